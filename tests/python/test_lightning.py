"""s3flash.lightning against the real RGW: S3LightningCheckpoint as the Trainer's CheckpointIO,
ModelCheckpoint to s3:// (top-k pruning seen by listing the bucket, save_last), resume from
ckpt_path="last" and from an explicit URI, AsyncCheckpointIO, load_checkpoint's map_location
and weights_only, and the README's example (examples/lightning_resume.py)."""

import importlib.util
import os
import pickle
import re
import sys
import uuid
from pathlib import Path

import pytest
import torch

L = pytest.importorskip("lightning")
from lightning.pytorch.callbacks import Callback, ModelCheckpoint  # noqa: E402
from lightning.pytorch.plugins.io import AsyncCheckpointIO, TorchCheckpointIO  # noqa: E402

from s3flash.lightning import (  # noqa: E402
    S3AsyncLightningCheckpoint, S3LightningCheckpoint, S3ModelCheckpoint)

from conftest import exists  # noqa: E402
from helpers import fsspec_registered  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "lightning_resume.py"


def _example():
    spec = importlib.util.spec_from_file_location("lightning_resume_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


ex = _example()
STEPS = ex.STEPS_PER_EPOCH


@pytest.fixture(scope="module", autouse=True)
def s3_fsspec(endpoint):
    """Lightning's own look at s3:// (fsspec) is s3flash's, with the test endpoint."""
    with fsspec_registered(endpoint_url=endpoint) as cls:
        yield cls


@pytest.fixture(scope="module")
def plugin(region, endpoint):
    return S3LightningCheckpoint(region, endpoint=endpoint)


@pytest.fixture
def run(bucket):
    prefix = f"run-{uuid.uuid4().hex[:8]}/"
    return bucket, prefix, f"s3://{bucket}/{prefix}"


def keys(s3, bucket, prefix):
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"][len(prefix):] for o in page.get("Contents", [])]
    return sorted(out)


class StartedAt(Callback):
    def on_train_start(self, trainer, pl_module):
        self.epoch, self.step = trainer.current_epoch, trainer.global_step
        self.weight = next(pl_module.parameters()).detach().clone()


def fit(tmp_path, plugins, checkpoint, epochs, ckpt_path=None, extra=()):
    L.seed_everything(0, verbose=False)
    train_dl, val_dl = ex.data()
    started = StartedAt()
    trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False,
                        callbacks=[checkpoint, started, *extra], plugins=plugins,
                        enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, default_root_dir=tmp_path)
    trainer.fit(ex.TinyMLP(), train_dl, val_dl, ckpt_path=ckpt_path)
    return trainer, started


def top_k(dirpath):
    return S3ModelCheckpoint(dirpath=dirpath, filename="{epoch}-{val_loss:.4f}",
                             monitor="val_loss", save_top_k=2, save_last=True)


def check_top_k_fit(s3, run, ck, plugin):
    """After fit(..., ck=top_k(dirpath), epochs=4): last.ckpt and the two best epochs are in
    the bucket (top-k pruned the others) and are ck's best_k_models; last.ckpt, read back
    through plugin, is epoch 3's. Returns its contents."""
    bucket, prefix, dirpath = run
    listed = keys(s3, bucket, prefix)
    assert "last.ckpt" in listed
    epochs = [k for k in listed if k.startswith("epoch=")]
    assert len(epochs) == 2, listed
    assert sorted(Path(p).name for p in ck.best_k_models) == epochs
    assert all(p.startswith(dirpath) for p in ck.best_k_models)
    last = plugin.load_checkpoint(dirpath + "last.ckpt")
    assert (last["epoch"], last["global_step"]) == (3, 4 * STEPS)
    return last


def check_resume_from_last(tmp_path, s3, run, plugin, last):
    """As a new process would: a fresh Trainer with ckpt_path="last" fits to 6 epochs. It
    starts at epoch 4 with last's weights; top-k still keeps two epochs and last.ckpt."""
    bucket, prefix, dirpath = run
    trainer, started = fit(tmp_path, [plugin], top_k(dirpath), epochs=6, ckpt_path="last")
    assert (started.epoch, started.step) == (4, 4 * STEPS)
    assert torch.equal(started.weight, last["state_dict"]["net.0.weight"])
    assert trainer.global_step == 6 * STEPS
    listed = keys(s3, bucket, prefix)
    assert len([k for k in listed if k.startswith("epoch=")]) == 2 and "last.ckpt" in listed
    assert plugin.load_checkpoint(dirpath + "last.ckpt")["global_step"] == 6 * STEPS


def test_fit_top_k_last_and_resume_from_last(tmp_path, s3, plugin, run):
    ck = top_k(run[2])
    trainer, started = fit(tmp_path, [plugin], ck, epochs=4)
    assert (started.epoch, started.step) == (0, 0)
    last = check_top_k_fit(s3, run, ck, plugin)
    check_resume_from_last(tmp_path, s3, run, plugin, last)


def test_plain_model_checkpoint_resume_from_explicit_uri(tmp_path, s3, plugin, run):
    bucket, prefix, dirpath = run
    ck = ModelCheckpoint(dirpath=dirpath, filename="{epoch}", save_top_k=-1)
    fit(tmp_path, [plugin], ck, epochs=3)
    assert keys(s3, bucket, prefix) == ["epoch=0.ckpt", "epoch=1.ckpt", "epoch=2.ckpt"]
    uri = dirpath + "epoch=1.ckpt"
    trainer, started = fit(tmp_path, [plugin],
                           ModelCheckpoint(dirpath=dirpath, filename="{epoch}", save_top_k=-1),
                           epochs=4, ckpt_path=uri)
    assert (started.epoch, started.step) == (2, 2 * STEPS)
    assert trainer.global_step == 4 * STEPS
    # epoch 2 again: ModelCheckpoint saw the first one (fs.exists) and versioned the name
    assert keys(s3, bucket, prefix) == ["epoch=0.ckpt", "epoch=1.ckpt", "epoch=2-v1.ckpt",
                                        "epoch=2.ckpt", "epoch=3.ckpt"]


def test_last_is_found_by_plain_and_s3_model_checkpoint(tmp_path, plugin, run):
    """Lightning 2.6 drops the protocol from last-checkpoint candidates (#18261): importing
    s3flash.lightning makes ModelCheckpoint keep it for remote dirpaths (S3ModelCheckpoint
    too); a local dirpath's candidates are Lightning's, unchanged."""
    _, _, dirpath = run
    fit(tmp_path, [plugin], top_k(dirpath), epochs=1)
    trainer = L.Trainer(logger=False, default_root_dir=tmp_path)
    ours = S3ModelCheckpoint(dirpath=dirpath)
    plain = ModelCheckpoint(dirpath=dirpath)
    assert ours._find_last_checkpoints(trainer) == {dirpath + "last.ckpt"}
    assert plain._find_last_checkpoints(trainer) == {dirpath + "last.ckpt"}
    local = tmp_path / "local"
    local.mkdir()
    (local / "last.ckpt").write_bytes(b"x")
    found = ModelCheckpoint(dirpath=local)._find_last_checkpoints(trainer)
    assert found == {os.path.normpath(str(local / "last.ckpt"))}


def test_async_checkpoint_io(tmp_path, s3, plugin, run):
    bucket, prefix, dirpath = run
    ck = top_k(dirpath)
    trainer, _ = fit(tmp_path, [AsyncCheckpointIO(plugin)], ck, epochs=4)
    listed = keys(s3, bucket, prefix)
    assert "last.ckpt" in listed and len([k for k in listed if k.startswith("epoch=")]) == 2
    assert plugin.load_checkpoint(dirpath + "last.ckpt")["global_step"] == 4 * STEPS
    _, started = fit(tmp_path, [AsyncCheckpointIO(plugin)], top_k(dirpath), epochs=5,
                     ckpt_path="last")
    assert (started.epoch, started.step) == (4, 4 * STEPS)


def test_async_plugin_stages_prunes_and_resumes(tmp_path, s3, region, endpoint, run):
    """S3AsyncLightningCheckpoint: top-k and last.ckpt as with the synchronous plugin, the
    staging buffers allocated once for every save of the fit, resume from "last"."""
    aplugin = S3AsyncLightningCheckpoint(region, endpoint=endpoint)
    ck = top_k(run[2])
    fit(tmp_path, [aplugin], ck, epochs=4)        # its teardown waited for the queue
    assert aplugin.stager.allocations == 1        # 8 saves (4 top-k, 4 last), one arena
    assert (aplugin.in_place_saves, aplugin.stream_saves) == (8, 0)
    last = check_top_k_fit(s3, run, ck, aplugin)
    check_resume_from_last(tmp_path, s3, run,
                           S3AsyncLightningCheckpoint(region, endpoint=endpoint), last)


def test_async_plugin_failed_save_removes_nothing(region, endpoint, s3, bucket, run):
    """A background save that fails is raised by the next call, and the removals queued
    behind it are not done (the checkpoint they would delete may be the one to keep)."""
    _, prefix, dirpath = run
    aplugin = S3AsyncLightningCheckpoint(region, endpoint=endpoint)
    aplugin.save_checkpoint({"w": torch.ones(3)}, dirpath + "a.ckpt")
    aplugin.wait()
    assert exists(s3, bucket, prefix + "a.ckpt")
    aplugin.save_checkpoint({"w": torch.ones(3), "bad": Unpicklable()}, dirpath + "b.ckpt")
    aplugin.remove_checkpoint(dirpath + "a.ckpt")
    with pytest.raises(RuntimeError, match="background checkpoint operation failed"):
        aplugin.teardown()
    assert exists(s3, bucket, prefix + "a.ckpt") and not exists(s3, bucket, prefix + "b.ckpt")
    aplugin.remove_checkpoint(dirpath + "a.ckpt")   # after the error was raised: done
    aplugin.teardown()
    assert not exists(s3, bucket, prefix + "a.ckpt")


def test_async_plugin_streams_what_is_not_staged(region, endpoint, s3, bucket, run):
    """A checkpoint with a tensor that is cloned rather than staged (sparse) is streamed
    (s3flash._zipimage.stream into the S3 writer) instead of built in place: the object is
    a torch.save zip that loads back the same."""
    import io
    import zipfile
    _, prefix, dirpath = run
    ck = {"w": torch.arange(12.0), "sp": torch.eye(3).to_sparse(), "epoch": 2}
    aplugin = S3AsyncLightningCheckpoint(region, endpoint=endpoint)
    aplugin.save_checkpoint(ck, dirpath + "s.ckpt")
    got = aplugin.load_checkpoint(dirpath + "s.ckpt")
    assert (aplugin.in_place_saves, aplugin.stream_saves) == (0, 1)
    aplugin.teardown()
    assert torch.equal(got["w"], ck["w"]) and got["epoch"] == 2
    assert torch.equal(got["sp"].to_dense(), torch.eye(3))
    body = s3.get_object(Bucket=bucket, Key=prefix + "s.ckpt")["Body"].read()
    with zipfile.ZipFile(io.BytesIO(body)) as z:
        assert z.testzip() is None


def test_async_plugin_removes_off_the_callers_thread(region, endpoint, s3, bucket, run):
    """remove_checkpoint returns before its DELETE could have been answered: the fault proxy
    holds the DELETE for 2 s after it arrives, and the call had returned before that."""
    import time
    from urllib.parse import urlparse
    spec = importlib.util.spec_from_file_location(
        "integration_faults", ROOT / "tests" / "integration" / "faults.py")
    faults = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(faults)
    _, prefix, dirpath = run
    u = urlparse(endpoint)
    with faults.start_faultproxy(u.hostname, u.port) as proxy:
        aplugin = S3AsyncLightningCheckpoint(region, endpoint=proxy.endpoint)
        aplugin.save_checkpoint({"w": torch.ones(3)}, dirpath + "old.ckpt")
        aplugin.wait()
        proxy.set_faults([{"match": {"method": "DELETE", "path": "old.ckpt"},
                           "action": "delay", "seconds": 2}])
        aplugin.remove_checkpoint(dirpath + "old.ckpt")
        returned = time.monotonic()
        aplugin.teardown()
        [arrived] = [e["time"] for e in proxy.stats()["log"] if e["method"] == "DELETE"]
        assert returned < arrived + 2
        assert not exists(s3, bucket, prefix + "old.ckpt")


class Custom:
    def __init__(self, v):
        self.v = v


def test_load_map_location_and_weights_only(plugin, uri):
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    plugin.save_checkpoint({"state_dict": {"w": t}, "epoch": 3, "obj": Custom(7)}, uri)
    with pytest.raises(pickle.UnpicklingError):
        plugin.load_checkpoint(uri, weights_only=True)
    c = plugin.load_checkpoint(uri, weights_only=False)
    assert c["obj"].v == 7 and c["epoch"] == 3 and torch.equal(c["state_dict"]["w"], t)
    assert c["state_dict"]["w"].device.type == "cpu"
    meta = plugin.load_checkpoint(uri, map_location="meta", weights_only=False)
    assert meta["state_dict"]["w"].is_meta and meta["state_dict"]["w"].shape == (3, 4)
    seen = []
    c = plugin.load_checkpoint(uri, map_location=lambda s, loc: seen.append(loc) or s,
                               weights_only=False)
    assert seen == ["cpu"] and torch.equal(c["state_dict"]["w"], t)
    plugin.save_checkpoint({"state_dict": {"w": t}, "epoch": 4}, uri)
    assert plugin.load_checkpoint(uri, weights_only=True)["epoch"] == 4


class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("cannot pickle")


def test_failed_save_creates_nothing_and_keeps_the_previous(plugin, s3, bucket, key, uri):
    with pytest.raises(RuntimeError, match="cannot pickle"):
        plugin.save_checkpoint({"w": torch.zeros(1 << 20), "bad": Unpicklable()}, uri)
    assert not exists(s3, bucket, key)
    plugin.save_checkpoint({"epoch": 1}, uri)
    with pytest.raises(RuntimeError):
        plugin.save_checkpoint({"w": torch.zeros(1 << 20), "bad": Unpicklable()}, uri)
    assert plugin.load_checkpoint(uri)["epoch"] == 1


def test_remove_checkpoint_and_errors(plugin, s3, bucket, key, uri):
    plugin.save_checkpoint({"epoch": 1}, uri)
    plugin.remove_checkpoint(uri)
    assert not exists(s3, bucket, key)
    plugin.remove_checkpoint(uri)  # already gone: fine, as a delete in S3
    for i in range(3):  # a directory-like checkpoint (sharded)
        s3.put_object(Bucket=bucket, Key=f"{key}.dir/shard{i}", Body=b"x")
    plugin.remove_checkpoint(f"{uri}.dir")
    assert keys(s3, bucket, f"{key}.dir") == []
    with pytest.raises(FileNotFoundError):
        plugin.load_checkpoint(uri)
    with pytest.raises(TypeError, match="S3 URI"):
        plugin.save_checkpoint({}, Path(uri))
    with pytest.raises(ValueError):
        plugin.load_checkpoint("s3://")
    plugin.teardown()


def test_example_kill_and_resume(bucket, endpoint, capfd):
    """The README's example: trained in a child that SIGKILLs itself, resumed here."""
    prefix = f"example-{uuid.uuid4().hex[:8]}/"
    out = ex.main(["--bucket", bucket, "--prefix", prefix, "--endpoint", endpoint,
                   "--epochs", "3", "--kill-at-epoch", "1"])
    assert out["killed_rc"] == -9
    assert out["resumed_at"] == {"epoch": 1, "global_step": STEPS}
    assert out["global_step"] == 3 * STEPS
    assert "last.ckpt" in out["final"] and len(out["final"]) == 3
    text = capfd.readouterr().out
    assert re.search(r"\[train\] epoch 1 step \d+: SIGKILL", text)
    assert "[driver] OK" in text


def test_timing_against_torch_checkpoint_io(tmp_path, plugin, bucket):
    """Prints save/load times of a 64 MiB checkpoint: S3LightningCheckpoint to RGW and
    TorchCheckpointIO to the local disk (informational; asserts only the round trip)."""
    import time
    ckpt = {"state_dict": {f"l{i}": torch.randn(1 << 20) for i in range(16)}, "epoch": 1}
    uri = f"s3://{bucket}/timing-{uuid.uuid4().hex[:8]}.ckpt"
    local = str(tmp_path / "t.ckpt")
    res = {}
    for name, io_, path in (("s3flash", plugin, uri), ("local", TorchCheckpointIO(), local)):
        t0 = time.perf_counter()
        io_.save_checkpoint(ckpt, path)
        t1 = time.perf_counter()
        back = io_.load_checkpoint(path, weights_only=True)
        t2 = time.perf_counter()
        assert torch.equal(back["state_dict"]["l7"], ckpt["state_dict"]["l7"])
        res[name] = (t1 - t0, t2 - t1)
    plugin.remove_checkpoint(uri)
    print(f"\n64 MiB checkpoint: S3LightningCheckpoint save {res['s3flash'][0]:.3f} s, load "
          f"{res['s3flash'][1]:.3f} s; TorchCheckpointIO (local disk) save "
          f"{res['local'][0]:.3f} s, load {res['local'][1]:.3f} s")
