"""The CSI driver and issue 30: Mountpoint's request options as mountOptions (sse,
sse-kms-key-id, storage-class, expected-bucket-owner, aws-max-attempts, user-agent-prefix)
and the CLI's (acl, sse-kms-encryption-context, bucket-key-enabled, sse-c with its key from
the publish's Secret) reach `s3flash mount` and the wire (tests/servers/faultproxy.py
records each request's x-amz-* headers and User-Agent), an SSE-C key never reaching an
argv, an environment, a log or a file left on the node; bad values are refused before
anything is mounted; the
node's proxy variables reach the daemons (a real proxy on loopback,
tests/servers/connectproxy.py); and an access point ARN as bucketName is published by the
node and provisioned and deleted by the controller (tests/servers/aws_host.py stands in for
the access point's AWS host, reached through a test build's S3FLASH_TEST_CONNECT_TO). All of
it through the driver's real gRPC sockets, as kubelet and the external-provisioner drive it.
"""

import base64
import hashlib
import json
import os
import subprocess
import sys

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("s3flash.csi.csi_pb2", reason="s3flash.csi built without grpcio-tools")

import aws_host  # noqa: E402
from aws_host import AP_ARN, AP_HOST  # noqa: E402
from connectproxy import ConnectProxy  # noqa: E402
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


def publish(driver, vid, target, ctx, flags=(), secrets=None):
    cap = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(mount_flags=list(flags)),
                              access_mode=M(mode=M.SINGLE_NODE_WRITER))
    return driver.stub("Node").NodePublishVolume(pb.NodePublishVolumeRequest(
        volume_id=vid, target_path=str(target), volume_capability=cap,
        volume_context=ctx, secrets=secrets or {}), timeout=60)


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
    ("user-agent-prefix=$(id)", "user-agent-prefix"),
    ("acl=bucket-owner-full", "acl"), ("acl=private;x", "acl"),
    ("sse-kms-encryption-context={\"a\": 1}", "sse-kms-encryption-context"),
    ("sse-kms-encryption-context=[]", "sse-kms-encryption-context"),
    ("bucket-key-enabled=yes", "bucket-key-enabled"),
    ("sse-c=aws:kms", "sse-c"), ("sse-c-key=fileb:///etc/shadow", "sse-c-key")])
def test_bad_request_options_are_refused(driver, bucket, endpoint, tmp_path, flag, needle):
    with pytest.raises(grpc.RpcError) as e:
        publish(driver, "vol-bad", tmp_path / "pod", {"bucketName": bucket,
                                                      "endpointUrl": endpoint}, [flag])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert needle in e.value.details(), e.value.details()
    assert driver.daemons() == {}


MIB = 1 << 20
WRITES = ("PutObject", "CreateMultipartUpload")


def test_canned_acl_on_writes_only(driver, s3, bucket, endpoint, tmp_path):
    s3.put_object(Bucket=bucket, Key="acl/r.txt", Body=b"read me\n")
    t = tmp_path / "pod"
    with faultproxy(endpoint) as proxy:
        publish(driver, "vol-acl", t, {"bucketName": bucket, "endpointUrl": proxy.endpoint,
                                       "prefix": "acl/"},
                ["acl bucket-owner-full-control", "part-size=5M"])
        try:
            (t / "big.bin").write_bytes(os.urandom(11 * MIB))   # multipart at 5 MiB parts
            (t / "small.bin").write_bytes(b"small\n")
            assert (t / "r.txt").read_bytes() == b"read me\n"
        finally:
            unpublish(driver, "vol-acl", t)
        got = F.by_operation(proxy)
    F.seen_on(got, WRITES, "x-amz-acl", "bucket-owner-full-control")
    assert s3.head_object(Bucket=bucket, Key="acl/big.bin")["ContentLength"] == 11 * MIB


def test_kms_encryption_context_and_bucket_key(driver, kms, s3, bucket, endpoint, tmp_path):
    t = tmp_path / "pod"
    with faultproxy(endpoint) as proxy:
        # a JSON value with commas and spaces stays one option
        publish(driver, "vol-ctx", t, {"bucketName": bucket, "endpointUrl": proxy.endpoint,
                                       "prefix": "ctx/"},
                ["sse aws:kms", f"sse-kms-key-id={kms}",
                 'sse-kms-encryption-context={"team": "ml", "run": "7"}',
                 "bucket-key-enabled"])
        try:
            (t / "f.bin").write_bytes(b"with a context\n")
        finally:
            unpublish(driver, "vol-ctx", t)
        got = F.by_operation(proxy)
    want = base64.b64encode(json.dumps({"team": "ml", "run": "7"},
                                       separators=(",", ":")).encode()).decode()
    F.seen_on(got, ("PutObject",), "x-amz-server-side-encryption-context", want)
    F.seen_on(got, ("PutObject",), "x-amz-server-side-encryption-bucket-key-enabled", "true")
    h = s3.head_object(Bucket=bucket, Key="ctx/f.bin")
    assert h["ServerSideEncryption"] == "aws:kms" and h["SSEKMSKeyId"] == kms, h


def _files_under(root):
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p):
                yield p


def test_sse_c_key_from_the_publish_secret(kms, s3, bucket, endpoint, tmp_path):
    key = os.urandom(32)
    b64 = base64.b64encode(key).decode()
    md5 = base64.b64encode(hashlib.md5(key).digest()).decode()
    theirs = os.urandom(3 * MIB + 5)
    s3.put_object(Bucket=bucket, Key="ssec/theirs.bin", Body=theirs,
                  SSECustomerAlgorithm="AES256", SSECustomerKey=key)
    t = tmp_path / "pod"
    mine = os.urandom(11 * MIB)
    # `debug` and the node's S3FLASH_LOG=trace: the daemon logs every request and its own
    # state transitions (to the mounter's log)
    with faultproxy(endpoint) as proxy, started(tmp_path, env={"S3FLASH_LOG": "trace"}) as driver:
        publish(driver, "vol-ssec", t, {"bucketName": bucket, "endpointUrl": proxy.endpoint,
                                        "prefix": "ssec/"}, ["sse-c", "part-size=5M", "debug"],
                secrets={"sse_customer_key": b64})
        try:
            with open(t / "theirs.bin", "rb") as f:
                f.seek(MIB + 3)
                assert f.read(MIB) == theirs[MIB + 3:2 * MIB + 3]   # a ranged read
            (t / "mine.bin").write_bytes(mine)
            (t / "small.bin").write_bytes(b"small\n")
            assert (t / "small.bin").read_bytes() == b"small\n"
            (pid,) = driver.daemons().values()
            secret = (b64.encode(), key)
            for what in ("cmdline", "environ"):
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    seen = f.read()
                assert not any(s in seen for s in secret), what
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            assert argv[argv.index(b"--sse-c") + 1] == b"AES256", argv
            assert argv[argv.index(b"--sse-c-key") + 1].startswith(b"fileb://"), argv
            # nothing the driver keeps on disk holds it: records, the daemon's directory
            for p in _files_under(driver.state):
                with open(p, "rb") as f:
                    assert not any(s in f.read() for s in secret), p
        finally:
            unpublish(driver, "vol-ssec", t)
        got = F.by_operation(proxy)
    keyed = ("PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload",
             "GetObject", "HeadObject")
    F.seen_on(got, keyed, "x-amz-server-side-encryption-customer-algorithm", "AES256")
    F.seen_on(got, keyed, "x-amz-server-side-encryption-customer-key-md5", md5)
    F.seen_on(got, keyed, "x-amz-server-side-encryption-customer-key", b64)
    body = s3.get_object(Bucket=bucket, Key="ssec/mine.bin", SSECustomerAlgorithm="AES256",
                         SSECustomerKey=key)["Body"].read()
    assert body == mine
    with pytest.raises(s3.exceptions.ClientError):  # encrypted at rest: needs the key
        s3.get_object(Bucket=bucket, Key="ssec/small.bin")
    assert any(b"DEBUG -> PutObject PUT" in open(p, "rb").read()
               for p in driver.logs), "the daemon's debug log is not in the mounter's log"
    for p in driver.logs:
        with open(p, "rb") as f:
            text = f.read()
        assert b64.encode() not in text and key not in text, p


def test_sse_c_keys_never_share_a_daemon(driver, bucket, endpoint, tmp_path):
    """A daemon and its cache serve one SSE-C key: the same volume published with another
    key (a rotated Secret, for a new pod) gets a daemon of its own; with the same key, the
    pods share one."""
    k1, k2 = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))
    ctx = {"bucketName": bucket, "endpointUrl": endpoint, "prefix": "share/"}
    pods = [(tmp_path / "a", k1), (tmp_path / "b", k1), (tmp_path / "c", k2)]
    for t, k in pods:
        publish(driver, "vol-share", t, ctx, ["sse-c"], {"sse_customer_key": k})
    try:
        assert len(driver.daemons()) == 2, driver.daemons()
    finally:
        for t, _ in pods:
            unpublish(driver, "vol-share", t)


@pytest.mark.parametrize("flags,secrets,needle", [
    (["sse-c"], {}, "sse_customer_key"),
    (["sse-c"], {"sse_customer_key": base64.b64encode(b"k" * 31).decode()}, "32-byte"),
    (["sse-c"], {"sse_customer_key": "not base64 at all!"}, "32-byte"),
    ([], {"sse_customer_key": base64.b64encode(b"k" * 32).decode()}, "sse-c"),
    (["sse-c", "sse=AES256"], {"sse_customer_key": base64.b64encode(b"k" * 32).decode()},
     "exclude"),
    (["sse-kms-key-id=k1"], {}, "sse aws:kms"),
    (["bucket-key-enabled"], {}, "sse aws:kms")])
def test_bad_sse_c_and_kms_options_are_refused(driver, bucket, endpoint, tmp_path, flags,
                                               secrets, needle):
    with pytest.raises(grpc.RpcError) as e:
        publish(driver, "vol-bad", tmp_path / "pod", {"bucketName": bucket,
                                                      "endpointUrl": endpoint}, flags, secrets)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert needle in e.value.details(), e.value.details()
    for v in secrets.values():
        assert v not in e.value.details()
        for p in driver.logs:
            assert v not in p.read_text(errors="replace"), p
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
    # the controller is the installed package (a wheel: no test hooks), so it reaches the
    # access point's host through a proxy that tunnels every host to aws_host
    proxy = ConnectProxy(redirect=("127.0.0.1", port))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
               HTTPS_PROXY=proxy.url, AWS_CA_BUNDLE=str(cert))
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
        assert vol.volume_id.startswith(AP_ARN + "/claims/pv-1/#")
        assert vol.volume_context["bucketName"] == AP_ARN
        handler.seen.clear()
        ctl.DeleteVolume(pb.DeleteVolumeRequest(volume_id=vol.volume_id), timeout=60)
        seen = [(m, p.split("?")[0]) for m, p, h, _ in handler.seen]
        # the listed object (in one DeleteObjects), then the owner record
        assert [b for m, _, _, b in handler.seen if m == "POST" and
                b"<Key>claims/pv-1/a.bin</Key>" in b], seen
        assert ("DELETE", "/.s3flash-csi/volumes/claims/pv-1/.volume") in seen, seen
        assert all(h["host"] == AP_HOST for _, _, h, _ in handler.seen)
        assert f"CONNECT {AP_HOST}:443" in proxy.seen()
        ch.close()
    finally:
        p.terminate()
        p.wait(10)
        proxy.stop()
