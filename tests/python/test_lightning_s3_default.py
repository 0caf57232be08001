"""Lightning with ``s3://`` and nothing else (issue 14 §3), against the real RGW.

Each scenario runs in a fresh interpreter (fsspec's registry is per process). s3fs is made
unimportable there by a sys.meta_path finder that refuses it (not by uninstalling it), and
the endpoint comes from AWS_ENDPOINT_URL only: no register() call, no storage_options.
- the plain ``ModelCheckpoint(dirpath="s3://...")`` + ``S3LightningCheckpoint``: top-k
  pruning and save_last seen in the bucket, then a new Trainer resumes with
  ``ckpt_path="last"`` where the first one stopped;
- an implementation already there is never displaced: a class registered for ``s3`` before
  the import, and an importable ``s3fs`` (a stand-in package on sys.path).
"""

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

pytest.importorskip("lightning")

ROOT = Path(__file__).resolve().parents[2]

BLOCK_S3FS = textwrap.dedent("""
    import sys
    class _NoS3fs:
        def find_spec(self, name, path=None, target=None):
            if name == "s3fs" or name.startswith("s3fs."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
            return None
    sys.meta_path.insert(0, _NoS3fs())
    sys.modules.pop("s3fs", None)
""")

TRAIN = textwrap.dedent("""
    import importlib.util, json, sys
    spec = importlib.util.spec_from_file_location("ex", sys.argv[2])
    ex = importlib.util.module_from_spec(spec); sys.modules["ex"] = ex
    spec.loader.exec_module(ex)
    import lightning as L
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint
    from s3flash.lightning import S3LightningCheckpoint
    import fsspec

    dirpath = sys.argv[1]

    class StartedAt(Callback):
        def on_train_start(self, trainer, pl_module):
            self.at = (trainer.current_epoch, trainer.global_step)

    def fit(epochs, ckpt_path=None):
        L.seed_everything(0, verbose=False)
        train_dl, val_dl = ex.data()
        ck = ModelCheckpoint(dirpath=dirpath, filename="{epoch}-{val_loss:.4f}",
                             monitor="val_loss", save_top_k=2, save_last=True)
        started = StartedAt()
        trainer = L.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False,
                            callbacks=[ck, started], plugins=[S3LightningCheckpoint()],
                            enable_progress_bar=False, enable_model_summary=False,
                            num_sanity_val_steps=0, default_root_dir=sys.argv[3])
        trainer.fit(ex.TinyMLP(), train_dl, val_dl, ckpt_path=ckpt_path)
        return trainer, ck, started

    t1, ck1, s1 = fit(4)
    fs = fsspec.filesystem("s3")
    first = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(dirpath, detail=False))
    t2, ck2, s2 = fit(6, ckpt_path="last")
    second = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(dirpath, detail=False))
    print("RESULT " + json.dumps({
        "fs": type(fs).__module__ + "." + type(fs).__name__,
        "s3fs_loaded": "s3fs" in sys.modules,
        "first": first, "best_k": sorted(ck1.best_k_models),
        "started1": s1.at, "started2": s2.at, "steps2": t2.global_step,
        "second": second, "steps_per_epoch": ex.STEPS_PER_EPOCH}))
""")


def _run(code, *args, extra_path=None, env_extra=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join([str(extra_path)] + (
            [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-6000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_plain_model_checkpoint_to_s3_without_s3fs(bucket, endpoint, tmp_path, s3):
    prefix = f"nos3fs-{uuid.uuid4().hex[:8]}"
    dirpath = f"s3://{bucket}/{prefix}"
    r = _run(BLOCK_S3FS + TRAIN, dirpath, ROOT / "examples" / "lightning_resume.py",
             tmp_path, env_extra={"AWS_ENDPOINT_URL": endpoint})
    assert r["fs"] == "s3flash.fsspec.S3FlashFileSystem" and not r["s3fs_loaded"]
    steps = r["steps_per_epoch"]
    epochs = [k for k in r["first"] if k.startswith("epoch=")]
    assert "last.ckpt" in r["first"] and len(epochs) == 2, r["first"]   # top-k pruned
    assert sorted(p.rsplit("/", 1)[-1] for p in r["best_k"]) == epochs
    assert all(p.startswith(dirpath + "/") for p in r["best_k"])
    # ckpt_path="last" with the plain callback: the second Trainer starts after epoch 3
    assert r["started1"] == [0, 0] and r["started2"] == [4, 4 * steps], r
    assert r["steps2"] == 6 * steps
    assert "last.ckpt" in r["second"] and len([k for k in r["second"]
                                               if k.startswith("epoch=")]) == 2
    # what the bucket holds, seen by boto3
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/")
              .get("Contents", [])]
    assert sorted(k.rsplit("/", 1)[-1] for k in listed) == r["second"]


PROBE = textwrap.dedent("""
    import json, sys
    import fsspec
    {setup}
    import s3flash.lightning
    from lightning.pytorch.callbacks import ModelCheckpoint
    ck = ModelCheckpoint(dirpath="s3://some-bucket/run")
    cls = fsspec.get_filesystem_class("s3")
    cls_a = fsspec.get_filesystem_class("s3a")
    print("RESULT " + json.dumps({{
        "s3": cls.__module__ + "." + cls.__name__,
        "s3a": cls_a.__module__ + "." + cls_a.__name__,
        "callback_fs": type(ck._fs).__module__ + "." + type(ck._fs).__name__}}))
""")

FAKE_REGISTERED = textwrap.dedent("""
    from fsspec.spec import AbstractFileSystem
    class MineFS(AbstractFileSystem):
        protocol = ("s3",)
    MineFS.__module__ = "users_own"
    fsspec.register_implementation("s3", MineFS, clobber=True)
""")


def test_s3_taken_only_when_nothing_else_serves_it(tmp_path):
    # s3fs unimportable, nothing registered: s3flash serves s3:// and s3a://
    r = _run(BLOCK_S3FS + PROBE.format(setup=""))
    assert r == {"s3": "s3flash.fsspec.S3FlashFileSystem",
                 "s3a": "s3flash.fsspec.S3FlashFileSystem",
                 "callback_fs": "s3flash.fsspec.S3FlashFileSystem"}
    # a class registered for s3 before the import stays
    r = _run(BLOCK_S3FS + PROBE.format(setup=FAKE_REGISTERED))
    assert r["s3"] == "users_own.MineFS" and r["callback_fs"] == "users_own.MineFS"
    # s3fs installed (an importable stand-in package named s3fs): never displaced
    fake = tmp_path / "site" / "s3fs"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(textwrap.dedent("""
        from fsspec.spec import AbstractFileSystem
        __version__ = "2099.1.0"
        class S3FileSystem(AbstractFileSystem):
            protocol = ("s3", "s3a")
    """))
    r = _run(PROBE.format(setup=""), extra_path=fake.parent)
    assert r == {"s3": "s3fs.S3FileSystem", "s3a": "s3fs.S3FileSystem",
                 "callback_fs": "s3fs.S3FileSystem"}


EP_PROBE = textwrap.dedent("""
    import json, sys
    import fsspec
    fs = fsspec.filesystem("s3")
    cls = fsspec.get_filesystem_class("s3a")
    print("RESULT " + json.dumps({
        "s3": type(fs).__module__ + "." + type(fs).__name__,
        "s3a": cls.__module__ + "." + cls.__name__,
        "lightning_imported": "s3flash.lightning" in sys.modules}))
""")


def test_fsspec_entry_points_serve_s3_only_without_s3fs(tmp_path, endpoint):
    """pyproject.toml's fsspec.specs entry points s3/s3a, seen by fsspec as an installed
    package's (a dist-info with the same entry points on sys.path): with s3fs unimportable,
    fsspec.filesystem("s3") is s3flash's with no import of s3flash by the caller; with an
    importable s3fs it is s3fs's."""
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+
    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][
        "fsspec.specs"]
    assert eps["s3"] == eps["s3a"] == "s3flash._fsspec_s3:S3FileSystem"
    site = tmp_path / "site"
    dist = site / "s3flash_eptest-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: s3flash-eptest\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[fsspec.specs]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()))
    env = {"AWS_ENDPOINT_URL": endpoint}
    r = _run(BLOCK_S3FS + EP_PROBE, extra_path=site, env_extra=env)
    assert r == {"s3": "s3flash.fsspec.S3FlashFileSystem",
                 "s3a": "s3flash.fsspec.S3FlashFileSystem", "lightning_imported": False}
    fake = site / "s3fs"
    fake.mkdir()
    (fake / "__init__.py").write_text(textwrap.dedent("""
        from fsspec.spec import AbstractFileSystem
        __version__ = "2099.1.0"
        class S3FileSystem(AbstractFileSystem):
            protocol = ("s3", "s3a")
    """))
    r = _run(EP_PROBE, extra_path=site, env_extra=env)
    assert r == {"s3": "s3fs.S3FileSystem", "s3a": "s3fs.S3FileSystem",
                 "lightning_imported": False}
