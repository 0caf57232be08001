"""s3flash cp through the transfer engine, against RGW: multipart downloads around part
boundaries, stdin through the streaming writer, the engine options (--part-size,
--concurrency, --memory-limit, --checksum) and their bad values, --recursive with many
objects in flight in both directions, failures that do not stop a recursive copy, SIGINT
during a download. Every check compares bytes (SHA-256) with what was uploaded."""

import base64
import hashlib
import os
import signal
import subprocess
import time
import uuid
import zlib
from urllib.parse import urlparse

import pytest

from faults import faultproxy_factory, s3_error  # noqa: F401  (fixture)
from helpers import list_keys, read_tree, sha256, sha256_file
from test_checksums_moto import _cli_env, _s3, moto  # noqa: F401  (fixture)

MiB = 1 << 20
PART = 5 * MiB


@pytest.fixture
def proxy(rgw, faultproxy_factory):  # noqa: F811
    u = urlparse(rgw.endpoint)
    return faultproxy_factory(u.hostname, u.port)


def via(cli, proxy, *args, **kw):
    """Run the CLI through the fault proxy (fast retries)."""
    env = cli.env(S3FLASH_RETRY_BASE_MS="20", **kw.pop("env", {}))
    return cli.run("--endpoint-url", proxy.endpoint, "--force-path-style", *args,
                   endpoint=False, env=env, **kw)


def requests(proxy, method, key):
    return sum(n for k, n in proxy.stats()["requests"].items()
               if k.startswith(method + " ") and k.endswith(key))


def leftovers(root):
    return [p for p in root.rglob("*") if "s3flash" in p.name]


# ---- downloads ----------------------------------------------------------------------------

SIZES = [0, 1, PART - 1, PART, PART + 1, 3 * PART + 12345]


@pytest.mark.parametrize("size", SIZES, ids=["0", "1", "part-1", "part", "part+1", "3parts+"])
def test_multipart_download_byte_exact(cli, s3, bucket, proxy, tmp_path, size):
    """Ranged GETs of --part-size each, in parallel, written at their offsets."""
    data = os.urandom(size)
    key = f"dl/{size}"
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    out = tmp_path / "out.bin"
    r = via(cli, proxy, "cp", "--part-size", "5M", f"s3://{bucket}/{key}", out)
    assert r.rc == 0, r
    assert r.text == f"download: s3://{bucket}/{key} to {out}\n"
    assert out.stat().st_size == size
    assert sha256_file(out) == sha256(data)
    # one GET per part (the empty object: a ranged GET answered 416, then a plain GET)
    parts = max(1, -(-size // PART))
    assert requests(proxy, "GET", key) == (2 if size == 0 else parts)
    assert leftovers(tmp_path) == []


def test_download_missing_key_leaves_nothing(cli, bucket, tmp_path):
    out = tmp_path / "sub" / "missing.bin"
    r = cli.run("cp", f"s3://{bucket}/no/such/key", out)
    assert r.rc == 1, r
    assert "NoSuchKey" in r.err and f"s3://{bucket}/no/such/key" in r.err, r
    assert len(r.err_lines) == 1, r
    assert not out.exists()
    assert leftovers(tmp_path) == []


def test_download_to_dev_null(cli, s3, bucket):
    s3.put_object(Bucket=bucket, Key="dl/devnull", Body=os.urandom(1000))
    r = cli.run("cp", f"s3://{bucket}/dl/devnull", "/dev/null")
    assert r.rc == 0, r
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


def test_download_multipart_reset_resumes_per_part(cli, s3, bucket, proxy, tmp_path):
    """A connection reset in the middle of a later part: that part is asked again (from the
    byte it reached), the others are untouched, the file is bit-exact."""
    data = os.urandom(3 * PART + 77)
    s3.put_object(Bucket=bucket, Key="dl/reset", Body=data)
    proxy.set_faults([{"match": {"method": "GET", "path": "/dl/reset$", "nth": 3},
                       "action": "reset_response_body_at", "at": "random", "seed": 9}])
    out = tmp_path / "reset.bin"
    r = via(cli, proxy, "cp", "--part-size", "5M", f"s3://{bucket}/dl/reset", out)
    assert r.rc == 0, r
    assert sha256_file(out) == sha256(data)
    assert proxy.stats()["faults_total"] == 1
    assert requests(proxy, "GET", "/dl/reset") == 5  # 4 parts + the resumed one


def test_sigint_during_download_leaves_nothing(cli, s3, bucket, proxy, tmp_path):
    data = os.urandom(4 * PART)
    s3.put_object(Bucket=bucket, Key="dl/slow", Body=data)
    # every part after the first is slowed down so the download is still running
    proxy.set_faults([{"match": {"method": "GET", "path": "/dl/slow$"},
                       "action": "throttle", "bytes_per_second": 2 * MiB,
                       "direction": "response"}])
    dst = tmp_path / "d"
    dst.mkdir()
    env = cli.env()
    p = subprocess.Popen([cli.path, "--endpoint-url", proxy.endpoint, "--force-path-style",
                          "cp", "--part-size", "5M", f"s3://{bucket}/dl/slow",
                          str(dst / "slow.bin")], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not any(leftovers(dst)):
        time.sleep(0.02)
    assert leftovers(dst), "the download never started"
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=30)
    assert p.returncode == -signal.SIGINT
    assert list(dst.iterdir()) == []


# ---- uploads ------------------------------------------------------------------------------

def test_stdin_upload_multipart_through_writer(cli, s3, bucket):
    data = os.urandom(2 * PART + 4321)
    key = "stdin/multi"
    r = cli.run("cp", "--part-size", "5M", "-", f"s3://{bucket}/{key}", input=data)
    assert r.rc == 0, r
    assert r.text == f"upload: - to s3://{bucket}/{key}\n"
    head = s3.head_object(Bucket=bucket, Key=key)
    assert head["ContentLength"] == len(data)
    assert head["ETag"].endswith('-3"'), head["ETag"]
    assert sha256(s3.get_object(Bucket=bucket, Key=key)["Body"].read()) == sha256(data)
    assert s3.list_multipart_uploads(Bucket=bucket, Prefix="stdin/").get("Uploads", []) == []


def test_stdin_upload_small_and_empty(cli, s3, bucket):
    for data in (b"", b"tiny"):
        cli.ok("cp", "-", f"s3://{bucket}/stdin/small", input=data)
        assert s3.get_object(Bucket=bucket, Key="stdin/small")["Body"].read() == data


def test_stdin_upload_failure_creates_nothing(cli, s3, bucket, proxy):
    """Part 2 is refused (403, not retried): the writer aborts its multipart upload, no
    object appears, exit 1 with S3's error."""
    data = os.urandom(3 * PART)
    proxy.set_faults([s3_error("AccessDenied", 403,
                               {"method": "PUT", "query": "partNumber=2"})])
    r = via(cli, proxy, "cp", "--part-size", "5M", "-", f"s3://{bucket}/stdin/fail",
            input=data)
    assert r.rc == 1, r
    assert "AccessDenied" in r.err, r
    assert list_keys(s3, bucket, "stdin/fail") == []
    assert s3.list_multipart_uploads(Bucket=bucket, Prefix="stdin/fail").get("Uploads", []) == []


def test_file_upload_multipart_with_part_size(cli, s3, bucket, tmp_path):
    data = os.urandom(2 * PART + 1)
    src = tmp_path / "f.bin"
    src.write_bytes(data)
    cli.ok("cp", "--part-size", "5MiB", src, f"s3://{bucket}/up/f.bin")
    head = s3.head_object(Bucket=bucket, Key="up/f.bin")
    assert head["ETag"].endswith('-3"'), head["ETag"]
    assert sha256(s3.get_object(Bucket=bucket, Key="up/f.bin")["Body"].read()) == sha256(data)


# ---- options ------------------------------------------------------------------------------

@pytest.mark.parametrize("alg", ["crc32c", "crc32", "crc64nvme", "none", "CRC32C"])
def test_engine_options_round_trip(cli, s3, bucket, tmp_path, alg):
    data = os.urandom(PART + 999)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    opts = ["--part-size", "5M", "--concurrency", "3", "--memory-limit", "64M",
            "--checksum", alg]
    cli.ok("cp", *opts, src, f"s3://{bucket}/opt/{alg}")
    assert sha256(s3.get_object(Bucket=bucket, Key=f"opt/{alg}")["Body"].read()) == sha256(data)
    out = tmp_path / "out.bin"
    cli.ok("cp", *opts, f"s3://{bucket}/opt/{alg}", out)
    assert sha256_file(out) == sha256(data)
    r = cli.ok("cp", *opts, "-", f"s3://{bucket}/opt/{alg}-stdin", input=data)
    assert sha256(s3.get_object(Bucket=bucket, Key=f"opt/{alg}-stdin")["Body"].read()) == \
        sha256(data), r


@pytest.mark.parametrize("opt,value", [
    ("--part-size", "4M"), ("--part-size", "6G"), ("--part-size", "abc"),
    ("--part-size", "5X"), ("--part-size", "-5M"), ("--part-size", ""),
    ("--part-size", "99999999999999999999"), ("--part-size", "5MBs"),
    ("--concurrency", "0"), ("--concurrency", "257"), ("--concurrency", "x"),
    ("--concurrency", "-1"), ("--concurrency", "4k"),
    ("--memory-limit", "15M"), ("--memory-limit", "1Q"), ("--memory-limit", "16777215"),
    ("--checksum", "md5"), ("--checksum", ""), ("--checksum", "sha256"),
])
def test_bad_engine_values_are_usage_errors(cli, s3, bucket, tmp_path, opt, value):
    src = tmp_path / "f"
    src.write_bytes(b"x")
    r = cli.run("cp", opt, value, src, f"s3://{bucket}/bad/f")
    assert r.rc == 2, r
    assert len(r.err_lines) == 1 and opt in r.err and f"'{value}'" in r.err, r
    assert list_keys(s3, bucket, "bad/") == []
    r = cli.run("cp", opt, value, f"s3://{bucket}/bad/f", tmp_path / "out")
    assert r.rc == 2, r
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value,ok", [("5242880", True), ("5M", True), ("5m", True),
                                      ("5Mi", True), ("5MiB", True), ("5MB", True),
                                      ("5120K", True), ("5120k", True), ("1G", True),
                                      ("5G", True), ("5121M", False), ("5T", False)])
def test_size_suffixes(cli, s3, bucket, tmp_path, value, ok):
    src = tmp_path / "f"
    src.write_bytes(b"y")
    r = cli.run("cp", "--part-size", value, src, f"s3://{bucket}/sz/{value}")
    assert r.rc == (0 if ok else 2), r


def test_help_documents_the_options(cli_nosrv):
    r = cli_nosrv.run("cp", "--help", endpoint=False)
    assert r.rc == 0
    for word in ("--part-size", "--concurrency", "--memory-limit", "--checksum", "crc64nvme",
                 "Ceph RGW", "1024"):
        assert word in r.text, word


# ---- --recursive --------------------------------------------------------------------------

def _tree(root):
    files = {}
    for i in range(200):
        files[f"small/{i % 7}/f{i:03d}.bin"] = os.urandom((i * 997) % 20000)
    files["big/a.bin"] = os.urandom(2 * PART + 3)
    files["big/b.bin"] = os.urandom(PART + 1)
    files["empty"] = b""
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return files


def test_recursive_many_files_both_directions(cli, s3, bucket, tmp_path):
    src = tmp_path / "src"
    files = _tree(src)
    r = cli.ok("cp", "-r", "--part-size", "5M", src, f"s3://{bucket}/many")
    lines = r.text.splitlines()
    assert len(lines) == len(files)
    assert sorted(lines) == sorted(f"upload: {src / rel} to s3://{bucket}/many/{rel}"
                                   for rel in files)
    assert sorted(list_keys(s3, bucket, "many/")) == sorted(f"many/{k}" for k in files)
    for rel in ("big/a.bin", "big/b.bin", "small/3/f010.bin", "empty"):
        body = s3.get_object(Bucket=bucket, Key=f"many/{rel}")["Body"].read()
        assert sha256(body) == sha256(files[rel]), rel
    assert s3.head_object(Bucket=bucket, Key="many/big/a.bin")["ETag"].endswith('-3"')

    dst = tmp_path / "back"
    r = cli.ok("cp", "-r", "--part-size", "5M", f"s3://{bucket}/many/", dst)
    lines = r.text.splitlines()
    assert sorted(lines) == sorted(f"download: s3://{bucket}/many/{rel} to {dst / rel}"
                                   for rel in files)
    back = read_tree(dst)
    assert sorted(back) == sorted(files)
    for rel, data in files.items():
        assert sha256(back[rel]) == sha256(data), rel
    assert leftovers(dst) == []


def test_recursive_keeps_many_objects_in_flight(cli, s3, bucket, proxy, tmp_path):
    """Every request is delayed 0.25 s by the proxy: 40 objects one by one would take 10 s
    each way; with 8 in flight about 1.3 s."""
    src = tmp_path / "src"
    src.mkdir()
    files = {f"f{i:02d}": os.urandom(100 + i) for i in range(40)}
    for n, d in files.items():
        (src / n).write_bytes(d)
    proxy.set_faults([{"match": {"path": "/par/"}, "action": "delay", "seconds": 0.25}])
    t0 = time.monotonic()
    r = via(cli, proxy, "cp", "-r", "--concurrency", "8", src, f"s3://{bucket}/par")
    up = time.monotonic() - t0
    assert r.rc == 0, r
    assert len(r.text.splitlines()) == 40
    dst = tmp_path / "dst"
    t0 = time.monotonic()
    r = via(cli, proxy, "cp", "-r", "--concurrency", "8", f"s3://{bucket}/par", dst)
    down = time.monotonic() - t0
    assert r.rc == 0, r
    assert read_tree(dst) == files
    assert up < 5 and down < 5, (up, down)


def test_recursive_continues_after_a_failed_download(cli, s3, bucket, proxy, tmp_path):
    keys = {f"rf/k{i:02d}": os.urandom(1000 + i) for i in range(30)}
    for k, d in keys.items():
        s3.put_object(Bucket=bucket, Key=k, Body=d)
    proxy.set_faults([s3_error("AccessDenied", 403, {"method": "GET", "path": "/rf/k07$"})])
    dst = tmp_path / "d"
    r = via(cli, proxy, "cp", "-r", f"s3://{bucket}/rf", dst)
    assert r.rc == 1, r
    assert len(r.err_lines) == 1 and "AccessDenied" in r.err and "rf/k07" in r.err, r
    assert r.text.count("download: ") == 29
    got = read_tree(dst)
    assert sorted(got) == sorted(k[3:] for k in keys if k != "rf/k07")
    for name, data in got.items():
        assert data == keys["rf/" + name]
    assert leftovers(dst) == []


def test_recursive_continues_after_a_failed_upload(cli, s3, bucket, proxy, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    files = {f"u{i:02d}": os.urandom(500 + i) for i in range(30)}
    for n, d in files.items():
        (src / n).write_bytes(d)
    proxy.set_faults([s3_error("AccessDenied", 403, {"method": "PUT", "path": "/ru/u13$"})])
    r = via(cli, proxy, "cp", "-r", src, f"s3://{bucket}/ru")
    assert r.rc == 1, r
    assert len(r.err_lines) == 1 and "AccessDenied" in r.err and "ru/u13" in r.err, r
    assert r.text.count("upload: ") == 29
    assert sorted(list_keys(s3, bucket, "ru/")) == sorted(f"ru/{n}" for n in files
                                                          if n != "u13")
    for n, d in files.items():
        if n != "u13":
            assert s3.get_object(Bucket=bucket, Key=f"ru/{n}")["Body"].read() == d


def test_recursive_s3_to_s3_many(cli, s3, bucket):
    from helpers import put_many
    keys = [f"rc/src/{i:03d}" for i in range(60)]
    put_many(s3, bucket, keys, body=b"copied")
    r = cli.ok("cp", "-r", f"s3://{bucket}/rc/src", f"s3://{bucket}/rc/dst")
    assert r.text.count("copy: ") == 60
    assert sorted(list_keys(s3, bucket, "rc/dst/")) == sorted(k.replace("/src/", "/dst/")
                                                              for k in keys)


# ---- checksums end to end (moto stores them; RGW does not) -------------------------------

def _crc_b64(alg, data):
    if alg == "crc32":
        v, n = zlib.crc32(data), 4
    elif alg == "crc32c":
        import crc32c
        v, n = crc32c.crc32c(data), 4
    else:
        from awscrt import checksums
        v, n = checksums.crc64nvme(data), 8
    return base64.b64encode(v.to_bytes(n, "big")).decode()


@pytest.mark.parametrize("alg", ["crc32c", "crc32", "crc64nvme"])
@pytest.mark.parametrize("size", [1000, 2 * PART + 5], ids=["single", "multipart"])
def test_checksum_end_to_end_on_moto(moto, cli_path, tmp_path, alg, size):  # noqa: F811
    """The upload sends the --checksum value (per part and for the whole object, which moto
    stores); the download verifies it (--debug says so)."""
    s3 = _s3(moto)
    bucket = f"cke-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    data = os.urandom(size)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    env = _cli_env(tmp_path)
    base = [cli_path, "--endpoint-url", moto, "--force-path-style"]
    r = subprocess.run(base + ["cp", "--checksum", alg, "--part-size", "5M", str(src),
                               f"s3://{bucket}/obj"], env=env, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    head = s3.head_object(Bucket=bucket, Key="obj", ChecksumMode="ENABLED")
    stored = head.get("Checksum" + alg.upper())
    assert stored == _crc_b64(alg, data), head
    out = tmp_path / "out.bin"
    r = subprocess.run(base + ["--debug", "cp", "--checksum", alg, "--part-size", "5M",
                               f"s3://{bucket}/obj", str(out)], env=env, capture_output=True,
                       timeout=120)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0, err
    assert f"{stored} verified" in err, err[-3000:]
    assert sha256_file(out) == sha256(data)
    assert hashlib.sha256(out.read_bytes()).hexdigest() == sha256(data)


# ---- S3 -> S3 through s3f_copy ------------------------------------------------------------

def test_s3_to_s3_multipart_copy(cli, s3, bucket, proxy):
    """--part-size 5M: a 12 MiB object is copied with CreateMultipartUpload and three
    UploadPartCopy requests (ETag "-3"), pinned to the source's ETag, byte-exact; the
    content type comes along."""
    data = os.urandom(12 * MiB)
    s3.put_object(Bucket=bucket, Key="s2s/src", Body=data, ContentType="application/x-ckpt")
    r = via(cli, proxy, "cp", "--part-size", "5M", "--concurrency", "2",
            f"s3://{bucket}/s2s/src", f"s3://{bucket}/s2s/dst")
    assert r.rc == 0, r.err
    assert f"copy: s3://{bucket}/s2s/src to s3://{bucket}/s2s/dst" in r.text
    head = s3.head_object(Bucket=bucket, Key="s2s/dst")
    assert head["ETag"].strip('"').endswith("-3"), head["ETag"]
    assert head["ContentType"] == "application/x-ckpt"
    got = s3.get_object(Bucket=bucket, Key="s2s/dst")["Body"].read()
    assert sha256(got) == sha256(data)
    assert requests(proxy, "PUT", "/s2s/dst") == 3  # the three parts, no body through us
    assert requests(proxy, "GET", "/s2s/src") == 0
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_s3_to_s3_small_is_one_copy_object(cli, s3, bucket):
    """Without --part-size an object up to the copy part size (128 MiB) is one CopyObject."""
    data = os.urandom(12 * MiB)
    s3.put_object(Bucket=bucket, Key="s2s/one", Body=data)
    cli.ok("cp", f"s3://{bucket}/s2s/one", f"s3://{bucket}/s2s/one-copy")
    head = s3.head_object(Bucket=bucket, Key="s2s/one-copy")
    assert "-" not in head["ETag"]
    assert sha256(s3.get_object(Bucket=bucket, Key="s2s/one-copy")["Body"].read()) == \
        sha256(data)


def test_s3_to_s3_recursive_multipart(cli, s3, bucket):
    """--recursive S3 -> S3 with --part-size 5M: small objects by CopyObject, the large
    one by parts; every byte equal."""
    want = {"rc/a": os.urandom(1), "rc/b/c": os.urandom(PART + 1), "rc/d": b"",
            "rc/e": os.urandom(11 * MiB)}
    for k, v in want.items():
        s3.put_object(Bucket=bucket, Key=k, Body=v)
    cli.ok("cp", "--recursive", "--part-size", "5M", f"s3://{bucket}/rc/",
           f"s3://{bucket}/rc-copy/")
    for k, v in want.items():
        dk = "rc-copy/" + k[len("rc/"):]
        assert s3.get_object(Bucket=bucket, Key=dk)["Body"].read() == v
    assert s3.head_object(Bucket=bucket, Key="rc-copy/e")["ETag"].strip('"').endswith("-3")
    assert s3.head_object(Bucket=bucket, Key="rc-copy/b/c")["ETag"].strip('"').endswith("-2")


def test_s3_to_s3_missing_source(cli, bucket):
    r = cli.run("cp", f"s3://{bucket}/s2s/none", f"s3://{bucket}/s2s/x")
    assert r.rc != 0
    assert "s2s/none" in r.err
    assert "404" in r.err or "NoSuchKey" in r.err or "Not Found" in r.err
