"""The password of an endpoint URL (http://user:password@host) never reaches a log line or
an error message, even with --debug / S3FLASH_LOG=trace."""
import pytest

SECRET = "hunter2-endpoint-password"


@pytest.mark.parametrize("how", ["--debug", "S3FLASH_LOG=trace"])
def test_endpoint_password_not_shown(cli_nosrv, how):
    url = f"http://someone:{SECRET}@127.0.0.1:9"
    args = ["ls", "s3://bucket/", "--endpoint-url", url]
    env = cli_nosrv.env()
    if how == "--debug":
        args.append("--debug")
    else:
        env["S3FLASH_LOG"] = "trace"
    r = cli_nosrv.run(*args, endpoint=False, env=env, timeout=60)
    assert r.rc != 0, r
    assert SECRET not in r.err and SECRET not in r.text, r
    assert "***@127.0.0.1" in r.err, r  # the client's DEBUG line, redacted


def test_endpoint_password_not_in_scheme_error(cli_nosrv):
    r = cli_nosrv.run("ls", "s3://bucket/", "--endpoint-url", f"ftp://someone:{SECRET}@h",
                      endpoint=False, timeout=60)
    assert r.rc != 0, r
    assert SECRET not in r.err, r
    assert "ftp://***@h" in r.err, r
