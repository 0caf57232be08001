"""Issue 28, D4: a ListObjectsV2 answer that stays truncated with a token the listing
already followed (the same token again, or a cycle of two), or a truncated page without a
token, ends the listing with an error naming the server's fault: before, the CLI's `ls`,
its recursive listings and the mount's readdir sent LIST after LIST forever. An honest
listing of many pages is never cut. The server is http_faults.py over a real socket; each
command runs under a timeout, so a listing that loops fails the test instead of hanging it."""

import os
import re
import subprocess

import pytest

from http_faults import LONG_PAGES, FaultServer
from mountutil import Mount, abort_connection, mount_supported, stop_mounts

LOOPS = ["list-same-token", "list-cycle", "list-no-token"]
# a page count a looping listing reaches well inside the timeout (the fault server answers
# in well under a millisecond): more than this many requests is a listing that did not stop
MAX_HITS = 6
FAULT_RE = re.compile(r"already followed|NextContinuationToken", re.I)


@pytest.fixture(scope="module")
def faults():
    with FaultServer() as srv:
        yield srv


def run(cli_nosrv, faults, *args, timeout=30):
    return cli_nosrv.run("--no-sign-request", "--endpoint-url", faults.url,
                         "--force-path-style", *args, endpoint=False, timeout=timeout)


def one_error_line(r):
    assert r.rc == 1, r
    assert len(r.err_lines) == 1, r.err
    assert r.err_lines[0].startswith("s3flash: "), r.err
    return r.err_lines[0]


@pytest.mark.parametrize("fault", LOOPS)
@pytest.mark.parametrize("command", [["ls"], ["ls", "--recursive"], ["rm", "--recursive"],
                                     ["cp", "--recursive"]])
def test_cli_listing_that_loops_ends(cli_nosrv, faults, tmp_path, fault, command):
    before = faults.hits[fault]
    args = [*command, f"s3://{fault}/"]
    if command[0] == "cp":
        args.append(str(tmp_path / "out"))
    r = run(cli_nosrv, faults, *args)
    line = one_error_line(r)
    assert FAULT_RE.search(line), line
    assert "ListObjectsV2" in line, line
    assert 1 <= faults.hits[fault] - before <= MAX_HITS
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


@pytest.mark.parametrize("recursive", [False, True])
def test_cli_long_honest_listing_is_whole(cli_nosrv, faults, recursive):
    before = faults.hits["list-long"]
    r = run(cli_nosrv, faults, "ls", *(["--recursive"] if recursive else []),
            "s3://list-long/")
    assert r.rc == 0, r
    keys = re.findall(r"\bk-\d{4}\b", r.text)
    assert keys == [f"k-{i:04d}" for i in range(LONG_PAGES)], r.text
    assert faults.hits["list-long"] - before == LONG_PAGES


# ---- the mount's readdir --------------------------------------------------------------

@pytest.fixture
def mount_at(cli_path, faults, tmp_path):
    why = mount_supported()
    if why:
        pytest.skip(why)
    mounts = []

    def start(bucket):
        m = Mount(cli_path, faults.url, "AKIDLISTLOOP", "not-a-secret", bucket,
                  tmp_path / f"mnt-{bucket}", log_path=str(tmp_path / f"{bucket}.log"))
        mounts.append(m.start())
        return m
    yield start
    stop_mounts(mounts)


def listdir_bounded(m, timeout=30):
    """os.listdir of the mount in a child process: (rc, stdout, stderr). A readdir the daemon
    never answers (a listing that loops inside one request: the child then waits in the
    kernel, unkillable) fails the test after `timeout`, the connection aborted to free it."""
    p = subprocess.Popen(["python3", "-c",
                          "import os, sys; print(sorted(os.listdir(sys.argv[1])))", m.dir],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        abort_connection(m.dir)
        p.kill()
        p.communicate()
        pytest.fail(f"readdir of {m.source} got no answer within {timeout} s (a listing "
                    f"that loops)")
    return p.returncode, out, err


@pytest.mark.parametrize("fault", ["list-same-token", "list-cycle",
                                   "list-same-token--use1-az4--x-s3",
                                   "list-cycle--use1-az4--x-s3"])
def test_mount_readdir_that_loops_answers_eio(mount_at, faults, fault):
    """A general bucket's readdir (a page per call) and a directory bucket's (every page,
    then sorted) alike."""
    m = mount_at(fault)
    before = faults.hits[fault]
    rc, out, err = listdir_bounded(m)
    assert rc != 0 and "Errno 5" in err, (rc, out, err)  # EIO
    assert 1 <= faults.hits[fault] - before <= MAX_HITS
    assert m.alive()
    log = m.log_tail()
    assert "readdir" in log and FAULT_RE.search(log), log


@pytest.mark.parametrize("bucket", ["list-long", "list-long--use1-az4--x-s3"])
def test_mount_readdir_long_honest_listing_is_whole(mount_at, faults, bucket):
    m = mount_at(bucket)
    rc, out, err = listdir_bounded(m)
    assert rc == 0, err
    assert out.strip() == repr([f"k-{i:04d}" for i in range(LONG_PAGES)])
