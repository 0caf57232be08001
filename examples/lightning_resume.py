#!/usr/bin/env python3
"""Lightning training that checkpoints to S3, is killed, and resumes where it stopped.

    python3 examples/lightning_resume.py --bucket demo --prefix run/ [--endpoint URL]

1. A child process trains a small MLP on synthetic data (CPU, well under a second per
   epoch). Every epoch, ``ModelCheckpoint(dirpath="s3://BUCKET/PREFIX", save_top_k=2,
   monitor="val_loss", save_last=True)`` saves through ``S3LightningCheckpoint`` (torch.save
   streamed into S3 by s3flash), and Lightning keeps the two best and ``last.ckpt``.
2. In epoch --kill-at-epoch, the child SIGKILLs itself in the middle of the epoch.
3. This process resumes with ``trainer.fit(..., ckpt_path="last")`` (or ``--resume-from``
   an s3:// URI): it checks that training starts again at the first step of the epoch that
   was interrupted, with the weights of last.ckpt, and trains to --epochs.

The bucket is listed after each phase (the fsspec filesystem, ``s3flash.fsspec``). Credentials
and region come from the AWS environment; the endpoint from --endpoint or AWS_ENDPOINT_URL.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import lightning as L
from lightning.pytorch.callbacks import Callback

import s3flash.fsspec
from s3flash.lightning import S3LightningCheckpoint, S3ModelCheckpoint

STEPS_PER_EPOCH = 16
BATCH = 64


class TinyMLP(L.LightningModule):
    def __init__(self, width: int = 64, lr: float = 0.02):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(32, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self(x), y), on_epoch=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def data(seed: int = 0) -> "tuple[DataLoader, DataLoader]":
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(32, 1, generator=g)
    x = torch.randn(STEPS_PER_EPOCH * BATCH + 256, 32, generator=g)
    y = x @ w + 0.1 * torch.randn(len(x), 1, generator=g)
    train = TensorDataset(x[:-256], y[:-256])
    val = TensorDataset(x[-256:], y[-256:])
    return (DataLoader(train, batch_size=BATCH, shuffle=True,
                       generator=torch.Generator().manual_seed(seed)),
            DataLoader(val, batch_size=256))


class KillMidEpoch(Callback):
    """SIGKILL this process in the middle of epoch `epoch` (a crash, a preempted node)."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        if trainer.current_epoch == self.epoch and batch_idx == STEPS_PER_EPOCH // 2:
            print(f"[train] epoch {trainer.current_epoch} step {trainer.global_step}: "
                  "SIGKILL", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


class Report(Callback):
    """Prints each epoch; remembers where training (re)started."""

    def __init__(self, tag: str, run_dir: str):
        self.tag = tag
        self.run_dir = run_dir
        self.start: Optional[Dict[str, Any]] = None
        self.epochs: List[Dict[str, Any]] = []
        self.t0 = time.monotonic()

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        w = next(pl_module.parameters()).detach().clone()
        self.start = {"epoch": trainer.current_epoch, "global_step": trainer.global_step,
                      "first_weight": w}
        print(f"[{self.tag}] training starts at epoch {trainer.current_epoch}, "
              f"global step {trainer.global_step}", flush=True)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        m = trainer.callback_metrics
        e = {"epoch": trainer.current_epoch, "global_step": trainer.global_step,
             "train_loss": float(m.get("train_loss", float("nan"))),
             "val_loss": float(m.get("val_loss", float("nan")))}
        self.epochs.append(e)
        print(f"[{self.tag}] epoch {e['epoch']} done: global step {e['global_step']}, "
              f"train_loss {e['train_loss']:.4f}, val_loss {e['val_loss']:.4f} "
              f"({time.monotonic() - self.t0:.1f} s)", flush=True)

    # ModelCheckpoint saves (and prunes) after every other on_train_epoch_end: show the
    # result at the start of the next epoch and at the end
    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if self.epochs:
            self._show(self.epochs[-1])

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if self.epochs:
            self._show(self.epochs[-1])

    def _show(self, e: Dict[str, Any]) -> None:
        import fsspec
        fs, path = fsspec.core.url_to_fs(self.run_dir)
        e["in_s3"] = [n.rsplit("/", 1)[-1] for n in fs.ls(path, detail=False)]
        print(f"[{self.tag}]   in S3 after epoch {e['epoch']}: {', '.join(e['in_s3'])}",
              flush=True)


def run_dir(args: argparse.Namespace) -> str:
    return f"s3://{args.bucket}/{args.prefix}"


def trainer_for(args: argparse.Namespace, callbacks: List[Callback], tmp: str,
                max_epochs: int) -> L.Trainer:
    checkpoint = S3ModelCheckpoint(
        dirpath=run_dir(args), filename="{epoch}-{val_loss:.4f}",
        monitor="val_loss", save_top_k=2, save_last=True)
    plugin = S3LightningCheckpoint(args.region, endpoint=args.endpoint)
    return L.Trainer(max_epochs=max_epochs, accelerator="cpu", devices=1,
                     callbacks=[checkpoint, *callbacks], plugins=[plugin], logger=False,
                     enable_progress_bar=False, enable_model_summary=False,
                     default_root_dir=tmp, num_sanity_val_steps=0)


def setup(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    # Lightning's own look at s3:// (ModelCheckpoint lists, checks what exists) is fsspec:
    # make it s3flash's, with the same endpoint (an installed s3flash does it by its entry
    # point; this also works from a source tree and passes the endpoint).
    opts = {"endpoint_url": args.endpoint} if args.endpoint else {}
    s3flash.fsspec.register(**opts)


def list_run(args: argparse.Namespace, title: str) -> List[str]:
    import fsspec
    fs, path = fsspec.core.url_to_fs(run_dir(args))  # s3flash's, with the registered endpoint
    found = fs.ls(path, detail=True)
    print(f"--- {title}: s3://{args.bucket}/{args.prefix}")
    for e in found:
        print(f"    {e['name'].rsplit('/', 1)[-1]:32s} {e['size']:>9d} B  "
              f"{e['LastModified']:%H:%M:%S}")
    return [e["name"].rsplit("/", 1)[-1] for e in found]


def train(args: argparse.Namespace) -> None:
    """The child: train from scratch until killed."""
    setup(args)
    L.seed_everything(0, verbose=False)
    train_dl, val_dl = data()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = trainer_for(args, [KillMidEpoch(args.kill_at_epoch), Report("train", run_dir(args))],
                              tmp, args.epochs)
        trainer.fit(TinyMLP(), train_dl, val_dl)
    print("[train] finished without being killed", flush=True)


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bucket", required=True)
    p.add_argument("--prefix", default="run/")
    p.add_argument("--endpoint", default=os.environ.get("AWS_ENDPOINT_URL"))
    p.add_argument("--region", default=None)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--kill-at-epoch", type=int, default=3)
    p.add_argument("--resume-from", default="last",
                   help='"last" (default) or the s3:// URI of a checkpoint')
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.prefix = args.prefix.strip("/") + "/"
    if args.child:
        train(args)
        return {}
    assert 0 < args.kill_at_epoch < args.epochs

    # 1. train in a child process, which is SIGKILLed in the middle of an epoch
    t0 = time.monotonic()
    child = [sys.executable, os.path.abspath(__file__), "--child", "--bucket", args.bucket,
             "--prefix", args.prefix, "--epochs", str(args.epochs),
             "--kill-at-epoch", str(args.kill_at_epoch)]
    if args.endpoint:
        child += ["--endpoint", args.endpoint]
    if args.region:
        child += ["--region", args.region]
    rc = subprocess.run(child).returncode
    print(f"[driver] training process ended with {rc} "
          f"({'SIGKILL' if rc == -signal.SIGKILL else 'not SIGKILL'}), "
          f"{time.monotonic() - t0:.1f} s", flush=True)
    assert rc == -signal.SIGKILL, f"the training process should have been killed, got {rc}"

    setup(args)
    after_kill = list_run(args, "after the kill")
    assert "last.ckpt" in after_kill, after_kill

    # 2. resume in this process
    L.seed_everything(0, verbose=False)
    train_dl, val_dl = data()
    report = Report("resume", run_dir(args))
    ckpt_path = args.resume_from
    last_uri = f"s3://{args.bucket}/{args.prefix}last.ckpt"
    saved = S3LightningCheckpoint(args.region, endpoint=args.endpoint).load_checkpoint(last_uri)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = trainer_for(args, [report], tmp, args.epochs)
        trainer.fit(TinyMLP(), train_dl, val_dl, ckpt_path=ckpt_path)
    assert report.start is not None
    expected_step = args.kill_at_epoch * STEPS_PER_EPOCH
    first_weight = saved["state_dict"]["net.0.weight"]
    print(f"[driver] resumed at epoch {report.start['epoch']}, global step "
          f"{report.start['global_step']} (last.ckpt: epoch {saved['epoch']}, "
          f"global step {saved['global_step']})", flush=True)
    assert report.start["epoch"] == args.kill_at_epoch, report.start
    assert report.start["global_step"] == expected_step == saved["global_step"], report.start
    assert torch.equal(report.start["first_weight"], first_weight), "weights not restored"
    assert trainer.global_step == args.epochs * STEPS_PER_EPOCH, trainer.global_step
    final = list_run(args, "after the resumed run")
    epochs = sorted(n for n in final if n.startswith("epoch="))
    assert len(epochs) == 2 and "last.ckpt" in final, final
    print(f"[driver] OK: killed in epoch {args.kill_at_epoch}, resumed from "
          f"{'last.ckpt' if ckpt_path == 'last' else ckpt_path} at step {expected_step}, "
          f"trained to epoch {args.epochs - 1} (step {trainer.global_step}); kept the 2 best "
          f"and last.ckpt; {time.monotonic() - t0:.1f} s", flush=True)
    return {"killed_rc": rc, "after_kill": after_kill, "final": final,
            "resumed_at": {k: v for k, v in report.start.items() if k != "first_weight"},
            "epochs": report.epochs, "global_step": trainer.global_step}


if __name__ == "__main__":
    main()
