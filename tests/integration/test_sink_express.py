"""The sink's --express mode (bench/sink_express.c): an S3 Express One Zone directory bucket's
protocol, driven with python's http.client (no client library), so that the emulation the
library's Express tests run against is itself pinned down.

The rules it follows, from AWS's documentation of directory buckets:
- API CreateSession: "GET /?session" on the bucket, signed with the caller's credentials;
  the result's Credentials (SessionToken, SecretAccessKey, AccessKeyId, Expiration) live
  5 minutes; x-amz-create-session-mode ReadOnly | ReadWrite.
- "Authorizing Zonal endpoint API operations with CreateSession": requests carry the token in
  x-amz-s3session-token and are signed (SigV4) with the session's key for the service
  s3express.
- ListObjectsV2 on a directory bucket: results are not in lexicographic order; only "/" is a
  delimiter, and with it a prefix must end in "/".
- PutObject x-amz-write-offset-bytes: appends; the offset must equal the object's size
  (InvalidWriteOffset otherwise), 0 creates it.
- RenameObject: PUT /Key?renameObject with x-amz-rename-source; If-None-Match: * refuses an
  existing destination (412).
"""
import re
import time

import pytest

from test_sink import Sink, req, xml_field

BUCKET = "data--use1-az4--x-s3"


@pytest.fixture(scope="module")
def xsink(tmp_path_factory):
    s = Sink(tmp_path_factory.mktemp("xsink"), "--threads", "2", "--express",
             "--store", "64M", "--session-seconds", "300")
    yield s
    assert s.stop() == 0, s.stderr
    assert "express:" in s.stderr


def auth(akid, service="s3express", signed="host;x-amz-content-sha256;x-amz-date"):
    return (f"AWS4-HMAC-SHA256 Credential={akid}/20260101/us-east-1/{service}/aws4_request, "
            f"SignedHeaders={signed}, Signature={'0' * 64}")


def create_session(sink, bucket=BUCKET, mode=None):
    h = {"Authorization": auth("AKIDCALLER")}
    if mode:
        h["x-amz-create-session-mode"] = mode
    r, body = req(sink, "GET", f"/{bucket}?session", headers=h)
    assert r.status == 200, body
    return {k: xml_field(body, k) for k in ("SessionToken", "SecretAccessKey", "AccessKeyId",
                                            "Expiration")}


def session_headers(s, **extra):
    h = {"x-amz-s3session-token": s["SessionToken"],
         "Authorization": auth(s["AccessKeyId"],
                               signed="host;x-amz-content-sha256;x-amz-date;"
                                      "x-amz-s3session-token")}
    h.update(extra)
    return h


def stats(sink):
    r, body = req(sink, "GET", "/?sink-stats")
    assert r.status == 200
    return {k: int(v) for k, v in (line.split() for line in body.decode().splitlines())}


def error_code(body):
    return xml_field(body, "Code")


def test_create_session_result(xsink):
    s = create_session(xsink)
    assert re.fullmatch(r"ASIASINK[A-Z2-7]{12}", s["AccessKeyId"])
    assert len(s["SessionToken"]) == 40 and len(s["SecretAccessKey"]) == 40
    exp = time.mktime(time.strptime(s["Expiration"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert 290 <= exp - time.time() <= 310


def test_create_session_needs_caller_signature_for_s3express(xsink):
    r, body = req(xsink, "GET", f"/{BUCKET}?session")
    assert r.status == 403 and error_code(body) == "AccessDenied"
    r, body = req(xsink, "GET", f"/{BUCKET}?session", headers={"Authorization": auth("K", "s3")})
    assert r.status == 403 and error_code(body) == "SignatureDoesNotMatch"


def test_data_requests_need_a_valid_session(xsink):
    s = create_session(xsink)
    r, body = req(xsink, "PUT", f"/{BUCKET}/a", b"x")
    assert r.status == 403 and error_code(body) == "AccessDenied"
    # the token must be signed, for the service s3express, with the session's key
    h = session_headers(s)
    h["Authorization"] = auth(s["AccessKeyId"])  # token not among SignedHeaders
    r, body = req(xsink, "PUT", f"/{BUCKET}/a", b"x", h)
    assert r.status == 403 and error_code(body) == "SignatureDoesNotMatch"
    h = session_headers(s)
    h["Authorization"] = h["Authorization"].replace("/s3express/", "/s3/")
    r, body = req(xsink, "PUT", f"/{BUCKET}/a", b"x", h)
    assert r.status == 403 and error_code(body) == "SignatureDoesNotMatch"
    h = session_headers(s)
    h["Authorization"] = h["Authorization"].replace(s["AccessKeyId"], "AKIDCALLER")
    r, body = req(xsink, "PUT", f"/{BUCKET}/a", b"x", h)
    assert r.status == 403 and error_code(body) == "InvalidAccessKeyId"
    r, body = req(xsink, "PUT", f"/{BUCKET}/a", b"x",
                  session_headers(s, **{"x-amz-security-token": "t"}))
    assert r.status == 403
    r, body = req(xsink, "PUT", f"/{BUCKET}/a", b"x",
                  session_headers({**s, "SessionToken": "z" * 40}))
    assert r.status == 403 and error_code(body) == "InvalidToken"
    # another bucket's session
    other = create_session(xsink, "other--use1-az4--x-s3")
    r, body = req(xsink, "PUT", f"/{BUCKET}/a", b"x", session_headers(other))
    assert r.status == 403 and error_code(body) == "AccessDenied"
    r, _ = req(xsink, "PUT", f"/{BUCKET}/a", b"x", session_headers(s))
    assert r.status == 200


def test_read_only_session_cannot_write(xsink):
    rw = create_session(xsink)
    req(xsink, "PUT", f"/{BUCKET}/ro", b"abc", session_headers(rw))
    ro = create_session(xsink, mode="ReadOnly")
    r, data = req(xsink, "GET", f"/{BUCKET}/ro", headers=session_headers(ro))
    assert r.status == 200 and data == b"abc"
    r, body = req(xsink, "PUT", f"/{BUCKET}/ro", b"x", session_headers(ro))
    assert r.status == 403 and error_code(body) == "AccessDenied"


def test_session_expires(tmp_path):
    s = Sink(tmp_path, "--express", "--session-seconds", "1")
    try:
        ses = create_session(s)
        r, _ = req(s, "PUT", f"/{BUCKET}/k", b"x", session_headers(ses))
        assert r.status == 200
        deadline = time.monotonic() + 5
        while True:  # bounded: the session lives one second
            r, body = req(s, "HEAD", f"/{BUCKET}/k", headers=session_headers(ses))
            if r.status != 200:
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        r, body = req(s, "GET", f"/{BUCKET}/k", headers=session_headers(ses))
        assert r.status == 403 and error_code(body) == "ExpiredToken"
        assert stats(s)["expired"] >= 1
    finally:
        assert s.stop() == 0


def test_revoked_sessions(xsink):
    s = create_session(xsink)
    # the object of its own: the test runs alone or in any order
    r, _ = req(xsink, "PUT", f"/{BUCKET}/a", b"revoked", session_headers(s))
    assert r.status == 200
    r, _ = req(xsink, "POST", "/?sink-revoke-sessions", b"")
    assert r.status == 200
    r, body = req(xsink, "GET", f"/{BUCKET}/a", headers=session_headers(s))
    assert r.status == 403 and error_code(body) == "InvalidToken"
    s2 = create_session(xsink)
    r, _ = req(xsink, "HEAD", f"/{BUCKET}/a", headers=session_headers(s2))
    assert r.status == 200


def list_all(sink, s, prefix="", delimiter=None, max_keys=None):
    keys, prefixes, pages, token = [], [], 0, None
    while True:
        q = f"list-type=2&prefix={prefix}"
        if delimiter:
            q += "&delimiter=%2F"
        if max_keys:
            q += f"&max-keys={max_keys}"
        if token:
            from urllib.parse import quote
            q += "&continuation-token=" + quote(token, safe="")
        r, body = req(sink, "GET", f"/{BUCKET}?{q}", headers=session_headers(s))
        assert r.status == 200, body
        doc = body.decode()
        keys += re.findall(r"<Key>([^<]*)</Key>", doc)
        prefixes += re.findall(r"<CommonPrefixes><Prefix>([^<]*)</Prefix>", doc)
        pages += 1
        if "<IsTruncated>true</IsTruncated>" not in doc:
            return keys, prefixes, pages
        token = xml_field(body, "NextContinuationToken")


def test_listing_is_unordered_complete_and_pages(xsink):
    s = create_session(xsink)
    names = [f"ds/shard-{i:04d}" for i in range(300)] + ["ds/sub/x", "ds/sub/y", "ds/z/1"]
    for k in names:
        r, _ = req(xsink, "PUT", f"/{BUCKET}/{k}", b"", session_headers(s))
        assert r.status == 200
    keys, _, pages = list_all(xsink, s, "ds/")
    assert sorted(keys) == sorted(names) and len(keys) == len(names)
    assert keys != sorted(keys)            # unordered, as a directory bucket lists
    keys, _, pages = list_all(xsink, s, "ds/", max_keys=7)
    assert sorted(keys) == sorted(names) and pages >= 300 // 7
    keys, prefixes, _ = list_all(xsink, s, "ds/", delimiter="/")
    assert len(keys) == 300 and sorted(prefixes) == ["ds/sub/", "ds/z/"]


def test_listing_delimiter_rules(xsink):
    s = create_session(xsink)
    r, body = req(xsink, "GET", f"/{BUCKET}?list-type=2&delimiter=-", headers=session_headers(s))
    assert r.status == 400 and error_code(body) == "InvalidArgument"
    r, body = req(xsink, "GET", f"/{BUCKET}?list-type=2&delimiter=%2F&prefix=ds",
                  headers=session_headers(s))
    assert r.status == 400 and error_code(body) == "InvalidArgument"


def test_append(xsink):
    s = create_session(xsink)
    h = session_headers(s, **{"x-amz-write-offset-bytes": "0"})
    r, _ = req(xsink, "PUT", f"/{BUCKET}/log", b"hello ", h)
    assert r.status == 200
    r, body = req(xsink, "PUT", f"/{BUCKET}/log", b"oops",
                  session_headers(s, **{"x-amz-write-offset-bytes": "3"}))
    assert r.status == 400 and error_code(body) == "InvalidWriteOffset"
    r, _ = req(xsink, "PUT", f"/{BUCKET}/log", b"world",
               session_headers(s, **{"x-amz-write-offset-bytes": "6"}))
    assert r.status == 200
    r, data = req(xsink, "GET", f"/{BUCKET}/log", headers=session_headers(s))
    assert data == b"hello world"
    r, body = req(xsink, "PUT", f"/{BUCKET}/nolog", b"x",
                  session_headers(s, **{"x-amz-write-offset-bytes": "5"}))
    assert r.status == 400


def test_rename_and_if_none_match(xsink):
    s = create_session(xsink)
    req(xsink, "PUT", f"/{BUCKET}/r/src", b"payload", session_headers(s))
    req(xsink, "PUT", f"/{BUCKET}/r/taken", b"other", session_headers(s))
    before = stats(xsink)
    r, body = req(xsink, "PUT", f"/{BUCKET}/r/taken?renameObject", b"",
                  session_headers(s, **{"x-amz-rename-source": f"/{BUCKET}/r/src",
                                        "If-None-Match": "*"}))
    assert r.status == 412
    r, body = req(xsink, "PUT", f"/{BUCKET}/r/dst?renameObject", b"",
                  session_headers(s, **{"x-amz-rename-source": f"/{BUCKET}/r/src"}))
    assert r.status == 200, body
    r, data = req(xsink, "GET", f"/{BUCKET}/r/dst", headers=session_headers(s))
    assert data == b"payload"
    r, _ = req(xsink, "HEAD", f"/{BUCKET}/r/src", headers=session_headers(s))
    assert r.status == 404
    r, body = req(xsink, "PUT", f"/{BUCKET}/r/dst2?renameObject", b"",
                  session_headers(s, **{"x-amz-rename-source": f"/{BUCKET}/r/src"}))
    assert r.status == 404
    after = stats(xsink)
    assert after["renames"] == before["renames"] + 1
    assert after["copies"] == before["copies"] and after["deletes"] == before["deletes"]
    # If-None-Match: * on PutObject
    r, _ = req(xsink, "PUT", f"/{BUCKET}/r/dst", b"new", session_headers(s, **{"If-None-Match": "*"}))
    assert r.status == 412
    r, _ = req(xsink, "PUT", f"/{BUCKET}/r/fresh", b"new", session_headers(s, **{"If-None-Match": "*"}))
    assert r.status == 200
