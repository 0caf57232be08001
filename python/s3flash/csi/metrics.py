"""The node's one metrics port (docs/KUBERNETES.md, "Metrics"): `s3flash-csi node
--metrics-port PORT` serves GET /metrics in Prometheus text. Every mount daemon the mounter
starts serves its own registry on 127.0.0.1 (an ephemeral port, `--metrics-listen
127.0.0.1:0`, learnt from the daemon's start-up line); a scrape of the node asks the mounter
for the live daemons and their ports, scrapes each, and re-emits its series with the labels
`volume_id` (the PersistentVolume's volume handle) and `mount` (the share key, a hash) added,
one HELP and TYPE per name across them, then the driver's own series. Nothing of a publish's
secrets, tokens or pod names is a label."""

import http.client
import logging
import re
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger("s3flash-csi.metrics")

SCRAPE_TIMEOUT = 5.0
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_SUFFIXES = ("_bucket", "_count", "_sum", "_created")


def _escape(v):
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Families:
    """Metric families in the order first seen: name -> HELP, TYPE and sample lines."""

    def __init__(self):
        self.order = []
        self.fams = {}

    def _fam(self, name):
        f = self.fams.get(name)
        if f is None:
            f = self.fams[name] = {"help": None, "type": None, "samples": []}
            self.order.append(name)
        return f

    def add_text(self, text, labels):
        """The series of one daemon's exposition text, with `labels` (name -> value) put
        first on each."""
        extra = ",".join('%s="%s"' % (k, _escape(v)) for k, v in labels.items())
        current = None
        for line in text.splitlines():
            if not line.strip():
                continue
            if line.startswith("#"):
                parts = line.split(None, 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    current = parts[2]
                    f = self._fam(current)
                    rest = parts[3] if len(parts) > 3 else ""
                    if f[parts[1].lower()] is None:
                        f[parts[1].lower()] = rest
                continue
            m = _SAMPLE.match(line)
            if not m:
                continue
            name, inner, value = m.group(1), m.group(3), m.group(4)
            fam = current
            if fam is None or not (name == fam or
                                   any(name == fam + s for s in _SUFFIXES)):
                fam = name
            lab = extra + ("," + inner if inner else "")
            self._fam(fam)["samples"].append("%s{%s} %s" % (name, lab, value))

    def add(self, name, kind, help_, samples):
        """A series of the driver's own: samples, a list of (labels dict, value)."""
        f = self._fam(name)
        f["help"], f["type"] = help_, kind
        for labels, value in samples:
            lab = ",".join('%s="%s"' % (k, _escape(v)) for k, v in labels.items())
            f["samples"].append("%s{%s} %s" % (name, lab, value) if lab else
                                "%s %s" % (name, value))

    def render(self):
        out = []
        for name in self.order:
            f = self.fams[name]
            if f["help"] is not None:
                out.append("# HELP %s %s" % (name, f["help"]))
            if f["type"] is not None:
                out.append("# TYPE %s %s" % (name, f["type"]))
            out.extend(f["samples"])
        return "\n".join(out) + "\n"


def scrape(port, timeout=SCRAPE_TIMEOUT):
    """GET http://127.0.0.1:PORT/metrics: its text, or raises OSError/HTTPException."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", "/metrics")
        r = c.getresponse()
        body = r.read()
        if r.status != 200:
            raise http.client.HTTPException("status %d" % r.status)
        return body.decode("utf-8", "replace")
    finally:
        c.close()


class Exporter:
    """Collects the node's exposition: `mounts()` gives the live daemons as a list of
    (labels dict, metrics port or None)."""

    def __init__(self, mounts):
        self.mounts = mounts
        self.lock = threading.Lock()
        self.failures = 0  # scrapes of a daemon that failed, since the node started

    def collect(self):
        try:
            mounts = self.mounts()
            mounter_up = 1
        except Exception as e:  # the mounter restarting: the driver's series still answer
            log.warning("metrics: the mounter did not list its mounts: %s", e)
            mounts, mounter_up = [], 0
        fams = Families()
        up = []
        with futures.ThreadPoolExecutor(max_workers=8) as ex:
            jobs = [(labels, ex.submit(scrape, port) if port else None)
                    for labels, port in mounts]
            for labels, job in jobs:
                text = None
                if job is not None:
                    try:
                        text = job.result()
                    except (OSError, http.client.HTTPException) as e:
                        log.warning("metrics: scraping the daemon of volume %s failed: %s",
                                    labels.get("volume_id"), e)
                        with self.lock:
                            self.failures += 1
                if text is not None:
                    fams.add_text(text, labels)
                up.append((labels, 1 if text is not None else 0))
        fams.add("s3flash_csi_mount_up", "gauge",
                 "1 when the mount daemon's metrics were scraped, 0 when they could not be "
                 "(the daemon is gone, or was started without a metrics port)", up)
        fams.add("s3flash_csi_mounts", "gauge", "mount daemons the mounter runs now",
                 [({}, len(mounts))])
        fams.add("s3flash_csi_mounter_up", "gauge",
                 "1 when the mounter answered the node's list of its mounts",
                 [({}, mounter_up)])
        with self.lock:
            failures = self.failures
        fams.add("s3flash_csi_scrape_failures_total", "counter",
                 "scrapes of a mount daemon's metrics that failed", [({}, failures)])
        return fams.render()


class _Handler(BaseHTTPRequestHandler):
    exporter = None

    def do_GET(self):
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404, "only /metrics is served")
            return
        body = self.exporter.collect().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        log.debug("metrics: " + fmt, *args)


def serve(exporter, port, host=""):
    """Serve exporter's text on HOST:PORT in a thread; the server (its port:
    server.server_address[1])."""
    handler = type("Handler", (_Handler,), {"exporter": exporter})
    srv = ThreadingHTTPServer((host, port), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, name="metrics", daemon=True).start()
    log.info("metrics of the node's volumes at http://%s:%d/metrics", host or "0.0.0.0",
             srv.server_address[1])
    return srv
