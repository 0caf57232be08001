"""s3f_client_free is bounded in time when the server is away: the janitor's last try of a
pending AbortMultipartUpload is one request with a short deadline, not the client's retries
with their stall time-outs.

The upload fails (part 2 answers 500 on every attempt), its AbortMultipartUpload gets two
503s (so it goes to the janitor), and from then on the server takes every abort and never
answers (the fault proxy holds it). The client's stall timeout is the library's 30 s and
it has 2 attempts: before, s3f_client_free then waited about 60 s; now it returns within a
few seconds, and its WARN names the upload left, which ListMultipartUploads shows."""
import re

from faults import s3_error
from test_engine_faults import (count, part_puts, src,  # noqa: F401
                                upload, uploads)


def test_client_free_bounded_when_server_hangs(rgw, proxy, s3, bucket, src):
    key = "janitor-deadline/buffer"
    delete = {"method": "DELETE", "path": re.escape(key) + "$"}
    proxy.set_faults([
        s3_error("InternalError", 500, dict(part_puts(key), query="partNumber=2&")),
        s3_error("ServiceUnavailable", 503, dict(delete, max_count=2)),
        {"match": delete, "action": "delay", "seconds": 30},
    ])
    r = upload(rgw, proxy, "buffer", bucket, key, src[0], timeout=150, AWS_MAX_ATTEMPTS=2)
    assert r.rc == 1, r
    assert r.status == "S3F_ERR_SERVER", r
    free_s = float(r.kv["client_free_s"])
    print(f"s3f_client_free took {free_s:.2f} s")
    assert free_s < 8, r
    m = re.search(r"AbortMultipartUpload (\S+) failed \(S3F_ERR_TIMEOUT", r.err)
    assert m, r
    assert count(proxy, "DELETE", key) == 3  # 503, 503, then the last try, held
    assert uploads(s3, bucket, key) == [(key, m.group(1))]
    s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=m.group(1))
