"""`--request-payer requester` against a real Requester Pays bucket (Ceph RGW): the bucket of
the test user bills the requester and a policy lets the second user in; RGW refuses that
user's reads and listings without x-amz-request-payer (403 AccessDenied) and serves them
with it."""
import pytest
from s3servers import make_requester_pays


@pytest.fixture(scope="module")
def payer(s3, rgw, bucket):
    if not rgw.other_access_key:
        pytest.skip("no second user (S3FLASH_TEST_OTHER_ACCESS_KEY)")
    make_requester_pays(s3, bucket)
    s3.put_object(Bucket=bucket, Key="paid/obj", Body=b"owner's bytes")
    return bucket


def other(cli, rgw):
    return cli.env(AWS_ACCESS_KEY_ID=rgw.other_access_key,
                   AWS_SECRET_ACCESS_KEY=rgw.other_secret_key)


def test_without_request_payer_refused(cli, rgw, payer):
    r = cli.run("ls", f"s3://{payer}/paid/", env=other(cli, rgw))
    assert r.rc == 1 and "AccessDenied" in r.err, r


def test_with_request_payer(cli, rgw, payer, tmp_path):
    env = other(cli, rgw)
    r = cli.ok("--request-payer", "requester", "ls", f"s3://{payer}/paid/", env=env)
    assert "obj" in r.text
    dst = tmp_path / "obj"
    cli.ok("--request-payer", "requester", "cp", f"s3://{payer}/paid/obj", dst, env=env)
    assert dst.read_bytes() == b"owner's bytes"
    cli.ok("--request-payer", "requester", "cat", f"s3://{payer}/paid/obj", env=env)


def test_request_payer_value_checked(cli, payer):
    r = cli.run("--request-payer", "me", "ls", f"s3://{payer}/")
    assert r.rc == 2 and "--request-payer takes 'requester'" in r.err, r
