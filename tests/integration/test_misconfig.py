"""Every front end's error paths, as a new user meets them (issue 20): a matrix of
misconfigurations (unknown profile, malformed config and credentials files, missing region,
unreachable and malformed endpoints, no credentials, expired credentials, read-only and full
local disks) against the CLI's commands and `s3flash mount`. Each must give one clear line
on stderr naming what was wrong, an exit status below 128 (no crash: a signal would be
128+N, and AWS_PROFILE=nosuch was SIGSEGV), and write nothing: no object in the bucket, no
local file, no mount. tests/python/test_misconfig.py is the same matrix for the Python
package.
"""
import os
import re
import stat
import subprocess
import time

import pytest

from helpers import closed_port, list_keys, small_tmpfs
from misconfig_files import expired_process, write
from mountutil import force_unmount, is_mounted

MIB = 1 << 20


# name -> (how to set it up, what the error line must say). setup(tmp_path, rgw) returns
# (environment changes, use the test endpoint?, extra global options).
def _unknown_profile(tmp_path, rgw):
    return {"AWS_PROFILE": "nosuch"}, False, []


def _unknown_profile_endpoint(tmp_path, rgw):
    return {"AWS_PROFILE": "nosuch"}, True, []


def _unknown_profile_option(tmp_path, rgw):
    return {}, True, ["--profile", "nosuch"]


def _malformed_config(tmp_path, rgw):
    return {"AWS_CONFIG_FILE": write(tmp_path / "config-bad", "[default\nregion = x\n")}, \
        True, []


def _malformed_credentials(tmp_path, rgw):
    f = write(tmp_path / "credentials-bad", "this is not ini\n[default]\naws_access_key_id\n")
    return {"AWS_SHARED_CREDENTIALS_FILE": f, "AWS_ACCESS_KEY_ID": None,
            "AWS_SECRET_ACCESS_KEY": None}, True, []


def _missing_region_aws(tmp_path, rgw):
    # no region anywhere and no endpoint: the documented default (us-east-1) is AWS, which
    # this host cannot reach; the error names the host it tried
    return {"AWS_REGION": None, "AWS_DEFAULT_REGION": None}, False, []


def _unreachable_endpoint(tmp_path, rgw):
    return {}, False, ["--endpoint-url", f"http://127.0.0.1:{closed_port()}"]


def _unresolvable_endpoint(tmp_path, rgw):
    return {}, False, ["--endpoint-url", "http://no-such-host.invalid"]


def _bad_endpoint_scheme(tmp_path, rgw):
    return {}, False, ["--endpoint-url", "ftp://example.com"]


def _bad_endpoint_env(tmp_path, rgw):
    return {"AWS_ENDPOINT_URL": "http://[::1"}, False, []


def _no_credentials(tmp_path, rgw):
    return {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}, True, []


def _expired_credentials(tmp_path, rgw):
    return {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None,
            "AWS_CONFIG_FILE": expired_process(tmp_path, rgw), "AWS_PROFILE": "old"}, True, []


MATRIX = {
    "unknown_profile": (_unknown_profile, r"profile 'nosuch' not found"),
    "unknown_profile_endpoint": (_unknown_profile_endpoint, r"profile 'nosuch' not found"),
    "unknown_profile_option": (_unknown_profile_option, r"profile 'nosuch' not found"),
    "malformed_config": (_malformed_config, r"config-bad:1: section header without '\]'"),
    "malformed_credentials": (_malformed_credentials, r"credentials-bad:1: expected"),
    "missing_region_aws": (_missing_region_aws,
                           r"(?i)connect.*s3\.us-east-1\.amazonaws\.com|"
                           r"s3\.us-east-1\.amazonaws\.com.*(resolve|connect)"),
    "unreachable_endpoint": (_unreachable_endpoint, r"(?i)could not connect.*127\.0\.0\.1"),
    "unresolvable_endpoint": (_unresolvable_endpoint,
                              r"(?i)(resolve|connect).*no-such-host\.invalid"),
    "bad_endpoint_scheme": (_bad_endpoint_scheme,
                            r"ftp://example\.com.*must start with http:// or https://"),
    "bad_endpoint_env": (_bad_endpoint_env, r"http://\[::1.*not a valid URI"),
    "no_credentials": (_no_credentials, r"(?i)no credentials"),
    "expired_credentials": (_expired_credentials,
                            r"credentials expired.*expired at 2020-01-01T00:00:00Z"),
}


def one_error_line(r):
    assert 0 < r.rc < 128, r  # a failure, not a crash (128+N: killed by signal N)
    assert r.rc in (1, 2), r
    lines = r.err_lines
    assert len(lines) == 1, r.err
    assert lines[0].startswith("s3flash: "), r.err
    return lines[0]


def commands(bucket, local):
    """(name, argv, what it would write): every kind of command."""
    src = local / "src.bin"
    return [
        ("ls", ["ls", f"s3://{bucket}/"], None),
        ("upload", ["cp", src, f"s3://{bucket}/misconfig/up.bin"], None),
        ("download", ["cp", f"s3://{bucket}/misconfig/obj", local / "down.bin"],
         local / "down.bin"),
        ("cat", ["cat", f"s3://{bucket}/misconfig/obj"], None),
        ("rm", ["rm", f"s3://{bucket}/misconfig/obj"], None),
        ("sync", ["sync", local / "tree", f"s3://{bucket}/misconfig/tree/"], None),
    ]


@pytest.fixture(scope="module")
def seeded(s3, bucket):
    s3.put_object(Bucket=bucket, Key="misconfig/obj", Body=os.urandom(4 * MIB))
    return bucket


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_cli_misconfig(cli, rgw, s3, seeded, tmp_path, case):
    setup, want = MATRIX[case]
    env_changes, use_endpoint, opts = setup(tmp_path, rgw)
    env = cli.env(S3FLASH_RETRY_BASE_MS="1", **env_changes)
    local = tmp_path / "local"
    local.mkdir()
    (local / "src.bin").write_bytes(b"x" * 1000)
    (local / "tree").mkdir()
    (local / "tree" / "a").write_bytes(b"a")
    before_local = sorted(p.name for p in local.rglob("*"))
    before_keys = sorted(list_keys(s3, seeded))
    for name, argv, _ in commands(seeded, local):
        t0 = time.monotonic()
        r = cli.run(*opts, *argv, env=env, endpoint=use_endpoint, timeout=90)
        line = one_error_line(r)
        assert re.search(want, line), f"{name}: {line}"
        assert time.monotonic() - t0 < 60, name
        if name != "cat":
            assert r.out == b"", (name, r.out)
        for secret in (rgw.secret_key,):
            assert secret not in r.err
    # nothing written, here or there
    assert sorted(p.name for p in local.rglob("*")) == before_local
    assert sorted(list_keys(s3, seeded)) == before_keys


@pytest.fixture
def mountdir(tmp_path):
    d = tmp_path / "mnt"
    d.mkdir()
    yield d
    if is_mounted(d):
        force_unmount(str(d))


def need_fuse():
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_mount_misconfig(cli, rgw, s3, seeded, tmp_path, mountdir, case):
    """`s3flash mount` checks its configuration with a listing before it mounts: the same
    errors, exit status 1, nothing mounted."""
    need_fuse()
    setup, want = MATRIX[case]
    env_changes, use_endpoint, opts = setup(tmp_path, rgw)
    env = cli.env(S3FLASH_RETRY_BASE_MS="1", **env_changes)
    r = cli.run(*opts, "mount", f"{seeded}/misconfig/", mountdir, env=env,
                endpoint=use_endpoint, timeout=90)
    mounted = is_mounted(mountdir)
    line = one_error_line(r)
    assert re.search(want, line), line
    assert not mounted
    assert list(mountdir.iterdir()) == []


# ---- local disks: read-only and full ---------------------------------------------------

@pytest.fixture
def readonly_dir(tmp_path):
    """A read-only file system (a tmpfs mounted ro; root ignores directory modes)."""
    d = tmp_path / "ro"
    d.mkdir()
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(d)],
                       capture_output=True, text=True)
    if m.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {m.stderr.strip()}")
    yield d
    subprocess.run(["umount", "-l", str(d)], capture_output=True, check=False)


@pytest.fixture
def full_dir(tmp_path):
    with small_tmpfs(tmp_path / "full", "1m") as d:
        yield d


def test_cli_download_to_readonly_disk(cli, seeded, readonly_dir):
    for argv in (["cp", f"s3://{seeded}/misconfig/obj", readonly_dir / "obj"],
                 ["sync", f"s3://{seeded}/misconfig/", readonly_dir],
                 ["cp", "--recursive", f"s3://{seeded}/misconfig/", readonly_dir / "t"]):
        r = cli.run(*argv, timeout=90)
        assert 0 < r.rc < 128, r
        text = r.err
        assert "Read-only file system" in text, (argv, text)
        assert str(readonly_dir) in text, (argv, text)
    assert list(readonly_dir.iterdir()) == []


def test_cli_download_to_full_disk(cli, seeded, full_dir):
    """A 4 MiB object into a 1 MiB file system: ENOSPC named, no partial file left."""
    for argv in (["cp", f"s3://{seeded}/misconfig/obj", full_dir / "obj"],
                 ["sync", f"s3://{seeded}/misconfig/", full_dir]):
        r = cli.run(*argv, timeout=90)
        assert 0 < r.rc < 128, r
        text = r.err
        assert "No space left on device" in text, (argv, text)
        assert str(full_dir) in text, (argv, text)
        assert list(full_dir.iterdir()) == [], (argv, list(full_dir.iterdir()))


def test_mount_log_file_on_readonly_disk(cli, seeded, readonly_dir, mountdir):
    need_fuse()
    r = cli.run("mount", f"{seeded}/misconfig/", mountdir, "--log-file",
                readonly_dir / "mount.log", timeout=90)
    mounted = is_mounted(mountdir)
    line = one_error_line(r)
    assert str(readonly_dir) in line and "Read-only file system" in line, line
    assert not mounted
