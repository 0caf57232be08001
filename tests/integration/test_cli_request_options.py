"""The request options on the wire (issue 30): the fault proxy in front of the RGW records
each request's x-amz-* headers and User-Agent, and each option's header must be on exactly
the requests that must carry it: SSE-KMS on PutObject, CreateMultipartUpload and CopyObject
but not on UploadPart, Complete or reads; the SSE-C key and its MD5 on PutObject,
CreateMultipartUpload, UploadPart, Complete, GetObject and HeadObject (and the copy
source's on copies); the expected bucket owner on every request; the User-Agent suffix on
every request. The key never appears in the TRACE log, nor on the command line."""
import base64
import hashlib
import os

import pytest

KEY = bytes(range(7, 39))                      # a 32-byte SSE-C key
KEY_B64 = base64.b64encode(KEY).decode()
KEY_MD5 = base64.b64encode(hashlib.md5(KEY).digest()).decode()
MIB = 1 << 20


def copied(r):
    """A copy went through, or it is a CopyObject that Ceph 16 (Pacific) does not do for an
    encrypted source or destination (501 NotImplemented; its UploadPartCopy works): the
    request was sent, which is what these tests look at."""
    return r.rc == 0 or (r.rc == 1 and "CopyObject" in r.err and "NotImplemented" in r.err)


@pytest.fixture(scope="module")
def sse_rgw(rgw):
    if not rgw.kms_key_id:
        pytest.skip("the RGW has no SSE config (S3FLASH_TEST_KMS_KEY_ID; tests/servers/rgw.sh "
                    "starts one with it)")
    return rgw


@pytest.fixture(scope="module")
def key_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("key") / "sse-c.key"
    p.write_bytes(KEY)
    os.chmod(p, 0o600)
    return p


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    (d / "small").write_bytes(b"small object\n")
    (d / "big").write_bytes(os.urandom(12 * MIB))  # 3 parts of 5 MiB
    return d


def operation(e):
    """The S3 operation of a fault proxy log entry."""
    m, q, h = e["method"], e["query"] or "", e.get("headers") or {}
    has_key = e["path"].count("/") >= 2 and not e["path"].endswith("/")
    if m == "POST" and ("uploads" in q.split("&") or "uploads=" in q.split("&")):
        return "CreateMultipartUpload"
    if m == "POST" and "uploadId=" in q:
        return "CompleteMultipartUpload"
    if m == "DELETE" and "uploadId=" in q:
        return "AbortMultipartUpload"
    if m == "PUT" and "partNumber=" in q:
        return "UploadPartCopy" if "x-amz-copy-source" in h else "UploadPart"
    if m == "PUT" and has_key:
        return "CopyObject" if "x-amz-copy-source" in h else "PutObject"
    if m == "GET" and has_key and "list-type" not in q:
        return "GetObject"
    if m == "HEAD" and has_key:
        return "HeadObject"
    if m == "GET":
        return "List"
    return f"{m} {e['path']}?{q}"


def run(cli, proxy, *args, **kw):
    return cli.run("--endpoint-url", proxy.endpoint, *args, endpoint=False, **kw)


def by_operation(proxy):
    ops = {}
    for e in proxy.stats()["log"]:
        ops.setdefault(operation(e), []).append(e.get("headers") or {})
    return ops


SSE_C = {"x-amz-server-side-encryption-customer-algorithm": "AES256",
         "x-amz-server-side-encryption-customer-key": KEY_B64,
         "x-amz-server-side-encryption-customer-key-md5": KEY_MD5}
SSE_C_SOURCE = {"x-amz-copy-source-server-side-encryption-customer-algorithm": "AES256",
                "x-amz-copy-source-server-side-encryption-customer-key": KEY_B64,
                "x-amz-copy-source-server-side-encryption-customer-key-md5": KEY_MD5}


def carries(h, want):
    return all(h.get(k) == v for k, v in want.items())


def carries_none(h, want):
    return not any(k in h for k in want)


def test_sse_c_headers_on_exactly_the_requests_that_need_them(cli, sse_rgw, bucket, proxy,
                                                              key_file, files, tmp_path):
    opts = ["--sse-c", "AES256", "--sse-c-key", f"fileb://{key_file}"]
    env = cli.env(S3FLASH_LOG="trace")
    logs = []
    for args in (["cp", "--part-size", "5MiB", files / "big", f"s3://{bucket}/c/big"],
                 ["cp", files / "small", f"s3://{bucket}/c/small"],
                 ["cp", "--part-size", "5MiB", f"s3://{bucket}/c/big", tmp_path / "big"],
                 ["cat", f"s3://{bucket}/c/small"],
                 ["stat", f"s3://{bucket}/c/small"],
                 ["ls", f"s3://{bucket}/c/"]):
        r = run(cli, proxy, *opts, *args, env=env)
        assert r.rc == 0, r
        logs.append(r.err)
    # the copy: its source's key too (one CopyObject, then UploadPartCopy parts)
    copy_opts = opts + ["--sse-c-copy-source", "AES256",
                        "--sse-c-copy-source-key", f"fileb://{key_file}"]
    for args in (["cp", f"s3://{bucket}/c/small", f"s3://{bucket}/c/small-copy"],
                 ["cp", "--part-size", "5MiB", f"s3://{bucket}/c/big", f"s3://{bucket}/c/big-copy"]):
        r = run(cli, proxy, *copy_opts, *args, env=env)
        assert copied(r), r
        logs.append(r.err)
    assert (tmp_path / "big").read_bytes() == (files / "big").read_bytes()

    ops = by_operation(proxy)
    for op in ("PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload",
               "GetObject", "HeadObject", "CopyObject", "UploadPartCopy"):
        assert ops.get(op), f"no {op} seen: {sorted(ops)}"
        for h in ops[op]:
            assert carries(h, SSE_C), (op, h)
    for op in ("CopyObject", "UploadPartCopy"):
        for h in ops[op]:
            assert carries(h, SSE_C_SOURCE), (op, h)
    for op in ("PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload",
               "GetObject"):
        for h in ops[op]:
            assert carries_none(h, SSE_C_SOURCE), (op, h)
    for h in ops["List"]:
        assert carries_none(h, SSE_C) and carries_none(h, SSE_C_SOURCE), h
    # GETs were ranged (5 MiB parts of 12 MiB): each range carried the key
    assert len(ops["GetObject"]) >= 3

    # the TRACE log shows every request's headers, the key's never
    trace = "\n".join(logs)
    assert "x-amz-server-side-encryption-customer-key: <redacted>" in trace, trace[-3000:]
    assert "x-amz-copy-source-server-side-encryption-customer-key: <redacted>" in trace
    assert KEY_MD5 in trace                     # the MD5 is shown: it is not the key
    for secret in (KEY_B64, KEY_B64.rstrip("="), KEY.hex(), KEY.hex().upper()):
        assert secret not in trace


def test_sse_kms_and_write_options_on_exactly_the_writes(cli, sse_rgw, bucket, proxy, files,
                                                         s3):
    owner = s3.get_bucket_acl(Bucket=bucket)["Owner"]["ID"]
    context = '{"project":"s3flash"}'
    opts = ["--sse", "aws:kms", "--sse-kms-key-id", sse_rgw.kms_key_id,
            "--sse-kms-encryption-context", context, "--bucket-key-enabled",
            "--storage-class", "STANDARD", "--acl", "bucket-owner-full-control",
            "--expected-bucket-owner", owner, "--user-agent-extra", "test-suite/30"]
    for args in (["cp", "--part-size", "5MiB", files / "big", f"s3://{bucket}/k/big"],
                 ["cp", files / "small", f"s3://{bucket}/k/small"],
                 ["cp", f"s3://{bucket}/k/small", f"s3://{bucket}/k/small-copy"],
                 ["cp", "--part-size", "5MiB", f"s3://{bucket}/k/big", f"s3://{bucket}/k/big-copy"],
                 ["cat", f"s3://{bucket}/k/small"],
                 ["stat", f"s3://{bucket}/k/small"],
                 ["ls", f"s3://{bucket}/k/"]):
        r = run(cli, proxy, *opts, *args)
        assert copied(r), r
    want = {"x-amz-server-side-encryption": "aws:kms",
            "x-amz-server-side-encryption-aws-kms-key-id": sse_rgw.kms_key_id,
            "x-amz-server-side-encryption-context": base64.b64encode(context.encode()).decode(),
            "x-amz-server-side-encryption-bucket-key-enabled": "true",
            "x-amz-storage-class": "STANDARD",
            "x-amz-acl": "bucket-owner-full-control"}
    ops = by_operation(proxy)
    for op in ("PutObject", "CreateMultipartUpload", "CopyObject"):
        assert ops.get(op), f"no {op} seen: {sorted(ops)}"
        for h in ops[op]:
            assert carries(h, want), (op, h)
    for op in ("UploadPart", "UploadPartCopy", "CompleteMultipartUpload", "GetObject",
               "HeadObject", "List"):
        assert ops.get(op), f"no {op} seen: {sorted(ops)}"
        for h in ops[op]:
            assert carries_none(h, want), (op, h)
    log = proxy.stats()["log"]
    for e in log:  # every request: the owner, and the User-Agent with its suffix
        h = e.get("headers") or {}
        assert h.get("x-amz-expected-bucket-owner") == owner, (operation(e), h)
        assert h.get("user-agent", "").startswith("s3flash/"), (operation(e), h)
        assert h.get("user-agent", "").endswith(" test-suite/30"), (operation(e), h)
    assert s3.head_object(Bucket=bucket, Key="k/big")["ServerSideEncryption"] == "aws:kms"


@pytest.mark.parametrize("sse", ["AES256", "aws:kms:dsse"])
def test_sse_value_on_the_wire(cli, sse_rgw, bucket, proxy, files, sse):
    # RGW refuses DSSE-KMS (it has no such mode): what matters here is what was sent
    args = ["--sse", sse] + (["--sse-kms-key-id", sse_rgw.kms_key_id] if sse != "AES256" else [])
    run(cli, proxy, *args, "cp", files / "small", f"s3://{bucket}/v/{sse}")
    puts = by_operation(proxy)["PutObject"]
    assert puts and all(h.get("x-amz-server-side-encryption") == sse for h in puts), puts


def test_no_option_no_header(cli, rgw, bucket, proxy, files):
    r = run(cli, proxy, "cp", "--part-size", "5MiB", files / "big", f"s3://{bucket}/plain/big")
    assert r.rc == 0, r
    for e in proxy.stats()["log"]:
        h = e.get("headers") or {}
        assert not [k for k in h if "server-side-encryption" in k or k in
                    ("x-amz-storage-class", "x-amz-acl", "x-amz-expected-bucket-owner")], h
        assert h.get("user-agent") == h.get("user-agent", "").split(" ")[0], h


def test_sse_c_key_never_from_argv(cli, bucket):
    r = cli.run("--sse-c", "AES256", "--sse-c-key", KEY_B64, "ls", f"s3://{bucket}/")
    assert r.rc == 2, r
    assert "fileb://PATH" in r.err and "S3FLASH_SSE_C_KEY" in r.err, r.err
    assert KEY_B64 not in r.err and KEY_B64 not in r.text


def test_sse_c_key_from_the_environment(cli, sse_rgw, bucket, proxy):
    env = cli.env(S3FLASH_SSE_C_KEY=KEY_B64)
    r = run(cli, proxy, "--sse-c", "AES256", "cp", "-", f"s3://{bucket}/env/obj", env=env,
            input=b"from stdin\n")
    assert r.rc == 0, r
    r = run(cli, proxy, "--sse-c", "AES256", "cat", f"s3://{bucket}/env/obj", env=env)
    assert r.rc == 0 and r.out == b"from stdin\n", r
    for op, hs in by_operation(proxy).items():
        for h in hs:
            if op in ("PutObject", "GetObject", "HeadObject"):
                assert carries(h, SSE_C), (op, h)


@pytest.mark.parametrize("args, message", [
    (["--sse", "aws:kms:x"], "--sse takes AES256, aws:kms or aws:kms:dsse"),
    (["--sse-kms-key-id", "k"], "need --sse aws:kms"),
    (["--sse-c", "AES128", "--sse-c-key", "fileb:///dev/null"], "--sse-c takes AES256"),
    (["--sse-c", "AES256"], "S3FLASH_SSE_C_KEY"),
    (["--sse-c-key", "fileb:///dev/null"], "--sse-c-key needs --sse-c AES256"),
    (["--sse", "AES256", "--sse-c", "AES256", "--sse-c-key", "fileb:///dev/null"],
     "exclude each other"),
    (["--aws-max-attempts", "0"], "--aws-max-attempts takes a number from 1 to 100"),
])
def test_option_values_checked(cli, bucket, args, message):
    r = cli.run(*args, "ls", f"s3://{bucket}/")
    assert r.rc == 2 and message in r.err, r


def test_max_attempts_on_the_wire(cli, rgw, bucket, proxy, files):
    from faults import s3_error
    proxy.set_faults([s3_error("InternalError", 500, match={"method": "PUT"})])
    r = run(cli, proxy, "--aws-max-attempts", "2", "cp", files / "small", f"s3://{bucket}/m/o")
    assert r.rc == 1, r
    assert proxy.stats()["requests"].get(f"PUT /{bucket}/m/o") == 2
    proxy.reset()
    proxy.set_faults([s3_error("InternalError", 500, match={"method": "PUT"})])
    r = run(cli, proxy, "cp", files / "small", f"s3://{bucket}/m/o",
            env=cli.env(AWS_MAX_ATTEMPTS="4"))
    assert r.rc == 1, r
    assert proxy.stats()["requests"].get(f"PUT /{bucket}/m/o") == 4
