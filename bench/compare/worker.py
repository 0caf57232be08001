#!/usr/bin/env python3
"""One measured run of one scenario with one client (a fresh process per run).

  python3 bench/compare/worker.py '<json spec>'

The spec names the scenario, the client, its variant (defaults or tuned), the endpoint, the
size and where to write. Setup (building and pre-faulting the state dict or the buffer, DCP
ranks, the Lightning model) happens before the measured phase. For each phase the worker
prints one line `RESULT {json}`:
  wall       seconds of the phase (perf_counter)
  bytes      payload bytes moved (the object's size, read back with a HEAD where it applies)
  cpu        user+sys seconds of the phase: this process (every thread) plus the children it
             reaped during the phase (DataLoader workers, DCP ranks report their own)
  rss_peak   peak RSS during the phase (VmHWM, reset via /proc/self/clear_refs at its start;
             plus the children's own peaks), bytes
  rss_base   RSS at the phase's start
  items      objects / samples / saves, where it applies
  note       anything to say (a skip reason, a check that failed)
A run that cannot be done (an import that fails: a layer not landed) prints
`RESULT {"skip": "..."}`.
"""
import io
import json
import os
import re
import resource
import statistics
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

MiB = 1 << 20
KiB = 1 << 10


# -- measurement ---------------------------------------------------------------------------
def _status(field):
    with open("/proc/self/status") as f:
        for ln in f:
            if ln.startswith(field + ":"):
                return int(ln.split()[1]) * 1024
    return 0


def _reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


SERVER_PIDS = []  # the sink's (or RGW's daemons') pids: their CPU is read from /proc


def _server_cpu():
    t = 0
    for pid in SERVER_PIDS:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            t += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return t / os.sysconf("SC_CLK_TCK")


def _cpu():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


class Phase:
    """Times one phase: wall, CPU (self + reaped children), peak RSS over the phase."""

    def __init__(self, name="main"):
        self.name = name
        self.extra = {}

    def __enter__(self):
        _reset_hwm()
        self.rss_base = _status("VmRSS")
        self.cpu0 = _cpu()
        self.srv0 = _server_cpu()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        self.cpu = _cpu() - self.cpu0
        self.server_cpu = _server_cpu() - self.srv0
        self.rss_peak = _status("VmHWM")
        return False

    def result(self, nbytes, **kw):
        r = dict(phase=self.name, wall=self.wall, cpu=self.cpu, server_cpu=self.server_cpu,
                 bytes=nbytes,
                 rss_peak=self.rss_peak, rss_base=self.rss_base)
        r.update(self.extra)
        r.update(kw)
        return r


def emit(r):
    print("RESULT " + json.dumps(r), flush=True)


# -- endpoints and clients -----------------------------------------------------------------
class Env:
    def __init__(self, spec):
        self.spec = spec
        e = spec["endpoint"]
        self.url = e["url"]
        self.region = e["region"]
        self.ak = e["access_key"]
        self.sk = e["secret_key"]
        self.bucket = e["bucket"]
        self.kind = e["kind"]  # sink | rgw
        self.prefix = spec["prefix"]
        os.environ["AWS_ACCESS_KEY_ID"] = self.ak
        os.environ["AWS_SECRET_ACCESS_KEY"] = self.sk
        os.environ["AWS_REGION"] = self.region
        os.environ.pop("AWS_SESSION_TOKEN", None)

    def uri(self, key):
        return f"s3://{self.bucket}/{key}"

    def boto3(self, max_pool=None):
        import boto3
        from botocore.config import Config
        cfg = Config(s3={"addressing_style": "path"}, max_pool_connections=max_pool or 10,
                     retries={"max_attempts": 3})
        return boto3.client("s3", endpoint_url=self.url, region_name=self.region,
                            aws_access_key_id=self.ak, aws_secret_access_key=self.sk,
                            config=cfg)

    def s3flash_config(self, tuned):
        from s3flash import S3ClientConfig
        kw = dict(force_path_style=True)
        if tuned:
            kw.update(TUNED["s3flash"])
        return S3ClientConfig(**kw)

    def s3tc_config(self, tuned):
        from s3torchconnector import S3ClientConfig
        kw = dict(force_path_style=True)
        if tuned:
            kw.update(TUNED["s3tc"])
        return S3ClientConfig(**kw)

    def head_size(self, key):
        return self.boto3().head_object(Bucket=self.bucket, Key=key)["ContentLength"]

    def delete(self, keys):
        c = self.boto3()
        keys = list(keys)
        for i in range(0, len(keys), 1000):
            c.delete_objects(Bucket=self.bucket, Delete={
                "Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})

    def delete_prefix(self, prefix):
        c = self.boto3()
        keys = []
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                Prefix=prefix):
            keys += [o["Key"] for o in page.get("Contents", [])]
        if keys:
            self.delete(keys)
        return len(keys)


# The "tuned" settings of each client (what bench/compare.py's table calls "tuned").
TUNED = {
    "s3flash": dict(part_size=16 * MiB, memory_limit=1024 * MiB),
    "s3tc": dict(throughput_target_gbps=100.0, part_size=16 * MiB),
    "awscrt": dict(throughput_target_gbps=100.0, part_size=16 * MiB),
    "boto3": dict(multipart_chunksize=16 * MiB, multipart_threshold=16 * MiB,
                  max_concurrency=16, max_io_queue=1000, io_chunksize=1 * MiB),
    "threads": 32,
}
DEFAULT_THREADS = 8


def boto3_transfer_config(tuned):
    from boto3.s3.transfer import TransferConfig
    return TransferConfig(**TUNED["boto3"]) if tuned else TransferConfig()


# -- state dicts ---------------------------------------------------------------------------
# Mixed sizes (bytes of float32 tensors), cycled until the total is reached: a few large
# weight matrices, many medium ones, many small biases/norms.
MIX = [64 * MiB, 16 * MiB, 4 * MiB, 4 * MiB, 1 * MiB, 1 * MiB, 256 * KiB, 64 * KiB, 4 * KiB,
       1 * KiB]


def make_state_dict(total, prefix="t"):
    import torch
    sd = {}
    left, i = total, 0
    while left > 0:
        n = min(MIX[i % len(MIX)], left)
        n = max(4, n - n % 4)
        t = torch.empty(n // 4, dtype=torch.float32)
        t.fill_(float(i % 251))  # touches every page: pre-faulted
        sd[f"{prefix}{i:05d}"] = t
        left -= n
        i += 1
    return sd


def sd_bytes(sd):
    return sum(t.numel() * t.element_size() for t in sd.values())


def check_state_dict(got, want_total, want_n):
    n = len(got)
    b = sd_bytes(got)
    if n != want_n or b != want_total:
        return f"MISMATCH: {n} tensors / {b} bytes, expected {want_n} / {want_total}"
    for k, t in list(got.items())[:8]:
        i = int(k.lstrip("rt").split(".")[-1].lstrip("t")) if k[1:].isdigit() else None
        if i is not None and t.numel() and float(t[0]) != float(i % 251):
            return f"MISMATCH: {k}[0] = {float(t[0])}"
    return ""


def prefault(n):
    import numpy as np
    a = np.empty(n, dtype=np.uint8)
    a.fill(7)
    return a


# -- scenario: state dict save -------------------------------------------------------------
def io_max_cgroup(path, bps):
    """Moves this process into a new cgroup v2 group whose io.max caps the disk under path
    at bps bytes/s each way; (the group's directory, None), or (None, why not)."""
    root = next((r for r in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
                 if os.path.exists(os.path.join(r, "cgroup.controllers"))), None)
    if not root:
        return None, "io.max: no cgroup v2 hierarchy on this host"
    with open(os.path.join(root, "cgroup.controllers")) as f:
        if "io" not in f.read().split():
            return None, (f"io.max: the cgroup v2 hierarchy ({root}) has no io controller "
                          "on this host (cgroup v1 blkio cannot cap buffered writes)")
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    part = f"/sys/dev/block/{dev}/partition"
    if os.path.exists(part):  # io.max takes the whole disk
        with open(f"/sys/dev/block/{dev}/../dev") as f:
            dev = f.read().strip()
    cg = os.path.join(root, f"s3flash-bench-{os.getpid()}")
    try:
        with open(os.path.join(root, "cgroup.subtree_control"), "w") as f:
            f.write("+io")
        os.mkdir(cg)
        with open(os.path.join(cg, "io.max"), "w") as f:
            f.write(f"{dev} rbps={bps} wbps={bps}")
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    except OSError as e:
        if os.path.isdir(cg):
            os.rmdir(cg)
        return None, f"io.max: cannot set up {cg} for {dev}: {e}"
    return cg, None


def io_max_leave(cg):
    with open(os.path.join(os.path.dirname(cg), "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    os.rmdir(cg)


def scen_save(env, spec):
    import torch
    client, tuned, size = spec["client"], spec["tuned"], spec["size"]
    key = f"{env.prefix}/save-{client}-{size}.pt"
    sd = make_state_dict(size)
    if client == "s3flash":
        from s3flash import S3Checkpoint
        ck = S3Checkpoint(region=env.region, endpoint=env.url,
                          s3client_config=env.s3flash_config(tuned))
        with Phase() as ph:
            with ck.writer(env.uri(key)) as w:
                torch.save(sd, w)
    elif client == "s3tc":
        from s3torchconnector import S3Checkpoint
        ck = S3Checkpoint(region=env.region, endpoint=env.url,
                          s3client_config=env.s3tc_config(tuned))
        with Phase() as ph:
            with ck.writer(env.uri(key)) as w:
                torch.save(sd, w)
    elif client == "boto3":
        c = env.boto3(max_pool=20 if tuned else None)
        cfg = boto3_transfer_config(tuned)
        with Phase() as ph:
            b = io.BytesIO()
            torch.save(sd, b)
            b.seek(0)
            c.upload_fileobj(b, env.bucket, key, Config=cfg)
    elif client == "local":
        path = os.path.join(spec["local_dir"], f"s3flash-compare-{os.getpid()}.pt")
        cg = None
        if spec.get("io_max"):
            cg, why = io_max_cgroup(spec["local_dir"], spec["io_max"])
            if not cg:
                emit({"skip": why})
                return
        try:
            with Phase() as ph:
                with open(path, "wb") as f:
                    torch.save(sd, f)
                    f.flush()
                    os.fsync(f.fileno())
            n = os.path.getsize(path)
        finally:
            if os.path.exists(path):
                os.unlink(path)
            if cg:
                io_max_leave(cg)
        emit(ph.result(n))
        return
    else:
        raise ValueError(client)
    n = env.head_size(key)
    note = "" if abs(n - sd_bytes(sd)) < 4 * MiB else f"size {n} vs payload {sd_bytes(sd)}"
    env.delete([key])
    emit(ph.result(n, note=note))


# -- scenario: state dict load (needs the real bytes: RGW, or a local file) ---------------
def load_key(env, size):
    return f"{env.prefix}/load-src-{size}.pt"


def prepare_load(env, spec):
    """Upload the checkpoint that the load runs read (once per size), and the local file."""
    import torch
    size = spec["size"]
    sd = make_state_dict(size)
    from s3flash import S3Checkpoint
    ck = S3Checkpoint(region=env.region, endpoint=env.url,
                      s3client_config=env.s3flash_config(False))
    with ck.writer(env.uri(load_key(env, size))) as w:
        torch.save(sd, w)
    path = os.path.join(spec["local_dir"], f"s3flash-compare-load-{size}.pt")
    torch.save(sd, path)
    emit({"phase": "prepare", "n": len(sd), "bytes": sd_bytes(sd), "path": path})


def scen_load(env, spec):
    import torch
    client, tuned, size, reader = spec["client"], spec["tuned"], spec["size"], spec.get("reader")
    key = load_key(env, size)
    want_n, want_b = spec["want_n"], spec["want_bytes"]
    if client == "s3flash":
        from s3flash import S3Checkpoint, S3ReaderConstructor
        rc = (S3ReaderConstructor.range_based() if reader == "range"
              else S3ReaderConstructor.sequential())
        ck = S3Checkpoint(region=env.region, endpoint=env.url,
                          s3client_config=env.s3flash_config(tuned), reader_constructor=rc)
        with Phase() as ph:
            with ck.reader(env.uri(key)) as r:
                got = torch.load(r, weights_only=True)
    elif client == "s3tc":
        from s3torchconnector import S3Checkpoint, S3ReaderConstructor
        rc = (S3ReaderConstructor.range_based() if reader == "range"
              else S3ReaderConstructor.sequential())
        ck = S3Checkpoint(region=env.region, endpoint=env.url,
                          s3client_config=env.s3tc_config(tuned))
        # S3Checkpoint.reader() takes no reader constructor: its client's get_object does.
        with Phase() as ph:
            with ck._client.get_object(env.bucket, key, reader_constructor=rc) as r:
                got = torch.load(r, weights_only=True)
    elif client == "boto3":
        c = env.boto3(max_pool=20 if tuned else None)
        cfg = boto3_transfer_config(tuned)
        with Phase() as ph:
            b = io.BytesIO()
            c.download_fileobj(env.bucket, key, b, Config=cfg)
            b.seek(0)
            got = torch.load(b, weights_only=True)
    elif client == "local":
        path = spec["local_path"]
        if spec.get("cold"):
            # the file's pages leave the page cache (written back first): read from the disk
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        with Phase() as ph:
            with open(path, "rb") as f:
                got = torch.load(f, weights_only=True)
    else:
        raise ValueError(client)
    emit(ph.result(sd_bytes(got), note=check_state_dict(got, want_b, want_n)))


# -- scenario: raw objects -----------------------------------------------------------------
class CrtClient:
    """awscrt.s3.S3Client (the AWS Common Runtime's Python binding), path-style, plain HTTP."""

    def __init__(self, env, tuned):
        from awscrt.auth import AwsCredentialsProvider
        from awscrt.io import ClientBootstrap, DefaultHostResolver, EventLoopGroup
        from awscrt.s3 import S3Client, S3RequestTlsMode, create_default_s3_signing_config
        from urllib.parse import urlparse
        u = urlparse(env.url)
        self.host = u.netloc
        self.bucket = env.bucket
        elg = EventLoopGroup()
        boot = ClientBootstrap(elg, DefaultHostResolver(elg))
        creds = AwsCredentialsProvider.new_static(env.ak, env.sk)
        sc = create_default_s3_signing_config(region=env.region, credential_provider=creds)
        kw = dict(throughput_target_gbps=TUNED["awscrt"]["throughput_target_gbps"],
                  part_size=TUNED["awscrt"]["part_size"]) if tuned else {}
        self.c = S3Client(bootstrap=boot, region=env.region, signing_config=sc,
                          tls_mode=(S3RequestTlsMode.DISABLED if u.scheme == "http"
                                    else S3RequestTlsMode.ENABLED), **kw)

    def _req(self, method, key, headers=(), body=None):
        from awscrt.http import HttpHeaders, HttpRequest
        h = HttpHeaders([("Host", self.host)] + list(headers))
        return HttpRequest(method, f"/{self.bucket}/{key}", h, body)

    def put(self, key, buf, path=None):
        """Start a PutObject of `buf` (a memoryview), or of the file `path` (the CRT reads
        it itself: its fast path); returns the request's future."""
        from awscrt.s3 import S3RequestType
        req = self._req("PUT", key, [("Content-Length", str(len(buf)))],
                        None if path else io.BytesIO(buf))
        status = {}

        def on_headers(status_code, headers, **kw):
            status["code"] = status_code
        r = self.c.make_request(type=S3RequestType.PUT_OBJECT, request=req,
                                on_headers=on_headers, send_filepath=path)
        return r.finished_future, status

    def get(self, key, buf, path=None):
        """Start a GetObject into `buf` (a writable memoryview, large enough), or into the
        file `path` (written by the CRT)."""
        from awscrt.s3 import S3RequestType
        req = self._req("GET", key)
        status = {"n": 0}
        lock = threading.Lock()

        def on_body(chunk, offset, **kw):
            n = len(chunk)
            buf[offset:offset + n] = chunk
            with lock:
                status["n"] += n
        if path:
            status["path"] = path
            r = self.c.make_request(type=S3RequestType.GET_OBJECT, request=req,
                                    recv_filepath=path)
        else:
            r = self.c.make_request(type=S3RequestType.GET_OBJECT, request=req,
                                    on_body=on_body)
        return r.finished_future, status


def raw_keys(env, spec):
    if spec["shape"] == "large":
        return [f"{env.prefix}/raw-{spec['client']}-large-size-{spec['size']}"]
    n = spec["count"]
    return [f"{env.prefix}/raw-{spec['client']}-small-{i:05d}-size-{spec['size']}"
            for i in range(n)]


def scen_raw(env, spec):
    client, tuned, size = spec["client"], spec["tuned"], spec["size"]
    keys = raw_keys(env, spec)
    total = size * len(keys)
    src = prefault(size)
    dst = [prefault(size) for _ in keys] if spec["shape"] == "large" else None
    threads = TUNED["threads"] if tuned else DEFAULT_THREADS
    note = ""
    if spec["shape"] == "small":
        dst = [prefault(size) for _ in keys]  # one buffer per object, touched beforehand

    def pool_map(fn):
        if len(keys) == 1:
            return [fn(0)]
        with ThreadPoolExecutor(threads) as ex:
            return list(ex.map(fn, range(len(keys))))

    if client == "s3flash":
        from s3flash import S3Client
        c = S3Client(env.region, endpoint=env.url, s3client_config=env.s3flash_config(tuned))
        with Phase("upload") as up:
            pool_map(lambda i: c.upload(env.bucket, keys[i], src))
        with Phase("download") as dn:
            got = pool_map(lambda i: c.native.download_into(env.bucket, keys[i], dst[i]))
    elif client == "awscrt":
        c = CrtClient(env, tuned)
        mv = memoryview(src)
        files = spec.get("files")  # the CRT's file paths: source and targets in /dev/shm
        tmpdir = None
        if files:
            import tempfile
            tmpdir = tempfile.mkdtemp(prefix="s3flash-compare-crt.", dir="/dev/shm")
            srcpath = os.path.join(tmpdir, "src")
            with open(srcpath, "wb") as f:
                f.write(mv)
        try:
            with Phase("upload") as up:
                futs = [c.put(k, mv, srcpath if files else None) for k in keys]
                for f, st in futs:
                    f.result()
                    if st.get("code") != 200:
                        note += f"PUT status {st.get('code')} "
            with Phase("download") as dn:
                futs = [c.get(k, memoryview(dst[i]),
                              os.path.join(tmpdir, f"d{i}") if files else None)
                        for i, k in enumerate(keys)]
                got = []
                for f, st in futs:
                    f.result()
                    got.append(os.path.getsize(st["path"]) if files else st["n"])
            if files and env.kind == "rgw" and spec["shape"] == "large":
                with open(os.path.join(tmpdir, "d0"), "rb") as f:
                    f.readinto(memoryview(dst[0])[:1 << 20])
        finally:
            if tmpdir:
                import shutil
                shutil.rmtree(tmpdir, ignore_errors=True)
    elif client == "boto3":
        c = env.boto3(max_pool=max(threads, 20) if tuned else max(threads, 10))
        cfg = boto3_transfer_config(tuned)

        def up1(i):
            c.upload_fileobj(io.BytesIO(memoryview(src)), env.bucket, keys[i], Config=cfg)

        def dn1(i):
            b = io.BytesIO()
            c.download_fileobj(env.bucket, keys[i], b, Config=cfg)
            return b.getbuffer().nbytes
        with Phase("upload") as up:
            pool_map(up1)
        with Phase("download") as dn:
            got = pool_map(dn1)
    else:
        raise ValueError(client)
    sizes_ok = all(g == size for g in got)
    if not sizes_ok:
        note += f"download sizes differ: {sorted(set(got))[:4]} "
    n = env.head_size(keys[0])
    if n != size:
        note += f"HEAD size {n} != {size} "
    if env.kind == "rgw" and spec["shape"] == "large":
        # The real server keeps the bytes: check a sample of them.
        a, b = src[:1 << 20].tobytes(), bytes(memoryview(dst[0])[:1 << 20])
        if a != b:
            note += "content MISMATCH "
    env.delete(keys)
    items = len(keys)
    emit(up.result(total, items=items, note=note.strip()))
    emit(dn.result(total, items=items, note=note.strip()))


# -- scenario: Distributed Checkpoint, 2 ranks ---------------------------------------------
def _dcp_rank(rank, world, spec, outdir):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    env = Env(spec)
    SERVER_PIDS[:] = spec.get("server_pids", [])
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(spec["master_port"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    client, tuned = spec["client"], spec["tuned"]
    per_rank = spec["size"] // world
    sd = make_state_dict(per_rank, prefix=f"r{rank}.t")
    path = env.uri(f"{env.prefix}/dcp-{client}") if client != "local" else os.path.join(
        spec["local_dir"], f"s3flash-compare-dcp-{spec['master_port']}")

    def writer():
        if client == "s3flash":
            from s3flash.dcp import S3StorageWriter
            return S3StorageWriter(env.region, path, s3client_config=env.s3flash_config(tuned),
                                   endpoint=env.url, thread_count=4 if tuned else 1)
        if client == "s3tc":
            from s3torchconnector._s3client import S3Client
            from s3torchconnector.dcp import S3StorageWriter
            w = S3StorageWriter(env.region, path, s3client_config=env.s3tc_config(tuned),
                                thread_count=4 if tuned else 1)
            w.fs._client = S3Client(env.region, endpoint=env.url,
                                    s3client_config=env.s3tc_config(tuned))
            return w
        from torch.distributed.checkpoint import FileSystemWriter
        return FileSystemWriter(path, thread_count=4 if tuned else 1)

    def reader():
        if client == "s3flash":
            from s3flash.dcp import S3StorageReader
            return S3StorageReader(env.region, path, s3client_config=env.s3flash_config(tuned),
                                   endpoint=env.url)
        if client == "s3tc":
            from s3torchconnector._s3client import S3Client
            from s3torchconnector.dcp import S3StorageReader
            r = S3StorageReader(env.region, path, s3client_config=env.s3tc_config(tuned))
            r.fs._client = S3Client(env.region, endpoint=env.url,
                                    s3client_config=env.s3tc_config(tuned))
            return r
        from torch.distributed.checkpoint import FileSystemReader
        return FileSystemReader(path)

    out = {}
    dist.barrier()
    with Phase("save") as ps:
        dcp.save(sd, storage_writer=writer())
        dist.barrier()
    out["save"] = ps.result(sd_bytes(sd))
    if spec["load"]:
        into = {k: torch.empty_like(v) for k, v in sd.items()}
        dist.barrier()
        with Phase("load") as pl:
            dcp.load(into, storage_reader=reader())
            dist.barrier()
        bad = [k for k in list(into)[:16] if not torch.equal(into[k], sd[k])]
        out["load"] = pl.result(sd_bytes(into), note=f"MISMATCH {bad[:3]}" if bad else "")
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)
    dist.barrier()
    if rank == 0:
        if client == "local":
            import shutil
            shutil.rmtree(path, ignore_errors=True)
        else:
            env.delete_prefix(f"{env.prefix}/dcp-{client}/")
    dist.destroy_process_group()


def _dcp_rank_guarded(rank, world, spec, outdir):
    try:
        _dcp_rank(rank, world, spec, outdir)
    except BaseException as e:
        inner = e
        while inner.__cause__ is not None or inner.__context__ is not None:
            inner = inner.__cause__ or inner.__context__
        msg = str(inner) or str(e)
        if "S3Exception" in repr(e) or "CheckpointException" in type(e).__name__:
            import re
            m = re.search(r"S3Exception: ([^\n]{0,240})", repr(e) + str(e))
            msg = m.group(1) if m else msg
        with open(os.path.join(outdir, f"rank{rank}.err"), "w") as f:
            f.write(f"{type(inner).__name__}: {msg[:300]}")
        raise


def scen_dcp(env, spec):
    import socket
    import tempfile
    import torch.multiprocessing as mp
    if spec["client"] == "s3flash":
        import s3flash.dcp  # noqa: F401  (skip when not landed)
    elif spec["client"] == "s3tc":
        import s3torchconnector.dcp  # noqa: F401
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        spec["master_port"] = s.getsockname()[1]
    outdir = tempfile.mkdtemp(prefix="s3flash-compare-dcp.")
    world = 2
    t0 = time.perf_counter()
    try:
        mp.spawn(_dcp_rank_guarded, args=(world, spec, outdir), nprocs=world, join=True)
    except Exception as e:  # noqa: BLE001  (say what the rank said, not "exit code 1")
        msgs = []
        for r in range(world):
            p = os.path.join(outdir, f"rank{r}.err")
            if os.path.exists(p):
                with open(p) as f:
                    msgs.append(f"rank {r}: " + f.read().strip())
        raise RuntimeError("; ".join(msgs) or str(e)) from e
    total_wall = time.perf_counter() - t0
    ranks = []
    for r in range(world):
        with open(os.path.join(outdir, f"rank{r}.json")) as f:
            ranks.append(json.load(f))
    for phase in ("save", "load"):
        if phase not in ranks[0]:
            continue
        rs = [x[phase] for x in ranks]
        emit(dict(phase=phase, wall=max(x["wall"] for x in rs), cpu=sum(x["cpu"] for x in rs),
                  server_cpu=max(x["server_cpu"] for x in rs),
                  bytes=sum(x["bytes"] for x in rs),
                  rss_peak=sum(x["rss_peak"] for x in rs),
                  rss_base=sum(x["rss_base"] for x in rs),
                  note=" ".join(x.get("note", "") for x in rs).strip(),
                  process_wall=total_wall))


# -- scenario: Lightning checkpoint saves in a short fit -----------------------------------
def scen_lightning(env, spec):
    import torch
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.io import TorchCheckpointIO
    client, tuned, size = spec["client"], spec["tuned"], spec["size"]
    if client == "s3flash":
        from s3flash.lightning import S3LightningCheckpoint
        cio = S3LightningCheckpoint(region=env.region, endpoint=env.url,
                                    s3client_config=env.s3flash_config(tuned))
        base = env.uri(f"{env.prefix}/ltn-{client}")
    elif client == "s3tc":
        from s3torchconnector.lightning import S3LightningCheckpoint
        cio = S3LightningCheckpoint(region=env.region, endpoint=env.url,
                                    s3client_config=env.s3tc_config(tuned))
        base = env.uri(f"{env.prefix}/ltn-{client}")
    else:
        cio = TorchCheckpointIO()
        base = os.path.join(spec["local_dir"], f"s3flash-compare-ltn-{os.getpid()}")
        os.makedirs(base, exist_ok=True)
    # A model of about `size` bytes of float32 parameters: square Linear layers of 1024.
    width = 1024
    layers = max(1, size // (width * width * 4))

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=True)
                                             for _ in range(layers)])

        def training_step(self, batch, i):
            return self.net(batch).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-6)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.randn(64, width), batch_size=8)

    saves = []
    every = 2

    class Saver(pl.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if (trainer.global_step % every) == 0:
                path = (f"{base}/step-{trainer.global_step}.ckpt")
                with Phase("save") as ph:
                    trainer.save_checkpoint(path)
                saves.append(ph)

    nsaves = spec.get("saves", 3)
    trainer = pl.Trainer(max_steps=every * nsaves, plugins=[cio], callbacks=[Saver()],
                         enable_checkpointing=False, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(Model())
    nbytes = layers * (width * width + width) * 4
    for ph in saves:
        emit(ph.result(nbytes, items=len(saves)))
    if client == "local":
        import shutil
        shutil.rmtree(base, ignore_errors=True)
    else:
        env.delete_prefix(f"{env.prefix}/ltn-{client}/")


# -- scenario: datasets through a DataLoader -----------------------------------------------
def dataset_uris(env, spec):
    return [env.uri(f"{spec['ds_prefix']}/obj-{i:05d}-size-{spec['size']}")
            for i in range(spec["count"])]


def ds_object(i, size):
    """The bytes of dataset object i where the server keeps them (RGW, the sink with --store):
    its index (8 bytes, little-endian), then 7s; _read_check knows them."""
    b = bytearray(b"\x07") * size
    b[:8] = i.to_bytes(8, "little")
    return b


def prepare_dataset(env, spec):
    """On RGW and the store-mode sink the objects must exist (the discarding sink answers
    size-N keys without them)."""
    from s3flash import S3Client
    c = S3Client(env.region, endpoint=env.url, s3client_config=env.s3flash_config(False))
    uris = dataset_uris(env, spec)
    with ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda iu: c.upload(env.bucket, iu[1].split("/", 3)[3],
                                        ds_object(iu[0], spec["size"])), enumerate(uris)))
    emit({"phase": "prepare", "items": len(uris)})


def _read_all(reader):
    return len(reader.read()), True


_DS_KEY = re.compile(r"obj-(\d+)-size-")


def _read_check(reader):
    """Reads the sample and checks it is the object its key names (ds_object)."""
    data = reader.read()
    m = _DS_KEY.search(reader.key)
    ok = (m is not None and len(data) >= 8 and
          int.from_bytes(data[:8], "little") == int(m.group(1)) and
          data.count(7, 8) == len(data) - 8)
    return len(data), ok


def scen_dataset(env, spec):
    import torch
    client, kind, tuned = spec["client"], spec["kind"], spec["tuned"]
    uris = dataset_uris(env, spec)
    if client == "s3flash":
        import s3flash
        cfg = env.s3flash_config(False)
        extra = {"prefetch": 8} if tuned else {}
        cls = s3flash.S3IterableDataset if kind == "iterable" else s3flash.S3MapDataset
    else:
        import s3torchconnector
        cfg = env.s3tc_config(False)
        extra = {}
        cls = (s3torchconnector.S3IterableDataset if kind == "iterable"
               else s3torchconnector.S3MapDataset)
    # where the server keeps the bytes (RGW, the store-mode sink) each sample is checked
    real = spec.get("ds_real", False)
    kw = dict(region=env.region, endpoint=env.url,
              transform=_read_check if real else _read_all, s3client_config=cfg, **extra)
    if kind == "iterable":
        kw["enable_sharding"] = True
    ds = cls.from_objects(uris, **kw)
    dl = torch.utils.data.DataLoader(ds, num_workers=spec.get("workers", 4), batch_size=32,
                                     collate_fn=lambda xs: xs)
    n = got = bad = 0
    with Phase() as ph:
        for batch in dl:
            n += len(batch)
            got += sum(x[0] for x in batch)
            bad += sum(1 for x in batch if not x[1])
        del dl
    note = "" if n == len(uris) and got == n * spec["size"] else (
        f"MISMATCH {n} samples / {got} bytes")
    if bad:
        note += f" content MISMATCH in {bad} samples"
    elif real:
        note = note or "content checked"
    emit(ph.result(got, items=n, note=note))


# -- scenario: physical limits -------------------------------------------------------------
def scen_memcpy(env, spec):
    import numpy as np
    n = spec["size"]
    a = prefault(n)
    b = prefault(n)
    walls = []
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(b, a)
        walls.append(time.perf_counter() - t0)
    w = statistics.median(walls)
    emit(dict(phase="main", wall=w, cpu=w, server_cpu=0.0, bytes=n, rss_peak=_status("VmHWM"),
              rss_base=_status("VmRSS")))


SCENARIOS = {"save": scen_save, "load": scen_load, "raw": scen_raw, "dcp": scen_dcp,
             "lightning": scen_lightning, "dataset": scen_dataset, "memcpy": scen_memcpy,
             "prepare_load": prepare_load, "prepare_dataset": prepare_dataset}

# Imports that, failing, mean "not available" (a layer not landed, a peer not installed).
NEEDS = {
    ("dcp", "s3flash"): "s3flash.dcp", ("dcp", "s3tc"): "s3torchconnector.dcp",
    ("lightning", "s3flash"): "s3flash.lightning",
    ("lightning", "s3tc"): "s3torchconnector.lightning",
    ("dataset", "s3flash"): "s3flash._dataset",
    ("dataset", "s3tc"): "s3torchconnector",
    ("save", "s3flash"): "s3flash", ("load", "s3flash"): "s3flash", ("raw", "s3flash"): "s3flash",
    ("save", "s3tc"): "s3torchconnector", ("load", "s3tc"): "s3torchconnector",
    ("raw", "awscrt"): "awscrt.s3",
}


def main():
    spec = json.loads(sys.argv[1])
    need = NEEDS.get((spec["scenario"], spec.get("client")))
    if need:
        try:
            __import__(need)
        except Exception as e:  # noqa: BLE001
            emit({"skip": f"not available: import {need} failed ({type(e).__name__}: {e})"})
            return 0
    env = Env(spec)
    SERVER_PIDS[:] = spec.get("server_pids", [])
    try:
        SCENARIOS[spec["scenario"]](env, spec)
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        emit({"error": f"{type(e).__name__}: {str(e)[:300]}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
