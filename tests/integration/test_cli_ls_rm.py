"""s3flash ls and rm against RGW, including pagination and DeleteObjects batching."""

import re
from datetime import timezone

import pytest

from helpers import list_keys, put_many

PRE_RE = re.compile(r"^ {27}PRE (.+)$")
OBJ_RE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) +(\d+) (.+)$")
MANY = 1100  # > 1000: two ListObjectsV2 pages and two DeleteObjects batches


def parse_ls(text):
    pres, objs = [], {}
    for line in text.splitlines():
        m = PRE_RE.match(line)
        if m:
            pres.append(m.group(1))
            continue
        m = OBJ_RE.match(line)
        assert m, f"unexpected ls line {line!r}"
        objs[m.group(3)] = (m.group(1), int(m.group(2)))
    return pres, objs


@pytest.fixture(scope="module")
def tree(s3, bucket):
    objs = {"ls/a.txt": b"aaa", "ls/b.txt": b"bbbbbbbbbb", "ls/dir1/x": b"x",
            "ls/dir2/y/z": b"zz", "ls/dir2/w": b"", "lsx": b"sibling"}
    for k, v in objs.items():
        s3.put_object(Bucket=bucket, Key=k, Body=v)
    return objs


@pytest.fixture(scope="module")
def many(s3, bucket):
    keys = [f"many/{i:05d}" for i in range(MANY)]
    put_many(s3, bucket, keys)
    s3.put_object(Bucket=bucket, Key="many-sibling", Body=b"keep me")
    return keys


def test_ls_delimited(cli, s3, bucket, tree):
    r = cli.ok("ls", f"s3://{bucket}/ls/")
    pres, objs = parse_ls(r.text)
    assert pres == ["dir1/", "dir2/"]
    assert sorted(objs) == ["a.txt", "b.txt"]
    assert objs["a.txt"][1] == 3 and objs["b.txt"][1] == 10
    # the time shown is the object's LastModified, in UTC
    lm = s3.head_object(Bucket=bucket, Key="ls/b.txt")["LastModified"]
    assert objs["b.txt"][0] == lm.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    # exact aws-style layout: 19 chars of time, a 10-wide size column
    line = [ln for ln in r.text.splitlines() if ln.endswith(" a.txt")][0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d          3 a.txt", line), line


def test_ls_partial_name_and_bucket_root(cli, bucket, tree):
    # "s3://b/ls" (no slash): the prefix "ls" groups as "ls/", and the object "lsx" shows
    pres, objs = parse_ls(cli.ok("ls", f"s3://{bucket}/ls").text)
    assert "ls/" in pres
    assert "lsx" in objs
    # a deeper partial name is shown relative to its "directory"
    pres, objs = parse_ls(cli.ok("ls", f"s3://{bucket}/ls/dir").text)
    assert pres == ["dir1/", "dir2/"] and objs == {}
    pres, objs = parse_ls(cli.ok("ls", f"s3://{bucket}/ls/dir2/").text)
    assert pres == ["y/"] and list(objs) == ["w"] and objs["w"][1] == 0


def test_ls_recursive(cli, bucket, tree):
    pres, objs = parse_ls(cli.ok("ls", "--recursive", f"s3://{bucket}/ls/").text)
    assert pres == []
    expected = {k: len(v) for k, v in tree.items() if k.startswith("ls/")}
    assert {k: v[1] for k, v in objs.items()} == expected


@pytest.mark.parametrize("argv", [[], ["s3://"]])
def test_ls_buckets(cli, bucket, argv):
    """Without a bucket, ls lists the buckets (ListBuckets), as `aws s3 ls` does."""
    lines = cli.ok("ls", *argv).text.splitlines()
    names = [ln.split(" ", 2)[2] for ln in lines]
    assert bucket in names, lines
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+", ln) for ln in lines), lines


def test_ls_empty_prefix(cli, bucket, tree):
    r = cli.ok("ls", f"s3://{bucket}/nothing-here/")
    assert r.out == b""


def test_ls_paginates(cli, bucket, many):
    r = cli.ok("ls", "--recursive", f"s3://{bucket}/many/")
    pres, objs = parse_ls(r.text)
    assert sorted(objs) == many  # every key once, across two pages
    assert len(r.text.splitlines()) == MANY
    # without --recursive the same keys, relative to the prefix
    pres, objs = parse_ls(cli.ok("ls", f"s3://{bucket}/many/").text)
    assert pres == [] and sorted(objs) == [k[len("many/"):] for k in many]
    # small pages: many continuation tokens
    _, objs = parse_ls(cli.ok("ls", "-r", "--page-size", "250", f"s3://{bucket}/many/").text)
    assert sorted(objs) == many


def test_rm_one(cli, s3, bucket):
    s3.put_object(Bucket=bucket, Key="rm/one", Body=b"1")
    s3.put_object(Bucket=bucket, Key="rm/two", Body=b"2")
    r = cli.ok("rm", f"s3://{bucket}/rm/one")
    assert r.text == f"delete: s3://{bucket}/rm/one\n"
    assert list_keys(s3, bucket, "rm/") == ["rm/two"]
    r = cli.ok("rm", "--quiet", f"s3://{bucket}/rm/two")
    assert r.out == b""
    assert list_keys(s3, bucket, "rm/") == []


def test_rm_recursive_batches(cli, s3, bucket, many):
    r = cli.ok("rm", "--recursive", f"s3://{bucket}/many")
    lines = r.text.splitlines()
    assert sorted(lines) == sorted(f"delete: s3://{bucket}/{k}" for k in many)
    assert list_keys(s3, bucket, "many/") == []
    # "many" meant "many/": the sibling survives
    assert list_keys(s3, bucket, "many") == ["many-sibling"]


def test_rm_recursive_quiet_small(cli, s3, bucket):
    put_many(s3, bucket, [f"rq/{i}" for i in range(5)])
    r = cli.ok("rm", "-r", "-q", f"s3://{bucket}/rq/")
    assert r.out == b""
    assert list_keys(s3, bucket, "rq/") == []
