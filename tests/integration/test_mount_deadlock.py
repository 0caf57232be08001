"""`s3flash mount` never wedges itself (issue 19): the renames and unlinks that made the daemon
wait on its own mount, run under the watchdog of mountutil.py.

Each operation on the mount runs in a child process under a bound (Watchdog). When one has
not finished in time, or as soon as a daemon thread has been seen for 1.5 s waiting on its
own mount (a system call into the FUSE file system it serves, or a path walk asleep on a
directory lock the kernel holds for the request it serves), the FUSE connection is aborted
(/sys/fs/fuse/connections/N/abort, N from /proc/self/mountinfo) and the test fails with a
message that names the operation and where every daemon thread waited. A wedged mount
costs a test ~2 s, never the suite.

- rename two levels up with TTLs 0: `mv M/a/b/c/f M/a/f` with keys a/b/c/f and a/x. The
  kernel holds the lock of the destination directory a/ through the RENAME; a handler that
  stat()s a path inside its own mount to learn a node id (main's forget_emptied_parents)
  needs that lock for its walk.
- the same with the default TTL (1 s) while the fault proxy delays the DELETE of the
  rename's source past the TTL: the cached entries have expired when the handler walks.
- N parallel unlinks / renames of files that are the last keys of their directories with
  --max-threads < N: every worker waits for a GETATTR that no free worker can serve.

Needs root, /dev/fuse and fusermount3 (skipped otherwise), and RGW (the fixtures).
"""

import sys
import urllib.parse
import uuid

import pytest

from faults import faultproxy_factory  # noqa: F401 (a fixture)
from helpers import wait_for
from mountutil import Mount, Watchdog, mount_supported

pytestmark = pytest.mark.skipif(mount_supported() is not None,
                                reason=mount_supported() or "")

TTL0 = ["--metadata-ttl", "0", "--negative-metadata-ttl", "0"]


@pytest.fixture
def mounted(cli_path, rgw, tmp_path):
    """mounted(bucket, prefix, options, endpoint=None) -> (Mount, Watchdog); each mount is
    stopped at the end (its connection aborted first when it wedged)."""
    made = []

    def make(bucket, prefix, options, endpoint=None):
        name = f"m{len(made)}"
        m = Mount(cli_path, endpoint or rgw.endpoint, rgw.access_key, rgw.secret_key,
                  f"{bucket}/{prefix}", tmp_path / name, options, region=rgw.region,
                  log_path=str(tmp_path / f"{name}.log"))
        m.start()
        wd = Watchdog(m)
        made.append(wd)
        return m, wd

    yield make
    errors = []
    for wd in made:
        try:
            wd.close()
        except AssertionError as e:
            errors.append(str(e))
    assert not errors, errors


def _put(s3, bucket, prefix, keys, body=b"x"):
    for k in keys:
        s3.put_object(Bucket=bucket, Key=prefix + k, Body=body)


def _keys(s3, bucket, prefix):
    r = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"][len(prefix):] for o in r.get("Contents", []))


def _rename_two_levels_up(s3, bucket, pfx, m, wd):
    _put(s3, bucket, pfx, ["a/b/c/f", "a/x"], b"the file")
    d = m.dir
    assert wd.listdir(f"{d}/a/b/c") == ["f"]
    wd.run(["mv", f"{d}/a/b/c/f", f"{d}/a/f"], what="mv M/a/b/c/f M/a/f")
    assert wd.listdir(f"{d}/a") == ["f", "x"]        # b/ ended with its last key
    assert wd.read(f"{d}/a/f") == b"the file"
    assert not wd.exists(f"{d}/a/b")
    assert _keys(s3, bucket, pfx) == ["a/f", "a/x"]


def test_rename_two_levels_up_ttl0(s3, bucket, mounted):
    pfx = f"r0-{uuid.uuid4().hex[:8]}/"
    m, wd = mounted(bucket, pfx, ["--allow-rename", "--allow-delete", *TTL0])
    _rename_two_levels_up(s3, bucket, pfx, m, wd)


def test_rename_two_levels_up_delete_slower_than_ttl(s3, bucket, rgw, mounted,
                                                       faultproxy_factory):  # noqa: F811
    """Default TTLs (1 s); every DELETE held 2.5 s by the proxy, so the entries the kernel
    had have expired when the rename's handler learns its node ids."""
    u = urllib.parse.urlsplit(rgw.endpoint)
    proxy = faultproxy_factory(u.hostname, u.port)
    pfx = f"rd-{uuid.uuid4().hex[:8]}/"
    m, wd = mounted(bucket, pfx, ["--allow-rename", "--allow-delete"],
                    endpoint=proxy.endpoint)
    proxy.set_faults([{"match": {"method": "DELETE"}, "action": "delay", "seconds": 2.5}])
    _rename_two_levels_up(s3, bucket, pfx, m, wd)
    assert any(k.startswith("DELETE ") for k in proxy.stats()["requests"]), \
        "the rename sent no DELETE through the proxy"
    assert proxy.stats()["faults_total"] >= 1, "no DELETE was held"


@pytest.mark.parametrize("op", ["rm", "mv"])
def test_parallel_last_keys_more_than_threads(s3, bucket, mounted, op):
    """8 unlinks (or renames) at once of files that are each the last key of their
    directory and of its parent (x<i>/d/f), with 4 FUSE workers and TTL 0: each handler
    that learns the parent's node id by a stat() of M/x<i> waits for a LOOKUP/GETATTR that
    only a free worker could serve."""
    n, threads = 8, 4
    pfx = f"p{op}-{uuid.uuid4().hex[:8]}/"
    _put(s3, bucket, pfx, [f"x{i}/d/f" for i in range(n)])
    m, wd = mounted(bucket, pfx, ["--allow-delete", "--allow-rename", "--max-threads",
                                  str(threads), "--metadata-ttl", "0"])
    d = m.dir
    assert wd.listdir(d) == [f"x{i}" for i in range(n)]
    # the kernel knows every directory and file before the operations start
    wd.py("import os, sys; assert all(os.path.isfile(p) for p in sys.argv[1:])",
          *[f"{d}/x{i}/d/f" for i in range(n)], what=f"stat the {n} files")
    if op == "rm":
        wd.parallel([["rm", f"{d}/x{i}/d/f"] for i in range(n)], what=f"{n} parallel rm")
        want = []
    else:
        wd.parallel([["mv", f"{d}/x{i}/d/f", f"{d}/g{i}"] for i in range(n)],
                    what=f"{n} parallel mv")
        want = [f"g{i}" for i in range(n)]
    assert wd.listdir(d) == want
    assert _keys(s3, bucket, pfx) == want


# ---- generations, not timestamps: a fill that started before a change is not stored --------

def test_stale_list_across_a_close_keeps_the_new_file(s3, bucket, rgw, mounted, tmp_path,
                                                       faultproxy_factory):  # noqa: F811
    """A readdir's LIST answered by the server before a file of the same directory is closed
    (uploaded), and delivered to the mount after the close (the proxy holds the response):
    the listing must not be stored over the close. With --metadata-ttl 60 a stale listing
    would hide the new file for a minute."""
    u = urllib.parse.urlsplit(rgw.endpoint)
    proxy = faultproxy_factory(u.hostname, u.port)
    pfx = f"sf-{uuid.uuid4().hex[:8]}/"
    _put(s3, bucket, pfx, ["old"])
    m, wd = mounted(bucket, pfx, ["--metadata-ttl", "60", "--negative-metadata-ttl", "60"],
                    endpoint=proxy.endpoint)
    d = m.dir
    opened, go = tmp_path / "opened", tmp_path / "go"
    # the writer: create "new", write, say so, wait for the go, close (the upload)
    writer = wd.start([sys.executable, "-c", f"""
import os, sys, time
fd = os.open({d + '/new'!r}, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
os.write(fd, b"new bytes")
open({str(opened)!r}, "w").close()
deadline = time.monotonic() + 30
while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:
    time.sleep(0.01)
os.close(fd)
"""], what="create, write and close M/new")
    wait_for(lambda: opened.exists() or writer.proc.poll() is not None, 20, "the writer")
    assert opened.exists(), f"the writer failed: {wd.wait([writer])}"
    # the next LIST's answer is held 4 s after the server has computed it
    proxy.set_faults([{"match": {"method": "GET", "query": "list-type=2", "nth": 1},
                       "action": "stall", "direction": "response", "at": 0, "seconds": 4}])
    lister = wd.start(["ls", "-a", d], what="ls M (its LIST held by the proxy)")

    def listed():
        return [e for e in proxy.stats()["log"]
                if e.get("action") == "stall" and e.get("acted") is not None]
    wait_for(lambda: listed() or lister.proc.poll() is not None, 20,
             "the server's answer to the readdir's LIST")
    assert listed(), f"no LIST was held: {wd.wait([lister])}, {proxy.stats()['log']}"
    go.touch()
    wd.wait([writer, lister], what="the close and the held readdir")
    assert writer.rc == 0, writer
    assert s3.get_object(Bucket=bucket, Key=pfx + "new")["Body"].read() == b"new bytes"
    assert wd.listdir(d) == ["new", "old"]
    assert wd.read(f"{d}/new") == b"new bytes"
