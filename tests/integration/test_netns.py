"""tests/servers/netns.sh: hosts as network namespaces (a store, compute hosts, a bridge).

The store host runs the sink (bench/s3flash-sink) bound to the store's address; the clients
are Python processes in the compute namespaces speaking HTTP to it over the veths. Checked:
every compute host reaches the store and the root namespace has no address in the set; a
tbf cap on a host's link holds its uploads and downloads to the cap (within a band) while an
uncapped host runs far faster; `down` ends the processes in the namespaces and removes the
namespaces and their links, also a second time and after a set was left up.
"""
import json
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns import Netns, unavailable  # noqa: E402
from ready import read_line  # noqa: E402
from test_sink import sink_exe  # noqa: E402

PREFIX = "s3ftest"

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

# one PUT of `size` bytes and one GET of them, timed inside the client (no interpreter start)
CLIENT = r"""
import http.client, json, sys, time
host, port, key, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
body = b"x" * size
c = http.client.HTTPConnection(host, port, timeout=60)
t = time.monotonic(); c.request("PUT", "/bkt/" + key, body=body); r = c.getresponse(); r.read()
put_s, put_status = time.monotonic() - t, r.status
t = time.monotonic(); c.request("GET", "/bkt/" + key); r = c.getresponse(); n = len(r.read())
get_s, get_status = time.monotonic() - t, r.status
print(json.dumps({"put_s": put_s, "put": put_status, "get_s": get_s, "get": get_status, "n": n}))
"""


def namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return sorted(line.split()[0] for line in out.splitlines()
                  if line.split() and line.split()[0].startswith(PREFIX + "-"))


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    n = Netns(2, prefix=PREFIX)
    sink = n.popen("store", [sink_exe(), "--bind", n.addr("store"), "--port", "0",
                             "--print-port", "--threads", "2", "--quiet"],
                   stdout=subprocess.PIPE)
    n.sink_port = int(read_line(sink, r"^port (\d+)$", "the sink in the store host").group(1))
    n.sink = sink
    yield n
    n.down()


def transfer(net, host, key, size):
    r = net.run(host, [sys.executable, "-c", CLIENT, net.addr("store"), str(net.sink_port), key,
                       str(size)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_up_hosts_and_addresses(net):
    assert namespaces() == [f"{PREFIX}-c1", f"{PREFIX}-c2", f"{PREFIX}-net", f"{PREFIX}-store"]
    assert net.hosts() == ["c1", "c2"]
    assert [net.addr(h) for h in ("store", "c1", "c2")] == ["10.213.0.1", "10.213.0.11",
                                                           "10.213.0.12"]
    # the addresses exist only inside the set: none in the root namespace
    root = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    assert "10.213.0." not in root
    eth = net.run("c1", ["ip", "-o", "addr", "show", "dev", "eth0"], capture_output=True,
                  text=True).stdout
    assert "10.213.0.11/24" in eth


def test_compute_hosts_reach_the_store(net):
    for host in ("c1", "c2"):
        r = transfer(net, host, f"reach-{host}", 1000)
        assert (r["put"], r["get"], r["n"]) == (200, 200, 1000), r


def test_link_cap_is_enforced(net):
    size = 6 << 20
    net.cap("c1", "40mbit")                        # 5 MB/s each way
    try:
        capped = transfer(net, "c1", "capped", size)
    finally:
        net.cap("c1", "none")
    free = transfer(net, "c2", "free", size)
    cap = 40e6 / 8
    for d in ("put", "get"):
        rate = size / capped[d + "_s"]
        assert 0.6 * cap <= rate <= 1.1 * cap, (d, rate, capped)
        # the uncapped host is far faster: the cap, not this machine, set the pace
        assert size / free[d + "_s"] > 3 * cap, (d, free)
    assert capped["n"] == size and free["n"] == size


def test_down_leaves_nothing_behind(net, tmp_path):
    # a second set (another prefix) left up with a process in it, as a crashed run leaves it
    other = Netns(1, prefix=PREFIX + "x")
    sleeper = other.popen("c1", ["sleep", "600"])
    other.procs.remove(sleeper)                    # forget it: `down` must find it itself
    t = time.monotonic()
    other.script("down")
    assert time.monotonic() - t < 10
    assert sleeper.wait(timeout=5) is not None
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert PREFIX + "x-" not in out
    other.script("down")                           # idempotent

    # and the fixture's own set, sink running in the store namespace
    net.script("down")
    assert net.sink.wait(timeout=5) is not None
    assert namespaces() == []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "v-store" not in links and "e-c1" not in links
    net.script("down")
