"""`s3flash mount` used as people use a mount, under concurrency and under faults.

Real FUSE mounts (as root) of buckets on Ceph RGW; every byte that goes through the mount is
compared with what was written (sha256), and what the mount wrote is read back with boto3
straight from RGW. Faults go through tests/servers/faultproxy.py between the mount and RGW;
the assertions are on the proxy's request log and on returned state, never on sleeps.

What this file covers (docs/SEMANTICS.md is the contract):
- concurrency: many readers of one file, many files written and read at once, readdir while
  files are being written;
- tools: cp -r in and out, rsync -r, tar x into the mount, find / du / ls -lR over it,
  torch.load(open(path)), a torch DataLoader over a directory of files, dd of a large file;
- faults: connections reset mid-read (the bytes are still right), the server down (EIO in
  bounded time, no hang), a failed write (no object, the previous one intact), the daemon
  killed with SIGKILL (ENOTCONN until `fusermount3 -u`, then a remount; no partial object).
"""

import errno
import hashlib
import os
import random
import signal
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers import list_keys, read_tree
from mountutil import mount_supported

MIB = 1 << 20

pytestmark = pytest.mark.skipif(mount_supported() is not None,
                                reason=str(mount_supported()))


def sha(b):
    return hashlib.sha256(b).hexdigest()


def data(n, seed):
    return random.Random(seed).randbytes(n)


@pytest.fixture
def prefix():
    return f"u-{uuid.uuid4().hex[:8]}/"


def put(s3, bucket, key, body):
    s3.put_object(Bucket=bucket, Key=key, Body=body)


def get(s3, bucket, key):
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def make_tree(root, seed, nfiles=30, max_size=200_000, empty=True):
    """A local tree of files in nested directories; returns {relpath: bytes}."""
    rng = random.Random(seed)
    out = {}
    for i in range(nfiles):
        depth = rng.randint(0, 3)
        rel = "/".join([f"d{rng.randint(0, 2)}" for _ in range(depth)] + [f"f{i}.bin"])
        body = rng.randbytes(rng.choice([0 if empty else 2, 1, 100, 4096,
                                         rng.randint(1, max_size)]))
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(body)
        out[rel] = body
    return out


# ---- concurrency ---------------------------------------------------------------------------

def test_many_readers_one_file(s3, bucket, prefix, mounts):
    body = data(24 * MIB + 4321, 1)
    put(s3, bucket, prefix + "big", body)
    m = mounts(prefix)
    path = os.path.join(m.dir, "big")

    def whole(_):
        with open(path, "rb") as f:
            return sha(f.read())

    def ranges(seed):
        rng = random.Random(seed)
        fd = os.open(path, os.O_RDONLY)
        try:
            for _ in range(40):
                off = rng.randrange(len(body))
                n = rng.choice([1, 4096, 65536, MIB + 7])
                if os.pread(fd, n, off) != body[off:off + n]:
                    return f"bytes differ at {off}+{n}"
        finally:
            os.close(fd)
        return None

    with ThreadPoolExecutor(16) as ex:
        wholes = list(ex.map(whole, range(8)))
        bad = [r for r in ex.map(ranges, range(8)) if r]
    assert wholes == [sha(body)] * 8
    assert not bad


def test_many_files_at_once(s3, bucket, prefix, mounts):
    m = mounts(prefix)
    files = {f"w/f{i:03d}": data(random.Random(i).randint(0, 700_000), 100 + i)
             for i in range(48)}

    def write(item):
        k, v = item
        os.makedirs(os.path.join(m.dir, "w"), exist_ok=True)
        with open(os.path.join(m.dir, k), "wb") as f:
            for o in range(0, len(v), 65536):
                f.write(v[o:o + 65536])

    def read(k):
        with open(os.path.join(m.dir, k), "rb") as f:
            return k, f.read()

    with ThreadPoolExecutor(12) as ex:
        list(ex.map(write, files.items()))
        got = dict(ex.map(read, files))
    assert {k: sha(v) for k, v in got.items()} == {k: sha(v) for k, v in files.items()}
    assert sorted(os.listdir(os.path.join(m.dir, "w"))) == sorted(k[2:] for k in files)
    # straight from RGW
    for k, v in files.items():
        assert sha(get(s3, bucket, prefix + k)) == sha(v), k


def test_readdir_while_files_are_written(s3, bucket, prefix, mounts):
    m = mounts(prefix, "--metadata-ttl", "0")
    d = os.path.join(m.dir, "live")
    os.mkdir(d)
    names = [f"n{i:03d}" for i in range(30)]
    done = threading.Event()
    seen, errors = [], []

    def lister():
        while not done.is_set():
            try:
                seen.append(set(os.listdir(d)))
            except OSError as e:
                errors.append(e)
                return

    t = threading.Thread(target=lister)
    t.start()
    try:
        for i, n in enumerate(names):
            with open(os.path.join(d, n), "wb") as f:
                f.write(data(i * 1000, i))
    finally:
        done.set()
        t.join(60)
    assert not errors, errors
    assert len(seen) > 1
    every = set(names)
    # a file shows at its create (docs/SEMANTICS.md) and nothing is deleted: every listing
    # holds only names of the test, and each one holds all the names of the one before
    for before, after in zip(seen, seen[1:]):
        assert after <= every, after - every
        assert before <= after, before - after
    assert set(os.listdir(d)) == every
    assert sorted(k[len(prefix) + 5:] for k in list_keys(s3, bucket, prefix + "live/")) == names


# ---- what people do ------------------------------------------------------------------------

def test_cp_r_in_and_out(s3, bucket, prefix, mounts, tmp_path):
    src = tmp_path / "src"
    tree = make_tree(src, 7)
    m = mounts(prefix)
    subprocess.run(["cp", "-r", str(src), os.path.join(m.dir, "tree")], check=True,
                   capture_output=True, timeout=120)
    out = tmp_path / "out"
    subprocess.run(["cp", "-r", os.path.join(m.dir, "tree"), str(out)], check=True,
                   capture_output=True, timeout=120)
    assert read_tree(out) == tree
    assert {k[len(prefix) + 5:]: sha(get(s3, bucket, k))
            for k in list_keys(s3, bucket, prefix + "tree/")} == \
        {k: sha(v) for k, v in tree.items()}


def test_rsync_r_into_the_mount(s3, bucket, prefix, mounts, tmp_path):
    src = tmp_path / "src"
    tree = make_tree(src, 8, nfiles=20, empty=False)   # empty files: test_rsync_an_empty_file
    # rsync writes a temporary ".name.XXXXXX" and renames it over the name
    m = mounts(prefix, "--allow-rename", "--allow-overwrite")
    p = subprocess.run(["rsync", "-r", f"{src}/", os.path.join(m.dir, "rs") + "/"],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    assert read_tree(os.path.join(m.dir, "rs")) == tree
    assert {k[len(prefix) + 3:] for k in list_keys(s3, bucket, prefix + "rs/")} == set(tree)
    # a second rsync with nothing changed (sizes and times: -r alone compares size+mtime,
    # which differ, so it rewrites; --size-only skips) sends nothing
    p = subprocess.run(["rsync", "-r", "--size-only", f"{src}/",
                        os.path.join(m.dir, "rs") + "/"], capture_output=True, text=True,
                       timeout=180)
    assert p.returncode == 0, p.stderr


def test_rsync_an_empty_file(s3, bucket, prefix, mounts, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "empty").write_bytes(b"")
    m = mounts(prefix, "--allow-rename", "--allow-overwrite")
    p = subprocess.run(["rsync", "-r", f"{src}/", os.path.join(m.dir, "rs") + "/"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert get(s3, bucket, prefix + "rs/empty") == b""


def test_tar_x_into_the_mount(s3, bucket, prefix, mounts, tmp_path):
    src = tmp_path / "src"
    tree = make_tree(src, 9, nfiles=25)
    tarball = tmp_path / "t.tar"
    subprocess.run(["tar", "cf", str(tarball), "-C", str(src), "."], check=True)
    m = mounts(prefix)
    dst = os.path.join(m.dir, "untar")
    os.mkdir(dst)
    # -m: do not restore mtimes, --no-same-permissions/--no-same-owner: no chmod/chown
    # (docs/SEMANTICS.md: utimensat and chmod to other modes are EPERM on a closed file)
    p = subprocess.run(["tar", "xf", str(tarball), "-C", dst, "-m", "--no-same-permissions",
                        "--no-same-owner"], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    assert read_tree(dst) == tree


def test_find_du_ls_lR(s3, bucket, prefix, mounts, tmp_path):
    rng = random.Random(3)
    want = {}
    for i in range(120):
        k = f"t/{rng.choice('abc')}/{rng.choice('xy')}/k{i:03d}"
        want[k] = rng.randint(0, 5000)
    from concurrent.futures import ThreadPoolExecutor as TP
    with TP(16) as ex:
        list(ex.map(lambda kv: put(s3, bucket, prefix + kv[0], b"z" * kv[1]), want.items()))
    m = mounts(prefix)
    root = os.path.join(m.dir, "t")
    p = subprocess.run(["find", root, "-type", "f", "-printf", "%P %s\n"], capture_output=True,
                       text=True, timeout=120, check=True)
    got = dict(line.rsplit(" ", 1) for line in p.stdout.splitlines())
    assert {k: int(v) for k, v in got.items()} == {k[2:]: v for k, v in want.items()}
    p = subprocess.run(["du", "-s", "-b", root], capture_output=True, text=True, timeout=120,
                       check=True)
    assert int(p.stdout.split()[0]) == sum(want.values())
    p = subprocess.run(["ls", "-lR", root], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    files = [ln for ln in p.stdout.splitlines() if ln.startswith("-")]
    assert len(files) == len(want)
    assert all(ln.startswith("-rw-r--r--") for ln in files)


def test_torch_load_from_the_mount(s3, bucket, prefix, mounts, tmp_path):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    sd = {f"layer{i}.weight": torch.randn(256, 257, generator=g) for i in range(12)}
    local = tmp_path / "ckpt.pt"
    torch.save(sd, local)
    put(s3, bucket, prefix + "ckpt.pt", local.read_bytes())
    m = mounts(prefix)
    with open(os.path.join(m.dir, "ckpt.pt"), "rb") as f:
        got = torch.load(f, weights_only=True)
    assert got.keys() == sd.keys()
    assert all(torch.equal(got[k], sd[k]) for k in sd)
    # and saved through the mount
    torch.save(sd, os.path.join(m.dir, "saved.pt"))
    got = torch.load(os.path.join(m.dir, "saved.pt"), weights_only=True)
    assert all(torch.equal(got[k], sd[k]) for k in sd)


class _FilesDataset:
    def __init__(self, root):
        self.paths = sorted(os.path.join(root, n) for n in os.listdir(root))

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()


def test_dataloader_over_a_directory(s3, bucket, prefix, mounts):
    torch = pytest.importorskip("torch")
    files = {f"ds/s{i:04d}": data(random.Random(i).randint(1, 40_000), 500 + i)
             for i in range(200)}
    from concurrent.futures import ThreadPoolExecutor as TP
    with TP(16) as ex:
        list(ex.map(lambda kv: put(s3, bucket, prefix + kv[0], kv[1]), files.items()))
    m = mounts(prefix)
    dl = torch.utils.data.DataLoader(_FilesDataset(os.path.join(m.dir, "ds")), batch_size=16,
                                     num_workers=2, collate_fn=lambda b: b)
    got = [h for batch in dl for h in batch]
    assert got == [sha(files[k]) for k in sorted(files)]


def test_dd_of_a_large_file(s3, bucket, prefix, mounts, tmp_path):
    body = data(40 * MIB + 12345, 11)
    local = tmp_path / "big"
    local.write_bytes(body)
    m = mounts(prefix)
    dst = os.path.join(m.dir, "dd.bin")
    p = subprocess.run(["dd", f"if={local}", f"of={dst}", "bs=1M"], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert sha(get(s3, bucket, prefix + "dd.bin")) == sha(body)
    back = tmp_path / "back"
    p = subprocess.run(["dd", f"if={dst}", f"of={back}", "bs=4M"], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert sha(back.read_bytes()) == sha(body)


# ---- faults --------------------------------------------------------------------------------

def test_resets_mid_read_still_right_bytes(s3, bucket, prefix, mounts, proxy):
    body = data(16 * MIB + 99, 21)
    put(s3, bucket, prefix + "r", body)
    m = mounts(prefix, endpoint=proxy.endpoint)
    proxy.set_faults([{"match": {"method": "GET", "path": "/r$", "probability": 0.5,
                                 "seed": 4, "max_count": 6},
                       "action": "reset_response_body_at", "at": "random", "seed": 5}])
    with open(os.path.join(m.dir, "r"), "rb") as f:
        got = f.read()
    assert sha(got) == sha(body)
    # random ranges, a fresh handle
    fd = os.open(os.path.join(m.dir, "r"), os.O_RDONLY)
    try:
        rng = random.Random(6)
        for _ in range(30):
            off = rng.randrange(len(body))
            assert os.pread(fd, 100_000, off) == body[off:off + 100_000]
    finally:
        os.close(fd)
    assert proxy.stats()["faults_total"] >= 1


def test_server_down_gives_eio_in_bounded_time(s3, bucket, prefix, mounts, proxy):
    body = data(3 * MIB, 22)
    put(s3, bucket, prefix + "gone", body)
    m = mounts(prefix, "--metadata-ttl", "60", endpoint=proxy.endpoint)
    path = os.path.join(m.dir, "gone")
    assert os.stat(path).st_size == len(body)     # attributes cached; the data is not
    fd = os.open(path, os.O_RDONLY)
    try:
        proxy.down("refuse")
        t = time.monotonic()
        with pytest.raises(OSError) as ei:
            os.pread(fd, 4096, MIB)
        took = time.monotonic() - t
        assert ei.value.errno == errno.EIO
        assert took < 60, f"EIO after {took:.1f} s"
        # a new open of a name not cached also fails, and fast
        t = time.monotonic()
        with pytest.raises(OSError) as ei:
            os.stat(os.path.join(m.dir, "never-seen"))
        assert ei.value.errno == errno.EIO     # not ENOENT: nothing says it is missing
        assert time.monotonic() - t < 60
    finally:
        os.close(fd)
        proxy.up()
    # back up: the same mount reads again
    with open(path, "rb") as f:
        assert sha(f.read()) == sha(body)


def test_failed_write_leaves_no_object_and_the_old_one(s3, bucket, prefix, mounts, proxy):
    old = data(100_000, 23)
    put(s3, bucket, prefix + "keep", old)
    m = mounts(prefix, "--allow-overwrite", endpoint=proxy.endpoint)
    # every upload request fails (PUT of a part or object; CompleteMultipartUpload is a POST)
    proxy.set_faults([{"match": {"method": "PUT"}, "action": "reset_request_body_at",
                       "at": 10}])
    new = data(12 * MIB, 24)
    for name in ("keep", "fresh"):
        failed = None
        try:
            fd = os.open(os.path.join(m.dir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                for o in range(0, len(new), MIB):
                    os.write(fd, new[o:o + MIB])
            finally:
                os.close(fd)
        except OSError as e:
            failed = e
        assert failed is not None and failed.errno == errno.EIO, (name, failed)
    proxy.reset()
    assert get(s3, bucket, prefix + "keep") == old
    assert list_keys(s3, bucket, prefix + "fresh") == []
    with open(os.path.join(m.dir, "keep"), "rb") as f:
        assert f.read() == old
    uploads = s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])
    assert uploads == [], "the failed uploads were not aborted"


def test_daemon_killed_recovery(s3, bucket, prefix, mounts, tmp_path):
    """docs/SEMANTICS.md: SIGKILL leaves ENOTCONN until `fusermount3 -u DIR`; a remount
    then works, and an upload that was in progress left no object."""
    old = data(50_000, 25)
    put(s3, bucket, prefix + "old", old)
    m = mounts(prefix, name="killed")
    fd = os.open(os.path.join(m.dir, "partial"), os.O_WRONLY | os.O_CREAT)
    chunk = data(MIB, 26)
    for _ in range(12):            # past the first part: a multipart upload is in progress
        os.write(fd, chunk)
    m.proc.send_signal(signal.SIGKILL)
    m.proc.wait(30)
    with pytest.raises(OSError) as ei:
        os.write(fd, chunk)
    assert ei.value.errno in (errno.ENOTCONN, errno.EIO)
    try:
        os.close(fd)                  # the flush cannot reach the daemon
    except OSError as e:
        assert e.errno in (errno.ENOTCONN, errno.EIO)
    with pytest.raises(OSError) as ei:
        os.stat(os.path.join(m.dir, "old"))
    assert ei.value.errno == errno.ENOTCONN
    p = subprocess.run(["fusermount3", "-u", m.dir], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    m2 = mounts(prefix, name="killed")
    assert sorted(os.listdir(m2.dir)) == ["old"]
    assert list_keys(s3, bucket, prefix) == [prefix + "old"]
    with open(os.path.join(m2.dir, "old"), "rb") as f:
        assert f.read() == old


# ---- the node-local cache (--cache DIR) ----------------------------------------------------

def object_gets(proxy, key):
    """The GETs of the object `key` (not listings) in the proxy's log, with their Range."""
    return [e for e in proxy.stats()["log"]
            if e["method"] == "GET" and e["path"].endswith("/" + key)]


def block_files(cache_dir):
    out = []
    for dirpath, _dirs, files in os.walk(cache_dir):
        for f in files:
            p = os.path.join(dirpath, f)
            if os.path.isfile(p) and not f.startswith("."):
                out.append(p)
    return sorted(out)


def range_len(r):
    a, b = r.split("=", 1)[1].split("-")
    return int(b) - int(a) + 1


def test_cache_survives_a_remount(s3, bucket, prefix, mounts, proxy, tmp_path):
    body = data(5 * MIB + 777, 31)
    put(s3, bucket, prefix + "c", body)
    cache = str(tmp_path / "cache")
    m = mounts(prefix, "--cache", cache, endpoint=proxy.endpoint, name="c1")
    with open(os.path.join(m.dir, "c"), "rb") as f:
        assert sha(f.read()) == sha(body)
    assert object_gets(proxy, prefix + "c"), "the first read sent no GET"
    m.stop()
    proxy.reset()
    m = mounts(prefix, "--cache", cache, endpoint=proxy.endpoint, name="c2")
    with open(os.path.join(m.dir, "c"), "rb") as f:
        assert sha(f.read()) == sha(body)
    # the second mount read every byte from the cache: not one GET of the object
    assert object_gets(proxy, prefix + "c") == []


def test_cache_corrupted_block_is_refetched(s3, bucket, prefix, mounts, proxy, tmp_path):
    body = data(4 * MIB + 100, 32)
    put(s3, bucket, prefix + "k", body)
    cache = str(tmp_path / "cache")
    m = mounts(prefix, "--cache", cache, endpoint=proxy.endpoint, name="k1")
    with open(os.path.join(m.dir, "k"), "rb") as f:
        assert sha(f.read()) == sha(body)
    m.stop()
    files = block_files(cache)
    assert len(files) >= 5, files        # 4 MiB + 100 bytes: 5 blocks of 1 MiB
    victim = max(files, key=os.path.getsize)
    with open(victim, "r+b") as f:        # flip one byte of the data (past any header)
        f.seek(os.path.getsize(victim) - 1000)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x40]))
    proxy.reset()
    m = mounts(prefix, "--cache", cache, endpoint=proxy.endpoint, name="k2")
    with open(os.path.join(m.dir, "k"), "rb") as f:
        assert sha(f.read()) == sha(body)
    gets = object_gets(proxy, prefix + "k")
    assert gets and all(g["range"] for g in gets), gets
    ranges = [tuple(int(x) for x in g["range"].split("=", 1)[1].split("-")) for g in gets]
    # the corrupted block (its file is named by its index) came again from the server, and
    # the rest from the cache: less than the object was sent. (The reader refetches the run
    # it asked for, two blocks here, rather than the one bad block.)
    idx = int(os.path.basename(victim))
    assert any(a <= idx * MIB and b >= min(len(body), (idx + 1) * MIB) - 1 for a, b in ranges), \
        (idx, ranges)
    assert sum(b - a + 1 for a, b in ranges) <= 2 * MIB, ranges


def test_cache_eviction_respects_the_limit(s3, bucket, prefix, mounts, tmp_path):
    cache = str(tmp_path / "cache")
    limit = 4 * MIB
    bodies = {f"e{i}": data(3 * MIB, 40 + i) for i in range(4)}
    for k, v in bodies.items():
        put(s3, bucket, prefix + k, v)
    # MiB, Mountpoint's unit (a bare number of bytes would be read as that many MiB)
    m = mounts(prefix, "--cache", cache, "--max-cache-size", str(limit // MIB))
    for k, v in bodies.items():
        with open(os.path.join(m.dir, k), "rb") as f:
            assert sha(f.read()) == sha(v)
        total = sum(os.path.getsize(p) for p in block_files(cache))
        assert total <= limit, f"{total} bytes of block files after {k}, limit {limit}"
    assert sum(os.path.getsize(p) for p in block_files(cache)) > 0
