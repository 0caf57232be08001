"""The random-access reader returns the object's bytes whatever the order of the reads, the
faults on the wire and the pressure on the buffer pool (tests/integration/reader_stress.c).

Each run opens readers on one object of 37 MiB and a bit (not a multiple of a part or a
chunk) and sends them seeded patterns: sequential runs with small gaps, one range's 128 KiB
reads shuffled (the kernel's read-ahead under async FUSE reads, one reader shared behind a
lock as the mount's handle is), random 4 KiB and 1 MiB reads (which start the background
fill where it is on), reads at and across the end, large reads straight into the caller's
buffer, backwards scans and idle pauses (the pool may take an idle reader's loans back while
a writer waits for memory). Every read's count and bytes are compared with the source.

Through the fault proxy, GETs are cut short (FIN), reset mid-body, answered 503 SlowDown
and delayed, at random but reproducibly (seeded rules). The driver exits non-zero on any
wrong byte, short count or error, and prints the first of them.
"""
import os
import subprocess

import pytest

from conftest import build_dir

SIZE = 37 * 2**20 + 12345
MIB = 2**20

CONFIGS = {
    "own-readers": {},
    "shared-reader": {"STRESS_SHARED": "1"},
    "shared-fill": {"STRESS_SHARED": "1", "STRESS_FILL": "max"},
    "small-pool-pressure": {"STRESS_MEMORY_BYTES": str(16 * MIB), "STRESS_PRESSURE": "1",
                            "STRESS_FILL": "max"},
    "shared-small-pool-no-tail": {"STRESS_MEMORY_BYTES": str(16 * MIB), "STRESS_PRESSURE": "1",
                                  "STRESS_SHARED": "1", "STRESS_FILL": "max",
                                  "STRESS_TAIL": "-1"},
    "few-slots-many-threads": {"STRESS_INFLIGHT": "2", "STRESS_THREADS": "8"},
}

FAULTS = [
    {"match": {"method": "GET", "probability": 0.04, "seed": 3}, "action": "truncate_response",
     "at": "random"},
    {"match": {"method": "GET", "probability": 0.03, "seed": 4},
     "action": "reset_response_body_at", "at": "random"},
    {"match": {"method": "GET", "probability": 0.03, "seed": 5}, "action": "respond",
     "status": 503, "s3_error": {"code": "SlowDown", "message": "Please reduce your rate"}},
    {"match": {"method": "GET", "probability": 0.2, "seed": 6}, "action": "delay",
     "seconds": 0.02},
]


@pytest.fixture(scope="module")
def source(s3, bucket, tmp_path_factory):
    data = os.urandom(SIZE)
    path = tmp_path_factory.mktemp("stress") / "obj.bin"
    path.write_bytes(data)
    s3.put_object(Bucket=bucket, Key="obj", Body=data)
    return path


def stress(rgw, endpoint, bucket, source, seed, ops, **cfg):
    exe = os.path.join(build_dir(), "tests", "reader_stress")
    if not os.access(exe, os.X_OK):
        pytest.fail(f"{exe} not built")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and not k.startswith("S3FLASH_")}
    env.update({"S3FLASH_TEST_ENDPOINT": endpoint, "S3FLASH_TEST_ACCESS_KEY": rgw.access_key,
                "S3FLASH_TEST_SECRET_KEY": rgw.secret_key, "S3FLASH_TEST_REGION": rgw.region,
                "AWS_EC2_METADATA_DISABLED": "true", "AWS_MAX_ATTEMPTS": "10",
                "S3FLASH_RETRY_BASE_MS": "10", "STRESS_SEED": str(seed), "STRESS_OPS": str(ops),
                **cfg})
    r = subprocess.run([exe, bucket, "obj", str(source)], env=env, capture_output=True,
                       text=True, timeout=600)
    print(r.stdout[-4000:], r.stderr[-4000:])
    assert r.returncode == 0, f"seed {seed} {cfg}:\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}"
    stats = dict(kv.split("=") for kv in r.stdout.splitlines()[-1].split())
    assert int(stats["reads"]) > ops, stats  # the patterns ran (several reads each)
    return stats


@pytest.mark.parametrize("name", ["own-readers", "shared-fill", "small-pool-pressure"])
def test_patterns(rgw, bucket, source, name):
    stress(rgw, rgw.endpoint, bucket, source, seed=11, ops=60, **CONFIGS[name])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_patterns_under_faults(rgw, bucket, source, proxy, name):
    proxy.set_faults(FAULTS)
    stress(rgw, proxy.endpoint, bucket, source, seed=sorted(CONFIGS).index(name) + 1, ops=40,
           **CONFIGS[name])
    fired = proxy.stats()["faults"]
    # the faults fired: short answers and resets among them, not only delays
    assert sum(v for k, v in fired.items() if not k.endswith(":delay")) > 0, fired
