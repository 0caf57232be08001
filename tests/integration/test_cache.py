"""The node-local block cache (docs/CACHE.md) against Ceph RGW, through
tests/servers/faultproxy.py, which counts the requests on the wire. Each read is a new
process (tests/integration/cache_test.c): a restart of the client.

- a second read through a new client with the same cache_dir sends no GET (the reader,
  its random reads, s3f_download_buffer, _iov, _alloc and _file), and the bytes are right;
- a block corrupted on disk is detected (CRC32C), fetched again with one ranged GET, and
  the right bytes come back; the block is rewritten (a third read sends no GET);
- an object replaced on the server (a new ETag) is never served from the old blocks;
- eviction keeps the cache's files under cache_max_bytes;
- a cache directory that cannot be used does not fail a read;
- the cache touches only its own files: a planted symbolic link (an object directory
  replaced by a link to another tree) and a FIFO are left alone, and eviction deletes
  nothing outside the root; a root of another user, or one others may write, is not used;
  a shared root with the sticky bit gets a private directory (a part runs as uid 65534);
- a byte count near 2^64 in the lock file is recounted, inserts go on;
- a random read of one block of a large object caches that block;
- several processes reading at once keep the bound.
"""
import os
import shutil
import stat
import struct
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlparse

import pytest

from conftest import build_dir
from faults import start_faultproxy
from helpers import small_tmpfs

MIB = 1 << 20
SIZE = 20 * MIB + 12345  # 21 blocks, the last one short


def run(env, *args, prefix=()):
    exe = os.path.join(build_dir(), "tests", "cache_test")
    r = subprocess.run([*prefix, exe, *map(str, args)], env=env, capture_output=True,
                       text=True, timeout=300)
    print(r.stdout, r.stderr)
    assert r.returncode == 0, f"{args}: {r.stdout}\n{r.stderr}"
    stats = {}
    for line in r.stdout.splitlines():
        if line.startswith("stats "):
            stats = {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    return stats, r.stderr


@pytest.fixture()
def proxy(rgw):
    u = urlparse(rgw.endpoint)
    with start_faultproxy(u.hostname, u.port) as p:
        yield p


def gets(proxy):
    return sum(n for k, n in proxy.stats()["requests"].items() if k.startswith("GET "))


def block_files(cache_dir):
    return [p for p in Path(cache_dir, "v1").rglob("*")
            if p.is_file() and p.name != "lock" and not p.name.startswith(".")]


@pytest.mark.parametrize("mode", ["reader", "random", "buffer", "iov", "alloc", "file"])
def test_second_read_sends_no_get(mode, s3env, bucket, proxy, tmp_path):
    env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint)
    key = f"cache/{mode}"
    run(env, "put", bucket, key, SIZE, 7)
    cache = tmp_path / "cache"
    proxy.reset()
    first, _ = run(env, "read", mode, bucket, key, SIZE, 7, cache)
    assert gets(proxy) > 0
    # every block read is inserted: none lost, none dropped (the counters are one snapshot)
    if mode == "random":
        assert first["inserted"] >= MIB
    else:
        assert first["inserted"] == SIZE and first["dropped"] == 0, first
    proxy.reset()
    second, _ = run(env, "read", mode, bucket, key, SIZE, 7, cache)
    assert gets(proxy) == 0, proxy.stats()["requests"]
    assert second["hits"] > 0 and second["inserted"] == 0 and second["errors"] == 0
    if mode != "random":
        assert second["hit_bytes"] == SIZE


@pytest.mark.parametrize("mode", ["reader", "buffer", "alloc", "file"])
def test_corrupted_block_is_fetched_again(mode, s3env, bucket, proxy, tmp_path):
    env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint)
    key = f"cache/corrupt-{mode}"
    run(env, "put", bucket, key, SIZE, 8)
    cache = tmp_path / "cache"
    run(env, "read", mode, bucket, key, SIZE, 8, cache)
    (block,) = [p for p in block_files(cache) if p.name == "3"]
    data = bytearray(block.read_bytes())
    data[-1000] ^= 0xFF
    block.write_bytes(bytes(data))
    proxy.reset()
    second, err = run(env, "read", mode, bucket, key, SIZE, 8, cache)
    assert gets(proxy) == 1, proxy.stats()["requests"]   # block 3 alone
    assert second["errors"] == 1 and second["inserted"] == MIB
    assert "CRC32C" in err                               # logged once, as a WARN
    proxy.reset()
    third, _ = run(env, "read", mode, bucket, key, SIZE, 8, cache)
    assert gets(proxy) == 0 and third["errors"] == 0


@pytest.mark.parametrize("mode", ["reader", "buffer"])
def test_replaced_object_is_not_served_from_old_blocks(mode, s3env, bucket, proxy, tmp_path):
    env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint)
    key = f"cache/replaced-{mode}"
    cache = tmp_path / "cache"
    run(env, "put", bucket, key, SIZE, 9)
    run(env, "read", mode, bucket, key, SIZE, 9, cache)
    run(env, "put", bucket, key, SIZE, 10)          # same size, other bytes, new ETag
    proxy.reset()
    second, _ = run(env, "read", mode, bucket, key, SIZE, 10, cache)   # checks seed 10's bytes
    assert gets(proxy) > 0
    assert second["inserted"] == SIZE   # every block of the new ETag came from the server


def test_eviction_respects_the_limit(s3env, bucket, proxy, tmp_path):
    env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint)
    limit = 8 * MIB
    cache = tmp_path / "cache"
    for i in range(2):
        run(env, "put", bucket, f"cache/evict{i}", SIZE, 20 + i)
        run(env, "read", "reader", bucket, f"cache/evict{i}", SIZE, 20 + i, cache, limit)
        total = sum(p.stat().st_size for p in block_files(cache))
        assert 0 < total <= limit
    # the most recently read blocks are the ones kept: the end of evict1
    names = {p.parent.name for p in block_files(cache)}
    assert len(names) == 1
    assert "20" in {p.name for p in block_files(cache)}


def test_unusable_cache_dir_does_not_fail_reads(s3env, bucket, proxy, tmp_path):
    env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint)
    run(env, "put", bucket, "cache/unusable", 3 * MIB, 30)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_bytes(b"x")
    for mode in ("reader", "buffer"):
        stats, err = run(env, "read", mode, bucket, "cache/unusable", 3 * MIB, 30, not_a_dir)
        assert stats["hits"] == 0 and stats["inserted"] == 0
        assert "is not used" in err


def test_cli_cp_second_download_sends_no_get(s3env, bucket, proxy, tmp_path, cli_path):
    env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint)
    run(env, "put", bucket, "cache/cli", SIZE, 40)
    env.update(AWS_ACCESS_KEY_ID=s3env["S3FLASH_TEST_ACCESS_KEY"],
               AWS_SECRET_ACCESS_KEY=s3env["S3FLASH_TEST_SECRET_KEY"],
               AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    cache = tmp_path / "cache"
    outs = []
    for i in range(2):
        proxy.reset()
        out = tmp_path / f"out{i}"
        r = subprocess.run([cli_path, "cp", "--quiet", "--endpoint-url", proxy.endpoint,
                            "--region", s3env["S3FLASH_TEST_REGION"], "--force-path-style",
                            "--cache", str(cache), "--max-cache-size", "1G",
                            f"s3://{bucket}/cache/cli", str(out)],
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        outs.append((gets(proxy), out.read_bytes()))
    (g1, b1), (g2, b2) = outs
    assert g1 > 0 and g2 == 0
    assert b1 == b2 and len(b1) == SIZE
    assert sum(p.stat().st_size for p in block_files(cache)) >= SIZE


@pytest.mark.parametrize("mode", ["reader", "buffer", "file"])
def test_full_cache_disk_does_not_fail_reads(mode, s3env, bucket, proxy, tmp_path):
    """The cache on a 2 MiB tmpfs with no free-space floor: inserts fail with ENOSPC; the
    read still returns the right bytes, the failures are counted and logged once."""
    with small_tmpfs(tmp_path / "full", "2m") as d:
        env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint)
        run(env, "put", bucket, f"cache/full-{mode}", 6 * MIB, 50)
        stats, err = run(env, "read", mode, bucket, f"cache/full-{mode}", 6 * MIB, 50, d)
        assert stats["errors"] > 0 and stats["inserted"] < 6 * MIB
        assert err.count("No space left on device") == 1, err


def tree_state(root):
    """Every path under root (links not followed) with its kind and content."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                out[p] = open(p, "rb").read()
            elif stat.S_ISLNK(st.st_mode):
                out[p] = "link:" + os.readlink(p)
            elif stat.S_ISFIFO(st.st_mode):
                out[p] = "fifo"
            else:
                out[p] = "dir"
    return out


def object_dir(cache, key_blocks):
    """The object directory holding the given number of blocks (only one such)."""
    dirs = {p.parent for p in block_files(cache)}
    (d,) = [d for d in dirs if len([x for x in d.iterdir() if x.name.isdigit()]) == key_blocks]
    return d


def test_planted_symlink_and_fifo_are_left_alone(s3env, bucket, proxy, tmp_path):
    """An object directory replaced by a link to another tree (holding valid blocks of that
    object), a FIFO in place of a block and one in the tree: reads never follow or open
    them (the object comes from S3), inserts never write through them, and eviction under
    a small bound deletes nothing outside the root."""
    env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint)
    size_a, size_b = 3 * MIB, 4 * MIB
    run(env, "put", bucket, "cache/plant-a", size_a, 60)
    run(env, "put", bucket, "cache/plant-b", size_b, 61)
    run(env, "put", bucket, "cache/plant-c", SIZE, 62)
    cache = tmp_path / "cache"
    run(env, "read", "reader", bucket, "cache/plant-a", size_a, 60, cache)
    adir = object_dir(cache, 3)
    run(env, "read", "reader", bucket, "cache/plant-b", size_b, 61, cache)
    bdir = object_dir(cache, 4)
    # a's directory moves outside and a link takes its place
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(str(adir), str(outside / "a"))
    (outside / "precious").write_bytes(b"keep me")
    adir.symlink_to(outside / "a")
    # b's block 2 becomes a FIFO; another FIFO beside the first-level directories
    (bdir / "2").unlink()
    os.mkfifo(bdir / "2")
    os.mkfifo(cache / "v1" / "fifo")
    before_outside = tree_state(outside)
    proxy.reset()
    # a: read from S3 (the link is not followed), with a bound that makes eviction run
    stats, err = run(env, "read", "reader", bucket, "cache/plant-a", size_a, 60, cache, 6 * MIB)
    assert gets(proxy) > 0 and stats["hits"] == 0
    assert "left alone" in err
    proxy.reset()
    # b: block 2 from S3, the FIFO opened without blocking and left in place
    stats, _ = run(env, "read", "reader", bucket, "cache/plant-b", size_b, 61, cache, 6 * MIB)
    assert gets(proxy) >= 1
    # c: 21 MiB through a 6 MiB bound: eviction all the time
    stats, _ = run(env, "read", "reader", bucket, "cache/plant-c", SIZE, 62, cache, 6 * MIB)
    assert stats["evicted"] > 0
    assert tree_state(outside) == before_outside
    assert adir.is_symlink() and os.readlink(adir) == str(outside / "a")
    assert stat.S_ISFIFO(os.lstat(bdir / "2").st_mode)
    assert stat.S_ISFIFO(os.lstat(cache / "v1" / "fifo").st_mode)
    assert sum(p.stat().st_size for p in block_files(cache)) <= 6 * MIB


def test_foreign_or_open_root_is_not_used(s3env, bucket, proxy, tmp_path):
    """A root of another user (uid 65534, world-writable) and one anybody may write (no
    sticky bit) are refused with a clear line, nothing is created in them, the read goes
    to S3 and is right."""
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint)
    run(env, "put", bucket, "cache/foreign", 2 * MIB, 63)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    os.chown(foreign, 65534, 65534)
    os.chmod(foreign, 0o777)
    stats, err = run(env, "read", "reader", bucket, "cache/foreign", 2 * MIB, 63, foreign)
    assert stats["inserted"] == 0 and "is not used" in err
    assert "belongs to uid 65534" in err
    assert list(foreign.iterdir()) == []
    shared = tmp_path / "open"
    shared.mkdir()
    os.chmod(shared, 0o777)
    stats, err = run(env, "read", "buffer", bucket, "cache/foreign", 2 * MIB, 63, shared)
    assert stats["inserted"] == 0 and "writable by other users" in err
    assert list(shared.iterdir()) == []


def test_shared_sticky_root_gets_a_private_directory(s3env, bucket, proxy):
    """A /tmp-like root (mode 1777): a process of uid 65534 gets s3flash-65534 (its own,
    0700) and root gets s3flash-0; each one's second read sends no GET."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run a part as another user")
    env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint, HOME="/nonexistent",
               AWS_CONFIG_FILE="/nonexistent/config",
               AWS_SHARED_CREDENTIALS_FILE="/nonexistent/credentials")
    run(env, "put", bucket, "cache/sticky", 2 * MIB, 64)
    shared = tempfile.mkdtemp(prefix="s3f-sticky-", dir="/tmp")
    try:
        os.chmod(shared, 0o1777)
        nobody = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
        for prefix, uid in ((nobody, 65534), ((), 0)):
            for i in range(2):
                proxy.reset()
                stats, _ = run(env, "read", "reader", bucket, "cache/sticky", 2 * MIB, 64,
                               shared, prefix=prefix)
                assert (gets(proxy) == 0) == (i == 1), (uid, i)
            priv = os.path.join(shared, f"s3flash-{uid}")
            st = os.lstat(priv)
            assert stat.S_ISDIR(st.st_mode) and st.st_uid == uid
            assert stat.S_IMODE(st.st_mode) == 0o700
            assert os.path.isdir(os.path.join(priv, "v1"))
        assert sorted(os.listdir(shared)) == ["s3flash-0", "s3flash-65534"]
    finally:
        shutil.rmtree(shared, ignore_errors=True)


KEY = 0x5333464343414348


def read_counts(cache):
    raw = (cache / "v1" / "lock").read_bytes()
    assert raw[:8] == b"S3FCCNT1"
    slots = [struct.unpack_from("<QQ", raw, 16 + 16 * i) for i in range(256)]
    assert all(v ^ KEY == ck for v, ck in slots), "a slot is left invalid"
    return sum(v for v, _ in slots)


def test_overflowed_count_is_recovered(s3env, bucket, proxy, tmp_path):
    """Every slot of the byte count set near 2^64 (with matching checks): the next client
    recounts, inserts go on, the bound holds and the count is the files' size."""
    env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint)
    run(env, "put", bucket, "cache/overflow", 4 * MIB, 65)
    run(env, "put", bucket, "cache/overflow2", 4 * MIB, 66)
    cache = tmp_path / "cache"
    run(env, "read", "reader", bucket, "cache/overflow", 4 * MIB, 65, cache)
    assert read_counts(cache) == sum(p.stat().st_size for p in block_files(cache))
    lock = cache / "v1" / "lock"
    raw = bytearray(lock.read_bytes())
    for i in range(256):
        v = 2**64 - 4096 * (i + 1)
        struct.pack_into("<QQ", raw, 16 + 16 * i, v, v ^ KEY)
    lock.write_bytes(bytes(raw))
    stats, _ = run(env, "read", "reader", bucket, "cache/overflow2", 4 * MIB, 66, cache,
                   6 * MIB)
    # inserts go on: every slot is recounted before the first insert, all four blocks
    assert stats["inserted"] == 4 * MIB, stats
    total = sum(p.stat().st_size for p in block_files(cache))
    assert read_counts(cache) == total and total <= 6 * MIB
    # and the old 8-byte form of the count, near 2^64
    lock.write_bytes(struct.pack("<Q", 2**64 - 100))
    proxy.reset()
    stats, _ = run(env, "read", "reader", bucket, "cache/overflow", 4 * MIB, 65, cache, 6 * MIB)
    assert stats["inserted"] > 0
    assert read_counts(cache) == sum(p.stat().st_size for p in block_files(cache))


def test_partial_object_blocks_are_cached(s3env, bucket, proxy, tmp_path):
    """One 4 KiB read inside block 7 of a 21-block object caches block 7 (a reader that
    never reads the object whole); a second process's same read sends no GET."""
    env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint)
    run(env, "put", bucket, "cache/partial", SIZE, 67)
    cache = tmp_path / "cache"
    proxy.reset()
    first, _ = run(env, "read", "one", bucket, "cache/partial", SIZE, 67, cache)
    assert gets(proxy) > 0 and first["inserted"] >= MIB
    assert "7" in {p.name for p in block_files(cache)}
    proxy.reset()
    second, _ = run(env, "read", "one", bucket, "cache/partial", SIZE, 67, cache)
    assert gets(proxy) == 0, proxy.stats()["requests"]
    assert second["hits"] == 1 and second["inserted"] == 0


@pytest.mark.parametrize("mode", ["buffer", "alloc", "file"])
def test_partly_cached_download_fetches_only_the_missing_blocks(mode, s3env, bucket, proxy,
                                                                tmp_path):
    """A whole-object download of an object with three blocks missing from the cache (an
    eviction, a reader that read the rest): three ranged GETs, not the whole object; with
    more than eight missing, the whole object is downloaded again."""
    env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint)
    key = f"cache/partly-{mode}"
    run(env, "put", bucket, key, SIZE, 68)
    cache = tmp_path / "cache"
    run(env, "read", mode, bucket, key, SIZE, 68, cache)
    for p in block_files(cache):
        if p.name in ("0", "5", "20"):
            p.unlink()
    proxy.reset()
    second, _ = run(env, "read", mode, bucket, key, SIZE, 68, cache)
    assert gets(proxy) == 3, proxy.stats()["requests"]
    assert second["hit_bytes"] == SIZE - 2 * MIB - (SIZE - 20 * MIB)
    proxy.reset()
    third, _ = run(env, "read", mode, bucket, key, SIZE, 68, cache)
    assert gets(proxy) == 0 and third["hit_bytes"] == SIZE
    for p in block_files(cache):
        if int(p.name) < 9:
            p.unlink()
    proxy.reset()
    fourth, _ = run(env, "read", mode, bucket, key, SIZE, 68, cache)
    assert fourth["hits"] == 0 and gets(proxy) >= 1


def test_concurrent_processes_keep_the_bound(s3env, bucket, proxy, tmp_path):
    """Four processes read four objects at once through one cache with an 8 MiB bound:
    every read is right, the files stay under the bound, the count matches the files."""
    env = dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint)
    size = 6 * MIB + 5
    for i in range(4):
        run(env, "put", bucket, f"cache/conc{i}", size, 70 + i)
    cache = tmp_path / "cache"
    exe = os.path.join(build_dir(), "tests", "cache_test")
    for rnd in range(2):
        procs = [subprocess.Popen([exe, "read", "reader", bucket, f"cache/conc{i}", str(size),
                                   str(70 + i), str(cache), str(8 * MIB)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(4)]
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
        total = sum(p.stat().st_size for p in block_files(cache))
        assert 0 < total <= 8 * MIB
        assert read_counts(cache) == total
