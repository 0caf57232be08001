"""Every response checked against what was asked (docs/TRANSFER.md, "What every response is
checked against"), against Ceph RGW through tests/servers/faultproxy.py.

RGW keeps no checksums, so nothing but these checks stands between a wrong answer and wrong
bytes. The proxy forwards each GET and rewrites the answer: a shorter but consistent 206
(`short_range`), a 206 for another range (`other_range`), a 200 with the whole object
(`whole_object`, the bytes outside the asked range replaced by filler, so that a client that
used them would write wrong bytes), or another ETag (`etag`: a gateway that ignores
If-Match). One engine call runs in tests/integration/xfer_fault_test.c for each path:
s3f_download_buffer, s3f_download_file, the reader, and s3f_download_alloc (its only GET has
no Range: the rewrite hits its resumption, after a reset of the first body).

The outcome is checked on the bytes (SHA-256 of what the call handed over) and on the
proxy's log (the Range of every GET: the rest of a short answer is asked again).
"""
import re

import pytest

from test_engine_faults import (  # noqa: F401  (fixtures)
    MIB, PART, SIZE, dl_object, drive, gets, sha, sha_file)

PATHS = ["buffer", "file", "reader", "alloc"]
OP = {"buffer": "download_buffer", "file": "download_file", "reader": "reader",
      "alloc": "download_alloc"}
RESET_AT = 1_000_000   # the alloc path's first (unranged) GET is cut here


def rules(how, key, action, **params):
    """The fault on the 2nd GET of `key` (for alloc: its resumption after a reset of the
    1st); with every=True on every GET from the 2nd on."""
    every = params.pop("every", False)
    first = []
    if how == "alloc":
        first = [{"match": dict(gets(key), nth=1), "action": "reset_response_body_at",
                  "at": RESET_AT}]
    m = dict(gets(key))
    if not every:
        m["nth"] = 2
    elif how != "alloc":
        m["every"] = True
    rule = dict({"match": m, "action": action}, **params)
    return first + [rule]


def run(rgw, proxy, how, bucket, key, tmp_path, **env):
    dst = tmp_path / "out" / "obj"
    dst.parent.mkdir()
    extra = (SIZE,) if how == "buffer" else ()
    r = drive(rgw, proxy, OP[how], bucket, key, dst, *extra, **env)
    return r, dst


def key_gets(proxy, key):
    return [e for e in proxy.stats()["log"]
            if e["method"] == "GET" and e["path"].endswith("/" + key)]


def range_start(e):
    m = re.match(r"bytes=(\d+)-", e["range"] or "")
    return int(m.group(1)) if m else 0


def check_ok(r, dst, data):
    assert r.rc == 0, r
    assert sha_file(dst) == sha(data)
    assert [p.name for p in dst.parent.iterdir()] == [dst.name]  # no temporary file left


def check_failed(r, dst, status):
    assert r.rc == 1, r
    assert r.status == status, r
    assert not dst.exists() and list(dst.parent.iterdir()) == []  # no bytes handed over


@pytest.mark.parametrize("how", PATHS)
def test_short_206_is_continued(rgw, proxy, bucket, dl_object, tmp_path, how):
    """One GET is answered with only its first 1000 bytes in a consistent 206: the rest is
    asked for at once (one more ranged GET, from where the short answer ended) and the bytes
    are exact. Before: S3F_OK with a hole (buffer, file), or a failed read (reader,
    alloc)."""
    key, data = dl_object
    proxy.set_faults(rules(how, key, "short_range", bytes=1000))
    r, dst = run(rgw, proxy, how, bucket, key, tmp_path)
    check_ok(r, dst, data)
    log = key_gets(proxy, key)
    short = [e for e in log if e["action"] == "short_range"]
    assert len(short) == 1, log
    want = range_start(short[0]) + 1000
    rest = [e for e in log if e["range"] and range_start(e) == want]
    assert len(rest) == 1, log  # the missing rest, asked again
    assert rest[0]["range"].endswith(short[0]["range"].split("-", 1)[1]), (short, rest)
    assert "asking for the rest" in r.err, r


def test_every_206_short_is_continued(rgw, proxy, bucket, dl_object, tmp_path):
    """Every ranged answer carries only half of what was asked: each part is continued
    until complete (about 23 GETs for a 5 MiB part), exact."""
    key, data = dl_object
    proxy.set_faults([{"match": gets(key), "action": "short_range", "fraction": 0.5}])
    r, dst = run(rgw, proxy, "buffer", bucket, key, tmp_path)
    check_ok(r, dst, data)
    n = len(key_gets(proxy, key))
    print(f"{n} GETs for 4 parts answered in halves")
    assert 4 * 20 <= n <= 4 * 24, n


@pytest.mark.parametrize("how", PATHS)
def test_other_range_once_is_retried(rgw, proxy, bucket, dl_object, tmp_path, how):
    """One GET is answered with a 206 for another range (its start 4096 bytes later): a
    server fault, the range is asked again, exact. Before: a failed download."""
    key, data = dl_object
    proxy.set_faults(rules(how, key, "other_range", shift=4096))
    r, dst = run(rgw, proxy, how, bucket, key, tmp_path)
    check_ok(r, dst, data)
    assert any("asked for bytes" in ln and "answered bytes" in ln for ln in r.retries()), r


@pytest.mark.parametrize("how", PATHS)
def test_other_range_always_fails(rgw, proxy, bucket, dl_object, tmp_path, how):
    """Every GET is answered with a 206 for another range: S3F_ERR_BAD_RESPONSE after the
    attempts, naming what was asked and what came, with the request id; no bytes handed
    over."""
    key, _ = dl_object
    proxy.set_faults(rules(how, key, "other_range", shift=4096, every=True))
    r, dst = run(rgw, proxy, how, bucket, key, tmp_path, AWS_MAX_ATTEMPTS=2)
    check_failed(r, dst, "S3F_ERR_BAD_RESPONSE")
    err = r.kv["error"]
    assert re.search(r"asked for bytes \d+-\d*, the server answered bytes \d+-\d+/%d" % SIZE,
                     err), err
    assert "request id" in err.lower() or "tx" in err, err


@pytest.mark.parametrize("how", PATHS)
def test_whole_object_200(rgw, proxy, bucket, dl_object, tmp_path, how):
    """One ranged GET is answered 200 with the whole object (as a server that ignores Range
    does; the bytes outside the range are filler here): the asked bytes are taken by their
    offset, exact."""
    key, data = dl_object
    proxy.set_faults(rules(how, key, "whole_object"))
    r, dst = run(rgw, proxy, how, bucket, key, tmp_path)
    check_ok(r, dst, data)
    assert proxy.stats()["faults_total"] == (2 if how == "alloc" else 1)


@pytest.mark.parametrize("how", PATHS)
def test_other_etag_fails(rgw, proxy, bucket, dl_object, tmp_path, how):
    """One GET sent with If-Match comes back with another ETag (a gateway that ignores
    If-Match: the bytes may be of another object): S3F_ERR_PRECONDITION_FAILED naming both
    ETags, no bytes handed over. Before: S3F_OK."""
    key, _ = dl_object
    proxy.set_faults(rules(how, key, "etag", value='"0123456789abcdef0123456789abcdef-4"'))
    r, dst = run(rgw, proxy, how, bucket, key, tmp_path)
    check_failed(r, dst, "S3F_ERR_PRECONDITION_FAILED")
    err = r.kv["error"]
    assert "0123456789abcdef0123456789abcdef-4" in err and "pinned" in err, err
    # not retried: the answer would be the same (alloc: the reset of its first GET only)
    assert len(r.retries()) == (1 if how == "alloc" else 0), r
    assert "PRECONDITION" not in "".join(r.retries()), r


def test_checksum_head_of_other_etag_fails(rgw, proxy, bucket, dl_object, tmp_path):
    """The download's checksum HEAD (sent with If-Match) comes back with another ETag: the
    download fails with S3F_ERR_PRECONDITION_FAILED rather than compare the bytes with
    another object's checksum. Before: S3F_OK."""
    key, _ = dl_object
    proxy.set_faults([{"match": {"method": "HEAD", "path": re.escape(key) + "$"},
                       "action": "etag", "value": '"feedfacefeedfacefeedfacefeedface-4"'}])
    r, dst = run(rgw, proxy, "buffer", bucket, key, tmp_path, FAULT_VERIFY=1)
    check_failed(r, dst, "S3F_ERR_PRECONDITION_FAILED")
    assert "feedface" in r.kv["error"], r
    assert proxy.stats()["faults_total"] == 1
