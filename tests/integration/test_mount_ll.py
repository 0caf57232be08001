"""`s3flash mount SRC /dev/fd/N` (issue 19, the low-level API): the caller (a CSI driver)
opened /dev/fuse and mounted it; the daemon serves the descriptor it inherits. Against RGW.

The deadlocks of the path API that this file also held (rename two levels up, parallel
unlinks with fewer threads) are in test_mount_deadlock.py, under mountutil.Watchdog.
"""

import os
import subprocess
import sys

import pytest

from mountutil import Mount, Watchdog, is_mounted, mount_supported

pytestmark = pytest.mark.skipif(mount_supported() is not None,
                                reason=mount_supported() or "")


def test_mount_on_a_dev_fd_descriptor(cli_path, rgw, s3, bucket, tmp_path):
    import ctypes
    s3.put_object(Bucket=bucket, Key="ll-fd/a", Body=b"through a descriptor")
    mp = tmp_path / "fdmount"
    mp.mkdir()
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0,default_permissions".encode()
    if libc.mount(b"s3flash", str(mp).encode(), b"fuse.s3flash", 0, opts) != 0:
        os.close(fd)
        pytest.skip(f"mount(2) of /dev/fuse: {os.strerror(ctypes.get_errno())}")
    m = Mount(cli_path, rgw.endpoint, rgw.access_key, rgw.secret_key, f"{bucket}/ll-fd/",
              f"/dev/fd/{fd}", [], region=rgw.region, log_path=str(tmp_path / "fd.log"))
    proc = subprocess.Popen(m.argv(), env=m.env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(fd,))
    os.close(fd)
    wd = Watchdog(str(mp), bound_s=30, pid=proc.pid)
    try:
        assert wd.read(str(mp / "a")) == b"through a descriptor"
        assert wd.listdir(str(mp)) == ["a"]
    finally:
        subprocess.run(["umount", str(mp)], capture_output=True, timeout=30)
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait(30)
        wd.close()   # a wedged (aborted) or still mounted descriptor mount: lazy unmount
    assert rc == 0, proc.stdout.read().decode(errors="replace")
    assert not is_mounted(str(mp))
