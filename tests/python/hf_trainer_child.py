"""A tiny Trainer run for tests/python/test_hf.py, in a process of its own.

    python hf_trainer_child.py hold   URI ENDPOINT OUTPUT_DIR HOLD_STEP
        trains with S3CheckpointCallback (save_steps=2, save_total_limit=2); after the save of
        HOLD_STEP has committed it blocks until it is killed (the test SIGKILLs it).
    python hf_trainer_child.py resume URI ENDPOINT OUTPUT_DIR MAX_STEPS
        S3Trainer.train(resume_from_checkpoint=URI) (the newest committed checkpoint, downloaded
        into OUTPUT_DIR) to MAX_STEPS with the callback (retention_window_s=0: the killed writer
        is dead); OUTPUT_DIR/probe.pt gets the global step and optimizer state seen at
        on_train_begin.
"""

import os
import sys
import threading

import torch
from transformers import (LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback,
                          TrainingArguments)

import s3flash.hf

REGION = os.environ.get("AWS_REGION", "us-east-1")


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=64, length=8):
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, 64, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_model():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, max_position_embeddings=32))


def trainer(output_dir, max_steps, callbacks, cls=Trainer):
    args = TrainingArguments(output_dir=output_dir, max_steps=max_steps, save_steps=2,
                             save_total_limit=2, per_device_train_batch_size=4,
                             learning_rate=1e-3, lr_scheduler_type="constant", report_to=[],
                             use_cpu=True, logging_steps=1000, seed=0,
                             dataloader_num_workers=0, disable_tqdm=True)
    return cls(model=tiny_model(), args=args, train_dataset=Tokens(), callbacks=callbacks)


class Hold(TrainerCallback):
    """After the save of `step` has committed in S3: block (the test kills this process)."""

    def __init__(self, step, upload):
        self.step, self.upload = step, upload

    def on_save(self, args, state, control, **kw):
        if state.global_step >= self.step:
            self.upload.wait()
            print(f"held at {state.global_step}", flush=True)
            threading.Event().wait()


class Probe(TrainerCallback):
    def __init__(self, path):
        self.path = path

    def on_train_begin(self, args, state, control, optimizer=None, **kw):
        torch.save({"global_step": state.global_step,
                    "optimizer": optimizer.state_dict()}, self.path)


def main():
    mode, uri, endpoint, out, n = sys.argv[1:6]
    n = int(n)
    if mode == "hold":
        cb = s3flash.hf.S3CheckpointCallback(uri, region=REGION, endpoint=endpoint)
        trainer(out, 1000, [cb, Hold(n, cb)]).train()
        raise SystemExit("the run ended without being held")
    cb = s3flash.hf.S3CheckpointCallback(uri, region=REGION, endpoint=endpoint,
                                         retention_window_s=0)
    t = trainer(out, n, [cb, Probe(os.path.join(out, "probe.pt"))], s3flash.hf.S3Trainer)
    result = t.train(resume_from_checkpoint=uri)   # the newest committed checkpoint
    print(f"done at {result.global_step}", flush=True)


if __name__ == "__main__":
    main()
