"""s3flash cat, stat and presign against RGW."""

import os
import subprocess
import time
from datetime import timezone

from helpers import sha256


def test_cat(cli, s3, bucket):
    data = os.urandom(777_777)
    s3.put_object(Bucket=bucket, Key="cat/obj", Body=data)
    r = cli.ok("cat", f"s3://{bucket}/cat/obj")
    assert sha256(r.out) == sha256(data)
    assert r.err == ""
    s3.put_object(Bucket=bucket, Key="cat/empty", Body=b"")
    assert cli.ok("cat", f"s3://{bucket}/cat/empty").out == b""


def test_cat_into_closed_pipe(cli, s3, bucket):
    # `s3flash cat big | head -c 10`: the reader goes away; s3flash ends without hanging
    s3.put_object(Bucket=bucket, Key="cat/big", Body=os.urandom(8 << 20))
    p = subprocess.run(f"'{cli.path}' --endpoint-url {cli.rgw.endpoint} "
                       f"cat s3://{bucket}/cat/big | head -c 10 | wc -c",
                       shell=True, env=cli.env(), capture_output=True, timeout=60)
    assert p.stdout.strip() == b"10"
    assert b"Signature" not in p.stderr


def parse_stat(text):
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition(": ")
        assert sep, line
        out[k] = v
    return out


def test_stat(cli, s3, bucket):
    data = os.urandom(123_456)
    s3.put_object(Bucket=bucket, Key="stat/obj", Body=data, ContentType="image/png")
    head = s3.head_object(Bucket=bucket, Key="stat/obj")
    st = parse_stat(cli.ok("stat", f"s3://{bucket}/stat/obj").text)
    assert int(st["size"]) == head["ContentLength"] == len(data)
    assert st["etag"] == head["ETag"]
    assert st["etag"].startswith('"') and st["etag"].endswith('"')
    assert st["content-type"] == "image/png"
    assert st["last-modified"] == \
        head["LastModified"].astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    # checksum lines only for checksums the server reported
    for algo in ("crc32c", "crc32", "crc64nvme", "sha256"):
        hdr = head["ResponseMetadata"]["HTTPHeaders"].get(f"x-amz-checksum-{algo}")
        assert st.get(f"checksum-{algo}") == hdr, algo


def test_stat_after_cli_upload(cli, s3, bucket, tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"0123456789")
    cli.ok("cp", f, f"s3://{bucket}/stat/up")
    st = parse_stat(cli.ok("stat", f"s3://{bucket}/stat/up").text)
    assert st["size"] == "10"
    assert st["etag"] == '"781e5e245d69b566979b86e28d23f2c7"'  # md5 of the bytes


def _presign(cli, *args):
    r = cli.ok("presign", *args)
    url = r.text.strip().splitlines()[-1]
    assert url.startswith(cli.rgw.endpoint + "/") or url.startswith("http"), url
    assert cli.rgw.secret_key not in r.text
    return url


def test_presign_get_with_curl(cli, s3, bucket):
    data = os.urandom(50_000)
    s3.put_object(Bucket=bucket, Key="ps/get me", Body=data)
    url = _presign(cli, f"s3://{bucket}/ps/get me")
    assert "X-Amz-Signature=" in url and "X-Amz-Expires=3600" in url
    p = subprocess.run(["curl", "-sS", "-f", url], capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert p.stdout == data
    # the URL is for this key only
    other = url.replace("get%20me", "get%20you")
    p = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", other],
                       capture_output=True, timeout=30)
    assert p.stdout == b"403"


def test_presign_put_with_curl(cli, s3, bucket, tmp_path):
    data = os.urandom(20_000)
    f = tmp_path / "up"
    f.write_bytes(data)
    url = _presign(cli, "--method", "PUT", "--expires-in", "600", f"s3://{bucket}/ps/put")
    assert "X-Amz-Expires=600" in url
    p = subprocess.run(["curl", "-sS", "-f", "-T", str(f), url], capture_output=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    assert s3.get_object(Bucket=bucket, Key="ps/put")["Body"].read() == data


def test_presign_expires(cli, s3, bucket):
    s3.put_object(Bucket=bucket, Key="ps/short", Body=b"short")
    t0 = time.time()
    url = _presign(cli, "--expires-in", "2", f"s3://{bucket}/ps/short")

    def status():
        return subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url],
                              capture_output=True, timeout=30).stdout

    # the URL works until it expires (X-Amz-Date has whole seconds: at least one second of
    # the two is left), then is refused: poll for the refusal, bounded far from when it is due
    codes = [status()]
    assert codes[0] == b"200", codes
    while codes[-1] != b"403" and time.time() - t0 < 20:
        time.sleep(0.1)
        codes.append(status())
    assert codes[-1] == b"403", codes


def test_mb_rb(cli):
    import uuid
    name = "mbrb-" + uuid.uuid4().hex[:12]
    r = cli.ok("mb", f"s3://{name}")
    assert f"make_bucket: s3://{name}" in r.text
    cli.ok("mb", f"s3://{name}")  # already yours: fine
    cli.ok("cp", "-", f"s3://{name}/k", input=b"x")
    r = cli.run("rb", f"s3://{name}")
    assert r.rc == 1 and "BucketNotEmpty" in r.err, r
    cli.ok("rm", f"s3://{name}/k")
    cli.ok("rb", f"s3://{name}")
    r = cli.run("ls", f"s3://{name}/")
    assert r.rc == 1 and "NoSuchBucket" in r.err, r
    r = cli.run("mb", f"s3://{name}/key")
    assert r.rc == 2, r
