"""s3flash.hf against a real RGW: tiny transformers models (built from a config, nothing
downloaded) saved and loaded bit-exact, single file and sharded, a tokenizer built in code,
the meta-device loading path, and a Trainer run with S3CheckpointCallback that is SIGKILLed
and resumed from s3:// in a fresh process and folder."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import s3flash  # noqa: E402
import s3flash.hf  # noqa: E402
from s3flash._dir_checkpoint import DirectoryCheckpointer  # noqa: E402
from transformers import (AutoModelForCausalLM, AutoTokenizer, GPT2Config,  # noqa: E402
                          GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM)

HERE = Path(__file__).resolve().parent


def bits(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def assert_same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype, k
        assert sa[k].shape == sb[k].shape, k
        assert torch.equal(bits(sa[k]), bits(sb[k])), k


def tiny_llama(tie=True, dtype=None):
    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=32,
                                     tie_word_embeddings=tie))
    return m.to(dtype) if dtype is not None else m


@pytest.fixture(scope="module")
def client(region, endpoint):
    return s3flash.S3Client(region, endpoint=endpoint)


def names(s3, bucket, prefix):
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"][len(prefix):] for o in page.get("Contents", [])]
    return sorted(out)


# -- from_pretrained / save_pretrained ------------------------------------------------------

def test_single_file_round_trip_is_bit_exact_with_tied_weights(bucket, client, s3, tmp_path):
    m = tiny_llama(tie=True)
    uri = f"s3://{bucket}/llama-single/"
    written = s3flash.hf.save_pretrained(m, uri, client=client)
    assert "model.safetensors" in written and "config.json" in written
    assert "model.safetensors.index.json" not in names(s3, bucket, "llama-single/")
    got = s3flash.hf.from_pretrained(LlamaForCausalLM, uri, client=client)
    assert_same_weights(m, got)
    # tied again: one parameter, not two copies
    assert got.lm_head.weight is got.model.embed_tokens.weight
    assert not got.training and got.config.dtype == torch.float32
    # transformers' own loader reads the folder as it reads its own saves
    local = tmp_path / "dl"
    local.mkdir()
    for n in names(s3, bucket, "llama-single/"):
        s3.download_file(bucket, "llama-single/" + n, str(local / n))
    assert_same_weights(m, LlamaForCausalLM.from_pretrained(local))
    ids = torch.arange(8).unsqueeze(0)
    with torch.no_grad():
        assert torch.equal(m.eval()(ids).logits, got(ids).logits)


def test_sharded_round_trip_with_auto_class_and_stale_files_removed(bucket, client, s3):
    m = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=2,
                                   n_positions=32))
    uri = f"s3://{bucket}/gpt2-sharded/"
    s3flash.hf.save_pretrained(m, uri, client=client, max_shard_size=20_000)
    listed = names(s3, bucket, "gpt2-sharded/")
    shards = [n for n in listed if n.startswith("model-")]
    assert len(shards) > 2 and "model.safetensors.index.json" in listed
    assert shards == [f"model-{i:05d}-of-{len(shards):05d}.safetensors"
                      for i in range(1, len(shards) + 1)]
    got = s3flash.hf.from_pretrained(AutoModelForCausalLM, uri, client=client)
    assert type(got) is GPT2LMHeadModel
    assert_same_weights(m, got)
    # the same folder saved again unsharded: the shards and the index of the first save go
    s3flash.hf.save_pretrained(m, uri, client=client)
    listed = names(s3, bucket, "gpt2-sharded/")
    assert "model.safetensors" in listed
    assert not [n for n in listed if n.startswith("model-") or n.endswith(".index.json")]
    assert_same_weights(m, s3flash.hf.from_pretrained(AutoModelForCausalLM, uri,
                                                      client=client))


def test_dtype_kept_as_stored_unless_asked(bucket, client):
    m = tiny_llama(tie=False, dtype=torch.bfloat16)
    uri = f"s3://{bucket}/llama-bf16/"
    s3flash.hf.save_pretrained(m, uri, client=client)
    got = s3flash.hf.from_pretrained(LlamaForCausalLM, uri, client=client)
    assert got.lm_head.weight.dtype == torch.bfloat16
    assert_same_weights(m, got)
    f32 = s3flash.hf.from_pretrained(LlamaForCausalLM, uri, client=client,
                                     dtype=torch.float32)
    assert f32.lm_head.weight.dtype == torch.float32
    assert torch.equal(f32.lm_head.weight, m.lm_head.weight.float())


class ProbeLlama(LlamaForCausalLM):
    """What from_pretrained hands to load_state_dict: the model as it is then, the flag."""

    seen = {}

    def load_state_dict(self, state_dict, strict=True, assign=False):
        ProbeLlama.seen = {
            "meta": [n for n, p in self.named_parameters() if not p.is_meta],
            "assign": assign,
            "ptrs": {k: v.data_ptr() for k, v in state_dict.items()},
        }
        return super().load_state_dict(state_dict, strict=strict, assign=assign)


def test_weights_are_assigned_to_a_meta_model_not_copied(bucket, client):
    """Peak memory is one copy: the model's parameters are on the meta device until the
    loaded tensors are assigned, and each parameter IS the loaded tensor (same storage)."""
    m = tiny_llama(tie=True)
    uri = f"s3://{bucket}/llama-meta/"
    s3flash.hf.save_pretrained(m, uri, client=client)
    got = s3flash.hf.from_pretrained(ProbeLlama, uri, client=client)
    seen = ProbeLlama.seen
    assert seen["meta"] == [] and seen["assign"] is True
    params = dict(got.named_parameters())
    assert seen["ptrs"] and all(params[k].data_ptr() == p for k, p in seen["ptrs"].items())
    assert_same_weights(m, got)


def test_tokenizer_round_trip(bucket, client):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {w: i for i, w in enumerate(["[UNK]", "[PAD]", "hello", "world", "s3", "flash"])}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]")
    uri = f"s3://{bucket}/llama-tok/"
    s3flash.hf.save_pretrained(tiny_llama(), uri, tokenizer=tok, client=client)
    got = s3flash.hf.from_pretrained(AutoTokenizer, uri, client=client)
    text = "hello s3 flash world unknown"
    assert got(text)["input_ids"] == tok(text)["input_ids"] == [2, 4, 5, 3, 0]
    assert got.pad_token == "[PAD]" and got.get_vocab() == tok.get_vocab()


def test_missing_weights_fail_naming_them(bucket, client, s3):
    uri = f"s3://{bucket}/llama-missing/"
    s3flash.hf.save_pretrained(tiny_llama(), uri, client=client)
    with pytest.raises(ValueError, match="missing .*layers"):
        s3flash.hf.from_pretrained(LlamaForCausalLM, uri, client=client,
                                   num_hidden_layers=3)
    s3.delete_object(Bucket=bucket, Key="llama-missing/model.safetensors")
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        s3flash.hf.from_pretrained(LlamaForCausalLM, uri, client=client)
    s3.delete_object(Bucket=bucket, Key="llama-missing/config.json")
    with pytest.raises(FileNotFoundError, match=f"{uri}: no config.json"):
        s3flash.hf.from_pretrained(LlamaForCausalLM, uri, client=client)
    with pytest.raises((OSError, ValueError),
                       match=f"{uri}: AutoTokenizer.from_pretrained found nothing"):
        s3flash.hf.from_pretrained(AutoTokenizer, uri, client=client)


def test_import_without_the_extra_names_it():
    """`import s3flash` needs none of the extra; `import s3flash.hf` says which extra."""
    code = ("import sys; sys.modules['transformers'] = None\n"
            "import s3flash\n"
            "try:\n    import s3flash.hf\n"
            "except ImportError as e:\n    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ERR s3flash.hf needs" in out.stdout and "s3flash[hf]" in out.stdout, out.stdout


# -- Trainer checkpoints --------------------------------------------------------------------

def test_callback_uploads_in_the_background_and_commits_last(bucket, client, proxy, tmp_path,
                                                            region):
    """on_save returns while the upload is held at the proxy (the commit PUT of step 2); the
    files are in the bucket but no reader sees the checkpoint until its commit record is
    written. A second save queued behind it (max_pending=2) is uploaded from its snapshot
    after the Trainer's rotation deleted both local folders."""
    uri = f"s3://{bucket}/bg/"
    blobs = {}
    for step in (2, 4):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        blobs[step] = {"model.safetensors": os.urandom(300_000),
                       "optimizer.pt": os.urandom(70_000),
                       "trainer_state.json": b'{"global_step": %d}' % step}
        for n, b in blobs[step].items():
            (folder / n).write_bytes(b)
    proxy.set_faults([{"match": {"method": "PUT", "path": "/bg/commits/0"},
                       "action": "stall", "seconds": 120, "direction": "request"}])
    cb = s3flash.hf.S3CheckpointCallback(uri, region=region, endpoint=proxy.endpoint,
                                         conditional_put=True, max_pending=2)
    args = SimpleNamespace(output_dir=str(tmp_path), save_total_limit=None)
    # another rank: nothing uploaded, no client made
    cb.on_save(args, SimpleNamespace(global_step=2, is_world_process_zero=False), None)
    assert cb.checkpointer is None and cb._futures == []
    cb.on_save(args, SimpleNamespace(global_step=2, is_world_process_zero=True), None)
    reader = DirectoryCheckpointer(uri, client=client)
    deadline = time.monotonic() + 60
    while not proxy.stats()["faults_total"]:  # the commit's PUT came and is held
        assert time.monotonic() < deadline, "the commit was never attempted"
        time.sleep(0.05)
    cb.on_save(args, SimpleNamespace(global_step=4, is_world_process_zero=True), None)
    futs = [f for _, f in cb._futures]
    assert len(futs) == 2 and not any(f.done() for f in futs)
    uploaded = {o.key.rsplit("/", 1)[1] for o in client.list_objects(bucket, "bg/step-")}
    assert uploaded == set(blobs[2])
    assert reader.steps() == []
    with pytest.raises(FileNotFoundError, match="no committed checkpoint folder"):
        s3flash.hf.resolve_checkpoint(uri, str(tmp_path / "r"), client=client)
    for step in (2, 4):
        shutil.rmtree(tmp_path / f"checkpoint-{step}")
    proxy.release()
    cb.wait()
    assert [f.result().step for f in futs] == [2, 4] and reader.steps() == [2, 4]
    for step in (2, 4):
        got = Path(s3flash.hf.resolve_checkpoint(uri, str(tmp_path / "r"), step=step,
                                                 client=client))
        assert got.name == f"checkpoint-{step}"
        assert {f.name: f.read_bytes() for f in got.iterdir()} == blobs[step]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".s3flash-upload")]
    # a folder's commit is not a state dict: AsyncCheckpointer.load says so
    with pytest.raises(ValueError, match="directory checkpoint, 'checkpoint-4'"):
        s3flash.AsyncCheckpointer(uri, client=client).load()
    cb.close()


def test_accelerator_save_state_is_uploaded_and_loaded(bucket, client, tmp_path):
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration
    acc = Accelerator(cpu=True, project_config=ProjectConfiguration(
        project_dir=str(tmp_path / "proj"), automatic_checkpoint_naming=True, total_limit=2))
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, opt = acc.prepare(model, opt)
    up = s3flash.hf.S3AcceleratorCheckpoint(acc, f"s3://{bucket}/acc/", client=client)
    for _ in range(3):
        loss = model(torch.randn(2, 8)).sum()
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        acc.save_state()
    up.wait()
    # checkpoint_0, _1, _2 committed; total_limit=2 kept the newest two in the bucket too
    assert up.checkpointer.steps() == [1, 2]
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    path = up.load_state(str(tmp_path / "restore"))
    assert path == str(tmp_path / "restore" / "checkpoint_2")
    for k, v in model.state_dict().items():
        assert torch.equal(v, saved[k]), k
    up.close()
    assert "save_state" not in acc.__dict__



def child(mode, uri, endpoint, out, n):
    return subprocess.Popen([sys.executable, str(HERE / "hf_trainer_child.py"), mode, uri,
                             endpoint, str(out), str(n)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_steps(ck, want, proc, timeout_s=240):
    """Poll the bucket (bounded) until the committed steps are `want`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ck.steps() == want:
            return
        if proc.poll() is not None:
            pytest.fail(f"the training process ended ({proc.returncode}) before steps {want} "
                        f"were committed: {proc.stdout.read()}")
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"steps {want} not committed within {timeout_s} s: {ck.steps()}, "
                f"{proc.communicate()[0]}")


def test_trainer_killed_then_resumed_from_s3(bucket, client, endpoint, tmp_path, s3):
    uri = f"s3://{bucket}/run/"
    reader = DirectoryCheckpointer(uri, client=client)
    out1, out2 = tmp_path / "first", tmp_path / "second"
    p = child("hold", uri, endpoint, out1, 6)
    try:
        # save_steps=2, save_total_limit=2: 2, 4, 6 committed, 2 removed from the bucket
        wait_for_steps(reader, [4, 6], p)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert reader.steps() == [4, 6]
    # what a killed save leaves: files of step 8 without a commit, and a commit record whose
    # object never arrived: neither is ever picked
    client.native.put_object(bucket, "run/step-000000000008/x/model.safetensors", b"partial")
    m = reader._log.new_manifest(10, "y", [{"name": "optimizer.pt", "key": "run/step-10/y/o.pt",
                                              "size": 1, "crc32": "0", "etag": "e"}],
                                 directory="checkpoint-10")
    reader._log.commit(m, "y")
    assert reader.steps() == [4, 6]

    # the newest committed folder comes back whole, bit for bit
    path = s3flash.hf.resolve_checkpoint(uri, str(tmp_path / "check"), client=client)
    first, second = out1 / "checkpoint-6", Path(path)
    assert second == tmp_path / "check" / "checkpoint-6"
    files = sorted(f.name for f in first.iterdir())
    assert "optimizer.pt" in files and "model.safetensors" in files
    assert sorted(f.name for f in second.iterdir()) == files
    for name in files:
        assert (second / name).read_bytes() == (first / name).read_bytes(), name

    p = child("resume", uri, endpoint, out2, 10)
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 0, log
    assert "done at 10" in log
    # S3Trainer.train(resume_from_checkpoint="s3://...") started at step 6 with the saved
    # optimizer state
    probe = torch.load(out2 / "probe.pt", weights_only=False)
    assert probe["global_step"] == 6
    saved = torch.load(first / "optimizer.pt", weights_only=False)
    assert probe["optimizer"]["param_groups"] == saved["param_groups"]
    assert probe["optimizer"]["state"].keys() == saved["state"].keys()
    for i, st in saved["state"].items():
        for k, v in st.items():
            assert torch.equal(probe["optimizer"]["state"][i][k], v), (i, k)
    # the resumed run's saves 8 and 10 committed; the limit removed 4 and 6 (the killed
    # writer's, with retention_window_s=0)
    assert reader.steps() == [8, 10]
