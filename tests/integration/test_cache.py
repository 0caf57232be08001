"""The node-local block cache (docs/CACHE.md) against Ceph RGW, through
tests/servers/faultproxy.py, which counts the requests on the wire. Each read is a new
process (tests/integration/cache_test.c): a restart of the client.

- a second read through a new client with the same cache_dir sends no GET (the reader,
  its random reads, s3f_download_buffer, _iov, _alloc and _file), and the bytes are right;
- a block corrupted on disk is detected (CRC32C), fetched again with one ranged GET, and
  the right bytes come back; the block is rewritten (a third read sends no GET);
- an object replaced on the server (a new ETag) is never served from the old blocks;
- eviction keeps the cache's files under cache_max_bytes;
- a cache directory that cannot be used does not fail a read.
"""
import os
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest

from conftest import build_dir
from faults import start_faultproxy
from helpers import small_tmpfs

MIB = 1 << 20
SIZE = 20 * MIB + 12345  # 21 blocks, the last one short


def run(env, *args):
    exe = os.path.join(build_dir(), "tests", "cache_test")
    r = subprocess.run([exe, *map(str, args)], env=env, capture_output=True, text=True,
                       timeout=300)
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
    assert first["inserted"] >= (SIZE if mode != "random" else MIB)
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
