"""s3f_download_alloc: a whole object of unknown size in one GET without a Range header and
no HEAD (tests/integration/xfer_test.c, cases test_download_alloc*).

- against Ceph RGW: empty, 1-byte, small, 64 KiB, multi-MiB and multipart objects, byte
  for byte, with malloc and with the caller's allocator (called once, with the exact size),
  one data request per call; an allocator that refuses; NoSuchKey named with its request
  id; If-Match of another ETag.
- through tests/servers/faultproxy.py in front of RGW: RGW keeps no checksums, so two keys
  are answered by the proxy itself with an x-amz-checksum-crc32 header that matches the
  body ("ck/good") or not ("ck/bad": S3F_ERR_CHECKSUM with the response's request id, OK
  with verification off); the first GET of a real 10 MiB object is reset mid-body, and
  the call resumes it (two GETs on the wire, the bytes intact, one allocation). The proxy's
  request counts show that no HEAD was sent.
"""
import base64
import zlib
from urllib.parse import urlparse

from faults import start_faultproxy
from test_xfer import run_case


def crc32_b64(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_download_alloc_rgw(s3env):
    r = run_case(s3env, "test_download_alloc")
    assert r.stdout.count("one GET each") == 6


def test_download_alloc_proxy(s3env, rgw):
    u = urlparse(rgw.endpoint)
    body = b"hello world"
    with start_faultproxy(u.hostname, u.port) as proxy:
        def answer(key, checksum, rid):
            return {"match": {"method": "GET", "path": f"/{key}$"}, "action": "respond",
                    "status": 200, "body": body.decode(),
                    "headers": {"x-amz-checksum-crc32": checksum, "ETag": '"e-' + rid + '"',
                                "x-amz-request-id": rid}}
        proxy.set_faults([
            answer("ck/good", crc32_b64(body), "tx-ck-good"),
            answer("ck/bad", crc32_b64(b"hello worle"), "tx-ck-bad"),
            {"match": {"method": "GET", "path": "/ck/big$", "nth": 1},
             "action": "reset_response_body_at", "at": 1_000_000},
        ])
        run_case(dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint),
                 "test_download_alloc_proxy")
        stats = proxy.stats()
    reqs = stats["requests"]
    by = lambda method, suffix: sum(n for k, n in reqs.items()  # noqa: E731
                                    if k.startswith(method + " ") and k.endswith(suffix))
    assert by("GET", "/ck/good") == 1
    assert by("GET", "/ck/bad") == 2
    assert by("GET", "/ck/big") == 2, reqs      # the reset one and its resumption
    assert by("HEAD", "") == 0, reqs
    assert stats["faults"].get("2:reset_response_body_at") == 1, stats["faults"]
