"""The CSI driver and issue 30: Mountpoint's request options as mountOptions (sse,
sse-kms-key-id, storage-class, expected-bucket-owner, aws-max-attempts, user-agent-prefix)
reach `s3flash mount` and the wire (tests/servers/faultproxy.py records each request's
x-amz-* headers and User-Agent); bad values are refused before anything is mounted; the
node's proxy variables reach the daemons (a real proxy on loopback,
tests/servers/connectproxy.py); and an access point ARN as bucketName is published by the
node and provisioned and deleted by the controller (tests/servers/aws_host.py stands in for
the access point's AWS host, reached through a test build's S3FLASH_TEST_CONNECT_TO). All of
it through the driver's real gRPC sockets, as kubelet and the external-provisioner drive it.
"""

import os
import subprocess
import sys

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("s3flash.csi.csi_pb2", reason="s3flash.csi built without grpcio-tools")

import aws_host  # noqa: E402
from aws_host import AP_ARN, AP_HOST  # noqa: E402
from conftest import faultproxy, integration_faults  # noqa: E402
from connectproxy import ConnectProxy  # noqa: E402
from csi_harness import is_mount, running, wait_served  # noqa: E402
from s3flash.csi.proto import Stub, pb  # noqa: E402

if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
    pytest.skip("the CSI driver mounts: needs root and /dev/fuse", allow_module_level=True)

M = pb.VolumeCapability.AccessMode
F = integration_faults()
PROXY_VARS = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
              "all_proxy", "NO_PROXY", "no_proxy")


def publish(driver, vid, target, ctx, flags=()):
    cap = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(mount_flags=list(flags)),
                              access_mode=M(mode=M.SINGLE_NODE_WRITER))
    return driver.stub("Node").NodePublishVolume(pb.NodePublishVolumeRequest(
        volume_id=vid, target_path=str(target), volume_capability=cap,
        volume_context=ctx), timeout=60)


def unpublish(driver, vid, target):
    driver.stub("Node").NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(
        volume_id=vid, target_path=str(target)), timeout=60)


def started(tmp_path, **kw):
    """A driver (node and mounter) in tmp_path/driver."""
    (tmp_path / "driver").mkdir()
    return running(tmp_path / "driver", **kw)


@pytest.fixture
def driver(tmp_path):
    with started(tmp_path) as d:
        yield d


def test_mountpoint_request_options_on_the_wire(driver, kms, s3, bucket, endpoint, tmp_path):
    owner = s3.get_bucket_acl(Bucket=bucket)["Owner"]["ID"]
    s3.put_object(Bucket=bucket, Key="ro/faulty.bin", Body=b"x" * 100)
    t = tmp_path / "pod"
    # Mountpoint's spellings: "NAME VALUE", "--NAME=VALUE", "NAME=VALUE"
    flags = ["sse aws:kms", f"sse-kms-key-id {kms}", "--storage-class=STANDARD",
             f"expected-bucket-owner={owner}", "aws-max-attempts=4",
             "user-agent-prefix=s3-csi-driver/2.0 k8s/1.30", "allow-overwrite"]
    with faultproxy(endpoint) as proxy:
        publish(driver, "vol-ro", t, {"bucketName": bucket, "endpointUrl": proxy.endpoint,
                                      "prefix": "ro/"}, flags)
        try:
            (t / "w.bin").write_bytes(b"written by a pod\n")
            proxy.set_faults([F.s3_error("SlowDown", 503, {
                "method": "GET", "path": f"^/{bucket}/ro/faulty.bin$"})])
            with pytest.raises(OSError):
                (t / "faulty.bin").read_bytes()
        finally:
            unpublish(driver, "vol-ro", t)
        log = proxy.stats()["log"]
    ops = {}
    for e in log:
        ops.setdefault(F.operation(e), []).append(e.get("headers") or {})
    assert ops.get("PutObject"), sorted(ops)
    for h in ops["PutObject"]:
        assert h.get("x-amz-server-side-encryption") == "aws:kms", h
        assert h.get("x-amz-server-side-encryption-aws-kms-key-id") == kms, h
        assert h.get("x-amz-storage-class") == "STANDARD", h
    for e in log:
        h = e.get("headers") or {}
        assert h.get("x-amz-expected-bucket-owner") == owner, (F.operation(e), h)
        assert h.get("user-agent", "").startswith("s3-csi-driver/2.0 k8s/1.30 s3flash/"), h
    gets = [e for e in log if e["method"] == "GET" and e["path"] == f"/{bucket}/ro/faulty.bin"]
    assert len(gets) in (4, 8), len(gets)   # 4 attempts a read (the kernel may ask twice)
    h = s3.head_object(Bucket=bucket, Key="ro/w.bin")
    assert h["ServerSideEncryption"] == "aws:kms" and h["SSEKMSKeyId"] == kms, h


@pytest.mark.parametrize("flag,needle", [
    ("sse=aws:kms:nope", "sse"), ("sse-kms-key-id=a;b", "sse-kms-key-id"),
    ("storage-class=glacier", "storage-class"), ("expected-bucket-owner=1/2", "expected"),
    ("aws-max-attempts=0", "aws-max-attempts"), ("aws-max-attempts=101", "aws-max-attempts"),
    ("user-agent-prefix=$(id)", "user-agent-prefix")])
def test_bad_request_options_are_refused(driver, bucket, endpoint, tmp_path, flag, needle):
    with pytest.raises(grpc.RpcError) as e:
        publish(driver, "vol-bad", tmp_path / "pod", {"bucketName": bucket,
                                                      "endpointUrl": endpoint}, [flag])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert needle in e.value.details(), e.value.details()
    assert driver.daemons() == {}


def test_the_nodes_proxy_reaches_the_daemon(tmp_path, s3, bucket, endpoint, monkeypatch):
    for k in PROXY_VARS:
        monkeypatch.delenv(k, raising=False)
    s3.put_object(Bucket=bucket, Key="px/f.txt", Body=b"through the proxy\n")
    t = tmp_path / "pod"
    with ConnectProxy() as hp, started(tmp_path, env={"HTTP_PROXY": hp.url}) as d:
        publish(d, "vol-px", t, {"bucketName": bucket, "endpointUrl": endpoint,
                                 "prefix": "px/"})
        try:
            assert (t / "f.txt").read_bytes() == b"through the proxy\n"
        finally:
            unpublish(d, "vol-px", t)
        seen = hp.seen()
    host = endpoint.split("://", 1)[1]
    assert f"GET http://{host}/{bucket}/px/f.txt" in seen, seen


@pytest.fixture
def aws_ap(tmp_path, monkeypatch):
    """The access point's AWS host on loopback: (port, cert, handler)."""
    with aws_host.serve(tmp_path, [AP_HOST]) as served:
        yield served


def test_node_publishes_an_access_point_arn(tmp_path, aws_ap):
    port, cert, handler = aws_ap
    env = {"S3FLASH_TEST_CONNECT_TO": f"127.0.0.1:{port}", "AWS_CA_BUNDLE": str(cert)}
    t = tmp_path / "pod"
    with started(tmp_path, env=env) as d:
        publish(d, "vol-arn", t, {"bucketName": AP_ARN, "prefix": "team/"}, ["read-only"])
        try:
            assert is_mount(t)
            assert os.listdir(t) == ["a.bin"]
            assert (t / "a.bin").read_bytes() == aws_host.PAYLOAD
        finally:
            unpublish(d, "vol-arn", t)
    assert handler.seen and all(h["host"] == AP_HOST for _, _, h, _ in handler.seen)
    assert ("GET", "/team/a.bin") in [(m, p.split("?")[0]) for m, p, _, _ in handler.seen]
    assert all("/us-west-2/s3/aws4_request" in h["authorization"]
               for _, _, h, _ in handler.seen)


def test_controller_provisions_and_deletes_on_an_access_point_arn(tmp_path, aws_ap):
    port, cert, handler = aws_ap
    sock = tmp_path / "controller.sock"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
               S3FLASH_TEST_CONNECT_TO=f"127.0.0.1:{port}", AWS_CA_BUNDLE=str(cert))
    with open(tmp_path / "controller.log", "wb") as log:
        p = subprocess.Popen([sys.executable, "-m", "s3flash.csi", "controller", "--endpoint",
                              "unix://%s" % sock], env=env, stdout=log, stderr=log)
    try:
        ch = wait_served("unix://%s" % sock, p, "the controller",
                         log=tmp_path / "controller.log")
        ctl = Stub(ch, "Controller")
        cap = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(),
                                  access_mode=M(mode=M.MULTI_NODE_MULTI_WRITER))
        vol = ctl.CreateVolume(pb.CreateVolumeRequest(
            name="pv-1", volume_capabilities=[cap],
            parameters={"bucketName": AP_ARN, "prefixTemplate": "claims/${pv.name}/"}),
            timeout=60).volume
        assert vol.volume_id == AP_ARN + "/claims/pv-1/"
        assert vol.volume_context["bucketName"] == AP_ARN
        handler.seen.clear()
        ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume_id), timeout=60)
        seen = [(m, p.split("?")[0]) for m, p, h, _ in handler.seen]
        assert ("DELETE", "/claims/pv-1/a.bin") in seen, seen   # the listed object
        assert all(h["host"] == AP_HOST for _, _, h, _ in handler.seen)
        ch.close()
    finally:
        p.terminate()
        p.wait(10)
