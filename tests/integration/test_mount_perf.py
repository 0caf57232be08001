"""`s3flash mount`'s speed and memory settings, checked on real FUSE mounts (as root) of
buckets on Ceph RGW (docs/PERFORMANCE.md, "The mount", says why each matters):

- the mount's kernel read-ahead is raised from the kernel's 128 KiB to 2 MiB, so that a
  sequential read reaches the daemon as 1 MiB requests, not 128 KiB ones, and a 1 MiB
  read at any offset as one request (test_mount_read.py counts its GETs);
- under 32 readers of a large object and 8 writers at once, the daemon's peak RSS (VmHWM)
  stays within --memory-target.
"""

import os
import random
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from mountutil import Mount, mount_supported

MIB = 1 << 20

pytestmark = pytest.mark.skipif(mount_supported() is not None,
                                reason=str(mount_supported()))


@pytest.fixture
def prefix():
    return f"p-{uuid.uuid4().hex[:8]}/"


@pytest.fixture
def mount(cli_path, rgw, bucket, prefix, tmp_path):
    made = []

    def make(*options, name="mnt"):
        m = Mount(cli_path, rgw.endpoint, rgw.access_key, rgw.secret_key, f"{bucket}/{prefix}",
                  tmp_path / name, list(options), region=rgw.region,
                  log_path=str(tmp_path / "mount.log"))
        made.append(m)
        return m.start()

    yield make
    for m in made:
        if m.alive():
            m.stop()


def read_ahead_kb(path):
    st = os.stat(path)
    with open(f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb") as f:
        return int(f.read())


def test_read_ahead_is_two_mib(s3, bucket, prefix, mount):
    body = random.Random(1).randbytes(3 * MIB + 5)
    s3.put_object(Bucket=bucket, Key=prefix + "f", Body=body)
    # a space in the mount point: /proc/self/mountinfo writes it as \040
    m = mount(name="with space")
    assert read_ahead_kb(m.dir) == 2048
    with open(os.path.join(m.dir, "f"), "rb") as f:
        assert f.read() == body


@pytest.mark.parametrize("target_mib", [128, 256])
def test_peak_rss_within_the_memory_target(cli_path, s3, bucket, prefix, mount, target_mib):
    if "asan" in cli_path:
        pytest.skip("under ASan the daemon's memory is ASan's (shadow, quarantine): the "
                    "target bounds the release build")
    size = 128 * MIB
    block = random.Random(2).randbytes(MIB)
    s3.put_object(Bucket=bucket, Key=prefix + "large", Body=block * (size // MIB))
    m = mount("--memory-target", f"{target_mib}M")
    per = 16 * MIB
    src = os.path.join(m.dir, "large")

    def reader(i):
        off = random.Random(i).randrange(0, size - per) // MIB * MIB
        fd = os.open(src, os.O_RDONLY)
        try:
            got = 0
            while got < per:
                b = os.pread(fd, MIB, off + got)
                assert b == block, (i, off + got)
                got += len(b)
            return got
        finally:
            os.close(fd)

    def writer(i):
        try:
            with open(os.path.join(m.dir, f"w{i}"), "wb", buffering=0) as f:
                for _ in range(per // MIB):
                    f.write(block)
            return per
        except OSError as e:   # ENOMEM at open: the writers' pool is taken (documented)
            assert e.errno == 12 and not os.path.exists(os.path.join(m.dir, f"w{i}"))
            return 0

    with ThreadPoolExecutor(40) as ex:
        futs = [ex.submit(reader, i) for i in range(32)]
        futs += [ex.submit(writer, i) for i in range(8)]
        moved = [f.result() for f in futs]
    assert sum(moved[:32]) == 32 * per
    assert sum(moved[32:]) >= per      # at least one writer got its buffers
    rss = m.peak_rss_kib()
    assert rss is not None and rss <= target_mib * 1024, (rss, target_mib)
