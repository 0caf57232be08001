"""s3flash cp against RGW: uploads, downloads, server-side copies, --recursive."""

import os

import pytest

from helpers import list_keys, read_tree, sha256, sha256_file

MiB = 1 << 20


@pytest.mark.parametrize("size", [0, 1, MiB, 64 * MiB], ids=["0B", "1B", "1MiB", "64MiB"])
def test_round_trip_bit_exact(cli, s3, bucket, tmp_path, size):
    data = os.urandom(size)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    key = f"rt/obj-{size}"
    r = cli.ok("cp", src, f"s3://{bucket}/{key}")
    assert r.text == f"upload: {src} to s3://{bucket}/{key}\n"
    # an independent reader sees the same bytes
    head = s3.head_object(Bucket=bucket, Key=key)
    assert head["ContentLength"] == size
    assert sha256(s3.get_object(Bucket=bucket, Key=key)["Body"].read()) == sha256(data)
    dst = tmp_path / "dst.bin"
    r = cli.ok("cp", f"s3://{bucket}/{key}", dst)
    assert r.text == f"download: s3://{bucket}/{key} to {dst}\n"
    assert dst.stat().st_size == size
    assert sha256_file(dst) == sha256(data)
    # no temporary file left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst.bin", "src.bin"]


def test_download_overwrites_and_keeps_mode(cli, s3, bucket, tmp_path):
    s3.put_object(Bucket=bucket, Key="mode/obj", Body=b"new contents")
    dst = tmp_path / "obj"
    dst.write_bytes(b"old contents that are longer than the new ones")
    cli.ok("cp", f"s3://{bucket}/mode/obj", dst)
    assert dst.read_bytes() == b"new contents"
    umask = os.umask(0)
    os.umask(umask)
    assert dst.stat().st_mode & 0o777 == 0o666 & ~umask


def test_destination_directory_gets_basename(cli, s3, bucket, tmp_path):
    f = tmp_path / "named.txt"
    f.write_bytes(b"basename test")
    # DST ending in '/': the key gets the file's name
    cli.ok("cp", f, f"s3://{bucket}/dir/")
    assert s3.get_object(Bucket=bucket, Key="dir/named.txt")["Body"].read() == b"basename test"
    # bucket only: the key is the file's name
    cli.ok("cp", f, f"s3://{bucket}")
    assert s3.get_object(Bucket=bucket, Key="named.txt")["Body"].read() == b"basename test"
    # download into an existing directory
    out = tmp_path / "out"
    out.mkdir()
    cli.ok("cp", f"s3://{bucket}/dir/named.txt", out)
    assert (out / "named.txt").read_bytes() == b"basename test"
    # download to a path ending in '/' that does not exist yet
    cli.ok("cp", f"s3://{bucket}/dir/named.txt", f"{tmp_path}/new/")
    assert (tmp_path / "new" / "named.txt").read_bytes() == b"basename test"


def test_stdin_and_stdout(cli, s3, bucket):
    data = os.urandom(300_000)
    cli.ok("cp", "-", f"s3://{bucket}/stdin/obj", input=data)
    assert s3.get_object(Bucket=bucket, Key="stdin/obj")["Body"].read() == data
    r = cli.ok("cp", f"s3://{bucket}/stdin/obj", "-")
    assert r.out == data


def test_content_type(cli, s3, bucket, tmp_path):
    f = tmp_path / "page.html"
    f.write_text("<p>hi</p>")
    cli.ok("cp", "--content-type", "text/html; charset=utf-8", f, f"s3://{bucket}/ct/page.html")
    assert s3.head_object(Bucket=bucket, Key="ct/page.html")["ContentType"] == \
        "text/html; charset=utf-8"
    cli.ok("cp", f, f"s3://{bucket}/ct/default")
    assert s3.head_object(Bucket=bucket, Key="ct/default")["ContentType"] == \
        "application/octet-stream"


def test_quiet(cli, bucket, tmp_path):
    f = tmp_path / "q"
    f.write_bytes(b"q")
    r = cli.ok("--quiet", "cp", f, f"s3://{bucket}/quiet/q")
    assert r.out == b"" and r.err == ""
    r = cli.ok("cp", f"s3://{bucket}/quiet/q", tmp_path / "q2", "-q")
    assert r.out == b"" and r.err == ""
    assert (tmp_path / "q2").read_bytes() == b"q"


def test_s3_to_s3_copy(cli, s3, bucket):
    data = os.urandom(2 * MiB + 17)
    s3.put_object(Bucket=bucket, Key="copy/src.bin", Body=data)
    r = cli.ok("cp", f"s3://{bucket}/copy/src.bin", f"s3://{bucket}/copy/dst.bin")
    assert r.text == f"copy: s3://{bucket}/copy/src.bin to s3://{bucket}/copy/dst.bin\n"
    assert sha256(s3.get_object(Bucket=bucket, Key="copy/dst.bin")["Body"].read()) == \
        sha256(data)
    # into a "directory"
    cli.ok("cp", f"s3://{bucket}/copy/src.bin", f"s3://{bucket}/copy/sub/")
    assert sha256(s3.get_object(Bucket=bucket, Key="copy/sub/src.bin")["Body"].read()) == \
        sha256(data)
    # the source is unchanged
    assert sha256(s3.get_object(Bucket=bucket, Key="copy/src.bin")["Body"].read()) == \
        sha256(data)


def _make_tree(root):
    files = {
        "top.txt": b"top level\n",
        "empty": b"",
        "sub/a.bin": os.urandom(1000),
        "sub/deeper/b.bin": os.urandom(70_000),
        "sub/deeper/deepest/c.txt": b"c" * 10,
        "other/d.bin": os.urandom(5),
    }
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (root / "empty-dir").mkdir()
    return files


def test_recursive_upload_and_download(cli, s3, bucket, tmp_path):
    src = tmp_path / "tree"
    files = _make_tree(src)
    r = cli.ok("cp", "--recursive", src, f"s3://{bucket}/tree")
    assert r.text.count("upload: ") == len(files)
    assert sorted(list_keys(s3, bucket, "tree/")) == sorted(f"tree/{k}" for k in files)
    for rel, data in files.items():
        assert s3.get_object(Bucket=bucket, Key=f"tree/{rel}")["Body"].read() == data, rel

    # prefix -> local dir (that does not exist yet), with and without the trailing '/'
    for i, uri in enumerate([f"s3://{bucket}/tree", f"s3://{bucket}/tree/"]):
        dst = tmp_path / f"back{i}"
        r = cli.ok("cp", "-r", uri, dst)
        assert r.text.count("download: ") == len(files)
        assert read_tree(dst) == files
        leftovers = [p for p in dst.rglob("*") if "s3flash-tmp" in p.name]
        assert leftovers == []


def test_recursive_prefix_is_a_directory(cli, s3, bucket, tmp_path):
    # "pre" means "pre/": a sibling key "prefixed" is not part of it
    s3.put_object(Bucket=bucket, Key="pre/x", Body=b"x")
    s3.put_object(Bucket=bucket, Key="prefixed", Body=b"y")
    dst = tmp_path / "d"
    cli.ok("cp", "-r", f"s3://{bucket}/pre", dst)
    assert read_tree(dst) == {"x": b"x"}


def test_recursive_s3_to_s3(cli, s3, bucket):
    for k in ("rs/a", "rs/b/c", "rs/b/d/e"):
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    r = cli.ok("cp", "--recursive", f"s3://{bucket}/rs/", f"s3://{bucket}/rs-copy/")
    assert r.text.count("copy: ") == 3
    assert sorted(list_keys(s3, bucket, "rs-copy/")) == ["rs-copy/a", "rs-copy/b/c",
                                                        "rs-copy/b/d/e"]
    assert s3.get_object(Bucket=bucket, Key="rs-copy/b/d/e")["Body"].read() == b"rs/b/d/e"


def test_recursive_download_skips_unsafe_keys(cli, s3, bucket, tmp_path):
    s3.put_object(Bucket=bucket, Key="unsafe/ok", Body=b"ok")
    s3.put_object(Bucket=bucket, Key="unsafe/../escape", Body=b"bad")
    dst = tmp_path / "inside" / "d"
    r = cli.run("cp", "-r", f"s3://{bucket}/unsafe/", dst)
    assert r.rc == 1, r
    assert "not a safe local path" in r.err
    assert (dst / "ok").read_bytes() == b"ok"
    assert not (tmp_path / "inside" / "escape").exists()


def test_upload_directory_needs_recursive(cli, bucket, tmp_path):
    r = cli.run("cp", tmp_path, f"s3://{bucket}/nope")
    assert r.rc == 1, r
    assert "is a directory" in r.err and "--recursive" in r.err


def test_upload_missing_file(cli, s3, bucket, tmp_path):
    r = cli.run("cp", tmp_path / "missing", f"s3://{bucket}/missing")
    assert r.rc == 1, r
    assert "No such file or directory" in r.err
    assert str(tmp_path / "missing") in r.err
    assert list_keys(s3, bucket, "missing") == []


def test_cp_large_file_goes_multipart(cli, s3, bucket, tmp_path):
    """A file over one part is a parallel multipart upload: the ETag has the part count."""
    import os
    data = os.urandom(20 * 1024 * 1024 + 3)
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    cli.ok("cp", src, f"s3://{bucket}/mp/big.bin")
    head = s3.head_object(Bucket=bucket, Key="mp/big.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].endswith('-3"'), head["ETag"]
    out = tmp_path / "back.bin"
    cli.ok("cp", f"s3://{bucket}/mp/big.bin", out)
    assert out.read_bytes() == data
    uploads = s3.list_multipart_uploads(Bucket=bucket, Prefix="mp/").get("Uploads", [])
    assert uploads == []
