"""What the checkpoint savers and the datasets report (SaveStats, DatasetStats), against RGW:
AsyncCheckpointer's callback gets one SaveStats per save whose bytes are what S3 holds; the
DCP writer's, for dcp.save and dcp.async_save; Lightning's CSVLogger gets the checkpoint
metrics of S3LightningCheckpoint and S3AsyncLightningCheckpoint through S3CheckpointMetrics
(blocked less than the save, throughput bytes over upload time, bytes the objects' sizes);
a dataset counts exactly the samples and bytes it handed out."""

import csv
import math
import threading
import uuid

import pytest
import torch

import s3flash
from s3flash import S3IterableDataset, S3MapDataset, SaveStats

from helpers import put_objects

EPS = 1e-9  # the phases are differences of the same monotonic readings


def _sizes(s3, bucket, prefix):
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return out


def check_consistent(st: SaveStats, blocked_is_save: bool = False):
    """The phases lie one after the other inside the save; throughput is bytes/upload."""
    assert st.bytes > 0
    assert st.upload_seconds > 0
    assert st.staging_seconds >= 0 and st.commit_seconds >= 0
    assert st.staging_seconds + st.upload_seconds + st.commit_seconds <= st.save_seconds + EPS
    assert st.blocked_seconds is not None
    if blocked_is_save:
        assert st.blocked_seconds == st.save_seconds
    else:
        assert st.staging_seconds <= st.blocked_seconds + EPS
        assert st.blocked_seconds < st.save_seconds
    assert st.throughput_bytes_per_s == st.bytes / st.upload_seconds
    m = st.as_metrics()
    assert m["checkpoint/bytes"] == st.bytes
    assert m["checkpoint/throughput_bytes_per_s"] == st.throughput_bytes_per_s


# -- AsyncCheckpointer ------------------------------------------------------------------------

@pytest.mark.parametrize("in_place", [True, False])
def test_async_checkpointer_reports_each_save(region, endpoint, bucket, s3, in_place):
    prefix = f"metrics-ack-{uuid.uuid4().hex[:8]}/"
    got = []
    threads = set()

    def on_stats(st):
        threads.add(threading.current_thread().name)
        got.append(st)

    state = {"w": torch.randn(256, 1024), "b": torch.arange(1000)}
    with s3flash.AsyncCheckpointer(f"s3://{bucket}/{prefix}", region, endpoint,
                                   in_place=in_place, on_save_stats=on_stats) as ck:
        infos = []
        for step in (10, 20, 30):
            fut = ck.save(state, step)
            info = fut.result()
            # the callback ran before the future resolved
            assert len(got) == len(infos) + 1 and got[-1] is info.stats
            assert ck.last_save_stats is info.stats
            infos.append(info)
    assert [st.step for st in got] == [10, 20, 30]
    assert threads == {"s3flash-checkpoint"}  # the background thread, not the caller's
    sizes = _sizes(s3, bucket, prefix)
    for info, st in zip(infos, got):
        assert st.uri == info.uri
        check_consistent(st)
        # bytes: the state object and the commit record, as S3 holds them
        ckey = info.commit_uri[len(f"s3://{bucket}/"):]
        skey = info.uri[len(f"s3://{bucket}/"):] + "state.pt"
        assert st.bytes == sizes[skey] + sizes[ckey]
    assert (ck.in_place_saves, ck.stream_saves) == ((3, 0) if in_place else (0, 3))


def test_async_checkpointer_callback_error_is_a_warning(region, endpoint, bucket):
    def boom(st):
        raise RuntimeError("callback broke")

    with s3flash.AsyncCheckpointer(f"s3://{bucket}/metrics-boom-{uuid.uuid4().hex[:8]}/",
                                   region, endpoint, on_save_stats=boom) as ck:
        with pytest.warns(RuntimeWarning, match="callback broke"):
            info = ck.save({"x": torch.ones(8)}, 1).result()
    assert info.seq is not None and ck.last_save_stats is info.stats


def test_s3checkpoint_writer_reports_on_close(region, endpoint, bucket, s3):
    got = []
    ck = s3flash.S3Checkpoint(region, endpoint, on_save_stats=got.append)
    uri = f"s3://{bucket}/metrics-sync-{uuid.uuid4().hex[:8]}.pt"
    with ck.writer(uri) as w:
        torch.save({"w": torch.randn(512, 512)}, w)
        assert got == []  # nothing until the object is complete
    with pytest.raises(RuntimeError):  # an aborted save reports nothing
        with ck.writer(uri + ".aborted") as w:
            w.write(b"x" * 100)
            raise RuntimeError("abort")
    assert len(got) == 1 and ck.last_save_stats is got[0]
    st = got[0]
    check_consistent(st, blocked_is_save=True)
    assert st.uri == uri
    assert st.bytes == s3.head_object(Bucket=bucket, Key=uri.split("/", 3)[3])["ContentLength"]


# -- DCP --------------------------------------------------------------------------------------

def test_dcp_writer_reports_save_and_async_save(region, endpoint, bucket, s3):
    import torch.distributed.checkpoint as dcp
    from s3flash.dcp import S3StorageWriter
    sd = {"a": torch.randn(300, 300), "b": torch.randn(1000), "n": 7}
    for mode in ("save", "async_save"):
        prefix = f"metrics-dcp-{mode}-{uuid.uuid4().hex[:8]}/"
        got = []
        w = S3StorageWriter(region, f"s3://{bucket}/{prefix}", endpoint=endpoint,
                            thread_count=2, on_save_stats=got.append)
        if mode == "save":
            dcp.save(sd, storage_writer=w, no_dist=True)
        else:
            dcp.async_save(sd, storage_writer=w, no_dist=True).result()
        assert len(got) == 1 and w.last_save_stats is got[0]
        st = got[0]
        assert st.uri == f"s3://{bucket}/{prefix}"
        # dcp.save blocks its caller throughout; async_save only for the staging
        check_consistent(st, blocked_is_save=(mode == "save"))
        if mode == "async_save":
            assert st.blocked_seconds == st.staging_seconds > 0
        else:
            assert st.staging_seconds == 0
        assert st.commit_seconds > 0  # .metadata, written by this (the only) rank
        assert st.bytes == sum(_sizes(s3, bucket, prefix).values())


# -- Lightning --------------------------------------------------------------------------------

L = pytest.importorskip("lightning")


@pytest.fixture(scope="module")
def s3_fsspec(endpoint):
    from helpers import fsspec_registered
    with fsspec_registered(endpoint_url=endpoint) as cls:
        yield cls


@pytest.mark.parametrize("plugin_cls", ["S3LightningCheckpoint", "S3AsyncLightningCheckpoint",
                                        "AsyncCheckpointIO"])
def test_lightning_csv_logger_gets_checkpoint_metrics(tmp_path, region, endpoint, bucket, s3,
                                                      s3_fsspec, plugin_cls):
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import CSVLogger

    import s3flash.lightning as sl
    from test_lightning import ex  # the README's example: TinyMLP, data()

    prefix = f"metrics-pl-{uuid.uuid4().hex[:8]}/"
    if plugin_cls == "AsyncCheckpointIO":  # Lightning's wrapper around the plain plugin
        from lightning.pytorch.plugins.io import AsyncCheckpointIO
        plugin = sl.S3LightningCheckpoint(region, endpoint=endpoint)
        plugins = [AsyncCheckpointIO(plugin)]
    else:
        plugin = getattr(sl, plugin_cls)(region, endpoint=endpoint)
        plugins = [plugin]
    every = 4
    ck = ModelCheckpoint(dirpath=f"s3://{bucket}/{prefix}", every_n_train_steps=every,
                         save_top_k=-1, filename="{step}")
    logger = CSVLogger(tmp_path, name="run")
    pl.seed_everything(0, verbose=False)
    train_dl, val_dl = ex.data()
    trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=logger,
                         callbacks=[ck, sl.S3CheckpointMetrics()], plugins=plugins,
                         enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, default_root_dir=tmp_path,
                         log_every_n_steps=1)
    trainer.fit(ex.TinyMLP(), train_dl, val_dl)

    with open(f"{logger.log_dir}/metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("checkpoint/save_seconds")]
    sizes = _sizes(s3, bucket, prefix)
    saves = 2 * ex.STEPS_PER_EPOCH // every
    assert len(sizes) == saves, sorted(sizes)
    assert len(rows) == saves, rows
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(steps) and steps[-1] == 2 * ex.STEPS_PER_EPOCH
    for r in rows:
        save = float(r["checkpoint/save_seconds"])
        if plugin_cls == "AsyncCheckpointIO":
            # the wrapper's thread waited, not the training: no blocked time is logged
            assert not r.get("checkpoint/blocked_seconds")
            r["checkpoint/blocked_seconds"] = "0"
        blocked = float(r["checkpoint/blocked_seconds"])
        upload = float(r["checkpoint/upload_seconds"])
        nbytes = float(r["checkpoint/bytes"])
        tput = float(r["checkpoint/throughput_bytes_per_s"])
        assert 0 < upload <= save
        if plugin_cls == "S3LightningCheckpoint":
            assert blocked == save
        else:
            assert blocked < save  # the upload ran in the background
        assert math.isclose(tput, nbytes / upload, rel_tol=1e-12)
    # each logged save is one object in S3, byte for byte
    assert sorted(int(float(r["checkpoint/bytes"])) for r in rows) == sorted(sizes.values())
    assert plugin.last_save_stats.uri.startswith(f"s3://{bucket}/{prefix}")


def test_lightning_metrics_needs_the_s3_plugin(tmp_path):
    import lightning.pytorch as pl
    import s3flash.lightning as sl
    from test_lightning import ex
    trainer = pl.Trainer(max_steps=1, logger=False, callbacks=[sl.S3CheckpointMetrics()],
                         enable_checkpointing=False, enable_progress_bar=False,
                         default_root_dir=tmp_path)
    with pytest.raises(ValueError, match="not an s3flash S3LightningCheckpoint"):
        trainer.fit(ex.TinyMLP(), ex.data()[0])


# -- datasets ---------------------------------------------------------------------------------

N = 40
DS_PREFIX = "metrics-ds/"


def _body(i):
    return bytes([i % 251]) * (1000 + 37 * i)


@pytest.fixture(scope="module")
def seeded(s3, bucket):
    put_objects(s3, bucket, {f"{DS_PREFIX}{i:03d}": _body(i) for i in range(N)})
    return f"s3://{bucket}/{DS_PREFIX}"


TOTAL = sum(len(_body(i)) for i in range(N))


def _read_all(r):
    return len(r.read())


def check_ds_stats(st, samples, nbytes):
    assert (st.samples, st.bytes) == (samples, nbytes)
    assert st.seconds > 0
    assert st.samples_per_s == st.samples / st.seconds
    assert st.bytes_per_s == st.bytes / st.seconds


@pytest.mark.parametrize("prefetch", [None, 0])
@pytest.mark.parametrize("source", ["prefix", "objects"])
def test_iterable_dataset_counts_samples_and_bytes(region, endpoint, seeded, bucket, prefetch,
                                                   source):
    got = []
    kw = dict(region=region, endpoint=endpoint, transform=_read_all, prefetch=prefetch,
              on_stats=got.append, stats_interval_s=3600)
    if source == "prefix":
        ds = S3IterableDataset.from_prefix(seeded, **kw)
    else:
        ds = S3IterableDataset.from_objects(
            [f"s3://{bucket}/{DS_PREFIX}{i:03d}" for i in range(N)], **kw)
    assert sum(ds) == TOTAL
    check_ds_stats(ds.stats, N, TOTAL)
    assert got == [ds.stats]  # the interval never passed: once, at the end of the pass
    assert sum(ds) == TOTAL  # a second pass counts on
    check_ds_stats(ds.stats, 2 * N, 2 * TOTAL)
    ds.reset_stats()
    assert (ds.stats.samples, ds.stats.bytes, ds.stats.seconds) == (0, 0, 0.0)


@pytest.mark.parametrize("prefetch", [None, 0])
def test_map_dataset_counts_batches_and_items(region, endpoint, seeded, prefetch):
    got = []
    ds = S3MapDataset.from_prefix(seeded, region=region, endpoint=endpoint, transform=_read_all,
                                  prefetch=prefetch, on_stats=got.append, stats_interval_s=0)
    loader = torch.utils.data.DataLoader(ds, batch_size=8, collate_fn=list)
    assert sum(sum(b) for b in loader) == TOTAL  # __getitems__: whole batches
    check_ds_stats(ds.stats, N, TOTAL)
    assert ds[3] == len(_body(3))  # one item
    check_ds_stats(ds.stats, N + 1, TOTAL + len(_body(3)))
    # interval 0: a report per item, each counting one more
    assert [s.samples for s in got] == list(range(1, N + 2))
    assert got[-1] == ds.stats


def test_dataset_counts_what_the_transform_did_not_read(region, endpoint, seeded, bucket):
    """A lazy item never read: its listed size counts (from_prefix), nothing when the size
    is unknown (from_objects)."""
    ds = S3IterableDataset.from_prefix(seeded, region=region, endpoint=endpoint, prefetch=0,
                                       transform=lambda r: r.key)
    assert len(list(ds)) == N and ds.stats.bytes == TOTAL
    ds = S3IterableDataset.from_objects([f"s3://{bucket}/{DS_PREFIX}000"], region=region,
                                        endpoint=endpoint, prefetch=0, transform=lambda r: 1)
    assert list(ds) == [1] and (ds.stats.samples, ds.stats.bytes) == (1, 0)
