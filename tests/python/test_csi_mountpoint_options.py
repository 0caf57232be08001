"""Every option and volume attribute of Mountpoint's CSI driver, as the node reads them
(s3flash/csi/options.py, no mount): each `mount-s3` flag (Mountpoint's mountpoint-s3/src/cli.rs)
given as a mountOption becomes the daemon's `--NAME VALUE` with Mountpoint's meaning, in
s3flash's explicit units where Mountpoint's are implicit (MiB), or is refused with
INVALID_ARGUMENT naming why; what Mountpoint's driver drops is dropped; the `cache` kinds,
cacheEmptyDirSizeLimit (Kubernetes quantities), the Mountpoint Pod's attributes and
mountpointEnv.* are checked as docs/KUBERNETES.md's table says. The mounts themselves are
tests/python/test_csi_examples.py's."""

import pytest

pytest.importorskip("grpc")
pytest.importorskip("s3flash.csi.csi_pb2", reason="s3flash.csi built without grpcio-tools")

from s3flash.csi.options import Volume, VolumeError, quantity  # noqa: E402
from s3flash.csi.proto import pb  # noqa: E402

M = pb.VolumeCapability.AccessMode


def volume(flags=(), ctx=None):
    cap = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(mount_flags=list(flags)),
                              access_mode=M(mode=M.MULTI_NODE_MULTI_WRITER))
    c = {"bucketName": "bkt"}
    c.update(ctx or {})
    return Volume(pb.NodePublishVolumeRequest(volume_id="v", target_path="/t",
                                              volume_capability=cap, volume_context=c), "/cache")


def refused(flags=(), ctx=None):
    with pytest.raises(VolumeError) as e:
        volume(flags, ctx)
    assert e.value.code.name == "INVALID_ARGUMENT", e.value.message
    return e.value.message


EMPTY_DIR = {"cache": "emptyDir", "cacheEmptyDirSizeLimit": "64Gi"}

# every flag of mount-s3 --help (Mountpoint's cli.rs), as a mountOption -> the daemon's flags
# (volume attributes where s3flash keeps them so: region, prefix, endpoint-url,
# force-path-style end the command line)
ACCEPTED = [
    (["read-only"], None, ["--read-only"]),
    (["allow-delete"], None, ["--allow-delete"]),
    (["allow-overwrite"], None, ["--allow-overwrite"]),
    (["incremental-upload"], None, ["--incremental-upload"]),
    (["allow-other"], None, ["--allow-other"]),
    # root owns the node's mount (user_id=0, no allow_other): root alone enters already
    (["allow-root"], None, []),
    (["region us-west-2"], None, ["--region", "us-west-2"]),
    (["prefix some-s3-prefix/"], None, []),
    (["endpoint-url http://127.0.0.1:9000"], None, ["--endpoint-url", "http://127.0.0.1:9000"]),
    (["force-path-style"], None, ["--force-path-style"]),
    (["transfer-acceleration"], None, ["--transfer-acceleration"]),
    (["dual-stack"], None, ["--dual-stack"]),
    (["requester-pays"], None, ["--requester-pays"]),
    (["bucket-type directory"], None, ["--bucket-type", "directory"]),
    (["no-sign-request"], None, ["--no-sign-request"]),
    (["storage-class INTELLIGENT_TIERING"], None, ["--storage-class", "INTELLIGENT_TIERING"]),
    (["maximum-throughput-gbps 100"], None, ["--maximum-throughput-gbps", "100"]),
    (["max-threads 32"], None, ["--max-threads", "32"]),
    # MiB in Mountpoint: the explicit M of s3flash
    (["memory-target 4096"], None, ["--memory-target", "4096M"]),
    (["part-size 16777216"], None, ["--part-size", "16777216"]),
    (["read-part-size 16777216", "write-part-size 5242880"], None,
     ["--read-part-size", "16777216", "--write-part-size", "5242880"]),
    (["uid 1000", "gid 2000", "dir-mode 0750", "file-mode 0640"], None,
     ["--dir-mode", "0750", "--file-mode", "0640", "--gid", "2000", "--uid", "1000"]),
    (["expected-bucket-owner 123456789012"], None, ["--expected-bucket-owner", "123456789012"]),
    (["log-metrics"], None, ["--log-metrics"]),
    (["otlp-endpoint http://collector:4318", "otlp-export-interval 30"], None,
     ["--otlp-endpoint", "http://collector:4318", "--otlp-export-interval", "30"]),
    (["debug"], None, ["--debug"]),
    (["debug-crt"], None, ["--debug-crt"]),
    (["no-log"], None, ["--no-log"]),
    (["metadata-ttl indefinite", "negative-metadata-ttl minimal"], None,
     ["--metadata-ttl", "31536000", "--negative-metadata-ttl", "1"]),
    (["metadata-ttl 300"], None, ["--metadata-ttl", "300"]),
    (["max-cache-size 1024"], EMPTY_DIR, ["--max-cache-size", "1024M"]),
    (["max-cache-size 10G"], {"cache": "datasets"}, ["--max-cache-size", "10G"]),
    (["cache-block-size 128"], EMPTY_DIR, ["--cache-block-size", "128", "--max-cache-size",
                                           "62259M"]),
    (["cache-xz s3-csi-driver--usw2-az1--x-s3"], None,
     ["--cache-xz", "s3-csi-driver--usw2-az1--x-s3"]),
    (["user-agent-prefix my-app/1.0"], None, ["--user-agent-prefix", "my-app/1.0"]),
    (["sse aws:kms", "sse-kms-key-id arn:aws:kms:us-west-2:012345678900:key/1"], None,
     ["--sse", "aws:kms", "--sse-kms-key-id", "arn:aws:kms:us-west-2:012345678900:key/1"]),
    (["upload-checksums off"], None, ["--upload-checksums", "off"]),
    (["infer-content-type"], None, ["--infer-content-type"]),
    (["bind eth0", "bind eth1"], None, ["--bind", "eth0", "--bind", "eth1"]),
    (["aws-max-attempts 5"], None, ["--aws-max-attempts", "5"]),
    # what Mountpoint's driver drops from mountOptions (pkg/mountpoint/args.go)
    (["foreground", "-f", "--help", "-h", "version", "-v", "allow-delete"], None,
     ["--allow-delete"]),
]


@pytest.mark.parametrize("flags,ctx,want", ACCEPTED, ids=[" ".join(f) for f, _, _ in ACCEPTED])
def test_mount_s3_flags_become_daemon_flags(flags, ctx, want):
    v = volume(flags, ctx)
    assert v.daemon_flags == want, v.daemon_flags
    if flags == ["prefix some-s3-prefix/"]:
        assert v.source == "bkt/some-s3-prefix/"


REFUSED = [
    (["cache-block-size 128"], None, "needs a cache"),
    (["max-cache-size 1024"], None, "needs the volume attribute cache"),
    (["auto-unmount"], None, "descriptor"),
    (["log-directory /var/log/mp"], None, "host directory"),
    (["ca-bundle /etc/ssl/x.pem"], None, "host file"),
    (["profile admin"], None, "AWS config"),
    (["-o allow_other"], None, "fstab"),
    (["allow-root", "allow-other"], None, "exclude"),
    (["part-size 8388608", "read-part-size 8388608"], None, "exclude"),
    (["no-log", "debug"], None, "exclude"),
    (["no-log", "log-metrics"], None, "exclude"),
    (["otlp-export-interval 30"], None, "needs otlp-endpoint"),
    (["maximum-throughput-gbps 0"], None, "at least 1"),
    (["upload-checksums md5"], None, "upload-checksums"),
    (["bucket-type express"], None, "bucket-type"),
    (["bind eth0;reboot"], None, "bind"),
    (["cache-xz ../etc"], None, "cache-xz"),
    (["memory-target 1G;x"], None, "memory-target"),
]


@pytest.mark.parametrize("flags,ctx,needle", REFUSED, ids=[" ".join(f) for f, _, _ in REFUSED])
def test_refused_options_name_why(flags, ctx, needle):
    assert needle in refused(flags, ctx)


@pytest.mark.parametrize("text,want", [
    ("500Mi", 500 << 20), ("2Gi", 2 << 30), ("1.5Gi", 3 << 29), ("1G", 10 ** 9),
    ("512Ki", 512 << 10), ("2e9", 2 * 10 ** 9), ("1000", 1000), ("0.5Ki", 512),
    ("100m", 1)])   # resource.Quantity's Value() rounds up
def test_kubernetes_quantities(text, want):
    assert quantity(text, "x") == want


@pytest.mark.parametrize("text", ["", "500MB", "-1Gi", "1 Gi", "Gi", "1.2.3Gi"])
def test_bad_kubernetes_quantities(text):
    with pytest.raises(VolumeError):
        quantity(text, "x")


@pytest.mark.parametrize("limit,flags,want", [
    # 95% of the limit, in MiB, rounded down (Mountpoint's driver: 500Mi -> 475)
    ("500Mi", [], ["--max-cache-size", "475M"]),
    ("2Gi", [], ["--max-cache-size", "1945M"]),
    ("1G", [], ["--max-cache-size", "905M"]),
    # an explicit max-cache-size at most 95% of it is kept; above, lowered to 95%
    ("500Mi", ["max-cache-size 400"], ["--max-cache-size", "400M"]),
    ("500Mi", ["max-cache-size 490"], ["--max-cache-size", "475M"]),
    ("500Mi", ["max-cache-size 500"], ["--max-cache-size", "475M"]),
])
def test_empty_dir_limit_bounds_the_cache(limit, flags, want):
    v = volume(flags, {"cache": "emptyDir", "cacheEmptyDirSizeLimit": limit})
    assert v.empty_dir and v.cache_name == "emptyDir"
    assert v.daemon_flags == want


def test_empty_dir_without_limit_and_the_cache_option():
    v = volume([], {"cache": "emptyDir"})
    assert v.empty_dir and v.daemon_flags == []
    # Mountpoint's driver v2: `cache PATH` in mountOptions is an emptyDir cache, the path
    # ignored (never a host directory)
    v = volume(["cache /cache/folder/on/host", "metadata-ttl 60"])
    assert v.empty_dir and v.daemon_flags == ["--metadata-ttl", "60"]
    assert "/cache/folder" not in repr(v.daemon_flags)
    # a named cache stays a persistent cache of that name
    v = volume([], {"cache": "datasets"})
    assert not v.empty_dir and v.cache_name == "datasets"


@pytest.mark.parametrize("flags,ctx,needle", [
    (["max-cache-size 600"], {"cache": "emptyDir", "cacheEmptyDirSizeLimit": "500Mi"},
     "exceeds cacheEmptyDirSizeLimit"),
    ([], {"cache": "emptyDir", "cacheEmptyDirSizeLimit": "1Mi"}, "no room"),
    ([], {"cache": "emptyDir", "cacheEmptyDirSizeLimit": "lots"}, "quantity"),
    ([], {"cache": "emptyDir", "cacheEmptyDirMedium": "Memory"}, "Memory"),
    ([], {"cache": "emptyDir", "cacheEmptyDirMedium": "ssd"}, "cacheEmptyDirMedium"),
    ([], {"cacheEmptyDirSizeLimit": "1Gi"}, "needs cache: emptyDir"),
    ([], {"cache": "datasets", "cacheEmptyDirSizeLimit": "1Gi"}, "needs cache: emptyDir"),
    ([], {"cache": "ephemeral", "cacheEphemeralStorageClassName": "gp2",
          "cacheEphemeralStorageResourceRequest": "4Gi"}, "runs no pod per volume"),
    ([], {"cache": "ephemeral", "cacheEphemeralStorageClassName": "gp2"},
     "cacheEphemeralStorageResourceRequest must be given"),
    ([], {"cacheEphemeralStorageClassName": "gp2"}, "needs cache: ephemeral"),
    (["cache /tmp/x"], {"cache": "emptyDir"}, "both"),
    ([], {"cache": "/var/lib"}, "not a path"),
    ([], {"mountpointPodServiceAccountName": "mp-sa"}, "identity"),
    ([], {"mountpointContainerResourcesLimitsMemory": "lots"}, "quantity"),
    ([], {"mountpointContainerResourcesRequestsCpu": "1 core"}, "quantity"),
    ([], {"mountpointContainerResourcesLimitsMemory": "32Mi"}, "least memory target"),
    (["memory-target 2048"], {"mountpointContainerResourcesLimitsMemory": "1Gi"}, "exceeds"),
])
def test_refused_attributes_name_why(flags, ctx, needle):
    assert needle in refused(flags, ctx)


def test_mountpoint_pod_resources():
    # the memory limit: the daemon's memory target is 95% of it (Mountpoint's default of its
    # cgroup-limited memory); an explicit memory-target within it is kept
    v = volume([], {"mountpointContainerResourcesLimitsMemory": "1Gi",
                    "mountpointContainerResourcesRequestsMemory": "512Mi",
                    "mountpointContainerResourcesRequestsCpu": "500m",
                    "mountpointContainerResourcesLimitsCpu": "2"})
    assert v.daemon_flags == ["--memory-target", "972M"] and v.memory_limit == 1 << 30
    v = volume(["memory-target 512"], {"mountpointContainerResourcesLimitsMemory": "1Gi"})
    assert v.daemon_flags == ["--memory-target", "512M"]
    assert volume().memory_limit is None


def test_mountpoint_env():
    ctx = {"mountpointEnv.HTTPS_PROXY": "http://proxy.default.svc.cluster.local:3128",
           "mountpointEnv.NO_PROXY": "sts.us-east-1.amazonaws.com,.internal, 10.0.0.0/8"}
    v = volume([], ctx)
    assert v.env == {"HTTPS_PROXY": "http://proxy.default.svc.cluster.local:3128",
                     "NO_PROXY": "sts.us-east-1.amazonaws.com,.internal, 10.0.0.0/8"}
    assert v.daemon_flags == []                      # never on a command line
    # the environment is part of what makes two publishes share a daemon
    plain = volume()
    assert plain.env == {}
    assert v.share_key("v", "driver") != plain.share_key("v", "driver")
    assert v.share_key("v", "driver") == volume([], dict(ctx)).share_key("v", "driver")
    other = dict(ctx, **{"mountpointEnv.NO_PROXY": "example.com"})
    assert volume([], other).share_key("v", "driver") != v.share_key("v", "driver")
    assert v.digest("v", "/t") != plain.digest("v", "/t")


@pytest.mark.parametrize("name,value,needle", [
    ("AWS_ACCESS_KEY_ID", "AKID", "not allowed"),
    ("HTTP_PROXY", "http://p:3128", "not allowed"),
    ("https_proxy", "http://p:3128", "not allowed"),     # Mountpoint's names, exactly
    ("LD_PRELOAD", "/tmp/x.so", "not allowed"),
    ("HTTPS_PROXY", "http://p:3128\n", "URL"),
    ("HTTPS_PROXY", "http://p:3128\nAWS_ACCESS_KEY_ID=x", "URL"),
    ("HTTPS_PROXY", "http://p\x00:3128", "URL"),
    ("HTTPS_PROXY", "socks5://p:1080", "URL"),
    ("HTTPS_PROXY", "proxy:3128", "URL"),
    ("HTTPS_PROXY", "http://p:3128/path?q", "URL"),
    ("NO_PROXY", "a.com\nb.com", "host names"),
    ("NO_PROXY", "a.com;b.com", "host names"),
])
def test_mountpoint_env_refused(name, value, needle):
    msg = refused([], {"mountpointEnv." + name: value})
    assert needle in msg and "mountpointEnv." + name in msg
