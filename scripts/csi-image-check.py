"""Run inside the CSI image's root (scripts/csi-image.sh test): the mounter and the node as
the DaemonSet runs them, a bucket published through the node's socket as kubelet would, its
object read through the target, then unpublished. Standard library + the image's packages."""

import os
import subprocess
import sys
import time
import uuid

import grpc

from s3flash import S3Client
from s3flash.csi.proto import Stub, pb

base = sys.argv[1]
ep = os.environ["AWS_ENDPOINT_URL"]
bucket = "s3f-csi-image-" + uuid.uuid4().hex[:8]
procs = []


def wait(cond, what):
    end = time.monotonic() + 30
    while not cond():
        if time.monotonic() > end:
            raise SystemExit("csi-image-check: timed out waiting for " + what)
        time.sleep(0.05)


subprocess.run(["s3flash", "mb", "s3://" + bucket], check=True)
S3Client(endpoint=ep).upload(bucket, "hello.txt", b"hello from the image\n")
target = os.path.join(base, "pod", "mount")
os.makedirs(os.path.dirname(target))
try:
    for args in (["mounter", "--socket", base + "/run/m.sock", "--state-dir", base + "/state"],
                 ["node", "--endpoint", "unix://%s/csi.sock" % base, "--node-id", "image",
                  "--mounter-socket", base + "/run/m.sock", "--state-dir", base + "/state"]):
        procs.append(subprocess.Popen(["s3flash-csi"] + args))
    wait(lambda: os.path.exists(base + "/csi.sock"), "the node's socket")
    node = Stub(grpc.insecure_channel("unix://%s/csi.sock" % base), "Node")
    M = pb.VolumeCapability.AccessMode
    cap = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(),
                              access_mode=M(mode=M.SINGLE_NODE_WRITER))
    node.NodePublishVolume(pb.NodePublishVolumeRequest(
        volume_id="v", target_path=target, volume_capability=cap,
        volume_context={"bucketName": bucket, "endpointUrl": ep}), timeout=60)
    with open(os.path.join(target, "hello.txt"), "rb") as f:
        assert f.read() == b"hello from the image\n"
    node.NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(volume_id="v", target_path=target),
                             timeout=60)
    assert not os.path.exists(target)
    print("csi-image-check: published, read and unpublished s3://%s in the image root" % bucket)
finally:
    for p in procs:
        p.terminate()
        p.wait(10)
    subprocess.run(["s3flash", "rm", "s3://%s/hello.txt" % bucket])
    subprocess.run(["s3flash", "rb", "s3://" + bucket])
