"""Issue 28, R14: the mount's --log-file is created 0600 whatever the umask (the log names
paths, keys and request ids); a log file that exists already keeps its mode (it may be
someone else's, or a /dev/fd/N). The server is http_faults.py's well-formed bucket."""

import os
import stat

import pytest

from http_faults import FaultServer
from mountutil import Mount, mount_supported, stop_mounts


@pytest.fixture(scope="module")
def faults():
    with FaultServer() as srv:
        yield srv


@pytest.fixture
def mount_logging(cli_path, faults, tmp_path):
    why = mount_supported()
    if why:
        pytest.skip(why)
    mounts = []

    def start(log_file):
        m = Mount(cli_path, faults.url, "AKIDLOGFILE", "not-a-secret", "okay",
                  tmp_path / "mnt", options=["--log-file", str(log_file)],
                  log_path=str(tmp_path / "stdout.log"))
        old = os.umask(0)
        try:
            mounts.append(m.start())
        finally:
            os.umask(old)
        return m
    yield start
    stop_mounts(mounts)


def test_new_log_file_is_0600_under_umask_0(mount_logging, tmp_path):
    log = tmp_path / "mount.log"
    m = mount_logging(log)
    assert m.alive()
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600, oct(os.stat(log).st_mode)


def test_existing_log_file_keeps_its_mode(mount_logging, tmp_path):
    log = tmp_path / "mount.log"
    log.write_bytes(b"earlier\n")
    os.chmod(log, 0o644)
    m = mount_logging(log)
    assert m.alive()
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o644
    assert log.read_bytes().startswith(b"earlier\n")  # appended to, not truncated
