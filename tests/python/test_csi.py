"""The CSI driver (s3flash-csi, docs/KUBERNETES.md) driven as kubelet drives it: a gRPC client
over the node process's real unix socket, real FUSE mounts (root, /dev/fuse), real
`s3flash mount` daemons started by the mounter process, against RGW."""

import errno
import json
import os
import signal
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("s3flash.csi.csi_pb2", reason="s3flash.csi built without grpcio-tools")

from conftest import faultproxy  # noqa: E402
from csi_harness import (is_mount, mountinfo, pid_alive, running, tokens,  # noqa: E402
                         wait_for)
from s3flash.csi.proto import pb  # noqa: E402

if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
    pytest.skip("the CSI driver mounts: needs root and /dev/fuse", allow_module_level=True)

M = pb.VolumeCapability.AccessMode
OBJECTS = {"a.bin": os.urandom(3 << 20) + b"end", "dir/b.txt": b"hello from s3\n",
           "dir/sub/c.bin": os.urandom(70001)}


def capability(flags=(), mode=M.SINGLE_NODE_WRITER):
    return pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(mount_flags=list(flags)),
                               access_mode=M(mode=mode))


def publish(driver, vid, target, ctx, flags=(), readonly=False, secrets=None,
            mode=M.SINGLE_NODE_WRITER, timeout_s=60):
    return driver.stub("Node").NodePublishVolume(pb.NodePublishVolumeRequest(
        volume_id=vid, target_path=str(target), volume_capability=capability(flags, mode),
        readonly=readonly, secrets=secrets or {}, volume_context=ctx), timeout=timeout_s)


def unpublish(driver, vid, target, timeout_s=60):
    return driver.stub("Node").NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(
        volume_id=vid, target_path=str(target)), timeout=timeout_s)


def read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def filled(s3, bucket):
    for k, v in OBJECTS.items():
        s3.put_object(Bucket=bucket, Key=k, Body=v)
    return bucket


@pytest.fixture
def driver(tmp_path):
    with running(tmp_path) as d:
        yield d
        if d.node.poll() is None:  # what a failed test left published
            for rec in (d.state / "node" / "targets").glob("*.json"):
                r = json.loads(rec.read_text())
                try:
                    unpublish(d, r["volume_id"], r["target"])
                except grpc.RpcError:
                    pass


@pytest.fixture
def ctx(filled, endpoint):
    return {"bucketName": filled, "endpointUrl": endpoint}


def test_identity_and_node_info(driver):
    info = driver.stub("Identity").GetPluginInfo(pb.GetPluginInfoRequest())
    assert info.name == "csi.s3flash.io" and info.vendor_version
    assert driver.stub("Identity").Probe(pb.ProbeRequest()).ready.value
    caps = driver.stub("Identity").GetPluginCapabilities(pb.GetPluginCapabilitiesRequest())
    assert list(caps.capabilities) == []  # the node plugin serves no Controller
    assert driver.stub("Node").NodeGetInfo(pb.NodeGetInfoRequest()).node_id == "test-node"
    ncaps = driver.stub("Node").NodeGetCapabilities(pb.NodeGetCapabilitiesRequest())
    assert [c.rpc.type for c in ncaps.capabilities] == [pb.NodeServiceCapability.RPC.GET_VOLUME_STATS]


def test_volume_life(driver, ctx, s3, filled, tmp_path):
    t1, t2, t3 = tmp_path / "pod1" / "mount", tmp_path / "pod2" / "mount", tmp_path / "pod3"
    for t in (t1, t2):
        t.parent.mkdir()
    try:
        flags = ["allow-delete", "allow-overwrite", "uid=0", "--metadata-ttl=0"]
        publish(driver, "vol-a", t1, ctx, flags)
        assert is_mount(t1)
        for k, v in OBJECTS.items():
            assert read(t1 / k) == v, k
        assert sorted(os.listdir(t1)) == ["a.bin", "dir"]
        # a second publish: the same arguments succeed, others are ALREADY_EXISTS
        publish(driver, "vol-a", t1, ctx, flags)
        with pytest.raises(grpc.RpcError) as e:
            publish(driver, "vol-a", t1, ctx, flags, readonly=True)
        assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS and str(t1) in e.value.details()
        # writes go to the bucket
        (t1 / "written.txt").write_bytes(b"from a pod\n")
        assert s3.get_object(Bucket=filled, Key="written.txt")["Body"].read() == b"from a pod\n"
        # the same volume for a second pod: the same daemon
        publish(driver, "vol-a", t2, ctx, flags)
        assert read(t2 / "dir" / "b.txt") == OBJECTS["dir/b.txt"]
        daemons = driver.daemons()
        assert len(daemons) == 1, daemons
        pid = next(iter(daemons.values()))
        # readonly: its own daemon, writes refused
        publish(driver, "vol-a", t3, ctx, flags, readonly=True)
        assert len(driver.daemons()) == 2
        assert read(t3 / "a.bin") == OBJECTS["a.bin"]
        with pytest.raises(OSError) as w:
            (t3 / "nope.txt").write_bytes(b"x")
        assert w.value.errno == errno.EROFS
        # stats of a published volume; NOT_FOUND of another path
        st = driver.stub("Node").NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(
            volume_id="vol-a", volume_path=str(t1)))
        assert {u.unit for u in st.usage} == {pb.VolumeUsage.BYTES, pb.VolumeUsage.INODES}
        with pytest.raises(grpc.RpcError) as e:
            driver.stub("Node").NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(
                volume_id="vol-a", volume_path=str(tmp_path)))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        # unpublish one target: the other goes on with the same daemon
        unpublish(driver, "vol-a", t1)
        assert not is_mount(t1) and not t1.exists()
        assert read(t2 / "a.bin") == OBJECTS["a.bin"] and pid_alive(pid)
        unpublish(driver, "vol-a", t2)
        assert not is_mount(t2)
        wait_for(lambda: not pid_alive(pid), 20, "the unused daemon to end")
        unpublish(driver, "vol-a", t3)
        assert driver.daemons() == {}
        # unpublish of what is not published: OK
        unpublish(driver, "vol-a", t1)
        unpublish(driver, "vol-a", tmp_path / "never")
        assert not [m for m in mountinfo() if m.startswith(str(tmp_path))]
    finally:
        s3.delete_object(Bucket=filled, Key="written.txt")


@pytest.mark.parametrize("case", [
    "no-bucket", "unknown-option", "host-path-option", "log-file-option", "no-such-bucket",
    "target-is-file", "relative-target", "block", "no-capability", "bad-value",
    "unknown-attribute", "cache-path", "fs-ext4", "mount-group", "single-node-single-writer"])
def test_bad_input(driver, ctx, tmp_path, case):
    target = tmp_path / "pod" / "mount"
    target.parent.mkdir()
    c, flags, want = dict(ctx), [], grpc.StatusCode.INVALID_ARGUMENT
    req = dict(volume_id="vol-bad", target_path=str(target))
    if case == "no-bucket":
        del c["bucketName"]
        needle = "bucketName"
    elif case == "unknown-option":
        flags, needle = ["allow-everything"], "allow-everything"
    elif case == "host-path-option":
        flags, needle = ["log-directory=/etc"], "host directory"
    elif case == "log-file-option":
        flags, needle = ["--log-file /etc/passwd"], "host file"
    elif case == "no-such-bucket":
        c["bucketName"] = "no-such-bucket-" + uuid.uuid4().hex[:8]
        want, needle = grpc.StatusCode.NOT_FOUND, "NoSuchBucket"
    elif case == "target-is-file":
        target.write_bytes(b"")
        want, needle = grpc.StatusCode.FAILED_PRECONDITION, "not a directory"
    elif case == "relative-target":
        req["target_path"], needle = "pod/mount", "absolute"
    elif case == "bad-value":
        flags, needle = ["uid=-1"], "uid"
    elif case == "unknown-attribute":
        c["hostPath"], needle = "/etc", "hostPath"
    elif case == "cache-path":
        c["cache"], needle = "/var/lib", "not a path"
    elif case == "no-capability":
        needle = "capability"
    else:  # beyond the driver's capabilities: the spec's FAILED_PRECONDITION
        want = grpc.StatusCode.FAILED_PRECONDITION
        needle = {"block": "mount volumes", "fs-ext4": "'ext4'",
                  "mount-group": "volume_mount_group",
                  "single-node-single-writer": "SINGLE_NODE_MULTI_WRITER"}[case]
    cap = capability(flags)
    if case == "block":
        cap = pb.VolumeCapability(block=pb.VolumeCapability.BlockVolume(),
                                  access_mode=M(mode=M.SINGLE_NODE_WRITER))
    elif case == "fs-ext4":
        cap.mount.fs_type = "ext4"
    elif case == "mount-group":
        cap.mount.volume_mount_group = "1000"
    elif case == "single-node-single-writer":
        cap.access_mode.mode = M.SINGLE_NODE_SINGLE_WRITER
    with pytest.raises(grpc.RpcError) as e:
        driver.stub("Node").NodePublishVolume(pb.NodePublishVolumeRequest(
            volume_capability=None if case == "no-capability" else cap, volume_context=c,
            **req), timeout=60)
    assert e.value.code() == want, e.value.details()
    assert needle in e.value.details()
    # nothing mounted (only what is under this test's directory: other tests on the machine
    # mount and unmount elsewhere meanwhile)
    assert not [m for m in mountinfo() if m.startswith(str(tmp_path) + "/")]
    assert driver.daemons() == {}
    assert not list((driver.state / "node" / "sources").iterdir())
    assert not (target.exists() and target.is_dir())
    if case == "no-such-bucket":  # the daemon's own report is in the mounter's (container) log
        assert "NoSuchBucket" in (driver.root / "mounter.log").read_text()


def test_node_sigkill_keeps_volumes(driver, ctx, s3, filled, tmp_path):
    """Restarting the node process never interrupts a published volume."""
    ta, tb = tmp_path / "a", tmp_path / "b"
    try:
        publish(driver, "vol-1", ta, ctx, ["allow-overwrite"])
        publish(driver, "vol-2", tb, dict(ctx, prefix="dir/"))
        pids = driver.daemons()
        assert len(pids) == 2
        driver.kill("node")
        assert read(ta / "a.bin") == OBJECTS["a.bin"]
        assert read(tb / "b.txt") == OBJECTS["dir/b.txt"]
        (tb / "after-kill.txt").write_bytes(b"still here")
        assert s3.get_object(Bucket=filled, Key="dir/after-kill.txt")["Body"].read() == \
            b"still here"
        driver.start_node()
        publish(driver, "vol-1", ta, ctx, ["allow-overwrite"])  # the same: OK, no new daemon
        assert driver.daemons() == pids
        unpublish(driver, "vol-1", ta)
        unpublish(driver, "vol-2", tb)
        assert not is_mount(ta) and not is_mount(tb)
        for pid in pids.values():
            wait_for(lambda: not pid_alive(pid), 20, "daemon %d to end" % pid)
    finally:
        s3.delete_object(Bucket=filled, Key="dir/after-kill.txt")


def test_mounter_restart_readopts(driver, ctx, tmp_path):
    t = tmp_path / "m"
    publish(driver, "vol-m", t, ctx)
    pids = driver.daemons()
    driver.kill("mounter")
    driver.start_mounter()
    assert driver.daemons() == pids  # re-adopted from the state dir
    assert read(t / "dir" / "b.txt") == OBJECTS["dir/b.txt"]
    unpublish(driver, "vol-m", t)
    pid = next(iter(pids.values()))
    wait_for(lambda: not pid_alive(pid), 20, "the re-adopted daemon to end")
    assert driver.daemons() == {}
    # a daemon that ends while its mounter is down: the mounter that comes back reports it
    publish(driver, "vol-m", t, ctx)
    ((key, pid),) = driver.daemons().items()
    driver.kill("mounter")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not pid_alive(pid), 20, "the daemon to end")
    driver.start_mounter()
    lost = driver.mounter_call({"op": "list"})["lost"]
    assert list(lost) == [key] and lost[key]["pid"] == pid
    assert "is gone" in (driver.root / "mounter.log").read_text()
    unpublish(driver, "vol-m", t)
    assert not is_mount(t)


def test_cache_survives_republish(driver, filled, endpoint, tmp_path):
    t = tmp_path / "c"
    with faultproxy(endpoint) as proxy:
        c = {"bucketName": filled, "endpointUrl": proxy.endpoint, "cache": "test-cache",
             "cacheMaxSize": "1G"}
        for _ in range(2):
            publish(driver, "vol-c", t, c)
            assert read(t / "a.bin") == OBJECTS["a.bin"]
            unpublish(driver, "vol-c", t)
        gets = [e for e in proxy.stats()["log"]
                if e["method"] == "GET" and e["path"].endswith("/a.bin")]
        # the first publish fetched the object; the second read it from the cache
        assert gets, "no GET of a.bin at all"
        first_done = max(e["time"] for e in gets)
        lists = [e for e in proxy.stats()["log"] if e["method"] == "GET" and
                 "list-type" in (e["query"] or "") and e["time"] > first_done]
        assert lists, "the second publish never reached the proxy"
        assert not [e for e in gets if e["time"] > min(x["time"] for x in lists)]
        cache = driver.state / "cache" / "test-cache"
        assert cache.is_dir() and any(cache.rglob("*"))


class _STS(BaseHTTPRequestHandler):
    """AssumeRoleWithWebIdentity: the good token gets the second RGW user's keys."""

    def log_message(self, *a):
        pass

    def do_POST(self):
        p = {k: v[-1] for k, v in parse_qs(self.rfile.read(
            int(self.headers.get("Content-Length") or 0)).decode()).items()}
        srv = self.server
        srv.calls.append(p.get("RoleArn"))
        if srv.answers:  # scripted: (access key, secret key, seconds to expiry)
            a, k, secs = srv.answers.pop(0)
            srv.keys = (a, k)
            srv.expiration = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + secs))
        if p.get("Action") != "AssumeRoleWithWebIdentity" or p.get("WebIdentityToken") != srv.token:
            body = ("<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>"
                    "<Message>Incorrect token audience</Message></Error>"
                    "<RequestId>sts-req-1</RequestId></ErrorResponse>")
            status = 400
        else:
            body = ("<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>"
                    "<Credentials><AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s"
                    "</SecretAccessKey><SessionToken></SessionToken>"
                    "<Expiration>%s</Expiration></Credentials>"
                    "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
                    % (srv.keys + (srv.expiration,)))
            status = 200
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def sts(rgw):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _STS)
    srv.token, srv.keys, srv.calls = "good-token", (rgw.other_access_key, rgw.other_secret_key), []
    srv.expiration, srv.answers = "2099-01-01T00:00:00Z", []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


def test_pod_credentials(s3_other, rgw, endpoint, sts, tmp_path):
    """authenticationSource: pod: the token becomes the role's credentials (STS); the
    volume's requests are signed with them (seen at the proxy); a bad token is refused."""
    bucket = "s3fpy-csi-pod-" + uuid.uuid4().hex[:8]
    s3_other.create_bucket(Bucket=bucket)
    s3_other.put_object(Bucket=bucket, Key="private.txt", Body=b"the role's data")
    t = tmp_path / "p"
    try:
        with running(tmp_path, node_args=["--sts-endpoint",
                                          "http://127.0.0.1:%d/" % sts.server_port]) as d, \
                faultproxy(endpoint) as proxy:
            c = {"bucketName": bucket, "endpointUrl": proxy.endpoint,
                 "authenticationSource": "pod", "roleArn": "arn:aws:iam::1:role/reader",
                 "csi.storage.k8s.io/pod.namespace": "ns",
                 "csi.storage.k8s.io/serviceAccount.name": "sa",
                 "csi.storage.k8s.io/pod.uid": "uid-1",
                 "csi.storage.k8s.io/serviceAccount.tokens": tokens("good-token")}
            publish(d, "vol-p", t, c)
            assert read(t / "private.txt") == b"the role's data"
            keys = {e.get("access_key") for e in proxy.stats()["log"]}
            assert keys == {rgw.other_access_key}, keys
            assert sts.calls == ["arn:aws:iam::1:role/reader"]
            # requiresRepublish: the same publish with a fresh token asks STS again
            publish(d, "vol-p", t, dict(c, **{"csi.storage.k8s.io/serviceAccount.tokens":
                                              tokens("good-token")}))
            assert len(sts.calls) == 2
            unpublish(d, "vol-p", t)
            with pytest.raises(grpc.RpcError) as e:
                publish(d, "vol-p", t, dict(c, **{"csi.storage.k8s.io/serviceAccount.tokens":
                                                  tokens("wrong-token")}))
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "InvalidIdentityToken" in e.value.details()
            assert "wrong-token" not in e.value.details()
            assert not is_mount(t)
            # nodePublishSecretRef: the secret's keys sign
            proxy.reset()
            publish(d, "vol-s", t, {"bucketName": bucket, "endpointUrl": proxy.endpoint},
                    secrets={"key_id": rgw.other_access_key,
                             "access_key": rgw.other_secret_key})
            assert read(t / "private.txt") == b"the role's data"
            assert {e.get("access_key") for e in proxy.stats()["log"]} == {rgw.other_access_key}
            # kubelet's republish with a rotated Secret: the same publish, still mounted
            publish(d, "vol-s", t, {"bucketName": bucket, "endpointUrl": proxy.endpoint},
                    secrets={"key_id": rgw.other_access_key, "access_key": "rotated"})
            assert read(t / "private.txt") == b"the role's data"
            unpublish(d, "vol-s", t)
            for p in d.logs:  # no secret in the driver's logs
                text = p.read_text()
                assert rgw.other_secret_key not in text and "good-token" not in text
    finally:
        s3_other.delete_object(Bucket=bucket, Key="private.txt")
        s3_other.delete_bucket(Bucket=bucket)


class _KubeAPI(BaseHTTPRequestHandler):
    """GET /api/v1/namespaces/NS/serviceaccounts/NAME with the role annotation."""

    def log_message(self, *a):
        pass

    def do_GET(self):
        parts = self.path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "serviceaccounts":
            ann = {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/" + parts[5]} \
                if parts[5] != "plain" else {}
            status, body = 200, {"kind": "ServiceAccount", "metadata": {
                "name": parts[5], "namespace": parts[3], "annotations": ann}}
        else:
            status, body = 404, {"kind": "Status"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_pod_credentials_refresh_and_role_lookup(s3, rgw, endpoint, sts, tmp_path):
    """The role comes from the service account's annotation (the API server); credentials
    about to expire are replaced by those of the next republish, which the running daemon
    fetches through credential_process (its requests change keys at the proxy)."""
    bucket = "s3fpy-csi-refresh-" + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=bucket, ACL="public-read")
    s3.put_object(Bucket=bucket, Key="f.txt", Body=b"data", ACL="public-read")
    api = ThreadingHTTPServer(("127.0.0.1", 0), _KubeAPI)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    t = tmp_path / "r"
    sts.answers = [(rgw.access_key, rgw.secret_key, 6),
                   (rgw.other_access_key, rgw.other_secret_key, 3600)]
    try:
        with running(tmp_path, env={"S3FLASH_CSI_KUBE_API": "http://127.0.0.1:%d"
                                    % api.server_port},
                     node_args=["--sts-endpoint", "http://127.0.0.1:%d/" % sts.server_port]) \
                as d, faultproxy(endpoint) as proxy:
            c = {"bucketName": bucket, "endpointUrl": proxy.endpoint,
                 "authenticationSource": "pod",
                 "csi.storage.k8s.io/pod.namespace": "ns",
                 "csi.storage.k8s.io/serviceAccount.name": "trainer",
                 "csi.storage.k8s.io/serviceAccount.tokens": tokens("good-token")}
            publish(d, "vol-r", t, c, ["metadata-ttl=0"])
            assert sts.calls == ["arn:aws:iam::1:role/trainer"]
            assert read(t / "f.txt") == b"data"
            assert {e.get("access_key") for e in proxy.stats()["log"]} == {rgw.access_key}
            publish(d, "vol-r", t, c, ["metadata-ttl=0"])  # kubelet's republish
            assert len(sts.calls) == 2

            def refreshed():
                os.listdir(t)  # a LIST each time (metadata-ttl=0)
                return proxy.stats()["log"][-1].get("access_key") == rgw.other_access_key
            wait_for(refreshed, 30, "the daemon to sign with the refreshed credentials")
            unpublish(d, "vol-r", t)
            # a service account without the annotation: FAILED_PRECONDITION, naming it
            with pytest.raises(grpc.RpcError) as e:
                publish(d, "vol-r", t, dict(c, **{
                    "csi.storage.k8s.io/serviceAccount.name": "plain"}))
            assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "eks.amazonaws.com/role-arn" in e.value.details()
    finally:
        api.shutdown()
        s3.delete_object(Bucket=bucket, Key="f.txt")
        s3.delete_bucket(Bucket=bucket)


def test_reader_only_access_mode(driver, ctx, tmp_path):
    t = tmp_path / "ro"
    publish(driver, "vol-ro", t, ctx, ["allow-delete"], mode=M.MULTI_NODE_READER_ONLY)
    try:
        assert read(t / "dir" / "b.txt") == OBJECTS["dir/b.txt"]
        with pytest.raises(OSError) as e:
            os.unlink(t / "a.bin")
        assert e.value.errno == errno.EROFS
    finally:
        unpublish(driver, "vol-ro", t)


def test_daemon_gone(driver, ctx, tmp_path):
    """A mount whose daemon ended (a mounter container restarted): the republish says so,
    unpublish cleans up, and the next publish of the volume gets a fresh daemon."""
    t1, t2 = tmp_path / "d1", tmp_path / "d2"
    publish(driver, "vol-d", t1, ctx)
    (pid,) = driver.daemons().values()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not driver.daemons(), 20, "the mounter to see its daemon end")
    with pytest.raises(grpc.RpcError) as e:
        publish(driver, "vol-d", t1, ctx)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "daemon is gone" in e.value.details()
    publish(driver, "vol-d", t2, ctx)  # the same volume: a new daemon, a new mount
    assert read(t2 / "dir" / "b.txt") == OBJECTS["dir/b.txt"]
    (pid2,) = driver.daemons().values()
    assert pid2 != pid
    unpublish(driver, "vol-d", t1)
    assert not is_mount(t1)
    unpublish(driver, "vol-d", t2)
    wait_for(lambda: not pid_alive(pid2), 20, "the new daemon to end")


def test_interrupted_publish_leaks_nothing(driver, ctx, tmp_path):
    """A node killed between mounting a volume and recording it: the next node process
    releases the unrecorded mount, and unpublishing the target ends the daemon."""
    t = tmp_path / "i"
    publish(driver, "vol-i", t, ctx)
    (pid,) = driver.daemons().values()
    driver.kill("node")
    for rec in (driver.state / "node" / "targets").glob("*.json"):
        rec.unlink()  # as if the node died before writing it
    driver.start_node()
    assert not list((driver.state / "node" / "sources").iterdir())
    assert read(t / "dir" / "b.txt") == OBJECTS["dir/b.txt"]  # the pod's mount goes on
    unpublish(driver, "vol-i", t)
    assert not is_mount(t)
    wait_for(lambda: not pid_alive(pid), 20, "the daemon to end")


def test_s3flash_mount_refuses_a_descriptor_that_is_not_fuse(filled, endpoint, tmp_path):
    """`s3flash mount BUCKET /dev/fd/N` serves only an open /dev/fuse descriptor."""
    import subprocess
    from csi_harness import s3flash_cli
    cli = s3flash_cli()
    if not cli:
        pytest.skip("no s3flash CLI in the build directory")
    with open(tmp_path / "f", "w") as f:
        p = subprocess.run([cli, "--endpoint-url", endpoint, "mount", filled,
                            "/dev/fd/%d" % f.fileno(), "--foreground"], pass_fds=(f.fileno(),),
                           capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    assert "not an open /dev/fuse descriptor" in p.stderr


def test_target_through_a_symlink(driver, ctx, tmp_path):
    """kubelet's directory may be a symlink: the target is found in the mount table anyway."""
    (tmp_path / "real").mkdir()
    (tmp_path / "kubelet").symlink_to(tmp_path / "real")
    t = tmp_path / "kubelet" / "vol"
    publish(driver, "vol-l", t, ctx)
    assert is_mount(tmp_path / "real" / "vol")
    publish(driver, "vol-l", t, ctx)  # the same publish: found
    unpublish(driver, "vol-l", t)
    assert not is_mount(tmp_path / "real" / "vol")


def stats(driver, vid, target, timeout=60):
    return driver.stub("Node").NodeGetVolumeStats(pb.NodeGetVolumeStatsRequest(
        volume_id=vid, volume_path=str(target)), timeout=timeout)


# how long a publish, stats and unpublish of a healthy volume may take beside a stalled one
# (each takes well under a second; the stalled one is held until the test lets it go)
BESIDE = 30


def test_stalled_volume_holds_up_no_other(driver, ctx, filled, endpoint, tmp_path):
    """R3: a publish whose endpoint accepts and never answers (the fault proxy stalls every
    response: `s3flash mount` waits at start-up) does not delay the publish, stats and
    unpublish of another volume, and its retry answers ABORTED at once; once the endpoint
    answers, it completes."""
    ta, tb = tmp_path / "a", tmp_path / "b"
    with faultproxy(endpoint) as proxy:
        proxy.set_faults([{"match": {}, "action": "stall", "seconds": 600}])
        done = {}

        def publish_a():
            try:
                publish(driver, "vol-stalled", ta, dict(ctx, endpointUrl=proxy.endpoint),
                        timeout_s=300)
                done["ok"] = True
            except grpc.RpcError as e:
                done["error"] = e
        a = threading.Thread(target=publish_a)
        a.start()
        try:
            wait_for(lambda: proxy.stats()["requests_total"] >= 1, 60,
                     "the stalled volume's daemon to send its first request")
            t0 = time.monotonic()
            # the same publish again (kubelet's retry) is not queued behind it: ABORTED
            with pytest.raises(grpc.RpcError) as e:
                publish(driver, "vol-stalled", ta, dict(ctx, endpointUrl=proxy.endpoint),
                        timeout_s=BESIDE)
            assert e.value.code() == grpc.StatusCode.ABORTED, e.value.details()
            publish(driver, "vol-b", tb, ctx, timeout_s=BESIDE)
            assert read(tb / "dir" / "b.txt") == OBJECTS["dir/b.txt"]
            assert stats(driver, "vol-b", tb, timeout=BESIDE).usage
            unpublish(driver, "vol-b", tb, timeout_s=BESIDE)
            assert time.monotonic() - t0 < BESIDE
            assert a.is_alive() and not done, "the stalled publish ended first: %s" % done
        finally:
            proxy.release()
            a.join(300)
        assert done.get("ok"), done
        assert read(ta / "dir" / "b.txt") == OBJECTS["dir/b.txt"]
        unpublish(driver, "vol-stalled", ta)


def stopped(pid, tid):
    try:
        with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in "tT"
    except FileNotFoundError:  # a thread that ended
        return True


def test_stats_of_a_hung_mount(driver, ctx, tmp_path):
    """R3: NodeGetVolumeStats of a mount whose daemon does not answer (stopped: SIGSTOP)
    answers UNAVAILABLE within the node's deadline (node.STAT_DEADLINE, 10 s), again at
    once-bounded cost, while other volumes publish; the mount answers again once its daemon
    runs."""
    ta, tb = tmp_path / "a", tmp_path / "b"
    publish(driver, "vol-hung", ta, ctx)
    (pid,) = driver.daemons().values()
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: all(stopped(pid, t) for t in os.listdir("/proc/%d/task" % pid)), 20,
                 "every thread of the daemon to stop")
        for _ in range(2):
            t0 = time.monotonic()
            with pytest.raises(grpc.RpcError) as e:
                stats(driver, "vol-hung", ta, timeout=BESIDE)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value.details()
            assert "hung or stopped" in e.value.details()
            assert time.monotonic() - t0 < BESIDE
        publish(driver, "vol-b", tb, ctx, timeout_s=BESIDE)
        assert stats(driver, "vol-b", tb, timeout=BESIDE).usage
        unpublish(driver, "vol-b", tb, timeout_s=BESIDE)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert stats(driver, "vol-hung", ta).usage
    unpublish(driver, "vol-hung", ta)
