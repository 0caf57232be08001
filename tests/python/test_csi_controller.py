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


def create(ctl, name, params, pv=None, cap=CAP):
    """CreateVolume as the external-provisioner makes it for claim team-a/NAME (its PV name
    pvc-NAME, or `pv`: a claim made again has a new uid, so a new PV name)."""
    pv = pv or "pvc-" + name
    meta = {"csi.storage.k8s.io/pvc/name": name, "csi.storage.k8s.io/pvc/namespace": "team-a",
            "csi.storage.k8s.io/pv/name": pv}
    return ctl.CreateVolume(pb.CreateVolumeRequest(
        name=pv, volume_capabilities=[cap], parameters=dict(meta, **params)),
        timeout=30).volume


def keys(s3, bucket, prefix):
    r = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for o in r.get("Contents", []))


def refused(code, fn, *a, **kw):
    with pytest.raises(grpc.RpcError) as e:
        fn(*a, **kw)
    assert e.value.code() == code, e.value.details()
    return e.value.details()


def test_capabilities(controller, bucket, endpoint):
    ctl, ident = controller
    caps = ident.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest()).capabilities
    assert [c.service.type for c in caps] == [pb.PluginCapability.Service.CONTROLLER_SERVICE]
    rpcs = ctl.ControllerGetCapabilities(pb.ControllerGetCapabilitiesRequest()).capabilities
    assert [c.rpc.type for c in rpcs] == [pb.ControllerServiceCapability.RPC.CREATE_DELETE_VOLUME]
    params = {"bucketName": bucket, "endpointUrl": endpoint}
    vol = create(ctl, "caps", params)
    validate = lambda vid, caps: ctl.ValidateVolumeCapabilities(  # noqa: E731
        pb.ValidateVolumeCapabilitiesRequest(volume_id=vid, volume_capabilities=caps),
        timeout=30)
    ok = validate(vol.volume_id, [CAP])
    assert list(ok.confirmed.volume_capabilities) == [CAP]
    # what the node refuses (options.check_capability, the mount options): not confirmed
    # here, refused by CreateVolume
    block = pb.VolumeCapability(block=pb.VolumeCapability.BlockVolume(),
                                access_mode=M(mode=M.SINGLE_NODE_WRITER))
    ext4 = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(fs_type="ext4"),
                               access_mode=M(mode=M.SINGLE_NODE_WRITER))
    bad_flag = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(
        mount_flags=["allow-everything"]), access_mode=M(mode=M.SINGLE_NODE_WRITER))
    for cap, needle in ((block, "block"), (ext4, "ext4"), (bad_flag, "allow-everything")):
        no = validate(vol.volume_id, [CAP, cap])
        assert not no.HasField("confirmed") and needle in no.message, no.message
        assert needle in refused(grpc.StatusCode.INVALID_ARGUMENT, create, ctl, "caps2",
                                 params, cap=cap)
    # no capabilities: INVALID_ARGUMENT; a volume that does not exist: NOT_FOUND
    refused(grpc.StatusCode.INVALID_ARGUMENT, validate, vol.volume_id, [])
    base = vol.volume_id.split("#")[0]
    for vid in (base + "#0123456789abcdef", "no-such-volume", bucket + "/never/made/#00"):
        refused(grpc.StatusCode.NOT_FOUND, validate, vid, [CAP])
    ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume_id), timeout=60)
    refused(grpc.StatusCode.NOT_FOUND, validate, vol.volume_id, [CAP])


def test_create_publish_delete(controller, s3, bucket, endpoint, tmp_path):
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("publishing mounts: needs root and /dev/fuse")
    ctl, _ = controller
    params = {"bucketName": bucket, "endpointUrl": endpoint,
              "prefixTemplate": "${pvc.namespace}/${pvc.name}/", "cache": "dyn"}
    vol = create(ctl, "data", params)
    assert vol.volume_id.startswith(bucket + "/team-a/data/#")
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
    ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=keep.volume_id), timeout=60)
    assert keys(s3, bucket, "") == []


def test_default_prefix_is_the_volumes_own(controller, s3, bucket, endpoint):
    """R2, the default prefixTemplate: a claim deleted with Retain and made again under the
    same name (a new uid, so a new PV name) gets a prefix of its own: it does not see the old
    claim's data, and the old volume's DeleteVolume, late, leaves it alone."""
    ctl, _ = controller
    params = {"bucketName": bucket, "endpointUrl": endpoint}
    old = create(ctl, "run", params, pv="pvc-1111")
    assert old.volume_context["prefix"] == "team-a/run/pvc-1111/"
    s3.put_object(Bucket=bucket, Key="team-a/run/pvc-1111/old.bin", Body=b"old claim")
    new = create(ctl, "run", params, pv="pvc-2222")  # Retain: the old one was never deleted
    assert new.volume_context["prefix"] == "team-a/run/pvc-2222/"
    assert keys(s3, bucket, "team-a/run/pvc-2222/") == []
    s3.put_object(Bucket=bucket, Key="team-a/run/pvc-2222/new.bin", Body=b"new claim")
    ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=old.volume_id), timeout=60)
    assert keys(s3, bucket, "team-a/run/") == ["team-a/run/pvc-2222/new.bin"]
    ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=new.volume_id), timeout=60)
    assert keys(s3, bucket, "") == []


def test_late_delete_of_a_recreated_claim(controller, s3, bucket, endpoint):
    """R2 with a prefixTemplate that repeats across claims of the same name: the old volume's
    DeleteVolume arriving again (late, or retried) after the claim was made again never
    deletes the new claim's objects; while a volume holds a prefix (Retain), another claim
    of that prefix, or of a prefix in or around it, is refused rather than shown its data."""
    ctl, _ = controller
    params = {"bucketName": bucket, "endpointUrl": endpoint,
              "prefixTemplate": "${pvc.namespace}/${pvc.name}/"}
    delete = lambda v: ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=v),  # noqa: E731
                                        timeout=60)
    old = create(ctl, "again", params, pv="pvc-1111")
    s3.put_object(Bucket=bucket, Key="team-a/again/old.bin", Body=b"old claim")
    # Delete: the old claim's objects go; the claim made again gets the same prefix
    delete(old.volume_id)
    assert keys(s3, bucket, "team-a/") == []
    new = create(ctl, "again", params, pv="pvc-2222")
    assert new.volume_context["prefix"] == "team-a/again/"
    s3.put_object(Bucket=bucket, Key="team-a/again/new.bin", Body=b"new claim")
    # the old volume's DeleteVolume again, late: OK, and the new claim's objects stay; the
    # same for the id of the driver's earlier form (BUCKET/PREFIX/, no owner record)
    delete(old.volume_id)
    delete(bucket + "/team-a/again/")
    assert keys(s3, bucket, "team-a/") == ["team-a/again/new.bin"]
    assert new.volume_id != old.volume_id
    # Retain: the new volume holds its prefix; the claim made again once more is refused,
    # not shown its data, and so are prefixes in or around it
    msg = refused(grpc.StatusCode.FAILED_PRECONDITION, create, ctl, "again", params,
                  pv="pvc-3333")
    assert "pvc-2222" in msg and "team-a/again/" in msg
    assert "pvc-2222" in refused(grpc.StatusCode.FAILED_PRECONDITION, create, ctl, "x",
                                 dict(params, prefixTemplate="team-a/again/${pv.name}/"))
    assert "pvc-2222" in refused(grpc.StatusCode.FAILED_PRECONDITION, create, ctl, "x",
                                 dict(params, prefixTemplate="${pvc.namespace}/"))
    delete(new.volume_id)
    delete(new.volume_id)  # twice: OK
    assert keys(s3, bucket, "") == []


def test_delete_keeps_the_prefixes_of_other_volumes(controller, s3, bucket, endpoint):
    """A volume of the earlier form (BUCKET/PREFIX/, no owner record: made before owner
    records) whose prefix holds a newer volume's: its DeleteVolume deletes its own objects
    and leaves the newer volume's prefix and record."""
    ctl, _ = controller
    inner = create(ctl, "inner", {"bucketName": bucket, "endpointUrl": endpoint,
                                  "prefixTemplate": "old/${pv.name}/"})
    s3.put_object(Bucket=bucket, Key="old/own.bin", Body=b"the old volume's")
    s3.put_object(Bucket=bucket, Key="old/pvc-inner/data.bin", Body=b"the inner volume's")
    ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=bucket + "/old/"), timeout=60)
    assert keys(s3, bucket, "old/") == ["old/pvc-inner/data.bin"]
    ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=inner.volume_id), timeout=60)
    assert keys(s3, bucket, "") == []


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
