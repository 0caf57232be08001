"""The transfer engine against real servers (tests/integration/xfer_test.c).

- Ceph RGW (the `s3env` fixture): round trips around every part boundary, the writer, iov
  and file transfers, the reader, aborts, failures, the memory bound, fairness, progress.
- moto (started here for the module): RGW ignores checksums, moto keeps them, so the
  server's own whole-object CRC32C / CRC32 / CRC64NVME of a multipart upload is compared
  with the engine's combined value, and a stored checksum that does not match the bytes
  must fail a verified download.
- `test_large` (several GiB) runs only with S3FLASH_TEST_LARGE=1 (size in GiB:
  S3FLASH_TEST_LARGE_GIB, default 2).
"""
import os
import subprocess

import pytest

from conftest import build_dir
from helpers import small_tmpfs
from s3servers import moto_session


RGW_CASES = ["test_roundtrip_sizes", "test_writer", "test_iov_upload", "test_file",
             "test_reader", "test_abort", "test_errors", "test_changed_during_download",
             "test_memory_bound", "test_pool_loans", "test_pool_starved", "test_fairness", "test_progress", "test_copy",
             "test_upload_part_copy"]


def run_case(env, *args, timeout=600):
    exe = os.path.join(build_dir(), "tests", "xfer_test")
    env = dict(env)
    env.setdefault("S3FLASH_RETRY_BASE_MS", "50")
    r = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=timeout)
    print(r.stdout)
    print(r.stderr)
    assert r.returncode == 0, f"{args[0]} failed:\n{r.stdout}\n{r.stderr}"
    assert " 0 failed" in r.stdout
    return r


@pytest.mark.parametrize("case", RGW_CASES)
def test_engine_rgw(case, s3env):
    run_case(s3env, case)


def test_copy_source_replaced_rgw(s3env, proxy):
    """The source of a multipart copy replaced after its first part (from the progress
    callback): the copy fails S3F_ERR_PRECONDITION_FAILED, the upload is aborted and nothing
    appears. RGW copies the parts without checking x-amz-copy-source-if-match, so what
    refuses is the engine's HEAD of the source with If-Match after the last part: the proxy
    holds part 2 for 5 s, so that the replacement lands before that HEAD whatever the load
    (on loaded cores the copy could finish first: a CI run failed that way)."""
    proxy.set_faults([{"match": {"method": "PUT", "path": "/cpchg/dst$",
                                 "query": "partNumber=2"}, "action": "delay", "seconds": 5}])
    run_case(dict(s3env, S3FLASH_TEST_ENDPOINT=proxy.endpoint), "test_copy_source_replaced")
    stats = proxy.stats()
    assert stats["faults"] == {"0:delay": 1}, stats["faults"]
    log = [(e["method"], e["path"].rsplit("/", 2)[-2:], e["query"]) for e in stats["log"]]
    replaced = log.index(("PUT", ["cpchg", "src"], ""))
    # after the replacement: the source's HEAD, then the abort; no CompleteMultipartUpload
    assert ("HEAD", ["cpchg", "src"], "") in log[replaced + 1:], log
    assert any(m == "DELETE" and p == ["cpchg", "dst"] and "uploadId=" in q
               for m, p, q in log[replaced + 1:]), log
    assert not any(m == "POST" and p == ["cpchg", "dst"] and "uploadId=" in q
                   for m, p, q in log), log


def test_file_write_error_rgw(s3env, tmp_path):
    """A download into a full file system (a 6 MiB tmpfs) fails cleanly."""
    with small_tmpfs(tmp_path / "full", "6m") as d:
        run_case(dict(s3env, S3FLASH_TEST_FULL_DIR=str(d)), "test_file_write_error")


@pytest.mark.skipif(os.environ.get("S3FLASH_TEST_LARGE") != "1",
                    reason="several GiB: set S3FLASH_TEST_LARGE=1")
def test_large_rgw(s3env):
    r = run_case(s3env, "test_large", timeout=3600)
    assert "GiB: upload" in r.stdout


@pytest.fixture(scope="module")
def moto_env():
    for env in moto_session():
        full = dict(os.environ)
        full.update({
            "S3FLASH_TEST_ENDPOINT": env["S3FLASH_MOTO_ENDPOINT"],
            "S3FLASH_TEST_ACCESS_KEY": env["S3FLASH_MOTO_ACCESS_KEY"],
            "S3FLASH_TEST_SECRET_KEY": env["S3FLASH_MOTO_SECRET_KEY"],
            "S3FLASH_TEST_REGION": env.get("S3FLASH_MOTO_REGION", "us-east-1"),
        })
        yield full


def test_checksums_moto(moto_env):
    r = run_case(moto_env, "test_checksums")
    # every algorithm, single part and multipart, agreed with the server
    assert r.stdout.count("the server's") == 6


def test_checksum_mismatch_moto(moto_env):
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config
    s3 = boto3.client("s3", endpoint_url=moto_env["S3FLASH_TEST_ENDPOINT"],
                      aws_access_key_id="testing", aws_secret_access_key="testing",
                      region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"},
                                    request_checksum_calculation="when_required"))

    def bogus_checksum(request, **kw):
        # moto keeps the checksum it is given without checking it
        request.headers["x-amz-sdk-checksum-algorithm"] = "CRC32C"
        request.headers["x-amz-checksum-crc32c"] = "AAAAAA=="

    s3.meta.events.register("before-sign.s3.PutObject", bogus_checksum)
    s3.create_bucket(Bucket="xfer-mismatch")
    s3.put_object(Bucket="xfer-mismatch", Key="bogus", Body=os.urandom(300_000))
    head = s3.head_object(Bucket="xfer-mismatch", Key="bogus", ChecksumMode="ENABLED")
    assert head.get("ChecksumCRC32C") == "AAAAAA=="
    run_case(moto_env, "test_verify_mismatch", "xfer-mismatch", "bogus")
