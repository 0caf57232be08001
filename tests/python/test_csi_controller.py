"""Dynamic provisioning: the CSI Controller service of s3flash-csi (CreateVolume,
DeleteVolume) over its real unix socket against RGW, and a provisioned volume published by
the node as kubelet would (each claim its own prefix of the StorageClass's bucket)."""

import os
import subprocess
import sys

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("s3flash.csi.csi_pb2", reason="s3flash.csi built without grpcio-tools")

from csi_harness import is_mount, running, wait_served  # noqa: E402
from s3flash.csi.proto import Stub, pb  # noqa: E402

M = pb.VolumeCapability.AccessMode
CAP = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(),
                          access_mode=M(mode=M.MULTI_NODE_MULTI_WRITER))


@pytest.fixture(scope="module")
def controller(tmp_path_factory, endpoint):
    d = tmp_path_factory.mktemp("ctl")
    sock = d / "controller.sock"
    # the store DeleteVolume reaches (it gets no StorageClass parameters)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
               AWS_ENDPOINT_URL=endpoint)
    with open(d / "controller.log", "wb") as log:
        p = subprocess.Popen([sys.executable, "-m", "s3flash.csi", "controller", "--endpoint",
                              "unix://%s" % sock], env=env, stdout=log, stderr=log)
    try:
        ch = wait_served("unix://%s" % sock, p, "the controller", log=d / "controller.log")
    except BaseException:
        p.kill()
        p.wait()
        raise
    yield Stub(ch, "Controller"), Stub(ch, "Identity")
    ch.close()
    p.terminate()
    p.wait(10)


def create(ctl, name, params):
    meta = {"csi.storage.k8s.io/pvc/name": name, "csi.storage.k8s.io/pvc/namespace": "team-a",
            "csi.storage.k8s.io/pv/name": "pvc-" + name}
    return ctl.CreateVolume(pb.CreateVolumeRequest(
        name="pvc-" + name, volume_capabilities=[CAP], parameters=dict(meta, **params)),
        timeout=30).volume


def keys(s3, bucket, prefix):
    r = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for o in r.get("Contents", []))


def test_capabilities(controller):
    ctl, ident = controller
    caps = ident.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest()).capabilities
    assert [c.service.type for c in caps] == [pb.PluginCapability.Service.CONTROLLER_SERVICE]
    rpcs = ctl.ControllerGetCapabilities(pb.ControllerGetCapabilitiesRequest()).capabilities
    assert [c.rpc.type for c in rpcs] == [pb.ControllerServiceCapability.RPC.CREATE_DELETE_VOLUME]
    ok = ctl.ValidateVolumeCapabilities(pb.ValidateVolumeCapabilitiesRequest(
        volume_id="b/p/", volume_capabilities=[CAP]))
    assert list(ok.confirmed.volume_capabilities) == [CAP]
    block = pb.VolumeCapability(block=pb.VolumeCapability.BlockVolume(),
                                access_mode=M(mode=M.SINGLE_NODE_WRITER))
    no = ctl.ValidateVolumeCapabilities(pb.ValidateVolumeCapabilitiesRequest(
        volume_id="b/p/", volume_capabilities=[block]))
    assert not no.HasField("confirmed") and "block" in no.message


def test_create_publish_delete(controller, s3, bucket, endpoint, tmp_path):
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("publishing mounts: needs root and /dev/fuse")
    ctl, _ = controller
    params = {"bucketName": bucket, "endpointUrl": endpoint,
              "prefixTemplate": "${pvc.namespace}/${pvc.name}/", "cache": "dyn"}
    vol = create(ctl, "data", params)
    assert vol.volume_id == bucket + "/team-a/data/"
    assert dict(vol.volume_context) == {"bucketName": bucket, "prefix": "team-a/data/",
                                        "endpointUrl": endpoint, "cache": "dyn"}
    assert create(ctl, "data", params).volume_id == vol.volume_id  # idempotent
    keep = create(ctl, "keep", params)  # reclaimPolicy Retain: DeleteVolume is never called

    with running(tmp_path) as d:
        for v in (vol, keep):
            t = tmp_path / v.volume_id.replace("/", "_")
            d.stub("Node").NodePublishVolume(pb.NodePublishVolumeRequest(
                volume_id=v.volume_id, target_path=str(t), volume_capability=CAP,
                volume_context=v.volume_context), timeout=60)
            (t / "sub").mkdir()
            (t / "sub" / "file.bin").write_bytes(b"x" * 1000)
            (t / "top.txt").write_bytes(b"claim data")
            d.stub("Node").NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(
                volume_id=v.volume_id, target_path=str(t)), timeout=60)
            assert not is_mount(t)
    assert keys(s3, bucket, "team-a/data/") == ["team-a/data/sub/file.bin", "team-a/data/top.txt"]
    # reclaimPolicy Delete: the prefix's objects go, the other claim's stay
    ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume_id), timeout=60)
    assert keys(s3, bucket, "team-a/data/") == []
    assert keys(s3, bucket, "team-a/keep/") == ["team-a/keep/sub/file.bin", "team-a/keep/top.txt"]
    ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume_id), timeout=60)  # again: OK
    for k in keys(s3, bucket, "team-a/"):
        s3.delete_object(Bucket=bucket, Key=k)


@pytest.mark.parametrize("params,code,needle", [
    ({}, grpc.StatusCode.INVALID_ARGUMENT, "bucketName"),
    ({"bucketName": "no-such-bucket-s3f-csi"}, grpc.StatusCode.NOT_FOUND, "NoSuchBucket"),
    ({"prefixTemplate": "${pvc.namespace}/../x/"}, grpc.StatusCode.INVALID_ARGUMENT, "'..'"),
    ({"prefixTemplate": "${pod.name}/"}, grpc.StatusCode.INVALID_ARGUMENT, "pod.name"),
    ({"bucket": "x"}, grpc.StatusCode.INVALID_ARGUMENT, "unknown StorageClass parameter(s) bucket"),
])
def test_create_refusals(controller, bucket, endpoint, params, code, needle):
    ctl, _ = controller
    p = dict({"bucketName": bucket, "endpointUrl": endpoint}, **params)
    if not params.get("bucketName") and "bucketName" not in params and not params:
        del p["bucketName"]
    with pytest.raises(grpc.RpcError) as e:
        create(ctl, "bad", p)
    assert e.value.code() == code and needle in e.value.details(), e.value.details()
