#!/usr/bin/env python3
"""How long training is blocked per checkpoint save: s3flash.AsyncCheckpointer next to the
memcpy floor, s3flash's synchronous save, DCP's async_save (default stager, thread and process
modes, to the local file system and to S3 through s3torchconnector's and s3flash's writers)
and Lightning's AsyncCheckpointIO (s3torchconnector's plugin) next to s3flash's
S3AsyncLightningCheckpoint; then the slowdown of a small CPU training loop while a background
save runs, and the restore time from each tier. One run, side by side; a Markdown table on
stdout.

  python3 bench/checkpoint_async.py [--sizes 1G,4G] [--repeat 3] [--endpoint URL]
                                    [--local-dir DIR] [--skip ROW,...]

The S3 server: --endpoint, else S3FLASH_TEST_ENDPOINT (tests/servers/rgw.sh env), with the
keys of S3FLASH_TEST_ACCESS_KEY / S3FLASH_TEST_SECRET_KEY (or the AWS_* environment). A bucket
is created for the run and emptied after. The state is float32 tensors of 16 MiB (model-like);
"blocked" is the wall time of the call that training waits for, the median over --repeat saves
after one warm-up save (the warm-up is the "first save" column: fresh pages fault in). The
memcpy floor copies the state into memory already touched. The peers' failures are shown in
their rows. Targets (issue 12): blocked <= 1.2x the floor; background save within 1.2x the
synchronous save; restore from the local tier >= 2x faster than from S3.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid

import torch

import benchjson  # bench/, the script's own directory

MiB = 1 << 20
GiB = 1 << 30


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": MiB, "G": GiB}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def label(n):
    return f"{n / GiB:g} GiB" if n >= GiB else f"{n / MiB:g} MiB"


def make_state(nbytes, tensor_bytes=16 * MiB):
    sd = {}
    i = 0
    left = nbytes
    while left > 0:
        n = min(left, tensor_bytes) // 4
        sd[f"layer{i}.weight"] = torch.full((n,), float(i))
        left -= n * 4
        i += 1
    return sd


def median(xs):
    return statistics.median(xs) if xs else float("nan")


class Env:
    def __init__(self, a):
        self.endpoint = a.endpoint
        self.region = os.environ.get("S3FLASH_TEST_REGION", os.environ.get("AWS_REGION",
                                                                            "us-east-1"))
        ak = os.environ.get("S3FLASH_TEST_ACCESS_KEY")
        if ak:
            os.environ["AWS_ACCESS_KEY_ID"] = ak
            os.environ["AWS_SECRET_ACCESS_KEY"] = os.environ["S3FLASH_TEST_SECRET_KEY"]
        os.environ.setdefault("AWS_REGION", self.region)
        import s3flash
        self.client = s3flash.S3Client(self.region, endpoint=self.endpoint)
        self.bucket = f"s3f-ckpt-bench-{uuid.uuid4().hex[:8]}"
        self.client.native.create_bucket(self.bucket)
        self.local = tempfile.mkdtemp(prefix="s3flash-ckpt-bench-", dir=a.local_dir)

    def uri(self, p):
        return f"s3://{self.bucket}/{p}"

    def cleanup(self):
        keys = [o.key for o in self.client.list_objects(self.bucket)]
        for i in range(0, len(keys), 1000):
            self.client.native.delete_objects(self.bucket, keys[i:i + 1000])
        from s3flash import cleanup_uploads
        cleanup_uploads(self.bucket, "", 0, client=self.client)
        self.client.native.delete_bucket(self.bucket)
        shutil.rmtree(self.local, ignore_errors=True)


def mutate(sd):
    for t in sd.values():
        t.add_(1.0)


# -- the rows: each returns (first, [blocked...], [total...], note) -------------------------
def row_memcpy(env, sd, repeat):
    dst = {k: torch.empty_like(v) for k, v in sd.items()}
    for v in dst.values():
        v.fill_(0)  # touched: no page faults in the measured copies
    times = []
    for _ in range(repeat + 1):
        t = time.perf_counter()
        for k, v in sd.items():
            dst[k].copy_(v)
        times.append(time.perf_counter() - t)
    return times[0], times[1:], times[1:], "into touched memory"


def row_s3flash_sync(env, sd, repeat):
    import s3flash
    times = []
    for i in range(repeat + 1):
        t = time.perf_counter()
        s3flash.save(sd, env.uri(f"sync/{i}.pt"), region=env.region, endpoint=env.endpoint)
        times.append(time.perf_counter() - t)
    return times[0], times[1:], times[1:], "torch.save into S3Writer"


def _async_ck(env, sd, repeat, name, local):
    import s3flash
    blocked, total = [], []
    with s3flash.AsyncCheckpointer(env.uri(name + "/"), region=env.region,
                                   endpoint=env.endpoint, keep_remote=2,
                                   local_dir=os.path.join(env.local, name) if local else None
                                   ) as ck:
        for i in range(repeat + 1):
            t = time.perf_counter()
            fut = ck.save(sd, i)
            blocked.append(time.perf_counter() - t)
            mutate(sd)
            fut.result()
            ck.wait()
            total.append(time.perf_counter() - t)
        note = (f"staging allocations {ck.stager.allocations}, in place "
                f"{ck.in_place_saves}/{ck.in_place_saves + ck.stream_saves}")
    return blocked[0], blocked[1:], total[1:], note


def row_async_s3(env, sd, repeat):
    return _async_ck(env, sd, repeat, "async", False)


def row_async_s3_local(env, sd, repeat):
    return _async_ck(env, sd, repeat, "async-local", True)


def _dcp_rows(env, sd, repeat, writer, stager=None, process=False):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
    kind = AsyncCheckpointerType.PROCESS if process else AsyncCheckpointerType.THREAD
    blocked, total = [], []
    for i in range(repeat + 1):
        w = writer(i)
        t = time.perf_counter()
        kw = {"async_stager": stager} if stager is not None else {}
        fut = dcp.async_save(sd, storage_writer=w, async_checkpointer_type=kind, **kw)
        blocked.append(time.perf_counter() - t)
        mutate(sd)
        fut = getattr(fut, "upload_completion", fut)
        fut.result()
        total.append(time.perf_counter() - t)
    return blocked[0], blocked[1:], total[1:], ""


def _fs_writer(env, name):
    from torch.distributed.checkpoint import FileSystemWriter
    return lambda i: FileSystemWriter(os.path.join(env.local, f"{name}-{i}"))


def _stc_writer(env, name):
    from s3torchconnector import S3ClientConfig
    from s3torchconnector._s3client import S3Client
    from s3torchconnector.dcp import S3StorageWriter

    def make(i):
        cfg = S3ClientConfig(force_path_style=True)
        w = S3StorageWriter(env.region, env.uri(f"{name}-{i}/"), s3client_config=cfg)
        w.fs._client = S3Client(env.region, endpoint=env.endpoint, s3client_config=cfg)
        return w
    return make


def _s3flash_dcp_writer(env, name):
    from s3flash.dcp import S3StorageWriter
    return lambda i: S3StorageWriter(env.region, env.uri(f"{name}-{i}/"),
                                     endpoint=env.endpoint)


def row_dcp_thread_fs(env, sd, repeat):
    return _dcp_rows(env, sd, repeat, _fs_writer(env, "dcp-thread"))


def row_dcp_process_fs(env, sd, repeat):
    import torch.distributed as dist
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        dist.init_process_group("gloo", rank=0, world_size=1)
    return _dcp_rows(env, sd, repeat, _fs_writer(env, "dcp-process"), process=True)


def row_dcp_thread_stc(env, sd, repeat):
    return _dcp_rows(env, sd, repeat, _stc_writer(env, "dcp-stc"))


def row_dcp_thread_s3flash_stager(env, sd, repeat):
    from s3flash.dcp import S3HostStager
    stager = S3HostStager()
    r = _dcp_rows(env, sd, repeat, _s3flash_dcp_writer(env, "dcp-s3f"), stager=stager)
    return r[0], r[1], r[2], f"staging allocations {stager.allocations}"


def _lightning_rows(env, sd, repeat, plugin, wait):
    blocked, total = [], []
    for i in range(repeat + 1):
        t = time.perf_counter()
        plugin.save_checkpoint({"state_dict": sd, "epoch": i}, env.uri(f"{plugin_name(plugin)}"
                                                                        f"/epoch={i}.ckpt"))
        blocked.append(time.perf_counter() - t)
        mutate(sd)
        wait()
        total.append(time.perf_counter() - t)
    return blocked[0], blocked[1:], total[1:]


def plugin_name(p):
    return type(p).__name__ + ("-" + type(p.checkpoint_io).__name__
                               if hasattr(p, "checkpoint_io") else "")


def row_lightning_async_stc(env, sd, repeat):
    from lightning.pytorch.plugins.io import AsyncCheckpointIO
    from s3torchconnector import S3ClientConfig
    from s3torchconnector.lightning import S3LightningCheckpoint
    cfg = S3ClientConfig(force_path_style=True)
    inner = S3LightningCheckpoint(env.region, s3client_config=cfg, endpoint=env.endpoint)
    p = AsyncCheckpointIO(inner)

    def wait():  # its executor has one thread: a no-op behind the save waits for it
        if p._executor is not None:
            p._executor.submit(lambda: None).result()
        if p._error:
            raise p._error
    try:
        r = _lightning_rows(env, sd, repeat, p, wait)
    finally:
        p.teardown()
    return r + ("AsyncCheckpointIO(S3LightningCheckpoint)",)


def row_lightning_s3flash(env, sd, repeat):
    from s3flash.lightning import S3AsyncLightningCheckpoint
    p = S3AsyncLightningCheckpoint(env.region, endpoint=env.endpoint)
    r = _lightning_rows(env, sd, repeat, p, p.wait)
    p.teardown()
    return r + (f"staging allocations {p.stager.allocations}",)


def row_gpu_floor(env, sd, repeat):
    g = {k: v.cuda() for k, v in sd.items()}
    dst = {k: torch.empty(v.shape, dtype=v.dtype, pin_memory=True).fill_(0) for k, v in sd.items()}
    times = []
    for _ in range(repeat + 1):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for k, v in g.items():
            dst[k].copy_(v, non_blocking=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return times[0], times[1:], times[1:], "GPU state: pinned device-to-host copy"


def row_gpu_async(env, sd, repeat):
    g = {k: v.cuda() for k, v in sd.items()}
    r = _async_ck(env, g, repeat, "async-gpu", False)
    return r[0], r[1], r[2], "GPU state; " + r[3]


ROWS = [
    ("memcpy floor", row_memcpy),
    ("s3flash save (sync)", row_s3flash_sync),
    ("s3flash AsyncCheckpointer -> S3", row_async_s3),
    ("s3flash AsyncCheckpointer -> local+S3", row_async_s3_local),
    ("DCP async_save thread, default stager -> local FS", row_dcp_thread_fs),
    ("DCP async_save process, default stager -> local FS", row_dcp_process_fs),
    ("DCP async_save thread, default stager -> s3torchconnector", row_dcp_thread_stc),
    ("DCP async_save thread, S3HostStager -> s3flash", row_dcp_thread_s3flash_stager),
    ("Lightning AsyncCheckpointIO + s3torchconnector", row_lightning_async_stc),
    ("Lightning S3AsyncLightningCheckpoint (s3flash)", row_lightning_s3flash),
]
if torch.cuda.is_available():  # a GPU state: blocked time against the pinned D2H copy
    ROWS += [("GPU pinned D2H floor", row_gpu_floor),
             ("GPU s3flash AsyncCheckpointer -> S3", row_gpu_async)]


def training_slowdown(env, size, steps_min=20):
    """Step time of a small MLP on the CPU: alone, and while an AsyncCheckpointer save of a
    `size` state runs in the background."""
    import s3flash
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 512))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, 512)

    def step():
        t = time.perf_counter()
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        return time.perf_counter() - t

    for _ in range(10):
        step()
    alone = [step() for _ in range(steps_min * 2)]
    sd = make_state(size)
    during = []
    with s3flash.AsyncCheckpointer(env.uri("slowdown/"), region=env.region,
                                   endpoint=env.endpoint, keep_remote=1) as ck:
        ck.save(sd, 0).result()          # warm the buffers
        fut = ck.save(sd, 1)
        while not fut.done() or len(during) < 1:
            during.append(step())
        fut.result()
    return median(alone), median(during), len(during)


def restore_times(env, size):
    import s3flash
    sd = make_state(size)
    out = {}
    name = "restore"
    with s3flash.AsyncCheckpointer(env.uri(name + "/"), region=env.region,
                                   endpoint=env.endpoint,
                                   local_dir=os.path.join(env.local, name)) as ck:
        ck.save(sd, 1).result()
        del sd
        t = time.perf_counter()
        got = ck.load(1)
        out[f"local tier ({ck.last_load_tier})"] = time.perf_counter() - t
        del got
        ck.local_dir = None
        t = time.perf_counter()
        got = ck.load(1)
        out[f"S3 ({ck.last_load_tier})"] = time.perf_counter() - t
        del got
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1G,4G")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--endpoint", default=os.environ.get("S3FLASH_TEST_ENDPOINT"))
    ap.add_argument("--local-dir", default=None,
                    help="where the local tier and DCP's local FS rows write (default: TMPDIR)")
    ap.add_argument("--skip", default="", help="comma-separated row-name substrings to skip")
    benchjson.add_argument(ap)
    a = ap.parse_args()
    if not a.endpoint:
        sys.exit("no S3 endpoint: --endpoint or S3FLASH_TEST_ENDPOINT")
    skip = [s for s in a.skip.split(",") if s]
    env = Env(a)
    lines = []
    try:
        for size in [parse_size(s) for s in a.sizes.split(",")]:
            lines.append(f"\n### state {label(size)} ({a.repeat} saves after one warm-up; "
                         "seconds)\n")
            lines.append("| save | first save blocked | blocked (median) | x floor | "
                         "save to commit (median) | x s3flash sync | note |")
            lines.append("|---|---|---|---|---|---|---|")
            floor = sync = None
            for name, fn in ROWS:
                if any(s in name for s in skip):
                    continue
                sd = make_state(size)
                try:
                    first, blocked, total, note = fn(env, sd, a.repeat)
                except KeyboardInterrupt:
                    raise
                except BaseException as e:  # a peer's failure is a finding (DCP raises
                    # CheckpointException, a BaseException)
                    msg = [m for m in str(e).splitlines() if m.strip()] or [""]
                    lines.append(f"| {name} | - | - | - | - | - | failed: "
                                 f"{type(e).__name__}: {msg[-1][:120].replace('|', '/')} |")
                    print(lines[-1], file=sys.stderr)
                    continue
                finally:
                    del sd
                b, tot = median(blocked), median(total)
                if name in ("memcpy floor", "GPU pinned D2H floor"):
                    floor = b
                if name == "s3flash save (sync)":
                    sync = tot
                xf = f"{b / floor:.2f}" if floor else "-"
                xs = f"{tot / sync:.2f}" if sync and name != "memcpy floor" else "-"
                lines.append(f"| {name} | {first:.3f} | {b:.3f} | {xf} | {tot:.3f} | {xs} | "
                             f"{note} |")
                print(lines[-1], file=sys.stderr)
            alone, during, n = training_slowdown(env, size)
            lines.append(f"\ntraining step (MLP 512-1024-512, batch 64, CPU): {alone * 1e3:.2f} "
                         f"ms alone, {during * 1e3:.2f} ms during a background save "
                         f"({n} steps; slowdown {during / alone:.2f}x)\n")
            rt = restore_times(env, size)
            lines.append("| restore | seconds |\n|---|---|")
            for k, v in rt.items():
                lines.append(f"| {k} | {v:.3f} |")
            print("\n".join(lines[-3:]), file=sys.stderr)
    finally:
        env.cleanup()
    print(f"# checkpoint_async: torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"endpoint {a.endpoint}")
    print("\n".join(lines))
    if a.json:  # a row per saver; blocked and save-to-commit times (the x columns left out)
        benchjson.write_markdown(a.json, "\n".join(lines), "checkpoint async")


if __name__ == "__main__":
    main()
