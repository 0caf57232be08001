"""Issue 32: `s3flash mount` takes every `mount-s3` flag with Mountpoint's meaning and
units (docs/CLI.md, "mount-s3 compatibility", has the table). Each flag is seen where it
acts: on the wire (tests/servers/faultproxy.py in front of the RGW logs every request's
x-amz-* headers, Range, Content-Type and Content-Length; tests/servers/aws_host.py stands in
for AWS's accelerate and dual-stack hosts through S3FLASH_TEST_CONNECT_TO), in the store,
on the file system, in the log file or in the kernel's mount table. A flag that no store
takes (or not this one) is refused before anything is mounted."""
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import aws_host
from faults import by_operation, s3_error
from metricsutil import parse, scrape, total
from mountutil import Mount, force_unmount, is_mounted, mount_supported

pytestmark = pytest.mark.skipif(mount_supported() is not None,
                                reason=str(mount_supported()))
MIB = 1 << 20
URL_RE = re.compile(rb"metrics at (http://\S+/metrics)")


def poll(cond, what, timeout=30.0, every=0.05):
    """Until cond() is true, at most `timeout` s (a bounded wait for an event)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(every)


def write(m, name, data):
    with open(Path(m.dir) / name, "wb") as f:
        f.write(data)


def metrics(m):
    url = URL_RE.search(open(m.log_path, "rb").read()).group(1).decode()
    return parse(scrape(url))


# ---- refused before anything is mounted ---------------------------------------------------

REFUSED = [
    # (flags, the bucket, what the message says)
    (["--transfer-acceleration", "--endpoint-url", "http://127.0.0.1:1"], "b",
     "--transfer-acceleration cannot be used with --endpoint-url"),
    (["--transfer-acceleration", "--force-path-style"], "b",
     "--transfer-acceleration cannot be used with path-style addressing"),
    (["--transfer-acceleration"], "my.dotted.bucket",
     "--transfer-acceleration cannot be used with a bucket name with dots"),
    (["--transfer-acceleration"], "dir--use1-az4--x-s3",
     "--transfer-acceleration cannot be used with a directory bucket"),
    (["--dual-stack", "--endpoint-url", "http://127.0.0.1:1"], "b",
     "--dual-stack cannot be used with --endpoint-url"),
    (["--bind", "s3fnosuch0"], "b", "--bind s3fnosuch0: no such network interface"),
    (["--incremental-upload"], "b", "--incremental-upload appends to objects of directory "
     "buckets"),
    (["--incremental-upload", "--bucket-type", "general-purpose"], "dir--use1-az4--x-s3",
     "--incremental-upload appends to objects of directory buckets"),
    (["--allow-root", "--allow-other"], "b", "--allow-root and --allow-other exclude"),
    (["--upload-checksums", "md5"], "b", "--upload-checksums takes crc32c, crc64nvme or off"),
    (["--bucket-type", "express"], "b", "--bucket-type takes general-purpose or directory"),
    (["--metadata-ttl", "forever"], "b", "--metadata-ttl must be seconds"),
    (["--negative-metadata-ttl", "-1"], "b", "--negative-metadata-ttl must be seconds"),
    (["--prefix", "nodelimiter"], "b", "--prefix must end in '/'"),
    (["--prefix", "p/"], "b/q/", "--prefix cannot be combined with a source"),
    (["--read-part-size", "8M", "--part-size", "8M"], "b", "--read-part-size cannot be "
     "combined with --part-size"),
    (["--write-part-size", "1M"], "b", "--write-part-size must be a size from 5M to 5G"),
    (["--no-log", "--debug"], "b", "--no-log cannot be combined"),
    (["--log-file", "/tmp/x.log", "--log-directory", "/tmp"], "b",
     "--log-file and --log-directory exclude each other"),
    (["--cache", "/tmp/c", "--cache-block-size", "100"], "b",
     "--cache-block-size must be KiB, a power of two"),
    (["--cache-block-size", "64"], "b", "--cache-block-size needs --cache"),
    (["--ca-bundle", "/nonexistent/ca.pem"], "b", "--ca-bundle /nonexistent/ca.pem"),
    (["--maximum-throughput-gbps", "0"], "b", "--maximum-throughput-gbps must be"),
    (["--max-cache-size", "10X", "--cache", "/tmp/c"], "b", "--max-cache-size must be MiB"),
    (["--memory-target", "16"], "b", "--memory-target must be MiB (at least 32)"),
    # Mountpoint's fstab style
    (["-o", "ro,rw"], "b", "mount -o: 'ro' and 'rw' exclude each other"),
    (["-o", "allow-delete,foreground"], "b", "mount -o: 'foreground' is not taken"),
    (["-o", "--uid=2"], "b", "mount -o: '--uid=2' is not taken"),
    (["-o", 'cache="x"'], "b", "mount -o: unexpected '\"'"),
    (["-o", "uid=2,typo"], "b", "unknown option '--typo'"),
]


@pytest.mark.parametrize("flags,bucket_name,message", REFUSED,
                         ids=[" ".join(r[0]) + " " + r[1] for r in REFUSED])
def test_refused_before_mounting(cli_path, tmp_path, flags, bucket_name, message):
    d = tmp_path / "mnt"
    d.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3FLASH_"))}
    p = subprocess.run([str(cli_path), "mount", *flags, bucket_name, str(d)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert message in p.stderr, p.stderr
    assert not is_mounted(str(d))


def test_auto_unmount_refused_on_a_fuse_fd(cli_path):
    p = subprocess.run([str(cli_path), "mount", "--auto-unmount", "bkt", "/dev/fd/3"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--auto-unmount does nothing on a /dev/fd/N" in p.stderr, \
        (p.returncode, p.stderr)


def test_dual_stack_with_an_endpoint_from_the_environment(cli_path, rgw, tmp_path):
    """The endpoint is not on the command line (AWS_ENDPOINT_URL): the rules refuse it at
    the start-up LIST, before the mount: exit status 1, the rule named, nothing mounted."""
    d = tmp_path / "mnt"
    d.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3FLASH_"))}
    env.update(AWS_ENDPOINT_URL=rgw.endpoint, AWS_ACCESS_KEY_ID=rgw.access_key,
               AWS_SECRET_ACCESS_KEY=rgw.secret_key, AWS_REGION=rgw.region)
    p = subprocess.run([str(cli_path), "mount", "--dual-stack", "bkt", str(d)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "dual-stack in combination with a custom endpoint" in p.stderr, p.stderr
    assert not is_mounted(str(d))


# ---- on the wire ----------------------------------------------------------------------------

def test_requester_pays(mounts, proxy):
    m = mounts("rp/", "--requester-pays", endpoint=proxy.endpoint)
    write(m, "f", b"paid\n")
    assert (Path(m.dir) / "f").read_bytes() == b"paid\n"
    log = proxy.stats()["log"]
    assert len(log) >= 3
    assert all((e.get("headers") or {}).get("x-amz-request-payer") == "requester"
               for e in log), log


@pytest.mark.parametrize("flag,header", [
    (None, "x-amz-checksum-crc32c"),
    ("crc32c", "x-amz-checksum-crc32c"),
    ("crc64nvme", "x-amz-checksum-crc64nvme"),
    ("off", None),
])
def test_upload_checksums(mounts, proxy, flag, header):
    opts = ["--upload-checksums", flag] if flag else []
    m = mounts(f"ck-{flag}/", *opts, endpoint=proxy.endpoint)
    try:
        write(m, "big", os.urandom(9 * MIB))  # multipart: two parts of 8 MiB and 1 MiB
        write(m, "small", b"small\n")
    except OSError:
        assert flag == "crc64nvme"  # a store without CRC64NVME refuses it: what was sent counts
    ops = by_operation(proxy)
    sent = [h for op in ("PutObject", "UploadPart") for h in ops.get(op, [])]
    assert sent, sorted(ops)
    for h in sent:
        checks = sorted(k for k in h if k.startswith("x-amz-checksum-"))
        assert checks == ([header] if header else []), h


def test_write_part_size(mounts, proxy, s3, bucket):
    m = mounts("wps/", "--write-part-size", "5M", endpoint=proxy.endpoint)
    write(m, "f", os.urandom(12 * MIB))
    parts = [int(h["content-length"]) for h in by_operation(proxy)["UploadPart"]]
    assert sorted(parts) == [2 * MIB, 5 * MIB, 5 * MIB], parts
    assert s3.head_object(Bucket=bucket, Key="wps/f")["ETag"].endswith('-3"')


def test_read_part_size(mounts, proxy, s3, bucket):
    """The read-ahead's requests grow to the part once its window holds its planned
    requests (docs/TRANSFER.md): with a low throughput target (few requests) and a large
    memory target, a sequential read reaches 8 MiB ranges by default and 5 MiB ones with
    --read-part-size 5M."""
    s3.put_object(Bucket=bucket, Key="rps/f", Body=os.urandom(64 * MIB))

    def longest_get(*opts, name):
        proxy.reset()
        m = mounts("rps/", "--maximum-throughput-gbps", "1", "--memory-target", "1024", *opts,
                   endpoint=proxy.endpoint, name=name)
        with open(Path(m.dir) / "f", "rb") as f:
            while f.read(MIB):
                pass
        m.stop()
        lens = []
        for e in proxy.stats()["log"]:
            if e["method"] == "GET" and e.get("range"):
                a, b = e["range"].split("=")[1].split("-")
                lens.append(int(b) - int(a) + 1)
        assert lens
        return max(lens)
    assert longest_get(name="default") == 8 * MIB
    assert longest_get("--read-part-size", "5M", name="small") == 5 * MIB


def test_infer_content_type(mounts, proxy, s3, bucket):
    m = mounts("ct/", "--infer-content-type", endpoint=proxy.endpoint)
    for name in ("a.json", "b.CSV", "c.unknownext", "noext"):
        write(m, name, b"{}\n")
    want = {"a.json": "application/json", "b.CSV": "text/csv",
            "c.unknownext": "application/octet-stream", "noext": "application/octet-stream"}
    for name, ctype in want.items():
        assert s3.head_object(Bucket=bucket, Key=f"ct/{name}")["ContentType"] == ctype, name
    m2 = mounts("ct2/", endpoint=proxy.endpoint)  # without the flag: the default
    write(m2, "a.json", b"{}\n")
    assert s3.head_object(Bucket=bucket, Key="ct2/a.json")["ContentType"] == \
        "application/octet-stream"


def test_maximum_throughput_gbps(mounts, proxy):
    """The requests in flight are sized for the throughput (ceil(Gbit/s / 0.4), at least
    4): 2 Gbit/s gives 5, the default 10 Gbit/s 25."""
    m = mounts("tp/", "--maximum-throughput-gbps", "2", "--metrics-listen", "127.0.0.1:0",
               endpoint=proxy.endpoint)
    assert total(metrics(m), "s3flash_parts_in_flight_limit", client="read") == 5
    d = mounts("tp/", "--metrics-listen", "127.0.0.1:0", endpoint=proxy.endpoint)
    assert total(metrics(d), "s3flash_parts_in_flight_limit", client="read") == 25


def test_memory_target_in_mib(mounts, proxy):
    """Mountpoint's unit: a bare --memory-target is MiB; 256 and 256M are one target."""
    a = mounts("mt/", "--memory-target", "256", "--metrics-listen", "127.0.0.1:0",
               endpoint=proxy.endpoint)
    b = mounts("mt/", "--memory-target", "256M", "--metrics-listen", "127.0.0.1:0",
               endpoint=proxy.endpoint)
    la = total(metrics(a), "s3flash_pool_limit_bytes", client="read")
    assert la == total(metrics(b), "s3flash_pool_limit_bytes", client="read")
    assert 64 * MIB < la < 256 * MIB, la


@pytest.mark.parametrize("how", ["flag", "source"])
def test_prefix(mounts, s3, bucket, cli_path, rgw, tmp_path, how):
    s3.put_object(Bucket=bucket, Key=f"pfx-{how}/inside", Body=b"in")
    s3.put_object(Bucket=bucket, Key=f"pfx-{how}-outside", Body=b"out")
    d = tmp_path / "m"
    src, opts = (bucket, ["--prefix", f"pfx-{how}/"]) if how == "flag" else \
        (f"{bucket}/pfx-{how}/", [])
    m = Mount(cli_path, rgw.endpoint, rgw.access_key, rgw.secret_key, src, d, opts,
              region=rgw.region, log_path=str(tmp_path / "m.log")).start()
    try:
        assert os.listdir(d) == ["inside"]
        assert (d / "inside").read_bytes() == b"in"
    finally:
        m.stop()


class FstabMount(Mount):
    def argv(self):  # BUCKET DIR -o OPTIONS, as fstab's mount helper calls it
        return [self.cli, "--endpoint-url", self.endpoint, "--force-path-style", "mount",
                "--foreground", self.source, self.dir, "-o", ",".join(self.options)]


def test_fstab_style(cli_path, rgw, bucket, s3, tmp_path):
    """-o OPTIONS (mount-s3's fstab style): the flags without dashes, a comma escaped in a
    value, mount(8)'s and systemd's own options dropped, ro for --read-only."""
    s3.put_object(Bucket=bucket, Key="fs,tab/f", Body=b"fstab")
    opts = ["allow-delete", "prefix=fs\\,tab/", "metadata-ttl=indefinite", "_netdev",
            "nofail", "x-systemd.automount", "rw"]
    m = FstabMount(cli_path, rgw.endpoint, rgw.access_key, rgw.secret_key, bucket,
                   tmp_path / "m", opts, region=rgw.region,
                   log_path=str(tmp_path / "m.log")).start()
    try:
        assert os.listdir(m.dir) == ["f"]
        os.unlink(Path(m.dir) / "f")  # allow-delete
    finally:
        m.stop()
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix="fs,tab/")
    s3.put_object(Bucket=bucket, Key="fs,tab/g", Body=b"g")
    r = FstabMount(cli_path, rgw.endpoint, rgw.access_key, rgw.secret_key,
                   f"{bucket}/fs,tab/", tmp_path / "r", ["ro"], region=rgw.region,
                   log_path=str(tmp_path / "r.log")).start()
    try:
        with pytest.raises(OSError) as e:
            os.unlink(Path(r.dir) / "g")
        assert e.value.errno == 30  # EROFS: --read-only
    finally:
        r.stop()


def test_bucket_type_directory(mounts, proxy, s3, bucket):
    """--bucket-type directory gives a bucket of any name the directory bucket's
    behaviour: with --incremental-upload, `>>` appends (PutObject at the object's end,
    x-amz-write-offset-bytes) where a general-purpose bucket refuses (EPERM)."""
    s3.put_object(Bucket=bucket, Key="bt/f", Body=b"12345")
    m = mounts("bt/", "--bucket-type", "directory", "--incremental-upload",
               endpoint=proxy.endpoint)
    try:
        with open(Path(m.dir) / "f", "ab") as f:
            f.write(b"678")
    except OSError:
        pass  # the RGW may refuse appends: what was sent is the point
    puts = by_operation(proxy).get("PutObject", [])
    assert any(h.get("x-amz-write-offset-bytes") == "5" for h in puts), puts
    g = mounts("bt/", "--bucket-type", "general-purpose", endpoint=proxy.endpoint)
    with pytest.raises(PermissionError):
        open(Path(g.dir) / "f", "ab").close()


@pytest.fixture
def aws_endpoint(tmp_path):
    hosts = ["accel.s3-accelerate.amazonaws.com", "accel.s3.dualstack.us-east-1.amazonaws.com"]
    with aws_host.serve(tmp_path, hosts) as srv:
        yield srv


class AwsMount(Mount):
    def argv(self):  # no custom endpoint, no path style: the rules' AWS host
        return [self.cli, "mount", "--foreground", *self.options, self.source, self.dir]


@pytest.mark.parametrize("flag,host", [
    ("--transfer-acceleration", "accel.s3-accelerate.amazonaws.com"),
    ("--dual-stack", "accel.s3.dualstack.us-east-1.amazonaws.com"),
])
def test_aws_endpoint_variants_and_ca_bundle(cli_path, aws_endpoint, tmp_path, flag, host):
    """The flag picks AWS's host (Host header and TLS name); --ca-bundle is the only trust
    of the test server's certificate (without it the mount fails: TLS)."""
    port, cert, handler = aws_endpoint
    env = {"S3FLASH_TEST_CONNECT_TO": f"127.0.0.1:{port}"}
    m = AwsMount(cli_path, None, "AKIDFLAGS", "flags-secret", "accel", tmp_path / "mnt",
                 [flag, "--ca-bundle", str(cert)], env=env,
                 log_path=str(tmp_path / "m.log")).start()
    try:
        assert os.listdir(m.dir) == ["a.bin"]
        assert (Path(m.dir) / "a.bin").read_bytes() == aws_host.PAYLOAD
    finally:
        m.stop()
    assert handler.seen and all(h["host"] == host for _, _, h, _ in handler.seen), \
        [h["host"] for _, _, h, _ in handler.seen]
    d = tmp_path / "untrusted"
    d.mkdir()
    p = subprocess.run(AwsMount(cli_path, None, "AKIDFLAGS", "flags-secret", "accel", d,
                                [flag]).argv(),
                       env={**Mount(cli_path, None, "AKIDFLAGS", "s", "accel", d).env(), **env},
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and not is_mounted(str(d)), (p.returncode, p.stderr)


def test_bind_loopback(mounts, proxy):
    """--bind lo: every connection through lo, where the proxy on 127.0.0.1 answers."""
    m = mounts("bind/", "--bind", "lo", endpoint=proxy.endpoint)
    write(m, "f", b"bound\n")
    assert (Path(m.dir) / "f").read_bytes() == b"bound\n"
    assert proxy.stats()["requests_total"] >= 2


def test_bind_elsewhere(cli_path, rgw, proxy, bucket, tmp_path):
    """--bind eth0: 127.0.0.1 is not reachable through it; the mount fails at its start-up
    LIST (exit 1, nothing mounted) and the proxy saw nothing."""
    if not os.path.exists("/sys/class/net/eth0"):
        pytest.skip("no eth0 here")
    d = tmp_path / "m"
    d.mkdir()
    m = Mount(cli_path, proxy.endpoint, rgw.access_key, rgw.secret_key, f"{bucket}/b/", d,
              ["--bind", "eth0", "--aws-max-attempts", "1"], region=rgw.region)
    p = subprocess.run(m.argv(), env=m.env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "cannot list" in p.stderr, p.stderr
    assert not is_mounted(str(d))
    assert proxy.stats()["requests_total"] == 0


# ---- the file system ------------------------------------------------------------------------

def test_metadata_ttl_values(mounts, s3, bucket, tmp_path):
    """minimal (and the default) sees an object replaced behind the mount within about a
    second; indefinite keeps what it saw; --cache without --metadata-ttl keeps it 60 s
    (Mountpoint's default with a data cache)."""
    s3.put_object(Bucket=bucket, Key="ttl/f", Body=b"12345")
    minimal = mounts("ttl/", "--metadata-ttl", "minimal")
    default = mounts("ttl/")
    forever = mounts("ttl/", "--metadata-ttl", "indefinite")
    cached = mounts("ttl/", "--cache", str(tmp_path / "c"))
    for m in (minimal, default, forever, cached):
        assert os.stat(Path(m.dir) / "f").st_size == 5
    s3.put_object(Bucket=bucket, Key="ttl/f", Body=b"1234567890")
    for m in (minimal, default):
        poll(lambda: os.stat(Path(m.dir) / "f").st_size == 10, "the new size", timeout=20)
    assert os.stat(Path(forever.dir) / "f").st_size == 5
    assert os.stat(Path(cached.dir) / "f").st_size == 5


def test_negative_ttl_follows_metadata_ttl(mounts, s3, bucket):
    """No --negative-metadata-ttl: 'no such file' is kept as long as --metadata-ttl
    (Mountpoint's default). An object made behind the mounts is seen at once with
    --negative-metadata-ttl 0, after a second with 1, and still not then where only
    --metadata-ttl 3600 is given."""
    long_ = mounts("neg/", "--metadata-ttl", "3600")
    zero = mounts("neg/", "--metadata-ttl", "3600", "--negative-metadata-ttl", "0")
    one = mounts("neg/", "--metadata-ttl", "3600", "--negative-metadata-ttl", "1")
    for m in (long_, zero, one):
        assert not os.path.exists(Path(m.dir) / "f")
    s3.put_object(Bucket=bucket, Key="neg/f", Body=b"new")
    assert os.path.exists(Path(zero.dir) / "f")
    poll(lambda: os.path.exists(Path(one.dir) / "f"), "the 1 s negative entry expired")
    assert not os.path.exists(Path(long_.dir) / "f")


def cache_blocks(root):
    return [p for p in Path(root).glob("v1/*/*/*") if not p.name.startswith(".")]


def test_cache_block_size_and_max_cache_size_in_mib(mounts, s3, bucket, tmp_path):
    """--cache-block-size in KiB: a 1 MiB object is 16 blocks of 64 KiB; --max-cache-size
    in MiB: 1 holds about a MiB of them (never more), where 1 byte would hold none."""
    s3.put_object(Bucket=bucket, Key="cache/f", Body=os.urandom(4 * MIB))
    cache = tmp_path / "cache"
    m = mounts("cache/", "--cache", str(cache), "--cache-block-size", "64",
               "--max-cache-size", "1")
    assert len((Path(m.dir) / "f").read_bytes()) == 4 * MIB

    def held():
        blocks = cache_blocks(cache)
        size = sum(p.stat().st_size for p in blocks)
        assert size <= MIB + 16 * 4096, size  # the block files' headers beside the data
        assert all(p.stat().st_size <= 64 * 1024 + 4096 for p in blocks)
        return size >= MIB // 2
    poll(held, "half a MiB of 64 KiB blocks in the cache")


def test_max_cache_size_zero_turns_the_cache_off(mounts, s3, bucket, tmp_path):
    s3.put_object(Bucket=bucket, Key="nocache/f", Body=b"x" * 1000)
    cache = tmp_path / "cache"
    m = mounts("nocache/", "--cache", str(cache), "--max-cache-size", "0")
    assert (Path(m.dir) / "f").read_bytes() == b"x" * 1000
    assert not cache.exists()  # a cache would have made it when the mount started


def test_auto_unmount(mounts):
    """SIGKILL: with --auto-unmount the mount point is unmounted (FUSE's auto_unmount);
    without, it stays (ENOTCONN) until someone unmounts it."""
    plain = mounts("au/")
    auto = mounts("au/", "--auto-unmount")
    for m in (plain, auto):
        m.proc.send_signal(signal.SIGKILL)
        m.proc.wait(30)
    poll(lambda: not is_mounted(auto.dir), "the mount point unmounted", timeout=20)
    assert is_mounted(plain.dir)
    force_unmount(plain.dir)


def test_auto_unmount_in_the_background(cli_path, rgw, bucket, tmp_path):
    """Without --foreground the command returns once the mount is up, with --auto-unmount
    too (fusermount3, which stays beside the daemon for it, holds nothing of the start-up
    pipe); SIGKILL of the daemon then unmounts."""
    d = tmp_path / "m"
    d.mkdir()
    m = Mount(cli_path, rgw.endpoint, rgw.access_key, rgw.secret_key, f"{bucket}/aubg/", d,
              ["--auto-unmount"], region=rgw.region)
    argv = [a for a in m.argv() if a != "--foreground"]
    try:
        p = subprocess.run(argv, env=m.env(), capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert is_mounted(str(d))
        daemon = [pid for pid in os.listdir("/proc") if pid.isdigit() and
                  _cmdline(pid)[:1] == [str(cli_path)] and str(d) in _cmdline(pid)]
        assert len(daemon) == 1, daemon
        os.kill(int(daemon[0]), signal.SIGKILL)
        poll(lambda: not is_mounted(str(d)), "the mount point unmounted", timeout=20)
    finally:
        force_unmount(str(d))


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def run_as_nobody(path):
    """os.listdir(path) as uid/gid 65534: 'ok', or the errno's name."""
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        "python3", "-c",
                        "import errno, os, sys\n"
                        "try:\n os.listdir(sys.argv[1]); print('ok')\n"
                        "except OSError as e:\n print(errno.errorcode[e.errno])",
                        path], capture_output=True, text=True, timeout=30)
    return p.stdout.strip() or p.stderr


@pytest.mark.parametrize("flag,nobody", [
    (None, "EACCES"), ("--allow-root", "EACCES"), ("--allow-other", "ok")])
def test_allow_root_and_other(cli_path, rgw, bucket, s3, flag, nobody):
    """The mount's owner is root here: --allow-root lets the owner and root in (root is
    both), another user stays out; --allow-other lets everyone in. The directory is
    world-traversable so that only FUSE decides."""
    s3.put_object(Bucket=bucket, Key="ar/f", Body=b"f")
    base = tempfile.mkdtemp(prefix="s3f-allow-")
    os.chmod(base, 0o755)
    opts = [flag] if flag else []
    m = Mount(cli_path, rgw.endpoint, rgw.access_key, rgw.secret_key, f"{bucket}/ar/",
              os.path.join(base, "m"), opts, region=rgw.region).start()
    try:
        os.chmod(base, 0o755)
        assert os.listdir(m.dir) == ["f"]  # root
        assert run_as_nobody(m.dir) == nobody
        with open("/proc/self/mountinfo") as f:
            line = [ln for ln in f if f" {m.dir} " in ln][-1]
        assert ("allow_other" in line) == (flag is not None), line
    finally:
        m.stop()
        shutil.rmtree(base, ignore_errors=True)


LOG_NAME = re.compile(r"^mountpoint-s3-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ\.[A-Za-z0-9]{6}\.log$")


@pytest.mark.parametrize("spelling", ["--log-directory", "-l"])
def test_log_directory(mounts, tmp_path, spelling):
    """A file per mount, named as Mountpoint names it, in a directory created 0750, the
    file 0640 (whatever the umask); the mount's start is logged (INFO, Mountpoint's
    default level)."""
    logs = tmp_path / "logs" / "sub"
    a = mounts("ld/", spelling, str(logs))
    b = mounts("ld/", spelling, str(logs))
    names = sorted(os.listdir(logs))
    assert len(names) == 2 and all(LOG_NAME.match(n) for n in names), names
    assert stat.S_IMODE(os.stat(logs).st_mode) == 0o750
    for n in names:
        assert stat.S_IMODE(os.stat(logs / n).st_mode) == 0o640
        poll(lambda: b"INFO mounted s3://" in (logs / n).read_bytes(), "the mount logged")
    del a, b


@pytest.mark.parametrize("flags,present,absent", [
    ([], [rb"INFO mounted s3://"], [rb" DEBUG ", rb"<redacted>", rb"metrics: "]),
    (["--debug"], [rb" DEBUG -> ListObjectsV2 GET "], [rb"<redacted>"]),
    (["-d"], [rb" DEBUG -> ListObjectsV2 GET "], [rb"<redacted>"]),
    (["--debug-crt"], [rb" TRACE    authorization: <redacted>"], []),
    (["--log-metrics"], [rb" metrics: "], [rb" DEBUG "]),
])
def test_log_levels(mounts, tmp_path, flags, present, absent):
    logs = tmp_path / "logs"
    m = mounts("lv/", "--log-directory", str(logs), *flags)
    assert os.listdir(m.dir) == []
    (log,) = list(logs.iterdir())
    for pat in present:
        poll(lambda: re.search(pat, log.read_bytes()), f"{pat!r} in the log", timeout=30)
    m.stop()
    text = log.read_bytes()
    for pat in absent:
        assert not re.search(pat, text), (pat, text[-2000:])


def test_no_log(mounts, proxy, s3, bucket, tmp_path):
    """--no-log: a failed read, which logs a WARN line otherwise, logs nothing."""
    s3.put_object(Bucket=bucket, Key="nolog/f", Body=b"x" * 100)
    quiet = mounts("nolog/", "--no-log", "--aws-max-attempts", "1", endpoint=proxy.endpoint)
    loud = mounts("nolog/", "--aws-max-attempts", "1", endpoint=proxy.endpoint)
    proxy.set_faults([s3_error("InternalError", 500, {"method": "GET",
                                                     "path": f"^/{bucket}/nolog/f$"})])
    for m in (quiet, loud):
        with pytest.raises(OSError):
            (Path(m.dir) / "f").read_bytes()
    poll(lambda: b"WARN" in open(loud.log_path, "rb").read(), "the WARN line")
    quiet.stop()
    assert open(quiet.log_path, "rb").read() == b""
