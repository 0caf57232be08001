"""kubernetes-csi's csi-sanity (v5.3.1, built from tests/csi/ by tests/csi/build.sh) against
the driver's real processes: the node and the mounter on the node socket, the controller on
its own, dynamic volumes as prefixes of an RGW bucket, real FUSE mounts for the Node specs.
No spec may fail; a spec that does not apply to an S3 prefix is skipped by csi-sanity itself,
through the capability it checks (the driver advertises only what it serves)."""

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("s3flash.csi.csi_pb2", reason="s3flash.csi built without grpcio-tools")

from csi_harness import ROOT, running  # noqa: E402

if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
    pytest.skip("the CSI driver mounts: needs root and /dev/fuse", allow_module_level=True)

# csi-sanity v5.3.1's 92 specs against this driver: those it runs, and those it skips (59
# because the driver does not advertise their capability: snapshots, cloning, expansion,
# listing, GetCapacity, ControllerPublish, staging, group snapshots, ...; 1 pending in
# csi-sanity itself)
PASSED, SKIPPED = 32, 60


@pytest.fixture(scope="module")
def csi_sanity():
    """The binary: $S3FLASH_CSI_SANITY (tests/run.sh builds it in the background before the Python step), else
    built here (about a minute on two cores, then reused)."""
    path = os.environ.get("S3FLASH_CSI_SANITY")
    if path:
        assert os.access(path, os.X_OK), "S3FLASH_CSI_SANITY=%s is not an executable" % path
        return path
    if not shutil.which("go"):
        pytest.skip("no go to build csi-sanity with (apt-get install golang-go)")
    r = subprocess.run(["bash", str(ROOT / "tests" / "csi" / "build.sh")], capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def results(junit):
    """{spec name: 'passed' | 'skipped' | 'failed'} of a JUnit report of ginkgo."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kind = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                kind = "failed"
            elif child.tag == "skipped" and kind != "failed":
                kind = "skipped"
        out[case.get("name")] = kind
    return out


def test_csi_sanity(csi_sanity, s3, bucket, endpoint, tmp_path):
    params = tmp_path / "params.yaml"
    # ${pv.name}: the request's name, as the external-provisioner's PV name
    params.write_text("bucketName: %s\nendpointUrl: %s\nprefixTemplate: sanity/${pv.name}/\n"
                      % (bucket, endpoint))
    junit = tmp_path / "junit.xml"
    with running(tmp_path / "driver", controller_env={"AWS_ENDPOINT_URL": endpoint}) as d:
        r = subprocess.run(
            [csi_sanity, "--csi.endpoint", "unix://%s" % d.csi_sock,
             "--csi.controllerendpoint", "unix://%s" % d.controller_sock,
             "--csi.mountdir", str(tmp_path / "mnt"), "--csi.stagingdir", str(tmp_path / "stg"),
             "--csi.testvolumeparameters", str(params), "--ginkgo.junit-report", str(junit),
             "--ginkgo.no-color", "--ginkgo.timeout", "10m"],
            capture_output=True, text=True, timeout=900)
        print(r.stdout[-20000:], r.stderr[-5000:])
        got = results(junit)
        counts = {k: sum(1 for v in got.values() if v == k)
                  for k in ("passed", "failed", "skipped")}
        print("csi-sanity: %(passed)d passed, %(failed)d failed, %(skipped)d skipped" % counts)
        failed = sorted(n for n, v in got.items() if v == "failed")
        assert not failed, "csi-sanity failed: %s" % "; ".join(failed)
        assert r.returncode == 0, "csi-sanity exited %d" % r.returncode
        assert (counts["passed"], counts["skipped"]) == (PASSED, SKIPPED), counts
    # every volume csi-sanity made was deleted, with what CreateVolume wrote
    left = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert not left, [o["Key"] for o in left]
