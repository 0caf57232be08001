"""Command-line handling of s3flash: help, version, usage errors (no S3 server needed)."""

import re

import pytest

COMMANDS = ["ls", "cp", "rm", "cat", "stat", "presign"]


def test_help_lists_every_command(cli_nosrv):
    for argv in (["--help"], ["-h"]):
        r = cli_nosrv.run(*argv, endpoint=False)
        assert r.rc == 0, r
        for c in COMMANDS:
            assert re.search(rf"^\s+{c}\s", r.text, re.M), (c, r.text)
        assert "--endpoint-url" in r.text


@pytest.mark.parametrize("cmd", COMMANDS)
def test_command_help(cli_nosrv, cmd):
    for argv in ([cmd, "--help"], ["--help", cmd], [cmd, "-h"]):
        r = cli_nosrv.run(*argv, endpoint=False)
        assert r.rc == 0, (argv, r)
        assert r.text.startswith(f"usage: s3flash {cmd} "), (argv, r.text)
        assert r.err == ""


def test_version(cli_nosrv):
    r = cli_nosrv.run("--version", endpoint=False)
    assert r.rc == 0
    assert re.fullmatch(r"s3flash \d+\.\d+\.\d+\n", r.text), r.text


def test_no_command_is_usage_error(cli_nosrv):
    r = cli_nosrv.run(endpoint=False)
    assert r.rc == 2
    assert "usage: s3flash" in r.err
    assert r.out == b""


@pytest.mark.parametrize("argv,needle", [
    (["frobnicate"], "unknown command 'frobnicate'"),
    (["ls", "--bogus", "s3://bucket"], "unknown option '--bogus'"),
    (["ls", "-z", "s3://bucket"], "unknown option '-z'"),
    (["--recursive", "ls", "s3://bucket"], "must come after the command"),
    (["cat", "--recursive", "s3://bucket/k"], "unknown option '--recursive'"),
    (["ls", "s3://bucket", "--endpoint-url"], "needs a value"),
    (["ls", "s3://bucket", "--quiet=yes"], "takes no value"),
    (["ls", "s3://a", "s3://b"], "too many arguments"),
    (["cp", "s3://bucket/k"], "cp needs"),
    (["cp", "a", "b", "c"], "too many arguments"),
    (["cat"], "cat needs"),
    (["cp", "local-a", "local-b"], "needs an s3:// source or destination"),
    (["presign", "s3://bucket/k", "--expires-in", "0"], "--expires-in"),
    (["presign", "s3://bucket/k", "--expires-in", "604801"], "--expires-in"),
    (["presign", "s3://bucket/k", "--expires-in", "12abc"], "--expires-in"),
    (["presign", "s3://bucket/k", "--method", "POST"], "--method"),
    (["ls", "s3://bucket", "--page-size", "0"], "--page-size"),
    (["cat", "s3://bucket"], "names no object"),
    (["stat", "s3://bucket/dir/"], "names no object"),
    (["cp", "s3://bucket/dir/", "out"], "use --recursive"),
    (["cp", "--content-type", "text/plain", "s3://bucket/k", "out"], "uploads only"),
])
def test_usage_errors(cli_nosrv, argv, needle, tmp_path):
    r = cli_nosrv.run(*argv, cwd=tmp_path)
    assert r.rc == 2, (argv, r)
    assert len(r.err_lines) == 1, r.err
    assert r.err_lines[0].startswith("s3flash: "), r.err
    assert needle in r.err, (needle, r.err)
    assert "--help" in r.err  # the hint
    assert r.out == b""
    assert list(tmp_path.iterdir()) == []  # nothing was created


def test_global_options_after_command(cli_nosrv):
    # --endpoint-url after the command is accepted (the server is down: a connect error,
    # not a usage error, proves the option was parsed and used)
    r = cli_nosrv.run("ls", "s3://bucket", "--endpoint-url", cli_nosrv.rgw.endpoint,
                      "--region=us-east-1", endpoint=False, timeout=60)
    assert r.rc == 1, r
    assert "unknown option" not in r.err
