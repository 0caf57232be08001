"""Every front end's default memory budget is a share of what its cgroup allows, not of the
host's RAM (s3f_memory_available, src/core/memavail.c): the Python client's buffer pool (a
quarter, at most 512 MiB), the CLI's, and the mount's --memory-target (an eighth).

cgroup v1: a real process in a real memory cgroup this test makes (memory.limit_in_bytes).
cgroup v2: this machine's v2 hierarchy has no memory controller, so the process is moved into
a real v2 cgroup two levels deep and the test build reads the memory.max files of a test tree
mirroring that path ($S3FLASH_TEST_CGROUP2_ROOT): the smallest limit up the tree counts. The
hook is in test builds only (the build directory's CLI, and the package when it is the
build's, devenv.sh), never in the wheel that tests/python/run.sh installs."""

import os
import re
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest

from csi_harness import s3flash_cli, wait_for
from s3flash.csi.mounter import find_s3flash

MIB = 1 << 20
V1 = Path("/sys/fs/cgroup/memory")
V2 = Path("/sys/fs/cgroup/unified")

if os.geteuid() != 0:
    pytest.skip("making cgroups needs root", allow_module_level=True)


def cli():
    """The build directory's CLI, else the package's."""
    return s3flash_cli() or find_s3flash()


def package_is_a_test_build():
    import s3flash
    return "pystage" in Path(s3flash.__file__).resolve().parts


def in_cgroup(procs, argv, env, **kw):
    """argv run as a process that first joins the cgroup whose cgroup.procs is `procs`."""
    return subprocess.run(["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs)] + argv,
                          env=env, capture_output=True, timeout=120, **kw)


@pytest.fixture
def v1_group():
    if not (V1 / "memory.limit_in_bytes").exists():
        pytest.skip("no cgroup v1 memory controller at %s" % V1)
    g = V1 / ("s3flash-test-" + uuid.uuid4().hex[:12])
    g.mkdir()
    yield g
    wait_for(lambda: not (g / "cgroup.procs").read_text().strip(), 30, "the cgroup to empty")
    g.rmdir()


@pytest.fixture
def v2_group(tmp_path):
    """(cgroup.procs of a real v2 cgroup TOP/leaf, the test tree's TOP and leaf dirs)."""
    if not (V2 / "cgroup.procs").exists():
        pytest.skip("no cgroup v2 hierarchy at %s" % V2)
    name = "s3flash-test-" + uuid.uuid4().hex[:12]
    top = V2 / name
    (top / "leaf").mkdir(parents=True)
    tree = tmp_path / "cgroup2"
    (tree / name / "leaf").mkdir(parents=True)
    yield top / "leaf" / "cgroup.procs", tree, tree / name, tree / name / "leaf"
    wait_for(lambda: not (top / "leaf" / "cgroup.procs").read_text().strip(), 30,
             "the cgroup to empty")
    (top / "leaf").rmdir()
    top.rmdir()


def python_pool_mib(procs, endpoint, region, env=None):
    code = ("import s3flash; c = s3flash.S3Client(endpoint=%r, region=%r); "
            "print(c.stats()['pool_limit_bytes'])" % (endpoint, region))
    p = in_cgroup(procs, [sys.executable, "-c", code], dict(os.environ, **(env or {})))
    assert p.returncode == 0, p.stderr.decode()
    return int(p.stdout) // MIB


def cli_pool_mib(procs, endpoint, region, bucket, tmp_path, env=None, exe=None):
    src = tmp_path / "one.txt"
    src.write_bytes(b"one")
    p = in_cgroup(procs, [exe or cli(), "cp", str(src), "s3://%s/cgroup-test/one.txt" % bucket,
                          "--endpoint-url", endpoint, "--region", region],
                  dict(os.environ, S3FLASH_LOG="debug", **(env or {})))
    out = p.stderr.decode()
    assert p.returncode == 0, out
    return int(re.search(r"transfers: .*memory limit ([0-9]+)", out).group(1)) // MIB


def test_v1_limit_sets_python_and_cli_defaults(v1_group, endpoint, region, bucket, tmp_path):
    (v1_group / "memory.limit_in_bytes").write_text(str(200 * MIB))
    procs = v1_group / "cgroup.procs"
    # a quarter of 200 MiB, not 512 MiB (the default on a host with more than 2 GiB)
    assert python_pool_mib(procs, endpoint, region) == 50
    assert cli_pool_mib(procs, endpoint, region, bucket, tmp_path) == 50
    # no limit: the usual default
    (v1_group / "memory.limit_in_bytes").write_text("-1")
    assert python_pool_mib(procs, endpoint, region) == 512


def test_v1_limit_sets_the_mount_memory_target(v1_group, endpoint, region, bucket, tmp_path):
    """The mount's default --memory-target is an eighth of the cgroup's 1600 MiB (200 MiB):
    its metadata budget (1/16 of the target) says so."""
    (v1_group / "memory.limit_in_bytes").write_text(str(1600 * MIB))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = in_cgroup(v1_group / "cgroup.procs",
                  [cli(), "mount", bucket, str(mnt), "--endpoint-url", endpoint,
                   "--region", region, "--force-path-style", "--metrics-listen",
                   "127.0.0.1:0"], dict(os.environ))
    out = (p.stderr + p.stdout).decode()
    assert p.returncode == 0, out
    try:
        port = re.search(r"metrics at http://127\.0\.0\.1:([0-9]+)/metrics", out).group(1)
        with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=10) as r:
            text = r.read().decode()
        budget = re.search(r"^s3flash_mount_metadata_budget_bytes(?:\{[^}]*\})? ([0-9.e+]+)$",
                           text, re.M)
        assert budget, text
        assert int(float(budget.group(1))) == 200 * MIB // 16
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30)


def test_v2_smallest_limit_up_the_tree(v2_group, endpoint, region, bucket, tmp_path):
    exe = s3flash_cli()
    if not exe:
        pytest.skip("the hook is in test builds only: no build directory's CLI")
    procs, tree, top, leaf = v2_group
    hook = {"S3FLASH_TEST_CGROUP2_ROOT": str(tree)}
    pkg = package_is_a_test_build()
    (top / "memory.max").write_text("%d\n" % (300 * MIB))
    (leaf / "memory.max").write_text("max\n")
    assert cli_pool_mib(procs, endpoint, region, bucket, tmp_path, hook, exe) == 75
    assert not pkg or python_pool_mib(procs, endpoint, region, hook) == 75
    (leaf / "memory.max").write_text("%d\n" % (120 * MIB))  # the leaf's is smaller
    assert cli_pool_mib(procs, endpoint, region, bucket, tmp_path, hook, exe) == 30
    assert not pkg or python_pool_mib(procs, endpoint, region, hook) == 30
    (top / "memory.max").write_text("max\n")
    (leaf / "memory.max").write_text("max\n")
    assert cli_pool_mib(procs, endpoint, region, bucket, tmp_path, hook, exe) == 512
