"""The `s3flash-csi` command (docs/KUBERNETES.md):

  s3flash-csi node --endpoint unix:///csi/csi.sock --node-id NODE --mounter-socket SOCK
                   [--state-dir DIR] [--cache-root DIR] [--sts-endpoint URL] [--with-controller]
                   [--metrics-port PORT [--metrics-address IP]]
  s3flash-csi mounter --socket SOCK [--state-dir DIR] [--s3flash PATH] [--cache-root DIR]
                      [--daemon-cgroup DIR [--daemons-memory-limit SIZE] [--host-cgroup-ns]]
                      [--node-uid UID]
  s3flash-csi controller --endpoint unix:///csi/csi.sock
  s3flash-csi credentials --socket SOCK --mount KEY     (the daemons' credential_process)
"""

import argparse
import logging
import os
import signal
import sys
import threading
from concurrent import futures

DEFAULT_STATE = "/var/lib/kubelet/plugins/csi.s3flash.io"


def _serve_grpc(endpoint, services):
    import grpc

    from . import proto
    if not endpoint.startswith("unix://"):
        sys.exit("s3flash-csi: --endpoint must be unix:///PATH, not %r" % endpoint)
    path = endpoint[len("unix://"):]
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    for name, impl in services:
        proto.add_service(server, name, impl)
    server.add_insecure_port("unix://" + path)
    server.start()
    logging.getLogger("s3flash-csi").info("serving %s on %s",
                                          ", ".join(n for n, _ in services), endpoint)
    return server


def _wait_for_signal(stop, thread=None):
    """Until SIGTERM or SIGINT, or `thread` ended."""
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    while not stop.wait(0.2 if thread else 1):
        if thread and not thread.is_alive():
            return


def parser():
    ap = argparse.ArgumentParser(prog="s3flash-csi", description="s3flash's Kubernetes CSI "
                                 "driver (docs/KUBERNETES.md)")
    ap.add_argument("--log-level", default=os.environ.get("S3FLASH_CSI_LOG", "INFO"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    n = sub.add_parser("node", help="the Identity and Node services (kubelet's socket)")
    n.add_argument("--endpoint", required=True)
    n.add_argument("--node-id", required=True)
    n.add_argument("--mounter-socket", required=True)
    n.add_argument("--state-dir", default=DEFAULT_STATE)
    n.add_argument("--cache-root", default=None,
                   help="where the volumes' `cache` directories are (default STATE/cache)")
    n.add_argument("--sts-endpoint", default=None,
                   help="STS for pod-level credentials (default AWS_ENDPOINT_URL_STS, else "
                        "the regional AWS endpoint)")
    n.add_argument("--token-audience", default="sts.amazonaws.com",
                   help="the audience of the service-account token for STS (the CSIDriver's "
                        "tokenRequests)")
    n.add_argument("--max-volumes", type=int, default=0)
    n.add_argument("--with-controller", action="store_true",
                   help="the plugin's controller is deployed (dynamic provisioning): the "
                        "node's Identity reports CONTROLLER_SERVICE, as the controller's does")
    n.add_argument("--metrics-port", type=int,
                   default=int(os.environ.get("S3FLASH_CSI_METRICS_PORT", "0") or 0),
                   help="serve every volume's metrics (Prometheus text, labelled volume_id) "
                        "at http://NODE:PORT/metrics (default $S3FLASH_CSI_METRICS_PORT, "
                        "else 0: off; -1: any free port, logged)")
    n.add_argument("--metrics-address", default="",
                   help="the address --metrics-port binds (default: all)")
    m = sub.add_parser("mounter", help="runs the s3flash mount daemons")
    m.add_argument("--socket", required=True)
    m.add_argument("--state-dir", default=DEFAULT_STATE)
    m.add_argument("--cache-root", default=None,
                   help="the node's --cache-root: a volume's cache must be under it (default "
                        "STATE/cache)")
    m.add_argument("--daemon-cgroup", default=None,
                   help="run each daemon in a cgroup of its own under this directory (of a "
                        "cgroup v2 or v1 memory hierarchy, outside the mounter container's "
                        "cgroup), limited to its memory target plus headroom: a restart of "
                        "the mounter's container ends no mount (docs/KUBERNETES.md)")
    m.add_argument("--daemons-memory-limit", default=None,
                   help="the memory limit of --daemon-cgroup itself, SIZE (512M, 8G; a bare "
                        "number is MiB, as --memory-target's): what all the "
                        "daemons together may use (default: what is set there, else RAM)")
    m.add_argument("--host-cgroup-ns", action="store_true",
                   help="enter the cgroup namespace of PID 1 (hostPID) first, so that "
                        "--daemon-cgroup may be outside the container's (cgroup v2)")
    m.add_argument("--node-uid", type=int, default=None,
                   help="the node process's uid, if not the mounter's: the one other caller "
                        "the socket accepts")
    m.add_argument("--s3flash", default=None,
                   help="the s3flash CLI (default $S3FLASH_CSI_S3FLASH, the package's own, "
                        "else s3flash on PATH)")
    c = sub.add_parser("controller", help="the Identity and Controller services")
    c.add_argument("--endpoint", required=True)
    k = sub.add_parser("credentials", help="credential_process of a pod-level mount")
    k.add_argument("--socket", required=True)
    k.add_argument("--mount", required=True)
    return ap


def main(argv=None):
    a = parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, a.log_level.upper(), logging.INFO),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    stop = threading.Event()
    if a.cmd == "credentials":
        from .mounter import credentials_main
        return credentials_main(a.socket, a.mount)
    if a.cmd == "mounter":
        from .cgroups import parse_size
        from .mounter import Mounter, enter_host_cgroup_ns
        if a.host_cgroup_ns:
            enter_host_cgroup_ns()  # before any thread: setns() is per thread
        mnt = Mounter(a.socket, a.state_dir, s3flash=a.s3flash, cache_root=a.cache_root,
                      daemon_cgroup=a.daemon_cgroup, node_uid=a.node_uid,
                      daemons_limit=parse_size(a.daemons_memory_limit)
                      if a.daemons_memory_limit else None)
        t = threading.Thread(target=mnt.serve, args=(stop,), daemon=True)
        t.start()
        _wait_for_signal(stop, t)
        t.join(5)
        return 0 if stop.is_set() else 1  # else serve() failed (logged)
    from .node import Identity, Node
    if a.cmd == "node":
        node = Node(a.node_id, a.mounter_socket, a.state_dir, cache_root=a.cache_root,
                    sts_endpoint=a.sts_endpoint, max_volumes=a.max_volumes,
                    token_audience=a.token_audience)
        if a.metrics_port:
            from . import metrics
            metrics.serve(metrics.Exporter(node.metrics_mounts), max(a.metrics_port, 0),
                          a.metrics_address)
        server = _serve_grpc(a.endpoint, [("Identity", Identity(controller=a.with_controller)),
                                          ("Node", node)])
    else:
        from .controller import Controller
        server = _serve_grpc(a.endpoint, [("Identity", Identity(controller=True)),
                                          ("Controller", Controller())])
    _wait_for_signal(stop)
    server.stop(5).wait()
    logging.shutdown()
    os._exit(0)  # a handler still waiting on S3 or the mounter must not hold the exit


if __name__ == "__main__":
    sys.exit(main())
