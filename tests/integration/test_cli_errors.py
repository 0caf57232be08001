"""Bad input and failures: each gives one clear line on stderr and a non-zero exit status,
changes nothing, and never shows a secret."""

import os
import re
import time

import pytest

from helpers import closed_port, list_keys


def one_error_line(r):
    assert r.rc != 0, r
    lines = r.err_lines
    assert len(lines) == 1, r.err
    assert lines[0].startswith("s3flash: "), r.err
    return lines[0]


BAD_URIS = [
    "s3://",                      # no bucket
    "s3:///key",                  # empty bucket
    "s3:/bucket/key",             # one slash
    "s3:bucket/key",              # no slashes
    "bucket/key",                 # no scheme at all
    "s3://bad bucket/key",        # space in the bucket name
    "s3://b/key",                 # bucket name too short
    "s3://bucket/" + "k" * 1100,  # key longer than 1024 bytes
]


@pytest.mark.parametrize("uri", BAD_URIS, ids=range(len(BAD_URIS)))
@pytest.mark.parametrize("cmd", ["stat", "cat", "rm", "presign"])
def test_malformed_uri(cli_nosrv, cmd, uri):
    r = cli_nosrv.run(cmd, uri, timeout=30)
    line = one_error_line(r)
    assert r.rc in (1, 2)
    assert uri[:60] in line  # the error names the URI
    assert "connect" not in line  # rejected before any request
    assert r.out == b""


@pytest.mark.parametrize("uri", BAD_URIS[:4], ids=range(4))
def test_malformed_uri_ls_cp(cli_nosrv, uri, tmp_path):
    line = one_error_line(cli_nosrv.run("ls", uri))
    assert uri in line
    line = one_error_line(cli_nosrv.run("cp", uri, tmp_path / "out"))
    assert uri in line
    f = tmp_path / "in"
    f.write_bytes(b"x")
    line = one_error_line(cli_nosrv.run("cp", f, uri))
    assert uri in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_no_such_bucket(cli, tmp_path):
    missing = "s3flash-no-such-bucket-4711"
    for argv in (["ls", f"s3://{missing}/"], ["cat", f"s3://{missing}/k"],
                 ["cp", f"s3://{missing}/k", tmp_path / "out"]):
        line = one_error_line(cli.run(*argv))
        assert "NoSuchBucket" in line, line
        assert missing in line
        assert "request id: " in line
    f = tmp_path / "in"
    f.write_bytes(b"x")
    line = one_error_line(cli.run("cp", f, f"s3://{missing}/k"))
    assert "NoSuchBucket" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_no_such_key(cli, bucket, tmp_path):
    line = one_error_line(cli.run("cat", f"s3://{bucket}/no/such/key"))
    assert "NoSuchKey" in line and "404" in line, line
    assert "no/such/key" in line
    line = one_error_line(cli.run("stat", f"s3://{bucket}/no/such/key"))
    assert "404" in line, line  # HEAD has no body: no S3 code, but the status
    line = one_error_line(cli.run("cp", f"s3://{bucket}/no/such/key", f"s3://{bucket}/dst"))
    assert "NoSuchKey" in line or "404" in line, line


def test_failed_download_leaves_no_file(cli, bucket, tmp_path):
    dst = tmp_path / "out.bin"
    r = cli.run("cp", f"s3://{bucket}/missing.bin", dst)
    assert r.rc == 1
    assert list(tmp_path.iterdir()) == []
    # an existing file is left as it was
    dst.write_bytes(b"precious")
    r = cli.run("cp", f"s3://{bucket}/missing.bin", dst)
    assert r.rc == 1
    assert dst.read_bytes() == b"precious"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_wrong_secret(cli, rgw, bucket):
    wrong = "wrongSecretKey0123456789abcdefghijklmnop"
    env = cli.env(AWS_SECRET_ACCESS_KEY=wrong)
    r = cli.run("ls", f"s3://{bucket}/", env=env)
    line = one_error_line(r)
    assert r.rc == 1
    assert "SignatureDoesNotMatch" in line or "AccessDenied" in line, line
    assert re.search(r"\[request id: \S+\]", line), line
    assert "403" in line
    assert wrong not in r.err and rgw.secret_key not in r.err


def test_other_users_bucket(cli, rgw, s3, bucket, tmp_path):
    if not rgw.other_access_key:
        pytest.skip("no second user (S3FLASH_TEST_OTHER_ACCESS_KEY)")
    s3.put_object(Bucket=bucket, Key="private/obj", Body=b"mine")
    env = cli.env(AWS_ACCESS_KEY_ID=rgw.other_access_key,
                  AWS_SECRET_ACCESS_KEY=rgw.other_secret_key)
    for argv in (["ls", f"s3://{bucket}/"], ["cat", f"s3://{bucket}/private/obj"],
                 ["rm", f"s3://{bucket}/private/obj"]):
        r = cli.run(*argv, env=env)
        line = one_error_line(r)
        assert "AccessDenied" in line, line
        assert rgw.other_secret_key not in r.err
    f = tmp_path / "f"
    f.write_bytes(b"intruder")
    line = one_error_line(cli.run("cp", f, f"s3://{bucket}/private/obj", env=env))
    assert "AccessDenied" in line
    assert s3.get_object(Bucket=bucket, Key="private/obj")["Body"].read() == b"mine"


def test_clock_skew(cli, bucket):
    env = cli.env(S3FLASH_TEST_CLOCK_OFFSET_S="-3600")
    line = one_error_line(cli.run("ls", f"s3://{bucket}/", env=env))
    assert "RequestTimeTooSkewed" in line, line


def test_no_credentials(cli, bucket):
    env = cli.env(creds=False)  # empty HOME, no AWS_* keys, IMDS at a closed port
    assert not any(k in env for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                      "AWS_SESSION_TOKEN", "AWS_PROFILE"))
    t0 = time.monotonic()
    r = cli.run("ls", f"s3://{bucket}/", env=env, timeout=60)
    elapsed = time.monotonic() - t0
    line = one_error_line(r)
    assert r.rc == 1
    assert re.search(r"no credentials", line, re.I), line
    assert elapsed < 20, elapsed


def test_server_down(cli, bucket):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    t0 = time.monotonic()
    r = cli.run("--endpoint-url", endpoint, "ls", f"s3://{bucket}/", endpoint=False,
                timeout=60)
    elapsed = time.monotonic() - t0
    line = one_error_line(r)
    assert r.rc == 1
    assert "connect" in line.lower(), line
    assert re.search(r"after \d+ attempts", line), line  # it retried, and then stopped
    assert "127.0.0.1" in line or bucket in line
    assert elapsed < 10, elapsed


def test_anonymous_request_is_denied(cli, bucket):
    line = one_error_line(cli.run("--no-sign-request", "ls", f"s3://{bucket}/"))
    assert "AccessDenied" in line, line


SESSION_TOKEN = "S3FLASHSESSIONTOKENMARKER0123456789abcdefghijklmnopqrstuvwxyzMARK"


def test_debug_never_shows_secrets(cli, rgw, s3, bucket, tmp_path):
    f = tmp_path / "dbg"
    f.write_bytes(os.urandom(1000))
    runs = [
        cli.run("--debug", "cp", f, f"s3://{bucket}/dbg/obj"),
        cli.run("ls", f"s3://{bucket}/dbg/", "--debug"),
        cli.run("--debug", "cat", f"s3://{bucket}/dbg/obj"),
        cli.run("--debug", "stat", f"s3://{bucket}/dbg/missing"),
        cli.run("--debug", "presign", f"s3://{bucket}/dbg/obj"),
        cli.run("--debug", "ls", f"s3://{bucket}/",
                env=cli.env(AWS_SECRET_ACCESS_KEY="debugWrongSecret0123456789abcdefghijklmn")),
        # a session token RGW does not know: the request fails, the token must not show
        cli.run("--debug", "ls", f"s3://{bucket}/", env=cli.env(AWS_SESSION_TOKEN=SESSION_TOKEN)),
    ]
    assert runs[0].rc == 0 and runs[1].rc == 0 and runs[2].rc == 0, runs[:3]
    # --debug logs the requests
    assert re.search(r"\bPUT\b", runs[0].err) and bucket in runs[0].err, runs[0].err
    assert re.search(r"\bGET\b", runs[1].err), runs[1].err
    assert len(runs[1].err_lines) >= 2, runs[1].err
    for r in runs:
        for secret in (rgw.secret_key, "debugWrongSecret0123456789abcdefghijklmn",
                       SESSION_TOKEN):
            assert secret not in r.err, r.err
        assert not re.search(r"Signature=[0-9a-f]{16}", r.err), r.err
        assert not re.search(r"X-Amz-Signature=[0-9a-f]{16}", r.err), r.err
    assert list_keys(s3, bucket, "dbg/") == ["dbg/obj"]
