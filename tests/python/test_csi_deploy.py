"""The CSI driver's deployment as a test reads it: the Helm chart rendered (helm is not
packaged for Debian: scripts/render-chart.py renders the subset of Go templates the chart
uses), the plain manifests (the chart's rendering, kept in sync), and the examples of
docs/KUBERNETES.md, each parsed and checked for every field the driver relies on."""

import os
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
pytest.importorskip("s3flash.csi.csi_pb2", reason="s3flash.csi built without grpcio-tools")

import importlib.util  # noqa: E402

from s3flash.csi import PLUGIN_NAME  # noqa: E402
from s3flash.csi.main import parser  # noqa: E402
from s3flash.csi.options import CONTEXT_KEYS, Volume  # noqa: E402
from s3flash.csi.proto import pb  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("render_chart", ROOT / "scripts" / "render-chart.py")
render_chart = importlib.util.module_from_spec(spec)
spec.loader.exec_module(render_chart)


def docs(text):
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(ds, kind, name=None):
    found = [d for d in ds if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert found, "no %s %s" % (kind, name or "")
    return found[0]


def containers(obj):
    return {c["name"]: c for c in obj["spec"]["template"]["spec"]["containers"]}


def arg(c, name):
    for a in c["args"]:
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    raise AssertionError("%s has no %s" % (c["name"], name))


@pytest.fixture(scope="module")
def rendered():
    return docs(render_chart.render(namespace="s3flash"))


def test_plain_manifests_are_the_chart(rendered):
    plain = docs((ROOT / "deploy" / "kubernetes" / "s3flash-csi.yaml").read_text())
    assert plain == docs(render_chart.render(namespace="kube-system")), \
        "deploy/kubernetes/s3flash-csi.yaml is stale: bash scripts/csi-manifests.sh"


def test_csidriver(rendered):
    d = by_kind(rendered, "CSIDriver", PLUGIN_NAME)["spec"]
    assert d["attachRequired"] is False
    assert d["podInfoOnMount"] is True
    assert d["requiresRepublish"] is True
    assert d["tokenRequests"] == [{"audience": "sts.amazonaws.com"}]
    assert d["volumeLifecycleModes"] == ["Persistent"]


def test_node_daemonset(rendered):
    ds = by_kind(rendered, "DaemonSet", "s3flash-csi-node")
    assert ds["metadata"]["namespace"] == "s3flash"
    pod = ds["spec"]["template"]["spec"]
    c = containers(ds)
    assert set(c) == {"s3flash-csi-node", "s3flash-csi-mounter", "node-driver-registrar",
                      "liveness-probe"}
    node, mounter = c["s3flash-csi-node"], c["s3flash-csi-mounter"]
    # the real command lines parse
    n = parser().parse_args([a.replace("$(NODE_NAME)", "n1") for a in node["args"]])
    m = parser().parse_args(mounter["args"])
    assert (n.cmd, m.cmd) == ("node", "mounter")
    assert n.mounter_socket == m.socket and n.state_dir == m.state_dir
    assert n.endpoint == "unix:///var/lib/kubelet/plugins/csi.s3flash.io/csi.sock"
    audience = by_kind(rendered, "CSIDriver")["spec"]["tokenRequests"][0]["audience"]
    assert n.token_audience == audience
    assert arg(c["node-driver-registrar"], "--kubelet-registration-path") == n.endpoint[7:]
    assert arg(c["node-driver-registrar"], "--csi-address") == "/csi/csi.sock"
    assert arg(c["liveness-probe"], "--health-port") == "9808"
    assert node["livenessProbe"]["httpGet"]["port"] == "healthz"
    assert {"name": "healthz", "containerPort": 9808, "protocol": "TCP"} in node["ports"]
    # privileged: the node process only; Bidirectional on the kubelet directory
    assert node["securityContext"]["privileged"] is True
    for name in ("s3flash-csi-mounter", "node-driver-registrar", "liveness-probe"):
        assert not c[name].get("securityContext", {}).get("privileged")
        assert c[name]["securityContext"]["allowPrivilegeEscalation"] is False
    assert mounter["securityContext"]["capabilities"]["drop"] == ["ALL"]
    # the daemons outlive the pod: the host's PID namespace, a cgroup of their own each
    # (docs/KUBERNETES.md, "Upgrade and restarts"); SYS_ADMIN to enter the host's cgroup ns
    assert pod["hostPID"] is True
    assert mounter["securityContext"]["capabilities"]["add"] == ["SYS_ADMIN"]
    assert m.daemon_cgroup == "/host/sys/fs/cgroup/s3flash-csi" and m.host_cgroup_ns
    assert m.cache_root == n.cache_root
    # the mounter's socket: in a directory of the node's and the mounter's alone
    sock_dir = os.path.dirname(n.mounter_socket)
    for name, cc in c.items():
        paths = {v["mountPath"] for v in cc.get("volumeMounts", [])}
        assert (sock_dir in paths) == (name in ("s3flash-csi-node", "s3flash-csi-mounter")), name
        assert not any(sock_dir.startswith(p.rstrip("/") + "/") for p in paths
                       if name not in ("s3flash-csi-node",)), (name, paths)
    mounts = {v["name"]: v for v in node["volumeMounts"]}
    assert mounts["kubelet-dir"]["mountPath"] == "/var/lib/kubelet"
    assert mounts["kubelet-dir"]["mountPropagation"] == "Bidirectional"
    assert mounts["dev-fuse"]["mountPath"] == "/dev/fuse"
    assert not any("mountPropagation" in v for v in mounter["volumeMounts"])
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["dev-fuse"]["hostPath"] == {"path": "/dev/fuse", "type": "CharDevice"}
    assert vols["registration-dir"]["hostPath"]["path"] == "/var/lib/kubelet/plugins_registry"
    assert vols["plugin-dir"]["hostPath"]["path"] == n.state_dir
    assert {v["mountPath"] for v in mounter["volumeMounts"]} == {
        n.state_dir, n.cache_root, sock_dir, "/host/sys/fs/cgroup"}
    assert vols["mounter-run"]["hostPath"]["path"] == sock_dir
    assert vols["host-cgroup"]["hostPath"]["path"] == "/sys/fs/cgroup"
    assert pod["serviceAccountName"] == "s3flash-csi-node"
    assert pod["tolerations"] == [{"operator": "Exists"}]


def test_node_metrics_port(rendered):
    """The node's metrics port: its flag, the container's port and the pod's Prometheus
    annotations agree; --set node.metricsPort=0 turns all three off."""
    ds = by_kind(rendered, "DaemonSet", "s3flash-csi-node")
    node = containers(ds)["s3flash-csi-node"]
    n = parser().parse_args([a.replace("$(NODE_NAME)", "n1") for a in node["args"]])
    assert n.metrics_port == 9810
    assert {"name": "metrics", "containerPort": 9810, "protocol": "TCP"} in node["ports"]
    assert ds["spec"]["template"]["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/port": "9810",
        "prometheus.io/path": "/metrics"}
    off = by_kind(docs(render_chart.render(namespace="s3flash", sets=["node.metricsPort=0"])),
                  "DaemonSet", "s3flash-csi-node")
    node = containers(off)["s3flash-csi-node"]
    assert "annotations" not in off["spec"]["template"]["metadata"]
    assert not any(a.startswith("--metrics-port") for a in node["args"])
    assert [p["name"] for p in node["ports"]] == ["healthz"]


def test_controller_and_rbac(rendered):
    dep = by_kind(rendered, "Deployment", "s3flash-csi-controller")
    c = containers(dep)
    assert set(c) == {"s3flash-csi-controller", "csi-provisioner"}
    a = parser().parse_args(c["s3flash-csi-controller"]["args"])
    assert a.cmd == "controller" and a.endpoint == "unix:///csi/csi.sock"
    prov = c["csi-provisioner"]
    assert "--extra-create-metadata" in prov["args"]
    assert arg(prov, "--csi-address") == "/csi/csi.sock"
    sas = {d["metadata"]["name"] for d in rendered if d["kind"] == "ServiceAccount"}
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] in sas
    roles = {(d["kind"], d["metadata"]["name"]): d for d in rendered
             if d["kind"] in ("ClusterRole", "Role")}
    for b in (d for d in rendered if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        assert (b["roleRef"]["kind"], b["roleRef"]["name"]) in roles
        for s in b["subjects"]:
            assert s["name"] in sas and s["namespace"] == "s3flash"
    prov_rules = roles[("ClusterRole", "s3flash-csi-provisioner")]["rules"]
    assert any("persistentvolumes" in r["resources"] and "create" in r["verbs"]
               and "delete" in r["verbs"] for r in prov_rules)
    assert roles[("ClusterRole", "s3flash-csi-node")]["rules"] == [
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get"]}]
    # only the node process runs privileged, in every object
    priv = [cn for d in rendered if d["kind"] in ("DaemonSet", "Deployment")
            for cn, cc in containers(d).items() if cc.get("securityContext", {}).get("privileged")]
    assert priv == ["s3flash-csi-node"]


def test_values_switch_off_the_controller():
    ds = docs(render_chart.render(sets=["controller.enabled=false",
                                        "node.stsEndpoint=https://sts.example.com"]))
    assert not [d for d in ds if d["kind"] == "Deployment"]
    assert {d["metadata"]["name"] for d in ds if d["kind"] == "ServiceAccount"} == \
        {"s3flash-csi-node"}
    node = containers(by_kind(ds, "DaemonSet"))["s3flash-csi-node"]
    assert "--sts-endpoint=https://sts.example.com" in node["args"]


def test_renderer_refuses_what_it_does_not_know(tmp_path):
    chart = tmp_path / "c"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("name: c\nversion: 1\n")
    (chart / "values.yaml").write_text("a: 1\n")
    (chart / "templates" / "x.yaml").write_text("v: {{ include \"x\" . }}\n")
    with pytest.raises(render_chart.TemplateError, match="include"):
        render_chart.render(chart)


MODES = {"ReadWriteMany": pb.VolumeCapability.AccessMode.MULTI_NODE_MULTI_WRITER,
         "ReadOnlyMany": pb.VolumeCapability.AccessMode.MULTI_NODE_READER_ONLY,
         "ReadWriteOnce": pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER}


@pytest.mark.parametrize("name", ["static.yaml", "dynamic.yaml", "pod-credentials.yaml",
                                  "secret.yaml", "sse-c.yaml"])
def test_examples_are_volumes_the_node_accepts(name):
    ds = docs((ROOT / "deploy" / "examples" / name).read_text())
    checked = 0
    for d in ds:
        if d["kind"] == "PersistentVolume":
            spec = d["spec"]
            assert spec["csi"]["driver"] == PLUGIN_NAME
            cap = pb.VolumeCapability(
                mount=pb.VolumeCapability.MountVolume(mount_flags=spec.get("mountOptions", [])),
                access_mode=pb.VolumeCapability.AccessMode(mode=MODES[spec["accessModes"][0]]))
            req = pb.NodePublishVolumeRequest(
                volume_id=spec["csi"]["volumeHandle"], target_path="/t", volume_capability=cap,
                volume_context=spec["csi"]["volumeAttributes"])
            Volume(req, "/cache")  # raises on anything the node would refuse
            checked += 1
        elif d["kind"] == "StorageClass":
            assert d["provisioner"] == PLUGIN_NAME
            assert set(d["parameters"]) <= CONTEXT_KEYS | {"prefixTemplate"}
            assert d["reclaimPolicy"] in ("Delete", "Retain")
            checked += 1
    assert checked


def volume(flags=(), ctx=None, mode=pb.VolumeCapability.AccessMode.SINGLE_NODE_WRITER,
           readonly=False):
    cap = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(mount_flags=list(flags)),
                              access_mode=pb.VolumeCapability.AccessMode(mode=mode))
    return Volume(pb.NodePublishVolumeRequest(
        volume_id="v", target_path="/t", volume_capability=cap, readonly=readonly,
        volume_context=ctx or {"bucketName": "bkt"}), "/cache")


def test_mount_options_become_flags():
    """The allow-list's spellings (Mountpoint's, kubelet's) and the daemon's command line."""
    v = volume(["--allow-delete", "uid 1000", "gid=1000", "metadata-ttl=indefinite", "rw",
                "region eu-west-1", "prefix=data", "allow-other,dir-mode=0750"])
    assert v.daemon_flags == ["--allow-delete", "--allow-other", "--dir-mode", "0750",
                              "--gid", "1000", "--metadata-ttl", "31536000", "--uid", "1000",
                              "--region", "eu-west-1"]
    assert (v.prefix, v.read_only, v.source) == ("data/", False, "bkt/data/")
    # read-only from a flag, the publish or the access mode; write permissions dropped
    ro = volume(["ro", "allow-delete"])
    assert ro.read_only and ro.daemon_flags == ["--read-only"]
    assert volume(readonly=True).read_only
    assert volume(mode=pb.VolumeCapability.AccessMode.SINGLE_NODE_READER_ONLY).read_only
    # the share key: the same for the same mount and identity only
    assert v.share_key("v", "driver") == volume(list(reversed(
        ["--allow-delete", "uid 1000", "gid=1000", "metadata-ttl=indefinite", "rw",
         "region eu-west-1", "prefix=data", "allow-other,dir-mode=0750"]))).share_key("v", "driver")
    assert v.share_key("v", "driver") != v.share_key("v", "pod:x")
    assert v.share_key("v", "driver") != ro.share_key("v", "driver")


def test_encryption_options_become_flags():
    """The CLI's encryption options: a JSON context (commas and all) is one compact flag,
    `sse-c` alone is the CLI's `--sse-c AES256` (its key never a flag)."""
    v = volume(['sse-kms-encryption-context={"a": "1", "b": "2"}', "sse=aws:kms",
                "bucket-key-enabled", "acl=bucket-owner-full-control"])
    assert v.daemon_flags == ["--acl", "bucket-owner-full-control", "--bucket-key-enabled",
                              "--sse", "aws:kms", "--sse-kms-encryption-context",
                              '{"a":"1","b":"2"}']
    assert volume(["sse-c"]).daemon_flags == volume(["sse-c AES256"]).daemon_flags == [
        "--sse-c", "AES256"]
    assert volume(["sse-c"]).sse_c and not volume().sse_c


def test_cache_dirs_are_private(tmp_path):
    from s3flash.csi.mounter import private_dirs
    root = tmp_path / "cache"
    assert private_dirs(str(root / "name" / "ident"), 2) is None
    assert (root / "name" / "ident").stat().st_mode & 0o777 == 0o700
    assert private_dirs(str(root / "name" / "ident"), 2) is None  # again: the same
    (root / "evil").symlink_to(tmp_path)
    assert "refused" in private_dirs(str(root / "evil" / "x"), 2)
    (root / "open").mkdir(mode=0o777)
    os.chmod(root / "open", 0o777)
    assert "refused" in private_dirs(str(root / "open" / "x"), 2)


@pytest.mark.parametrize("bucket", ["ckpt--use1-az4--x-s3", "data--usw2-az1--xa-s3"])
def test_directory_bucket_names_are_accepted(bucket):
    """S3 Express One Zone directory buckets (and their access points) as bucketName: the
    mount recognises them from the name (docs/CONFIGURATION.md, "S3 Express One Zone")."""
    v = volume(ctx={"bucketName": bucket, "prefix": "run1"})
    assert (v.bucket, v.source) == (bucket, f"{bucket}/run1/")
    with pytest.raises(Exception, match="not a bucket name"):
        volume(ctx={"bucketName": "Ckpt--use1-az4--x-s3"})
    # appends (Mountpoint's spelling) pass to the daemon; a read-only publish drops them
    v = volume(["incremental-upload"], ctx={"bucketName": bucket})
    assert v.daemon_flags == ["--incremental-upload"]
    assert volume(["incremental-upload", "ro"], ctx={"bucketName": bucket}).daemon_flags == [
        "--read-only"]
