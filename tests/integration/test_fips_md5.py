"""A host where MD5 is unavailable (FIPS): DeleteObjects, which S3 accepts only with a
Content-MD5 or an x-amz-checksum-* header, is sent with x-amz-checksum-crc32c instead, and
works, against Ceph RGW. The test build's hook S3FLASH_TEST_NO_MD5=1 makes MD5 unavailable
(meson -Dtest_hooks; the check is what a FIPS provider answers: EVP_MD_fetch("MD5") fails).
The headers are read from the client's TRACE log of each request as sent."""
import re


def put_keys(s3, bucket, keys):
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")


def delete_objects_headers(err):
    """Header lines logged (TRACE) for the DeleteObjects requests, lowercased."""
    out, inside = [], False
    for line in err.splitlines():
        m = re.match(r"\[s3flash [0-9.]+ (\w+)\] (.*)$", line)
        if not m:
            continue
        level, text = m.groups()
        if level == "debug":
            inside = text.startswith("-> DeleteObjects")
        elif level == "trace" and inside:
            out.append(text.strip().lower())
    return out


def test_delete_objects_without_md5(cli, s3, bucket):
    keys = [f"fips/k{i}" for i in range(5)]
    put_keys(s3, bucket, keys)
    env = cli.env(S3FLASH_TEST_NO_MD5="1", S3FLASH_LOG="trace")
    r = cli.run("rm", "--recursive", f"s3://{bucket}/fips/", env=env)
    assert r.rc == 0, r
    hdrs = delete_objects_headers(r.err.decode() if isinstance(r.err, bytes) else r.err)
    assert hdrs, r.err[-3000:]
    assert not any(h.startswith("content-md5:") for h in hdrs), hdrs
    assert "x-amz-sdk-checksum-algorithm: crc32c" in hdrs, hdrs
    assert any(re.fullmatch(r"x-amz-checksum-crc32c: [a-z0-9+/]{6}==", h) for h in hdrs), hdrs
    left = s3.list_objects_v2(Bucket=bucket, Prefix="fips/").get("KeyCount", 0)
    assert left == 0


def test_delete_objects_with_md5(cli, s3, bucket):
    # where MD5 works, Content-MD5 as before
    keys = [f"md5/k{i}" for i in range(3)]
    put_keys(s3, bucket, keys)
    r = cli.run("rm", "--recursive", f"s3://{bucket}/md5/", env=cli.env(S3FLASH_LOG="trace"))
    assert r.rc == 0, r
    hdrs = delete_objects_headers(r.err.decode() if isinstance(r.err, bytes) else r.err)
    assert any(h.startswith("content-md5:") for h in hdrs), hdrs
    assert not any(h.startswith("x-amz-checksum-crc32c:") for h in hdrs), hdrs
