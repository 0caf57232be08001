"""s3flash sync, mv and --exclude/--include against RGW, through the fault proxy where the
requests must be counted or failed: each of aws s3 sync's rules (missing, size, newer
modification time, --size-only, --exact-timestamps), --delete after the copies, --dryrun
changing nothing, a second sync copying nothing (no PUT, GET of an object or copy at all),
mv in every direction with the source removed only after its copy succeeded, filter order
on cp, rm and sync, and partial failures (exit 1, the rest done)."""

import os
import time
import uuid
from datetime import timezone
from urllib.parse import urlparse

import pytest

from faults import faultproxy_factory, s3_error  # noqa: F401  (fixture)
from helpers import list_keys, read_tree

OLD = 1_000_000_000  # a local mtime long before any object's LastModified (2001)


@pytest.fixture
def proxy(rgw, faultproxy_factory):  # noqa: F811
    u = urlparse(rgw.endpoint)
    return faultproxy_factory(u.hostname, u.port)


def via(cli, proxy, *args, **kw):
    """Run the CLI through the fault proxy (fast retries)."""
    env = cli.env(S3FLASH_RETRY_BASE_MS="20")
    return cli.run("--endpoint-url", proxy.endpoint, "--force-path-style", *args,
                   endpoint=False, env=env, **kw)


def reqs(proxy, method, path_part=""):
    return sum(n for k, n in proxy.stats()["requests"].items()
               if k.startswith(method + " ") and path_part in k)


def data_requests(proxy, bucket, prefix):
    """Requests that move or change objects under s3://bucket/prefix (anything but the
    listings, which are GET /bucket?list-type=2 — path /bucket)."""
    return {k: n for k, n in proxy.stats()["requests"].items()
            if k.split(" ", 1)[1].startswith(f"/{bucket}/{prefix}")}


def make_tree(root, files, mtime=None):
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        if mtime is not None:
            os.utime(p, (mtime, mtime))


def objects(s3, bucket, prefix):
    """{relative key: bytes} under prefix/."""
    out = {}
    for k in list_keys(s3, bucket, prefix + "/"):
        out[k[len(prefix) + 1:]] = s3.get_object(Bucket=bucket, Key=k)["Body"].read()
    return out


def last_modified(s3, bucket, key):
    return int(s3.head_object(Bucket=bucket, Key=key)["LastModified"]
               .astimezone(timezone.utc).timestamp())


def uid():
    return uuid.uuid4().hex[:8]


FILES = {"a.txt": b"alpha", "b.bin": b"bravo-bin", "sub/c.txt": b"charlie", "sub/d/e.bin": b"e"}


# ---- local -> S3 ----------------------------------------------------------------------------

def test_upload_missing_then_second_sync_copies_nothing(cli, s3, bucket, proxy, tmp_path):
    pre = f"up-{uid()}"
    make_tree(tmp_path / "src", FILES)
    r = via(cli, proxy, "sync", tmp_path / "src", f"s3://{bucket}/{pre}")
    assert r.rc == 0, r
    assert objects(s3, bucket, pre) == FILES
    assert sorted(r.text.splitlines()) == sorted(
        f"upload: {tmp_path / 'src' / k} to s3://{bucket}/{pre}/{k}" for k in FILES)
    proxy.reset()
    r = via(cli, proxy, "sync", tmp_path / "src", f"s3://{bucket}/{pre}")
    assert r.rc == 0 and r.text == "", r
    assert data_requests(proxy, bucket, pre) == {}  # listings only
    assert reqs(proxy, "GET") >= 1


def test_upload_size_and_newer_mtime(cli, s3, bucket, proxy, tmp_path):
    pre = f"upm-{uid()}"
    src = tmp_path / "src"
    make_tree(src, FILES)
    cli.ok("sync", src, f"s3://{bucket}/{pre}")
    # a.txt: other size, old mtime -> copied (size decides)
    make_tree(src, {"a.txt": b"alpha-longer"}, mtime=OLD)
    # b.bin: same size, newer than the object -> copied
    future = time.time() + 3600
    make_tree(src, {"b.bin": b"BRAVO-BIN"}, mtime=future)
    # sub/c.txt: same size, older than the object -> not copied (aws's rule)
    make_tree(src, {"sub/c.txt": b"CHARLIE"}, mtime=OLD)
    proxy.reset()
    r = via(cli, proxy, "sync", src, f"s3://{bucket}/{pre}")
    assert r.rc == 0, r
    assert sorted(r.text.splitlines()) == [
        f"upload: {src / 'a.txt'} to s3://{bucket}/{pre}/a.txt",
        f"upload: {src / 'b.bin'} to s3://{bucket}/{pre}/b.bin"]
    assert reqs(proxy, "PUT") == 2
    got = objects(s3, bucket, pre)
    assert got["a.txt"] == b"alpha-longer" and got["b.bin"] == b"BRAVO-BIN"
    assert got["sub/c.txt"] == b"charlie"


def test_upload_size_only(cli, s3, bucket, proxy, tmp_path):
    pre = f"upso-{uid()}"
    src = tmp_path / "src"
    make_tree(src, {"same.bin": b"12345", "grown.bin": b"123"})
    cli.ok("sync", src, f"s3://{bucket}/{pre}")
    future = time.time() + 3600
    make_tree(src, {"same.bin": b"54321", "grown.bin": b"1234"}, mtime=future)
    proxy.reset()
    r = via(cli, proxy, "sync", "--size-only", src, f"s3://{bucket}/{pre}")
    assert r.rc == 0, r
    assert r.text == f"upload: {src / 'grown.bin'} to s3://{bucket}/{pre}/grown.bin\n"
    assert reqs(proxy, "PUT") == 1
    assert objects(s3, bucket, pre) == {"same.bin": b"12345", "grown.bin": b"1234"}


def test_upload_delete_after_copies_spares_excluded(cli, s3, bucket, tmp_path):
    pre = f"updel-{uid()}"
    src = tmp_path / "src"
    make_tree(src, {"keep.txt": b"k"})
    for k in ("gone.txt", "sub/gone.bin", "logs/excluded.log"):
        s3.put_object(Bucket=bucket, Key=f"{pre}/{k}", Body=b"old")
    r = cli.run("sync", "--delete", "--exclude", "logs/*", src, f"s3://{bucket}/{pre}")
    assert r.rc == 0, r
    lines = r.text.splitlines()
    assert lines[0] == f"upload: {src / 'keep.txt'} to s3://{bucket}/{pre}/keep.txt"
    assert sorted(lines[1:]) == [f"delete: s3://{bucket}/{pre}/gone.txt",
                                 f"delete: s3://{bucket}/{pre}/sub/gone.bin"]
    assert sorted(list_keys(s3, bucket, pre + "/")) == [f"{pre}/keep.txt",
                                                       f"{pre}/logs/excluded.log"]


def test_dryrun_changes_nothing(cli, s3, bucket, proxy, tmp_path):
    pre = f"dry-{uid()}"
    src = tmp_path / "src"
    make_tree(src, {"new.txt": b"n"})
    s3.put_object(Bucket=bucket, Key=f"{pre}/extra.txt", Body=b"x")
    r = via(cli, proxy, "sync", "--dryrun", "--delete", src, f"s3://{bucket}/{pre}")
    assert r.rc == 0, r
    assert r.text.splitlines() == [
        f"(dryrun) upload: {src / 'new.txt'} to s3://{bucket}/{pre}/new.txt",
        f"(dryrun) delete: s3://{bucket}/{pre}/extra.txt"]
    assert data_requests(proxy, bucket, pre) == {}
    assert reqs(proxy, "POST") == 0 and reqs(proxy, "DELETE") == 0
    assert list_keys(s3, bucket, pre + "/") == [f"{pre}/extra.txt"]
    # downloads too: nothing written
    dst = tmp_path / "dst"
    r = via(cli, proxy, "sync", "--dryrun", f"s3://{bucket}/{pre}", dst)
    assert r.rc == 0, r
    assert r.text == f"(dryrun) download: s3://{bucket}/{pre}/extra.txt to {dst}/extra.txt\n"
    assert not dst.exists()


# ---- S3 -> local ----------------------------------------------------------------------------

def test_download_sets_mtime_and_second_sync_copies_nothing(cli, s3, bucket, proxy, tmp_path):
    pre = f"dl-{uid()}"
    for k, v in FILES.items():
        s3.put_object(Bucket=bucket, Key=f"{pre}/{k}", Body=v)
    dst = tmp_path / "dst"
    r = via(cli, proxy, "sync", f"s3://{bucket}/{pre}", dst)
    assert r.rc == 0, r
    assert read_tree(dst) == FILES
    for k in FILES:
        assert int((dst / k).stat().st_mtime) == last_modified(s3, bucket, f"{pre}/{k}"), k
    proxy.reset()
    r = via(cli, proxy, "sync", f"s3://{bucket}/{pre}", dst)
    assert r.rc == 0 and r.text == "", r
    assert data_requests(proxy, bucket, pre) == {}
    # --exact-timestamps agrees: the times are equal
    r = via(cli, proxy, "sync", "--exact-timestamps", f"s3://{bucket}/{pre}", dst)
    assert r.rc == 0 and r.text == "", r
    assert data_requests(proxy, bucket, pre) == {}


def test_cp_download_takes_last_modified(cli, s3, bucket, tmp_path):
    """cp too (as aws s3 cp): the file's mtime and atime are the object's LastModified."""
    key = f"cpm-{uid()}/obj"
    s3.put_object(Bucket=bucket, Key=key, Body=b"x" * 100)
    out = tmp_path / "obj"
    cli.ok("cp", f"s3://{bucket}/{key}", out)
    st = out.stat()
    assert st.st_mtime == st.st_atime == last_modified(s3, bucket, key)


def test_download_rules(cli, s3, bucket, proxy, tmp_path):
    pre = f"dlr-{uid()}"
    objs = {"size.txt": b"object", "newer.txt": b"object", "older.txt": b"object"}
    for k, v in objs.items():
        s3.put_object(Bucket=bucket, Key=f"{pre}/{k}", Body=v)
    dst = tmp_path / "dst"
    make_tree(dst, {"size.txt": b"local, longer"}, mtime=time.time() - 60)
    make_tree(dst, {"newer.txt": b"LOCAL!"}, mtime=time.time() + 3600)  # local newer
    make_tree(dst, {"older.txt": b"LOCAL!"}, mtime=OLD)  # local older, same size
    r = via(cli, proxy, "sync", f"s3://{bucket}/{pre}", dst)
    assert r.rc == 0, r
    assert sorted(r.text.splitlines()) == [
        f"download: s3://{bucket}/{pre}/newer.txt to {dst}/newer.txt",
        f"download: s3://{bucket}/{pre}/size.txt to {dst}/size.txt"]
    assert read_tree(dst) == {"size.txt": b"object", "newer.txt": b"object",
                              "older.txt": b"LOCAL!"}
    # --exact-timestamps: the older same-sized file differs in time -> downloaded
    proxy.reset()
    r = via(cli, proxy, "sync", "--exact-timestamps", f"s3://{bucket}/{pre}", dst)
    assert r.rc == 0, r
    assert r.text == f"download: s3://{bucket}/{pre}/older.txt to {dst}/older.txt\n"
    assert reqs(proxy, "GET", f"/{pre}/older.txt") >= 1
    assert reqs(proxy, "GET", f"/{pre}/newer.txt") == 0
    assert (dst / "older.txt").read_bytes() == b"object"


def test_download_size_only_and_delete(cli, s3, bucket, tmp_path):
    pre = f"dlso-{uid()}"
    s3.put_object(Bucket=bucket, Key=f"{pre}/same.txt", Body=b"object")
    dst = tmp_path / "dst"
    make_tree(dst, {"same.txt": b"LOCAL!", "extra/x.txt": b"x", "keep.log": b"l"},
              mtime=time.time() + 3600)
    r = cli.run("sync", "--size-only", "--delete", "--exclude", "*.log",
                f"s3://{bucket}/{pre}", dst)
    assert r.rc == 0, r
    assert r.text == f"delete: {dst}/extra/x.txt\n"
    assert read_tree(dst) == {"same.txt": b"LOCAL!", "keep.log": b"l"}


# ---- S3 -> S3 ---------------------------------------------------------------------------------

def test_s3_to_s3_rules(cli, s3, bucket, proxy):
    src, dst = f"s2s-{uid()}", f"s2d-{uid()}"
    for k in ("a", "b", "c"):
        s3.put_object(Bucket=bucket, Key=f"{src}/{k}", Body=b"v1" + k.encode())
    r = via(cli, proxy, "sync", f"s3://{bucket}/{src}", f"s3://{bucket}/{dst}")
    assert r.rc == 0, r
    assert objects(s3, bucket, dst) == {"a": b"v1a", "b": b"v1b", "c": b"v1c"}
    # server side: no object body came through this host
    assert reqs(proxy, "GET", f"/{src}/") == 0
    proxy.reset()
    r = via(cli, proxy, "sync", f"s3://{bucket}/{src}", f"s3://{bucket}/{dst}")
    assert r.rc == 0 and r.text == "", r
    assert data_requests(proxy, bucket, dst) == {}
    # b: a newer source of the same size; c: another size. LastModified has whole seconds:
    # wait until the new versions are a second newer than the copies.
    time.sleep(1.1)
    s3.put_object(Bucket=bucket, Key=f"{src}/b", Body=b"v2b")
    s3.put_object(Bucket=bucket, Key=f"{src}/c", Body=b"v2cc")
    proxy.reset()
    r = via(cli, proxy, "sync", "--delete", f"s3://{bucket}/{src}", f"s3://{bucket}/{dst}")
    assert r.rc == 0, r
    assert sorted(r.text.splitlines()) == [
        f"copy: s3://{bucket}/{src}/b to s3://{bucket}/{dst}/b",
        f"copy: s3://{bucket}/{src}/c to s3://{bucket}/{dst}/c"]
    assert objects(s3, bucket, dst) == {"a": b"v1a", "b": b"v2b", "c": b"v2cc"}


def test_sync_partial_failure_exit_1_rest_done(cli, s3, bucket, proxy, tmp_path):
    pre = f"spf-{uid()}"
    src = tmp_path / "src"
    files = {f"f{i:02d}": bytes([i]) * 10 for i in range(12)}
    make_tree(src, files)
    proxy.set_faults([s3_error("AccessDenied", 403, {"method": "PUT", "path": f"/{pre}/f05$"})])
    r = via(cli, proxy, "sync", src, f"s3://{bucket}/{pre}")
    assert r.rc == 1, r
    assert len(r.err_lines) == 1 and "AccessDenied" in r.err and f"{pre}/f05" in r.err, r
    want = dict(files)
    del want["f05"]
    assert objects(s3, bucket, pre) == want
    # the next sync copies just the missing one
    proxy.reset()
    r = via(cli, proxy, "sync", src, f"s3://{bucket}/{pre}")
    assert r.rc == 0, r
    assert r.text == f"upload: {src / 'f05'} to s3://{bucket}/{pre}/f05\n"
    assert reqs(proxy, "PUT") == 1


def test_sync_usage_errors(cli, bucket, tmp_path):
    assert cli.run("sync", tmp_path, tmp_path).rc == 2
    assert cli.run("sync", "-", f"s3://{bucket}/x").rc == 2
    r = cli.run("sync", f"s3://{bucket}/same", f"s3://{bucket}/same/")
    assert r.rc == 2 and "itself" in r.err, r
    r = cli.run("sync", tmp_path / "missing", f"s3://{bucket}/x")
    assert r.rc == 1 and "missing" in r.err, r


# ---- mv -------------------------------------------------------------------------------------

def test_mv_local_to_s3_and_back(cli, s3, bucket, tmp_path):
    pre = f"mv-{uid()}"
    f = tmp_path / "file.bin"
    f.write_bytes(b"payload")
    r = cli.run("mv", f, f"s3://{bucket}/{pre}/")
    assert r.rc == 0, r
    assert r.text == f"move: {f} to s3://{bucket}/{pre}/file.bin\n"
    assert not f.exists()
    assert s3.get_object(Bucket=bucket, Key=f"{pre}/file.bin")["Body"].read() == b"payload"
    back = tmp_path / "back.bin"
    r = cli.run("mv", f"s3://{bucket}/{pre}/file.bin", back)
    assert r.rc == 0, r
    assert r.text == f"move: s3://{bucket}/{pre}/file.bin to {back}\n"
    assert back.read_bytes() == b"payload"
    assert list_keys(s3, bucket, pre + "/") == []


def test_mv_s3_to_s3_server_side(cli, s3, bucket, proxy):
    pre = f"mvs-{uid()}"
    s3.put_object(Bucket=bucket, Key=f"{pre}/src", Body=b"x" * 1000)
    r = via(cli, proxy, "mv", f"s3://{bucket}/{pre}/src", f"s3://{bucket}/{pre}/dst")
    assert r.rc == 0, r
    assert list_keys(s3, bucket, pre + "/") == [f"{pre}/dst"]
    assert reqs(proxy, "GET", f"/{pre}/src") == 0  # no body through this host
    assert reqs(proxy, "PUT", f"/{pre}/dst") == 1  # one CopyObject
    assert reqs(proxy, "DELETE", f"/{pre}/src") == 1
    # onto itself: refused, the object stays
    r = cli.run("mv", f"s3://{bucket}/{pre}/dst", f"s3://{bucket}/{pre}/dst")
    assert r.rc == 2 and "itself" in r.err, r
    assert list_keys(s3, bucket, pre + "/") == [f"{pre}/dst"]


def test_mv_failed_copy_keeps_source(cli, s3, bucket, proxy, tmp_path):
    pre = f"mvf-{uid()}"
    s3.put_object(Bucket=bucket, Key=f"{pre}/obj", Body=b"keep me")
    proxy.set_faults([s3_error("AccessDenied", 403, {"method": "PUT"})])
    # S3 -> S3: the copy is refused
    r = via(cli, proxy, "mv", f"s3://{bucket}/{pre}/obj", f"s3://{bucket}/{pre}/new")
    assert r.rc == 1 and "AccessDenied" in r.err, r
    # local -> S3: the upload is refused
    f = tmp_path / "f"
    f.write_bytes(b"local")
    r = via(cli, proxy, "mv", f, f"s3://{bucket}/{pre}/up")
    assert r.rc == 1 and "AccessDenied" in r.err, r
    assert f.read_bytes() == b"local"
    # S3 -> local: the download fails
    proxy.set_faults([s3_error("AccessDenied", 403, {"method": "GET", "path": f"/{pre}/obj$"})])
    out = tmp_path / "out"
    r = via(cli, proxy, "mv", f"s3://{bucket}/{pre}/obj", out)
    assert r.rc == 1 and "AccessDenied" in r.err, r
    assert not out.exists()
    assert reqs(proxy, "DELETE") == 0
    assert list_keys(s3, bucket, pre + "/") == [f"{pre}/obj"]


def test_mv_failed_delete_is_reported(cli, s3, bucket, proxy):
    """The copy succeeded, the source's DeleteObject is refused: exit 1, the error names the
    source and what S3 said, and both objects are there (nothing lost)."""
    pre = f"mvd-{uid()}"
    s3.put_object(Bucket=bucket, Key=f"{pre}/src", Body=b"data")
    proxy.set_faults([s3_error("AccessDenied", 403, {"method": "DELETE"})])
    r = via(cli, proxy, "mv", f"s3://{bucket}/{pre}/src", f"s3://{bucket}/{pre}/dst")
    assert r.rc == 1, r
    assert "AccessDenied" in r.err and f"s3://{bucket}/{pre}/src" in r.err, r
    assert r.text == ""
    assert sorted(list_keys(s3, bucket, pre + "/")) == [f"{pre}/dst", f"{pre}/src"]


def test_mv_recursive_partial_failure(cli, s3, bucket, proxy, tmp_path):
    pre = f"mvr-{uid()}"
    src = tmp_path / "src"
    files = {f"d/f{i:02d}": bytes([65 + i]) * 5 for i in range(10)}
    files["skip.tmp"] = b"tmp"
    make_tree(src, files)
    proxy.set_faults([s3_error("AccessDenied", 403, {"method": "PUT", "path": "/d/f03$"})])
    r = via(cli, proxy, "mv", "-r", "--exclude", "*.tmp", src, f"s3://{bucket}/{pre}")
    assert r.rc == 1, r
    assert len(r.err_lines) == 1 and f"{pre}/d/f03" in r.err and "AccessDenied" in r.err, r
    # moved: all but the failed one and the excluded one, which are still here
    assert read_tree(src) == {"d/f03": files["d/f03"], "skip.tmp": b"tmp"}
    moved = {k: v for k, v in files.items() if k not in ("d/f03", "skip.tmp")}
    assert objects(s3, bucket, pre) == moved
    # S3 -> S3 then S3 -> local, recursively
    proxy.reset()
    r = via(cli, proxy, "mv", "-r", f"s3://{bucket}/{pre}", f"s3://{bucket}/{pre}-2")
    assert r.rc == 0, r
    assert list_keys(s3, bucket, pre + "/") == []
    assert reqs(proxy, "GET", f"/{pre}/d/") == 0
    dst = tmp_path / "dst"
    r = cli.run("mv", "-r", f"s3://{bucket}/{pre}-2", dst)
    assert r.rc == 0, r
    assert read_tree(dst) == moved
    assert list_keys(s3, bucket, pre + "-2/") == []


# ---- --exclude / --include --------------------------------------------------------------------

TREE = {"a.txt": b"1", "b.bin": b"2", "logs/x.txt": b"3", "logs/y.bin": b"4", "data/z.txt": b"5"}


@pytest.mark.parametrize("filters,want", [
    ([], sorted(TREE)),
    (["--exclude", "*.txt"], ["b.bin", "logs/y.bin"]),  # '*' crosses '/'
    (["--exclude", "*", "--include", "*.txt"], ["a.txt", "data/z.txt", "logs/x.txt"]),
    (["--include", "*.txt", "--exclude", "*"], []),  # the last match wins
    (["--exclude", "logs/*", "--include", "logs/x*"], ["a.txt", "b.bin", "data/z.txt",
                                                       "logs/x.txt"]),
    (["--exclude", "*", "--include", "logs/*", "--exclude", "*.bin"], ["logs/x.txt"]),
    (["--exclude", "?.*"], ["data/z.txt", "logs/x.txt", "logs/y.bin"]),
    (["--exclude", "[ab].*"], ["data/z.txt", "logs/x.txt", "logs/y.bin"]),
], ids=["none", "ext", "exclude-include", "include-exclude", "dir-then-file", "three",
        "question", "class"])
def test_filters_on_cp_upload_and_download(cli, s3, bucket, tmp_path, filters, want):
    pre = f"flt-{uid()}"
    make_tree(tmp_path / "src", TREE)
    r = cli.run("cp", "-r", *filters, tmp_path / "src", f"s3://{bucket}/{pre}")
    assert r.rc == 0, r
    assert sorted(objects(s3, bucket, pre)) == want
    # the same rules on a download select the same relative paths
    for k, v in TREE.items():
        s3.put_object(Bucket=bucket, Key=f"{pre}-all/{k}", Body=v)
    r = cli.run("cp", "-r", *filters, f"s3://{bucket}/{pre}-all", tmp_path / "dst")
    assert r.rc == 0, r
    assert sorted(read_tree(tmp_path / "dst")) == want


def test_filters_on_rm(cli, s3, bucket):
    pre = f"rmf-{uid()}"
    for k, v in TREE.items():
        s3.put_object(Bucket=bucket, Key=f"{pre}/{k}", Body=v)
    r = cli.run("rm", "-r", "--dryrun", "--exclude", "*", "--include", "logs/*",
                f"s3://{bucket}/{pre}")
    assert r.rc == 0, r
    assert sorted(r.text.splitlines()) == [f"(dryrun) delete: s3://{bucket}/{pre}/logs/x.txt",
                                           f"(dryrun) delete: s3://{bucket}/{pre}/logs/y.bin"]
    assert len(list_keys(s3, bucket, pre + "/")) == len(TREE)
    r = cli.run("rm", "-r", "--exclude", "*", "--include", "logs/*", "--exclude", "*.bin",
                f"s3://{bucket}/{pre}")
    assert r.rc == 0, r
    assert r.text == f"delete: s3://{bucket}/{pre}/logs/x.txt\n"
    assert sorted(objects(s3, bucket, pre)) == ["a.txt", "b.bin", "data/z.txt", "logs/y.bin"]


def test_filters_on_sync(cli, s3, bucket, tmp_path):
    pre = f"sf-{uid()}"
    make_tree(tmp_path / "src", TREE)
    r = cli.run("sync", "--exclude", "*", "--include", "*.bin", tmp_path / "src",
                f"s3://{bucket}/{pre}")
    assert r.rc == 0, r
    assert sorted(objects(s3, bucket, pre)) == ["b.bin", "logs/y.bin"]


def test_filters_need_recursive(cli, bucket, tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"x")
    for cmd in (["cp", f, f"s3://{bucket}/k"], ["mv", f, f"s3://{bucket}/k"],
                ["rm", f"s3://{bucket}/k"]):
        r = cli.run(*cmd, "--exclude", "*")
        assert r.rc == 2 and "--recursive" in r.err, r
    assert f.exists()
