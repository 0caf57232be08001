"""The C library's S3 operations against the real server (tests/integration/ops_test.c)."""
import os
import subprocess

import pytest

from conftest import build_dir

CASES = ["test_put_get_head", "test_errors", "test_list", "test_copy_and_batch_delete",
         "test_multipart", "test_list_buckets", "test_checksums", "test_threads",
         "test_server_down"]


@pytest.mark.parametrize("case", CASES)
def test_ops(case, s3env):
    exe = os.path.join(build_dir(), "tests", "ops_test")
    r = subprocess.run([exe, case], env=s3env, capture_output=True, text=True, timeout=300)
    print(r.stdout)
    print(r.stderr)
    assert r.returncode == 0, f"{case} failed:\n{r.stdout}\n{r.stderr}"
    assert " 0 failed" in r.stdout
