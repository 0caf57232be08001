"""Every PersistentVolume of Mountpoint's CSI driver's examples (awslabs/mountpoint-s3-csi-driver,
examples/kubernetes/static_provisioning/, copied unchanged into
tests/data/mountpoint-csi-examples/) served by s3flash-csi, as docs/KUBERNETES.md promises.

Each file is read as a user would apply it after changing what is theirs to change: `driver:`
becomes csi.s3flash.io, `bucketName` names a bucket of this test's store (RGW; the express
sink for a directory bucket; an Outposts access point's host stand-in for an Outposts ARN),
the store's endpoint is given to the driver as a user gives it (AWS_ENDPOINT_URL in the
mounter's environment, `mounter.env` of the chart), and the values that name the user's own
things (a KMS key, a proxy, an OTLP collector) name this test's. Nothing else is touched:
the mountOptions, the other volumeAttributes and the access modes are the file's. For each
PersistentVolume, through the driver's real gRPC socket (tests/python/csi_harness.py):
NodePublishVolume with its volumeAttributes, mountOptions and access mode for every pod of the
file that uses it, a file read, a file written where the options allow it, what the example
is about checked (its flags on the daemon's command line, its headers on the wire, its cache
directory, its proxy), NodeUnpublishVolume."""

import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")
yaml = pytest.importorskip("yaml")
pytest.importorskip("s3flash.csi.csi_pb2", reason="s3flash.csi built without grpcio-tools")

import aws_host  # noqa: E402
from conftest import faultproxy  # noqa: E402
import connectproxy  # noqa: E402
from connectproxy import ConnectProxy  # noqa: E402
from csi_harness import is_mount, mountinfo, running, tokens, wait_for  # noqa: E402
from s3flash.csi.proto import pb  # noqa: E402

if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
    pytest.skip("the CSI driver mounts: needs root and /dev/fuse", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "tests" / "data" / "mountpoint-csi-examples"
M = pb.VolumeCapability.AccessMode
ACCESS = {"ReadWriteMany": M.MULTI_NODE_MULTI_WRITER, "ReadOnlyMany": M.MULTI_NODE_READER_ONLY,
          "ReadWriteOnce": M.SINGLE_NODE_WRITER, "ReadWriteOncePod": M.SINGLE_NODE_SINGLE_WRITER}
HELLO = b"Hello from the store!\n"
WRITTEN = b"Hello from the container!\n"
# an Outposts access point of the test (the example's ARN has placeholders for its region,
# account and names) and its host by the endpoint rules
OUTPOST_ARN = ("arn:aws:s3-outposts:us-west-2:%s:outpost/op-01234567890123456/accesspoint/"
               "reports" % aws_host.ACCOUNT)
OUTPOST_HOST = "reports-%s.op-01234567890123456.s3-outposts.us-west-2.amazonaws.com" % \
    aws_host.ACCOUNT


def documents(text):
    """The YAML documents of a file. outpost_bucket.yaml has no `---` between its
    PersistentVolume and its claim: as one mapping their keys would collide (kubectl refuses
    that), so a top-level `apiVersion:` also starts an object here."""
    out = []
    for chunk in re.split(r"(?m)^---\s*$", text):
        for part in re.split(r"(?m)^(?=apiVersion:)", chunk):
            d = yaml.safe_load(part)
            if d:
                out.append(d)
    return out


def example(name):
    """(PersistentVolumes, {claim name: number of pods using it})."""
    ds = documents((EXAMPLES / name).read_text())
    pvs = [d for d in ds if d["kind"] == "PersistentVolume"]
    assert pvs, name
    uses = {}
    for d in ds:
        spec = d.get("spec", {})
        replicas = 1
        if d["kind"] == "Deployment":
            replicas, spec = spec.get("replicas", 1), spec["template"]["spec"]
        elif d["kind"] != "Pod":
            continue
        for v in spec.get("volumes", []):
            claim = v.get("persistentVolumeClaim", {}).get("claimName")
            if claim:
                uses[claim] = uses.get(claim, 0) + replicas
    return pvs, uses


def test_the_examples_are_the_thirteen():
    names = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
    assert names == sorted(CASES), names
    assert (EXAMPLES / "LICENSE").read_text().lstrip().startswith("Apache License")


class TLSFront(ConnectProxy):
    """A TLS server on 127.0.0.1 (its certificate names 127.0.0.1) that relays each
    connection to RGW's plain-HTTP port: an https:// endpoint for the store, so that a
    proxy for https URLs (HTTPS_PROXY, all that Mountpoint lets a volume set) applies.
    ConnectProxy's listener and threads, another handler."""

    def __init__(self, tmp_path, backend):
        self.cert, key = tmp_path / "front.pem", tmp_path / "front.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                        "1", "-subj", "/CN=127.0.0.1", "-addext",
                        "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                        str(self.cert)], check=True, capture_output=True)
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(self.cert), str(key))
        self.backend = backend
        super().__init__()

    def _handle(self, c):
        try:
            t = self.ctx.wrap_socket(c, server_side=True)
            b = socket.create_connection(self.backend)
        except OSError:
            c.close()
            return
        threading.Thread(target=connectproxy._pump, args=(b, t), daemon=True).start()
        connectproxy._pump(t, b)


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector: records the paths POSTed to."""

    def log_message(self, *a):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.posts.append(self.path)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def daemon_argv(driver):
    """{mount key: argv} of the driver's running daemons."""
    out = {}
    for k, pid in driver.daemons().items():
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            out[k] = [a.decode() for a in f.read().split(b"\0")[:-1]]
    return out


def flag_values(argv, name):
    return [argv[i + 1] for i, a in enumerate(argv) if a == name]


class Setting:
    """What one example needs around it: the driver's environment and arguments, the
    buckets (bucketName -> the test's), and the user's own values for the attributes and
    options that name theirs."""

    def __init__(self, **kw):
        self.env, self.node_args, self.buckets, self.attrs, self.options = {}, [], {}, {}, {}
        self.secrets_of = lambda pv, pod: {}
        self.pod_context = lambda pv, pod: {}
        self.__dict__.update(kw)


def publish(driver, vid, target, ctx, flags, mode, secrets=None):
    cap = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(mount_flags=flags),
                              access_mode=M(mode=mode))
    driver.stub("Node").NodePublishVolume(pb.NodePublishVolumeRequest(
        volume_id=vid, target_path=str(target), volume_capability=cap,
        volume_context=ctx, secrets=secrets or {}), timeout=90)


def unpublish(driver, vid, target):
    driver.stub("Node").NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(
        volume_id=vid, target_path=str(target)), timeout=60)


def as_user(uid, gid, cwd, script, *args):
    """Run a shell script as uid:gid (a pod's runAsUser/runAsGroup) in cwd (entered before
    the user changes: the test's directories above it are root's alone)."""
    # setpriv (util-linux) changes the user after the exec: subprocess's own user= and group=
    # make it fork() instead of vfork(), and a fork of this process (gRPC's and other
    # extensions' threads and atfork handlers) now and then died of SIGSEGV in the child
    return subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid, "--clear-groups",
                           "/bin/sh", "-c", script, "sh", *args],
                          env={"PATH": "/usr/bin:/bin"}, cwd=str(cwd),
                          capture_output=True, timeout=60)


def serve_example(name, setting, tmp_path, check=None):
    """Publish every PersistentVolume of the example for every pod using it, read, write
    where allowed, call check(driver, pv, targets) while published, unpublish. Returns the
    driver's logs' text."""
    pvs, uses = example(name)
    (tmp_path / "driver").mkdir()
    with running(tmp_path / "driver", env=setting.env, node_args=setting.node_args) as d:
        published = []
        try:
            for pv in pvs:
                spec = pv["spec"]
                csi = spec["csi"]
                assert csi["driver"] == "s3.csi.aws.com", csi
                csi = dict(csi, driver="csi.s3flash.io")    # the one change every user makes
                ctx = {k: str(v) for k, v in csi["volumeAttributes"].items()}
                ctx["bucketName"] = setting.buckets[ctx["bucketName"]]
                ctx.update(setting.attrs)
                flags = []
                for o in spec.get("mountOptions", []):
                    key = re.split(r"[ =]", o, 1)[0]
                    flags.append(setting.options.get(key, o))
                mode = ACCESS[spec["accessModes"][0]]
                pods = uses[spec["claimRef"]["name"]]
                targets = []
                for i in range(pods):
                    t = tmp_path / ("pod%d-%s" % (i, pv["metadata"]["name"])) / "mount"
                    t.parent.mkdir()
                    c = dict(ctx, **setting.pod_context(pv, i))
                    publish(d, csi["volumeHandle"], t, c, flags, mode,
                            setting.secrets_of(pv, i))
                    published.append((csi["volumeHandle"], t))
                    targets.append(t)
                    assert is_mount(t)
                if check:
                    check(d, pv, targets)
                else:
                    read_and_write(targets, mode)
            for vid, t in published:
                unpublish(d, vid, t)
                assert not is_mount(t)
            published = []
            wait_for(lambda: d.daemons() == {}, 30, "the daemons to end")
        finally:
            for vid, t in published:
                try:
                    unpublish(d, vid, t)
                except grpc.RpcError:
                    pass
        assert not [m for m in mountinfo() if m.startswith(str(tmp_path) + "/")]
        return "".join(p.read_text(errors="replace") for p in d.logs)


def read_and_write(targets, mode):
    for t in targets:
        assert (t / "hello.txt").read_bytes() == HELLO
    if mode != M.MULTI_NODE_READER_ONLY:
        name = "written-%s.txt" % uuid.uuid4().hex[:8]
        (targets[0] / name).write_bytes(WRITTEN)
        for t in targets:   # the pods sharing the volume see it
            wait_for(lambda: (t / name).exists(), 20, "the file in every pod")
            assert (t / name).read_bytes() == WRITTEN


@pytest.fixture(scope="module")
def buckets(s3, bucket):
    """Two buckets of RGW with hello.txt at their root and under the examples' prefix."""
    second = "s3fpy-csi-examples2-" + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=second)
    for b in (bucket, second):
        for k in ("hello.txt", "some-s3-prefix/hello.txt"):
            s3.put_object(Bucket=b, Key=k, Body=HELLO)
    yield bucket, second
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=second):
        for o in page.get("Contents", []):
            s3.delete_object(Bucket=second, Key=o["Key"])
    s3.delete_bucket(Bucket=second)


def rgw_setting(buckets, endpoint, **kw):
    b1, b2 = buckets
    return Setting(env={"AWS_ENDPOINT_URL": endpoint},
                   buckets={"s3-csi-driver": b1, "s3-csi-driver-test": b1,
                            "s3-csi-bucket-name": b1, "amzn-s3-demo-bucket": b1,
                            "s3-csi-driver-2": b2}, **kw)


def case_static_provisioning(buckets, endpoint, tmp_path, **_):
    def check(d, pv, targets):
        # `prefix some-s3-prefix/`: the pod sees the prefix's keys
        assert sorted(os.listdir(targets[0])) == ["hello.txt"]
        read_and_write(targets, M.MULTI_NODE_MULTI_WRITER)
        (targets[0] / "hello.txt").unlink()      # allow-delete
        (argv,) = daemon_argv(d).values()
        assert argv[2] == buckets[0] + "/some-s3-prefix/", argv
    serve_example("static_provisioning.yaml", rgw_setting(buckets, endpoint), tmp_path, check)


def case_non_root(buckets, endpoint, tmp_path, **_):
    def check(d, pv, targets):
        t = targets[0]
        st = os.stat(t / "hello.txt")
        assert (st.st_uid, st.st_gid) == (1000, 2000)
        # the pod runs as 1000:2000 (allow-other lets it in)
        r = as_user(1000, 2000, t, 'cat hello.txt && printf mine > by-1000.txt')
        assert r.returncode == 0, r.stderr
        assert r.stdout == HELLO
        assert (t / "by-1000.txt").read_bytes() == b"mine"
    serve_example("non_root.yaml", rgw_setting(buckets, endpoint), tmp_path, check)


def case_multiple_buckets_one_pod(buckets, endpoint, tmp_path, **_):
    seen = []

    def check(d, pv, targets):
        read_and_write(targets, M.MULTI_NODE_MULTI_WRITER)
        seen.append(pv["metadata"]["name"])
        assert len(d.daemons()) == len(seen)     # one daemon per volume
    serve_example("multiple_buckets_one_pod.yaml", rgw_setting(buckets, endpoint), tmp_path,
                  check)
    assert seen == ["s3-pv", "s3-pv-2"]


def case_multiple_pods_one_pv(buckets, endpoint, tmp_path, **_):
    def check(d, pv, targets):
        assert len(targets) == 3                 # the Deployment's replicas
        read_and_write(targets, M.MULTI_NODE_MULTI_WRITER)
        assert len(d.daemons()) == 1             # one daemon shared by the three pods
    serve_example("multiple_pods_one_pv.yaml", rgw_setting(buckets, endpoint), tmp_path, check)


def case_caching(buckets, endpoint, tmp_path, **_):
    """cache: emptyDir with cacheEmptyDirSizeLimit 500Mi: a cache directory of the mount's
    own, bounded at 95% of the limit (475 MiB, as Mountpoint's driver sets it), filled by the
    reads, removed when the mount ends."""
    dirs = []

    def check(d, pv, targets):
        read_and_write(targets, M.MULTI_NODE_MULTI_WRITER)
        ((key, argv),) = daemon_argv(d).items()
        assert flag_values(argv, "--max-cache-size") == ["475M"], argv
        assert flag_values(argv, "--metadata-ttl") == ["3"], argv
        (cache,) = flag_values(argv, "--cache")
        assert Path(cache) == d.state / "cache" / ".emptydir" / key, cache
        assert any(p.is_file() for p in Path(cache).rglob("*")), "nothing cached"
        dirs.append(Path(cache))
    serve_example("caching.yaml", rgw_setting(buckets, endpoint), tmp_path, check)
    assert dirs and not dirs[0].exists(), "the emptyDir cache outlived its mount"


def case_kms_sse(buckets, endpoint, tmp_path, s3, kms, **_):
    def check(d, pv, targets):
        read_and_write(targets, M.MULTI_NODE_MULTI_WRITER)
        (targets[0] / "encrypted.txt").write_bytes(b"secret\n")
        h = s3.head_object(Bucket=buckets[0], Key="encrypted.txt")
        assert h["ServerSideEncryption"] == "aws:kms" and h["SSEKMSKeyId"] == kms, h
    # the example's key ARN is a placeholder: a user names their key
    serve_example("kms_sse.yaml", rgw_setting(buckets, endpoint, options={
        "sse-kms-key-id": "sse-kms-key-id " + kms}), tmp_path, check)


def case_aws_max_attempts(buckets, endpoint, tmp_path, **_):
    def check(d, pv, targets):
        read_and_write(targets, M.MULTI_NODE_MULTI_WRITER)
        (argv,) = daemon_argv(d).values()
        assert flag_values(argv, "--aws-max-attempts") == ["5"], argv
    serve_example("aws_max_attempts.yaml", rgw_setting(buckets, endpoint), tmp_path, check)


def case_mountpoint_metrics(buckets, endpoint, tmp_path, **_):
    """otlp-endpoint: the example's collector is the cluster's; here a loopback one, which
    gets the daemon's push (one at the end of the mount at the latest)."""
    col = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    col.posts = []
    threading.Thread(target=col.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % col.server_port

    def check(d, pv, targets):
        (targets[0] / "metrics.txt").write_bytes(WRITTEN)     # allow-overwrite: replace it
        (targets[0] / "metrics.txt").write_bytes(b"again\n")
        assert (targets[0] / "hello.txt").read_bytes() == HELLO
        (argv,) = daemon_argv(d).values()
        assert flag_values(argv, "--otlp-endpoint") == [url], argv
    try:
        serve_example("mountpoint-metrics.yaml", rgw_setting(buckets, endpoint, options={
            "otlp-endpoint": "otlp-endpoint=" + url}), tmp_path, check)
        wait_for(lambda: col.posts, 30, "the daemon's OTLP push")
        assert set(col.posts) == {"/v1/metrics"}, col.posts
    finally:
        col.shutdown()


def case_outpost_bucket(tmp_path, **_):
    """An Outposts access point ARN as bucketName (with the example's `prefix` option): the
    requests go to the access point's host by the endpoint rules, signed for s3-outposts
    (tests/servers/aws_host.py stands in for it, reached through a test build's
    S3FLASH_TEST_CONNECT_TO)."""
    # the certificate's CN is its first name, at most 64 characters: not the host's
    with aws_host.serve(tmp_path, ["outposts.test", OUTPOST_HOST]) as (port, cert, handler):
        setting = Setting(env={"S3FLASH_TEST_CONNECT_TO": "127.0.0.1:%d" % port,
                               "AWS_CA_BUNDLE": str(cert)},
                          buckets={"arn:aws:s3-outposts:region:accountid:outpost/outpost-id/"
                                   "accesspoint/accesspoint-name": OUTPOST_ARN})

        def check(d, pv, targets):
            # read only: the stand-in lists a.bin under every prefix, so any other name
            # is a directory there
            assert os.listdir(targets[0]) == ["a.bin"]
            assert (targets[0] / "a.bin").read_bytes() == aws_host.PAYLOAD
        serve_example("outpost_bucket.yaml", setting, tmp_path, check)
    seen = [(m, p.split("?")[0], h) for m, p, h, _ in handler.seen]
    assert seen and all(h["host"] == OUTPOST_HOST for _, _, h in seen), seen
    assert ("GET", "/some-s3-prefix/a.bin") in [(m, p) for m, p, _ in seen]
    assert all("/s3-outposts/aws4_request" in h["authorization"]
               for _, _, h in seen), [h["authorization"] for _, _, h in seen]


def case_s3_express_specify_az(tmp_path, **_):
    """A directory bucket (NAME--usw2-az1--x-s3): sessions and all, at the express sink
    (bench/sink_express.c), the store the driver's AWS_ENDPOINT_URL names."""
    from test_express import ExpressSink
    sink = ExpressSink(tmp_path)
    try:
        setting = Setting(env={"AWS_ENDPOINT_URL": sink.endpoint},
                          buckets={"s3-csi-driver--usw2-az1--x-s3":
                                   "s3-csi-driver--usw2-az1--x-s3"})

        def check(d, pv, targets):
            (targets[0] / "hello.txt").write_bytes(HELLO)
            assert (targets[0] / "hello.txt").read_bytes() == HELLO
            (targets[0] / "hello.txt").unlink()          # allow-delete
            assert not (targets[0] / "hello.txt").exists()
        serve_example("s3_express_specify_az.yaml", setting, tmp_path, check)
        st = sink.stats()
        assert st["create_session"] >= 1 and st["denied"] == 0, st
    finally:
        assert sink.stop() == 0


def case_pod_level_identity(tmp_path, s3_other, rgw, endpoint, **_):
    """authenticationSource: pod, two pods with their own service accounts (the roles of
    their eks.amazonaws.com/role-arn annotations, read from an API-server stand-in, taken
    from an STS stand-in): one daemon each, each signing with its role's keys."""
    from test_csi import _STS, _KubeAPI
    bucket = "s3fpy-csi-podid-" + uuid.uuid4().hex[:8]
    s3_other.create_bucket(Bucket=bucket)
    s3_other.put_object(Bucket=bucket, Key="hello.txt", Body=HELLO)
    sts = ThreadingHTTPServer(("127.0.0.1", 0), _STS)
    sts.token, sts.keys, sts.calls = "pod-token", (rgw.other_access_key, rgw.other_secret_key), []
    sts.expiration, sts.answers = "2099-01-01T00:00:00Z", []
    api = ThreadingHTTPServer(("127.0.0.1", 0), _KubeAPI)
    for srv in (sts, api):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    sas = ["s3-csi-admin-sa", "s3-csi-read-only-sa"]     # the example's pods' accounts
    setting = Setting(
        env={"AWS_ENDPOINT_URL": endpoint,
             "S3FLASH_CSI_KUBE_API": "http://127.0.0.1:%d" % api.server_port},
        node_args=["--sts-endpoint", "http://127.0.0.1:%d/" % sts.server_port],
        buckets={"amzn-s3-demo-bucket": bucket},
        pod_context=lambda pv, i: {
            "csi.storage.k8s.io/pod.namespace": "default",
            "csi.storage.k8s.io/pod.name": "pod-%d" % i,
            "csi.storage.k8s.io/pod.uid": "uid-%d" % i,
            "csi.storage.k8s.io/serviceAccount.name": sas[i],
            "csi.storage.k8s.io/serviceAccount.tokens": tokens("pod-token")})

    def check(d, pv, targets):
        read_and_write(targets, M.MULTI_NODE_MULTI_WRITER)
        assert len(d.daemons()) == 2        # two identities: a daemon each
    try:
        logs = serve_example("pod_level_identity.yaml", setting, tmp_path, check)
        assert sorted(sts.calls) == ["arn:aws:iam::1:role/" + sa for sa in sas]
        assert rgw.other_secret_key not in logs and "pod-token" not in logs
    finally:
        sts.shutdown()
        api.shutdown()
        for page in s3_other.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for o in page.get("Contents", []):
                s3_other.delete_object(Bucket=bucket, Key=o["Key"])
        s3_other.delete_bucket(Bucket=bucket)


def case_proxy(buckets, endpoint, tmp_path, monkeypatch, **_):
    """mountpointEnv.HTTPS_PROXY and NO_PROXY reach that volume's daemon only: the store is
    behind TLS (an https endpoint, as AWS's), the volume's requests go through the user's
    proxy (here a loopback one; the example's names a Service of its cluster) and a volume
    without them, published beside it, does not."""
    for k in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
              "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(k, raising=False)
    host, port = endpoint.split("://", 1)[1].split(":")
    front = TLSFront(tmp_path, (host, int(port)))
    https = "https://127.0.0.1:%d" % front.port
    with ConnectProxy() as proxy:
        setting = rgw_setting(buckets, https,
                              attrs={"mountpointEnv.HTTPS_PROXY": proxy.url})
        setting.env["AWS_CA_BUNDLE"] = str(front.cert)

        def check(d, pv, targets):
            read_and_write(targets, M.MULTI_NODE_MULTI_WRITER)
            assert "CONNECT 127.0.0.1:%d" % front.port in proxy.seen()
            (pid,) = d.daemons().values()
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            assert env[b"HTTPS_PROXY"] == env[b"https_proxy"] == proxy.url.encode()
            assert env[b"NO_PROXY"] == b"sts.us-east-1.amazonaws.com"
            # a volume without mountpointEnv on the same node: not through the proxy
            before = len(proxy.seen())
            other = targets[0].parent.parent / "plain"
            publish(d, "plain", other, {"bucketName": buckets[0]}, [],
                    M.MULTI_NODE_MULTI_WRITER)
            try:
                assert (other / "hello.txt").read_bytes() == HELLO
                assert len(proxy.seen()) == before, proxy.seen()[before:]
            finally:
                unpublish(d, "plain", other)
        try:
            serve_example("proxy.yaml", setting, tmp_path, check)
        finally:
            front.stop()


def case_static_provisioning_with_shared_cache(tmp_path, **_):
    """cache-xz: the shared cache in an S3 Express directory bucket (docs/CACHE.md), the
    example's `s3-csi-driver--usw2-az1--x-s3`, at the express sink (bench/sink_express.c)
    behind the fault proxy (which counts requests by path), the store the driver's
    AWS_ENDPOINT_URL names. The sink serves directory buckets only, so the volume's bucket is
    one of its directory buckets too: the block of a file read through the volume is PUT into
    the cache bucket."""
    from s3flash import S3Client
    from test_express import ExpressSink
    sink = ExpressSink(tmp_path)
    source = "csi-source--usw2-az1--x-s3"
    blocks = "/s3-csi-driver--usw2-az1--x-s3/s3flash-v1/"
    try:
        w = S3Client("us-west-2", sink.endpoint).put_object(source, "hello.txt")
        w.write(HELLO)
        w.close()
        with faultproxy(sink.endpoint) as proxy:
            setting = Setting(env={"AWS_ENDPOINT_URL": proxy.endpoint},
                              buckets={"s3-csi-driver": source})

            def block_puts():
                return sum(n for k, n in proxy.stats()["requests"].items()
                           if k.startswith("PUT " + blocks) and "/_s3flash_cache_" not in k)

            def check(d, pv, targets):
                read_and_write(targets, M.MULTI_NODE_MULTI_WRITER)
                (targets[0] / "shared_cache_test.txt").write_bytes(b"Shared cache test\n")
                assert (targets[0] / "shared_cache_test.txt").read_bytes() == \
                    b"Shared cache test\n"
                (argv,) = daemon_argv(d).values()
                assert flag_values(argv, "--cache-xz") == ["s3-csi-driver--usw2-az1--x-s3"]
                wait_for(block_puts, 30, "the block's PUT into the shared cache")
            serve_example("static_provisioning_with_shared_cache.yaml", setting, tmp_path,
                          check)
        assert sink.stats()["denied"] == 0
    finally:
        assert sink.stop() == 0


CASES = {
    "aws_max_attempts.yaml": case_aws_max_attempts,
    "caching.yaml": case_caching,
    "kms_sse.yaml": case_kms_sse,
    "mountpoint-metrics.yaml": case_mountpoint_metrics,
    "multiple_buckets_one_pod.yaml": case_multiple_buckets_one_pod,
    "multiple_pods_one_pv.yaml": case_multiple_pods_one_pv,
    "non_root.yaml": case_non_root,
    "outpost_bucket.yaml": case_outpost_bucket,
    "pod_level_identity.yaml": case_pod_level_identity,
    "proxy.yaml": case_proxy,
    "s3_express_specify_az.yaml": case_s3_express_specify_az,
    "static_provisioning.yaml": case_static_provisioning,
    "static_provisioning_with_shared_cache.yaml": case_static_provisioning_with_shared_cache,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_example(name, request, tmp_path):
    fn = CASES[name]
    args = {"tmp_path": tmp_path}
    for p in ("buckets", "endpoint", "s3", "kms", "s3_other", "rgw", "monkeypatch"):
        if p in fn.__code__.co_varnames[:fn.__code__.co_argcount]:
            args[p] = request.getfixturevalue(p)
    fn(**args)


# mount-s3's flags that act against RGW, each set published alone: the daemon must start with
# them (the node's names and values are `s3flash mount`'s) and serve reads and writes.
# (transfer-acceleration and dual-stack name AWS hosts: tests/integration/test_mount_flags.py.)
DAEMON_FLAGS = [
    (["read-part-size 8388608", "write-part-size 5242880"],
     ["--read-part-size", "8388608", "--write-part-size", "5242880"]),
    (["maximum-throughput-gbps 25"], ["--maximum-throughput-gbps", "25"]),
    (["upload-checksums off"], ["--upload-checksums", "off"]),
    (["bucket-type general-purpose"], ["--bucket-type", "general-purpose"]),
    (["requester-pays"], ["--requester-pays"]),
    (["infer-content-type"], ["--infer-content-type"]),
    (["debug", "debug-crt"], ["--debug", "--debug-crt"]),
    (["no-log"], ["--no-log"]),
    (["log-metrics"], ["--log-metrics"]),
    (["memory-target 512"], ["--memory-target", "512M"]),
    (["max-threads 8"], ["--max-threads", "8"]),
    (["allow-root"], []),
    (["bind lo"], ["--bind", "lo"]),
    (["metadata-ttl minimal", "negative-metadata-ttl indefinite"],
     ["--metadata-ttl", "1", "--negative-metadata-ttl", "31536000"]),
    (["cache /ignored/host/path", "max-cache-size 64", "cache-block-size 256"],
     ["--cache-block-size", "256", "--max-cache-size", "64M"]),
    (["otlp-endpoint http://127.0.0.1:{closed}", "otlp-export-interval 5"],
     ["--otlp-endpoint", "http://127.0.0.1:{closed}", "--otlp-export-interval", "5"]),
]


@pytest.mark.parametrize("flags,argv", DAEMON_FLAGS, ids=[" ".join(f) for f, _ in DAEMON_FLAGS])
def test_mount_s3_flags_reach_a_daemon(flags, argv, buckets, endpoint, tmp_path):
    from s3servers import closed_port
    port = closed_port()
    flags = [f.format(closed=port) for f in flags]
    argv = [a.format(closed=port) for a in argv]
    t = tmp_path / "pod" / "mount"
    t.parent.mkdir(parents=True)
    (tmp_path / "driver").mkdir()
    with running(tmp_path / "driver", env={"AWS_ENDPOINT_URL": endpoint}) as d:
        publish(d, "flags", t, {"bucketName": buckets[0]}, ["allow-delete"] + flags,
                M.MULTI_NODE_MULTI_WRITER)
        try:
            read_and_write([t], M.MULTI_NODE_MULTI_WRITER)
            ((_, got),) = daemon_argv(d).items()
            i = got.index("--allow-delete") + 1
            assert got[i:i + len(argv)] == argv, got
        finally:
            unpublish(d, "flags", t)


def test_empty_dir_cache_ends_with_its_daemon(buckets, endpoint, tmp_path):
    """cache: emptyDir lives and dies with its daemon: a daemon killed (an OOM kill, a crash)
    takes its cache directory with it, and the volume's next publish starts an empty one."""
    import signal
    t, t2 = tmp_path / "pod" / "mount", tmp_path / "pod2" / "mount"
    for p in (t, t2):
        p.parent.mkdir(parents=True)
    (tmp_path / "driver").mkdir()
    ctx = {"bucketName": buckets[0], "cache": "emptyDir", "cacheEmptyDirSizeLimit": "1Gi"}
    with running(tmp_path / "driver", env={"AWS_ENDPOINT_URL": endpoint}) as d:
        publish(d, "ed", t, ctx, [], M.MULTI_NODE_MULTI_WRITER)
        try:
            assert (t / "hello.txt").read_bytes() == HELLO
            ((key, argv),) = daemon_argv(d).items()
            (cache,) = flag_values(argv, "--cache")
            assert any(p.is_file() for p in Path(cache).rglob("*")), "nothing cached"
            os.kill(d.daemons()[key], signal.SIGKILL)
            wait_for(lambda: not os.path.exists(cache), 30, "the cache to go with its daemon")
        finally:
            unpublish(d, "ed", t)
        publish(d, "ed", t2, ctx, [], M.MULTI_NODE_MULTI_WRITER)
        try:
            assert os.path.isdir(cache) and not any(Path(cache).rglob("*"))
            assert (t2 / "hello.txt").read_bytes() == HELLO
        finally:
            unpublish(d, "ed", t2)
        wait_for(lambda: not os.path.exists(cache), 30, "the cache to go with its mount")
