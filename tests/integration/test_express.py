"""S3 Express One Zone directory buckets end to end: the s3flash CLI (and through it the
library) against the sink's --express emulation (bench/sink_express.c), which checks every
request's session token as AWS does, lists in no order, appends and renames.

What AWS documents and these tests hold the client to:
- "Authorizing Zonal endpoint API operations with CreateSession": one CreateSession per
  bucket, signed with the caller's credentials; every zonal request carries the session
  token in x-amz-s3session-token and is signed for s3express with the session's key (the
  sink refuses anything else with 403); sessions expire (5 minutes on AWS; seconds here) and
  SDKs refresh them before expiry; an expired or revoked session is re-created.
- ListObjectsV2 on a directory bucket is unordered: `ls` must sort what the user sees.
- "Appending data to objects in directory buckets": PutObject x-amz-write-offset-bytes.
- "Renaming objects in directory buckets": RenameObject, atomic, no data movement: `mv`
  within the bucket must not copy and delete.
"""
import os
import re
import time
import types
import urllib.request

import pytest

from helpers import Cli
from test_sink import Sink

BUCKET = "ckpt--use1-az4--x-s3"


def stats(sink):
    with urllib.request.urlopen(f"http://127.0.0.1:{sink.port}/?sink-stats", timeout=10) as r:
        return {k: int(v) for k, v in (ln.split() for ln in r.read().decode().splitlines())}


def sink_cli(cli_path, sink, home):
    srv = types.SimpleNamespace(endpoint=f"http://127.0.0.1:{sink.port}", region="us-east-1",
                                access_key="AKIDEXPRESSTEST", secret_key="express-secret")
    return Cli(cli_path, srv, home)


@pytest.fixture(scope="module")
def xsink(tmp_path_factory):
    s = Sink(tmp_path_factory.mktemp("xsink"), "--threads", "2", "--express", "--store", "512M")
    yield s
    assert s.stop() == 0, s.stderr


@pytest.fixture(scope="module")
def xcli(cli_path, xsink, tmp_path_factory):
    return sink_cli(cli_path, xsink, tmp_path_factory.mktemp("home"))


def data(n, seed=1):
    import random
    return random.Random(seed).randbytes(n)


def test_roundtrip_multipart_with_one_session(xcli, xsink, tmp_path):
    src = tmp_path / "ckpt.bin"
    src.write_bytes(data(20 << 20))  # 3 parts of 8 MiB
    before = stats(xsink)
    xcli.ok("cp", src, f"s3://{BUCKET}/run1/ckpt.bin")
    after = stats(xsink)
    # one process, one bucket: one session for the whole multipart upload
    assert after["create_session"] - before["create_session"] == 1
    assert after["denied"] == before["denied"] and after["invalid"] == before["invalid"]
    out = tmp_path / "back.bin"
    xcli.ok("cp", f"s3://{BUCKET}/run1/ckpt.bin", out)
    assert out.read_bytes() == src.read_bytes()


def test_read_only_commands_use_read_only_sessions(xcli, xsink):
    xcli.ok("cp", "-", f"s3://{BUCKET}/ro/a", input=b"abc")
    before = stats(xsink)
    assert xcli.ok("cat", f"s3://{BUCKET}/ro/a").out == b"abc"
    xcli.ok("stat", f"s3://{BUCKET}/ro/a")
    after = stats(xsink)
    assert after["readonly"] - before["readonly"] == 2


def test_ls_sorts_unordered_listing(xcli, xsink):
    names = [f"ds/shard-{i:03d}.tar" for i in range(120)] + ["ds/val/x", "ds/train/y"]
    for k in names:
        xcli.ok("cp", "-", f"s3://{BUCKET}/{k}", input=b"x")
    lines = xcli.ok("ls", "--page-size", "17", f"s3://{BUCKET}/ds/").text.splitlines()
    pres = [ln.split()[-1] for ln in lines if " PRE " in ln]
    objs = [ln.split()[-1] for ln in lines if " PRE " not in ln]
    assert pres == ["train/", "val/"]
    assert objs == sorted(k[3:] for k in names if k.count("/") == 1)
    # recursive: every key, in order, across pages
    rec = [ln.split()[-1] for ln in
           xcli.ok("ls", "-r", "--page-size", "10", f"s3://{BUCKET}/ds/").text.splitlines()]
    assert rec == sorted(names)
    # a partial name: its directory listed, the names that start with it kept
    part = [ln.split()[-1] for ln in
            xcli.ok("ls", f"s3://{BUCKET}/ds/shard-01").text.splitlines()]
    assert part == [f"shard-{i:03d}.tar" for i in range(10, 20)]


def test_append_through_cli(xcli, xsink, tmp_path):
    key = f"s3://{BUCKET}/logs/train.log"
    r = xcli.ok("append", "-", key, input=b"step 1\n")
    assert "now 7" in r.text
    f = tmp_path / "more.txt"
    f.write_bytes(b"step 2\nstep 3\n")
    xcli.ok("append", f, key)
    assert xcli.ok("cat", key).out == b"step 1\nstep 2\nstep 3\n"
    assert stats(xsink)["appends"] >= 2
    # a general purpose bucket has no appends
    r = xcli.run("append", "-", "s3://plain-bucket/k", input=b"x")
    assert r.rc == 2 and "directory bucket" in r.err


def test_mv_within_bucket_is_one_rename(xcli, xsink):
    payload = data(3 << 20, seed=7)
    xcli.ok("cp", "-", f"s3://{BUCKET}/tmp/ckpt.pt", input=payload)
    before = stats(xsink)
    r = xcli.ok("mv", f"s3://{BUCKET}/tmp/ckpt.pt", f"s3://{BUCKET}/final/ckpt.pt")
    assert "move:" in r.text
    after = stats(xsink)
    assert after["renames"] - before["renames"] == 1
    assert after["copies"] == before["copies"] and after["deletes"] == before["deletes"]
    assert after["puts"] == before["puts"]
    assert xcli.ok("cat", f"s3://{BUCKET}/final/ckpt.pt").out == payload
    r = xcli.run("stat", f"s3://{BUCKET}/tmp/ckpt.pt")
    assert r.rc != 0
    # --recursive: one rename per object, still no copy
    for i in range(5):
        xcli.ok("cp", "-", f"s3://{BUCKET}/stage/{i}", input=str(i).encode())
    before = stats(xsink)
    xcli.ok("mv", "--recursive", f"s3://{BUCKET}/stage/", f"s3://{BUCKET}/done/")
    after = stats(xsink)
    assert after["renames"] - before["renames"] == 5
    assert after["copies"] == before["copies"] and after["deletes"] == before["deletes"]
    keys = [ln.split()[-1] for ln in xcli.ok("ls", "-r", f"s3://{BUCKET}/done/").text.splitlines()]
    assert keys == [f"done/{i}" for i in range(5)]


def test_bucket_operations_use_caller_credentials(xcli, xsink):
    # CreateBucket/DeleteBucket of a directory bucket: the control endpoint, no session
    before = stats(xsink)
    xcli.ok("mb", "s3://other--use1-az4--x-s3")
    xcli.ok("rb", "s3://other--use1-az4--x-s3")
    after = stats(xsink)
    assert after["denied"] == before["denied"]
    assert after["create_session"] == before["create_session"]


def test_session_expires_mid_transfer(cli_path, tmp_path):
    # sessions live 5 s; the upload takes about 8 (3 MiB/s per connection, 2 in flight): the
    # client creates new sessions in the background (half the lifetime before expiry) and
    # every request carries a session that is valid when its head arrives (the sink's
    # seconds make the margin coarse: one refused request, re-sent with a new session, is
    # allowed)
    sink = Sink(tmp_path, "--express", "--store", "256M", "--session-seconds", "5",
                "--conn-recv-rate", "3M")
    try:
        cli = sink_cli(cli_path, sink, tmp_path)
        src = tmp_path / "big.bin"
        src.write_bytes(data(48 << 20, seed=3))
        t0 = time.monotonic()
        r = cli.run("cp", "--concurrency", "2", src, f"s3://{BUCKET}/big.bin", timeout=120)
        took = time.monotonic() - t0
        st = stats(sink)
        assert r.rc == 0, (r, st)
        assert took > 6, f"upload too fast ({took:.1f} s) to outlive a session"
        assert st["create_session"] >= 2, st
        assert st["invalid"] == 0 and st["denied"] == 0, st
        out = tmp_path / "back.bin"
        cli.ok("cp", f"s3://{BUCKET}/big.bin", out, timeout=120)
        assert out.read_bytes() == src.read_bytes()
    finally:
        assert sink.stop() == 0


def test_revoked_session_recreated_once(cli_path, tmp_path):
    # the sink revokes every session after the 2nd request: the 3rd is refused 403
    # InvalidToken; the client creates a new session and re-sends it, once
    sink = Sink(tmp_path, "--express", "--store", "128M", "--revoke-after", "2")
    try:
        cli = sink_cli(cli_path, sink, tmp_path)
        src = tmp_path / "c.bin"
        src.write_bytes(data(20 << 20, seed=5))
        r = cli.ok("cp", "--concurrency", "1", src, f"s3://{BUCKET}/c.bin", timeout=60)
        st = stats(sink)
        assert st["invalid"] >= 1 and st["create_session"] == 2, (st, r)
        out = tmp_path / "o.bin"
        cli.ok("cp", f"s3://{BUCKET}/c.bin", out)
        assert out.read_bytes() == src.read_bytes()
    finally:
        assert sink.stop() == 0


def test_disabled_session_auth_signs_with_caller_credentials(cli_path, tmp_path):
    # AWS_S3_DISABLE_EXPRESS_SESSION_AUTH=true: no CreateSession; the sink, which wants
    # sessions, refuses the request: the setting is honoured (and the error is S3's)
    sink = Sink(tmp_path, "--express")
    try:
        cli = sink_cli(cli_path, sink, tmp_path)
        r = cli.run("cp", "-", f"s3://{BUCKET}/k", input=b"x",
                    env=cli.env(AWS_S3_DISABLE_EXPRESS_SESSION_AUTH="true"))
        assert r.rc != 0 and "AccessDenied" in r.err
        assert stats(sink)["create_session"] == 0
    finally:
        assert sink.stop() == 0


def test_secrets_never_logged(xcli, tmp_path):
    r = xcli.ok("cp", "-", f"s3://{BUCKET}/dbg", input=b"x", env=xcli.env(S3FLASH_LOG="trace"))
    assert "x-amz-s3session-token: <redacted>" in r.err, r.err[-3000:]
    # the session's token never appears: the sink's tokens are 40 [a-z0-9]
    assert not re.search(r"[a-z0-9]{40}", r.err)
