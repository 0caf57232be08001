"""The Python package's error paths (issue 20): the misconfiguration matrix of
tests/integration/test_misconfig.py (unknown profile, malformed config and credentials
files, missing region, unreachable and malformed endpoints, no credentials, expired
credentials, read-only and full local disks) met through the package's calls. Each call
must raise an exception naming what was wrong (no crash: every case runs in a child
interpreter whose exit status is checked, a signal would show as one), and write nothing.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import s3flash
from conftest import ROOT, closed_port

MIB = 1 << 20

# The child: builds the client from the environment (and `endpoint`), runs each call and
# prints {call: [exception class, its bases' names, message]} as JSON.
CHILD = textwrap.dedent("""
    import json, os, sys
    import s3flash
    spec = json.loads(sys.argv[1])
    bucket, local = spec["bucket"], spec["local"]
    out = {}

    def run(name, fn):
        try:
            fn()
            out[name] = None
        except Exception as e:  # what the caller sees
            out[name] = [type(e).__name__, [c.__name__ for c in type(e).__mro__],
                         str(e)]

    def client():
        return s3flash.S3Client(endpoint=spec["endpoint"])

    def write_stream():
        with client().put_object(bucket, "misconfig/stream.bin") as w:
            w.write(b"x" * 1000)

    run("client+list", lambda: list(client().list_objects(bucket, prefix="misconfig/")))
    run("upload", lambda: client().upload(bucket, "misconfig/up.bin", b"x" * 1000))
    run("writer", write_stream)
    run("download_file", lambda: client().download_file(bucket, "misconfig/obj",
                                                         os.path.join(local, "down.bin")))
    run("reader", lambda: client().get_object(bucket, "misconfig/obj").read())
    run("save", lambda: s3flash.save({"a": 1}, f"s3://{bucket}/misconfig/save.pt",
                                     endpoint=spec["endpoint"]))
    run("load", lambda: s3flash.load(f"s3://{bucket}/misconfig/obj",
                                     endpoint=spec["endpoint"]))
    print(json.dumps(out))
""")


def _misconfig_files():
    """tests/integration/misconfig_files.py, loaded by path (see conftest.integration_faults)."""
    spec = importlib.util.spec_from_file_location(
        "misconfig_files", ROOT / "tests" / "integration" / "misconfig_files.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_files = _misconfig_files()
write, expired_config = _files.write, _files.expired_process


NO_KEYS = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}

# name -> (setup(tmp_path, rgw) -> (env changes, endpoint or None), exception class, regex)
MATRIX = {
    "unknown_profile": (lambda t, r: ({"AWS_PROFILE": "nosuch"}, None), "S3Exception",
                        r"profile 'nosuch' not found"),
    "unknown_profile_endpoint": (lambda t, r: ({"AWS_PROFILE": "nosuch"}, "ENDPOINT"),
                                 "S3Exception", r"profile 'nosuch' not found"),
    "malformed_config": (lambda t, r: ({"AWS_CONFIG_FILE": write(t / "config-bad",
                                                                 "[default\nregion = x\n")},
                                       "ENDPOINT"),
                         "S3Exception", r"config-bad:1: section header without '\]'"),
    "malformed_credentials": (lambda t, r: (dict(NO_KEYS, AWS_SHARED_CREDENTIALS_FILE=write(
        t / "credentials-bad", "this is not ini\n[default]\naws_access_key_id\n")),
        "ENDPOINT"), "S3Exception", r"credentials-bad:1: expected"),
    "missing_region_aws": (lambda t, r: ({"AWS_REGION": None, "AWS_DEFAULT_REGION": None},
                                         None), "ConnectionError",
                           r"s3\.us-east-1\.amazonaws\.com"),
    "unreachable_endpoint": (lambda t, r: ({}, f"http://127.0.0.1:{closed_port()}"),
                             "ConnectionError", r"(?i)could not connect.*127\.0\.0\.1"),
    "bad_endpoint_scheme": (lambda t, r: ({}, "ftp://example.com"), "ValueError",
                            r"ftp://example\.com.*must start with http:// or https://"),
    "bad_endpoint_env": (lambda t, r: ({"AWS_ENDPOINT_URL": "http://[::1"}, None),
                         "ValueError", r"http://\[::1.*not a valid URI"),
    "no_credentials": (lambda t, r: (NO_KEYS, "ENDPOINT"), "PermissionError",
                       r"(?i)no credentials"),
    "expired_credentials": (lambda t, r: (dict(NO_KEYS, AWS_PROFILE="old",
                                               AWS_CONFIG_FILE=expired_config(t, r)),
                                          "ENDPOINT"),
                            "PermissionError",
                            r"credentials expired.*expired at 2020-01-01T00:00:00Z"),
}


@pytest.fixture(scope="module")
def seeded(s3, bucket):
    s3.put_object(Bucket=bucket, Key="misconfig/obj", Body=os.urandom(MIB))
    return bucket


def keys(s3, bucket):
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def run_child(spec, env):
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], env=env,
                       capture_output=True, text=True, timeout=180)
    # a crash (SIGSEGV, abort) shows as a negative status; an exit status >= 128 as well
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_python_misconfig(rgw, endpoint, s3, seeded, tmp_path, case):
    setup, cls, want = MATRIX[case]
    changes, ep = setup(tmp_path, rgw)
    env = dict(os.environ)
    env["S3FLASH_RETRY_BASE_MS"] = "1"  # the package's 10 attempts, with short backoffs
    for k, v in changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    local = tmp_path / "local"
    local.mkdir()
    before = keys(s3, seeded)
    out = run_child({"bucket": seeded, "local": str(local),
                     "endpoint": endpoint if ep == "ENDPOINT" else ep}, env)
    for call, got in out.items():
        assert got is not None, f"{call} succeeded under {case}"
        name, mro, msg = got
        assert cls in mro, (call, got)
        assert "S3Exception" in mro or "ValueError" in mro, (call, got)
        assert re.search(want, msg), (call, msg)
        assert rgw.secret_key not in msg
    assert list(local.iterdir()) == []
    assert keys(s3, seeded) == before


# ---- local disks ------------------------------------------------------------------------

def tmpfs(path, opts):
    path.mkdir()
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)],
                       capture_output=True, text=True)
    if m.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {m.stderr.strip()}")
    return path


def umount(path):
    subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@pytest.mark.parametrize("disk", ["readonly", "full"])
def test_python_download_to_bad_disk(region, endpoint, s3, bucket, tmp_path, disk):
    import errno
    s3.put_object(Bucket=bucket, Key="misconfig/big", Body=os.urandom(4 * MIB))
    d = tmpfs(tmp_path / disk, "ro,size=1m" if disk == "readonly" else "size=1m")
    try:
        c = s3flash.S3Client(region=region, endpoint=endpoint)
        dst = d / "big"
        with pytest.raises(OSError) as ei:
            c.download_file(bucket, "misconfig/big", str(dst))
        e = ei.value
        assert isinstance(e, s3flash.S3Exception)
        assert e.errno == (errno.EROFS if disk == "readonly" else errno.ENOSPC), e
        assert str(d) in str(e), str(e)
        assert list(d.iterdir()) == []
    finally:
        umount(d)
