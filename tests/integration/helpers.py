"""Helpers of the s3flash integration tests (imported by conftest.py and the tests)."""

import contextlib
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "servers"))
from s3servers import Rgw, closed_port  # noqa: E402,F401  (shared with tests/python)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def read_tree(root):
    """{path relative to root: bytes} of every file under root."""
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Result:
    def __init__(self, p):
        self.rc = p.returncode
        self.out = p.stdout  # bytes
        self.err = p.stderr.decode("utf-8", "replace")

    @property
    def text(self):
        return self.out.decode("utf-8", "replace")

    @property
    def err_lines(self):
        return [ln for ln in self.err.splitlines() if ln.strip()]

    def __repr__(self):
        return f"<rc={self.rc} out={self.out[:300]!r} err={self.err[-2000:]!r}>"


class Cli:
    """Runs the s3flash binary with a controlled environment: an empty HOME (no ~/.aws),
    no inherited AWS_* or S3FLASH_* variables, this user's keys in AWS_ACCESS_KEY_ID /
    AWS_SECRET_ACCESS_KEY and the metadata service pointed at a closed port."""

    def __init__(self, path, rgw, home):
        self.path = str(path)
        self.rgw = rgw
        self.home = str(home)

    def env(self, creds=True, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("AWS_") and not k.startswith("S3FLASH_")}
        env["HOME"] = self.home
        env["AWS_CONFIG_FILE"] = os.path.join(self.home, "no-such-config")
        env["AWS_SHARED_CREDENTIALS_FILE"] = os.path.join(self.home, "no-such-credentials")
        env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = f"http://127.0.0.1:{closed_port()}"
        env["AWS_REGION"] = self.rgw.region
        if creds:
            env["AWS_ACCESS_KEY_ID"] = self.rgw.access_key
            env["AWS_SECRET_ACCESS_KEY"] = self.rgw.secret_key
        for k, v in extra.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return env

    def run(self, *args, env=None, input=None, timeout=120, endpoint=True, cwd=None):
        argv = [self.path]
        if endpoint:
            argv += ["--endpoint-url", self.rgw.endpoint]
        argv += [str(a) for a in args]
        p = subprocess.run(argv, env=env if env is not None else self.env(), input=input,
                           capture_output=True, timeout=timeout, cwd=cwd)
        return Result(p)

    def ok(self, *args, **kw):
        r = self.run(*args, **kw)
        assert r.rc == 0, f"s3flash {' '.join(map(str, args))} failed: {r!r}"
        return r


def empty_bucket(s3, name):
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        keys += [o["Key"] for o in page.get("Contents", [])]
    for i in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=name,
                          Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]],
                                  "Quiet": True})


def put_many(s3, bucket, keys, body=b"x", workers=16):
    """Create many tiny objects concurrently (harness side)."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(lambda k: s3.put_object(Bucket=bucket, Key=k, Body=body), keys))


def list_keys(s3, bucket, prefix=""):
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


def wait_for(cond, timeout=20, what="condition"):
    """Poll cond() until it holds (an event a test waits for), failing after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@contextlib.contextmanager
def small_tmpfs(path, size):
    """A tmpfs of `size` (mount's size=, e.g. "2m") on the new directory `path` for the
    block: a file system that fills up. Skips the test where it cannot be mounted (needs
    root)."""
    path.mkdir()
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if m.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {m.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
