"""The CSI node's one metrics port (docs/KUBERNETES.md, "Metrics"), driven as kubelet drives
the driver (the node's real gRPC socket, real FUSE mounts, real `s3flash mount` daemons,
RGW): two volumes published and read through, one scrape of the node's --metrics-port shows
each volume's data bytes and GetObject requests under its own volume_id, one HELP and TYPE
per name, and nothing of the publish's secrets or pod; the `otlp-endpoint` mount option
reaches the daemon's argv as --otlp-endpoint, and a URL that is not http:// is refused (the push is plain HTTP)."""

import http.client
import os
import re
import socket
import stat
import subprocess
import sys

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("s3flash.csi.csi_pb2", reason="s3flash.csi built without grpcio-tools")

from csi_harness import running, s3flash_cli, wait_for  # noqa: E402
from test_csi import OBJECTS, driver, filled, publish, read, unpublish  # noqa: E402,F401

if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
    pytest.skip("the CSI driver mounts: needs root and /dev/fuse", allow_module_level=True)

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? (\S+)$')


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/metrics")
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def scrape(port):
    """The node's text once its port answers (bounded polling of an HTTP answer)."""
    def attempt():
        try:
            return _get(port)
        except OSError:
            return None
    status, text = wait_for(attempt, timeout=30, what="the node's metrics port")
    assert status == 200, text
    return text


def series(text):
    """[(name, {label: value}, value)] of the sample lines."""
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = _LINE.match(line)
        assert m, "not a sample line: %r" % line
        labels = dict(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def total(ss, name, **want):
    return sum(v for n, lab, v in ss
               if n == name and all(lab.get(k) == x for k, x in want.items()))


def test_two_volumes_on_one_port(tmp_path, filled, endpoint, rgw):
    port = _free_port()
    secrets = {"key_id": rgw.access_key, "access_key": rgw.secret_key}
    ctx = {"bucketName": filled, "endpointUrl": endpoint,
           "csi.storage.k8s.io/pod.name": "pod-name-not-a-label",
           "csi.storage.k8s.io/pod.namespace": "ns-not-a-label"}
    with running(tmp_path, node_args=["--metrics-port", str(port)]) as d:
        assert "s3flash_csi_mounts 0" in scrape(port)
        t1, t2 = tmp_path / "t1", tmp_path / "t2"
        publish(d, "vol-metrics-1", t1, ctx, secrets=secrets)
        publish(d, "vol-metrics-2", t2, {"bucketName": filled, "endpointUrl": endpoint})
        big, small = OBJECTS["a.bin"], OBJECTS["dir/sub/c.bin"]
        assert read(t1 / "a.bin") == big
        assert read(t2 / "dir/sub/c.bin") == small
        text = scrape(port)
        ss = series(text)
        # every byte read came down through its own volume's daemon: the small file in one
        # GET, exactly; the 3 MiB one at least once (a reader's window dropped and asked
        # again under load fetches a range twice, as tests/integration/test_metrics.py's
        # mount test says), and never the other volume's bytes
        down2 = total(ss, "s3flash_bytes_total", volume_id="vol-metrics-2", direction="down")
        assert down2 == len(small), text
        down1 = total(ss, "s3flash_bytes_total", volume_id="vol-metrics-1", direction="down")
        assert down1 >= len(big), text
        for vid in ("vol-metrics-1", "vol-metrics-2"):
            gets = total(ss, "s3flash_requests_total", volume_id=vid, op="GetObject",
                         status="2xx")
            assert gets >= 1
            assert total(ss, "s3flash_request_duration_seconds_count", volume_id=vid,
                         op="GetObject") == gets
            assert total(ss, "s3flash_fuse_operations_total", volume_id=vid, op="read") >= 1
            assert total(ss, "s3flash_csi_mount_up", volume_id=vid) == 1
        assert total(ss, "s3flash_csi_mounts") == 2
        # every series of a daemon carries its volume's id and mount; nothing secret
        assert all(lab.get("volume_id") in ("vol-metrics-1", "vol-metrics-2")
                   for n, lab, _ in ss if n.startswith("s3flash_") and
                   not n.startswith("s3flash_csi_") or n == "s3flash_csi_mount_up")
        for secret in (rgw.access_key, rgw.secret_key, "pod-name-not-a-label",
                       "ns-not-a-label"):
            assert secret not in text
        for name in ("s3flash_bytes_total", "s3flash_request_duration_seconds"):
            assert text.count("# TYPE %s " % name) == 1
            assert text.count("# HELP %s " % name) == 1
        # a family's samples follow its TYPE line, before the next family's
        fams = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
        assert len(fams) == len(set(fams))
        # unpublished: its series are gone, the other's stay
        unpublish(d, "vol-metrics-1", t1)
        ss = series(wait_for(lambda: (lambda t: "vol-metrics-1" not in t and t)(scrape(port)),
                             what="vol-metrics-1's series to go"))
        assert total(ss, "s3flash_bytes_total", volume_id="vol-metrics-2",
                     direction="down") == len(small)
        unpublish(d, "vol-metrics-2", t2)


def test_mounter_down_and_readopted(tmp_path, filled, endpoint):
    """The node's port answers while the mounter is down (s3flash_csi_mounter_up 0); the
    restarted mounter re-adopts the daemon with its metrics port, whose counts went on."""
    port = _free_port()
    with running(tmp_path, node_args=["--metrics-port", str(port)]) as d:
        t = tmp_path / "t"
        publish(d, "vol-readopt", t, {"bucketName": filled, "endpointUrl": endpoint})
        assert read(t / "a.bin") == OBJECTS["a.bin"]
        pids = d.daemons()
        d.kill("mounter")
        ss = series(scrape(port))
        assert total(ss, "s3flash_csi_mounter_up") == 0
        assert total(ss, "s3flash_csi_mounts") == 0
        d.start_mounter()
        assert d.daemons() == pids
        ss = series(scrape(port))
        assert total(ss, "s3flash_csi_mounter_up") == 1
        assert total(ss, "s3flash_csi_mount_up", volume_id="vol-readopt") == 1
        down = total(ss, "s3flash_bytes_total", volume_id="vol-readopt", direction="down")
        assert down >= len(OBJECTS["a.bin"])  # at least once: a window may be asked again
        unpublish(d, "vol-readopt", t)


def test_metrics_port_off_by_default(driver):
    # no --metrics-port: the node process listens on no TCP port (ss -p names the owner)
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    assert "pid=%d," % driver.node.pid not in out


def _otlp_known():
    cli = s3flash_cli()
    if not cli:
        return False
    h = subprocess.run([cli, "mount", "--help"], capture_output=True, text=True)
    return "--otlp-endpoint" in h.stdout + h.stderr


def test_otlp_endpoint_reaches_the_daemon(tmp_path, filled, endpoint):
    """Where this build's `s3flash mount` has no --otlp-endpoint yet, the mounter runs a
    wrapper that records its argv and runs the real CLI without that flag: the hand-off is
    what is tested."""
    cli = s3flash_cli()
    if not cli:
        pytest.skip("no s3flash CLI in the build directory")
    env = {}
    argv_log = tmp_path / "argv"
    if not _otlp_known():
        w = tmp_path / "s3flash-wrapper"
        w.write_text("#!%s\nimport os, sys\nopen(%r, 'a').write(repr(sys.argv[1:]) + '\\n')\n"
                     "a = sys.argv[1:]\ni = a.index('--otlp-endpoint')\ndel a[i:i + 2]\n"
                     "os.execv(%r, [%r] + a)\n" % (sys.executable, str(argv_log), cli, cli))
        w.chmod(w.stat().st_mode | stat.S_IXUSR)
        env["S3FLASH_CSI_S3FLASH"] = str(w)
    url = "http://otel-collector.monitoring.svc:4318"
    ctx = {"bucketName": filled, "endpointUrl": endpoint}
    with running(tmp_path, env=env) as d:
        t = tmp_path / "t"
        publish(d, "vol-otlp", t, ctx, flags=["otlp-endpoint=" + url])
        assert read(t / "dir/b.txt") == OBJECTS["dir/b.txt"]
        if env:
            argv = eval(argv_log.read_text().splitlines()[-1])
        else:
            (pid,) = d.daemons().values()
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = [a.decode() for a in f.read().split(b"\0")]
        i = argv.index("--otlp-endpoint")
        assert argv[i + 1] == url
        unpublish(d, "vol-otlp", t)
        for bad in ("ftp://collector:4318", "http://user:pw@collector:4318", "collector:4318",
                    "https://collector:4318"):
            with pytest.raises(grpc.RpcError) as e:
                publish(d, "vol-otlp-bad", tmp_path / "bad", ctx, flags=["otlp-endpoint=" + bad])
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "otlp-endpoint" in e.value.details()
