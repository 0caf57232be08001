"""S3ClientConfig's s3flash fields reach the native client: memory_wait_timeout_ms (checked,
and a starved writer fails after it) and the block cache's insert queue counted inside
memory_limit."""

import time

import pytest

import s3flash
from s3flash import _s3flash

MiB = 1 << 20


@pytest.mark.parametrize("bad", [-1, -60000, 2**32])
def test_memory_wait_timeout_ms_out_of_range_names_the_field(bad):
    with pytest.raises(ValueError, match="memory_wait_timeout_ms") as ei:
        s3flash.S3ClientConfig(memory_wait_timeout_ms=bad)
    assert str(bad) in str(ei.value)
    # the binding checks it too (a caller of the native type, not the dataclass)
    with pytest.raises(ValueError, match="memory_wait_timeout_ms"):
        _s3flash.Client(memory_wait_timeout_ms=bad)


def test_memory_wait_timeout_ms_type_and_default():
    assert s3flash.S3ClientConfig().memory_wait_timeout_ms == 0  # the library's 60 s
    with pytest.raises(TypeError, match="memory_wait_timeout_ms"):
        s3flash.S3ClientConfig(memory_wait_timeout_ms=1.5)
    cfg = s3flash.S3ClientConfig(memory_wait_timeout_ms=2**32 - 1)
    assert "memory_wait_timeout_ms=4294967295" in repr(cfg)


def test_starved_writer_fails_after_memory_wait_timeout(region, endpoint, bucket, s3):
    """Three idle writers hold a 16 MiB pool (a 5 MiB part buffer each) and nothing is in
    flight: a fourth writer's write fails with MemoryError naming the pool after the
    configured 700 ms (not the default 60 s); the idle writers then complete."""
    cfg = s3flash.S3ClientConfig(memory_limit=16 * MiB, part_size=5 * MiB,
                                 memory_wait_timeout_ms=700)
    client = s3flash.S3Client(region=region, endpoint=endpoint, s3client_config=cfg)
    idle = [client.put_object(bucket, f"starve/idle{i}") for i in range(3)]
    for w in idle:
        w.write(b"x")
    late = client.put_object(bucket, "starve/late")
    t0 = time.monotonic()
    with pytest.raises(MemoryError, match="buffer pool") as ei:
        late.write(b"y")
    took = time.monotonic() - t0
    assert isinstance(ei.value, s3flash.S3Exception)
    assert 0.6 <= took < 10, took
    late.abort()
    for i, w in enumerate(idle):
        w.close()
        assert s3.get_object(Bucket=bucket, Key=f"starve/idle{i}")["Body"].read() == b"x"


def test_cache_queue_is_inside_memory_limit(tmp_path):
    """With cache_dir, the cache's insert queue (an eighth of memory_limit, at most 32 MiB)
    comes off the buffer pool: pool + queue = memory_limit. No request is sent."""
    base = dict(access_key_id="AKIDEXAMPLE", secret_access_key="secret",
                memory_limit=64 * MiB)
    plain = s3flash.S3Client(region="us-east-1", endpoint="http://127.0.0.1:9",
                             s3client_config=s3flash.S3ClientConfig(**base))
    assert plain.stats()["pool_limit_bytes"] == 64 * MiB
    cached = s3flash.S3Client(
        region="us-east-1", endpoint="http://127.0.0.1:9",
        s3client_config=s3flash.S3ClientConfig(**base, cache_dir=str(tmp_path / "cache"),
                                               cache_min_free_bytes=1))
    assert cached.stats()["pool_limit_bytes"] == 56 * MiB
    default = s3flash.S3Client(
        region="us-east-1", endpoint="http://127.0.0.1:9",
        s3client_config=s3flash.S3ClientConfig(access_key_id="AKIDEXAMPLE",
                                               secret_access_key="secret",
                                               cache_dir=str(tmp_path / "cache2")))
    assert default.stats()["pool_limit_bytes"] == 512 * MiB - 32 * MiB
