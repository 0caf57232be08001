"""Volumes that outlive the driver, one cgroup per daemon, and the mounter socket's guard
(docs/KUBERNETES.md, "Upgrade and restarts"): the node and the mounter each run in a real
memory cgroup of their own, as containers do, and a container restart is what runc does (every
process of its cgroup SIGKILLed); the mounter runs each `s3flash mount` daemon in a cgroup
of its own (--daemon-cgroup), limited to its volume's memory target plus headroom. Against
RGW, with real FUSE mounts, while two pods' volumes are busy reading and writing."""

import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

grpc = pytest.importorskip("grpc")
pytest.importorskip("s3flash.csi.csi_pb2", reason="s3flash.csi built without grpcio-tools")

from conftest import faultproxy  # noqa: E402
from csi_harness import pid_alive, running, tokens, wait_for  # noqa: E402
from s3flash.csi.cgroups import HEADROOM_FIXED  # noqa: E402
from s3flash.csi.proto import pb  # noqa: E402
from test_csi import sts  # noqa: E402,F401  (its STS stand-in, a fixture)

V1 = Path("/sys/fs/cgroup/memory")
if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
    pytest.skip("the CSI driver mounts: needs root and /dev/fuse", allow_module_level=True)
if not (V1 / "memory.limit_in_bytes").exists():
    pytest.skip("no cgroup v1 memory controller at %s" % V1, allow_module_level=True)

MIB = 1 << 20
M = pb.VolumeCapability.AccessMode
DAEMONS_LIMIT = 2048 * MIB  # what all the daemons together may use (the node's share)
R_OBJ = {"iso-a/": os.urandom(2 * MIB + 123), "iso-b/": os.urandom(3 * MIB + 7)}
BIG = os.urandom(64 * MIB)


def publish(driver, vid, target, ctx, flags=(), secrets=None):
    cap = pb.VolumeCapability(mount=pb.VolumeCapability.MountVolume(mount_flags=list(flags)),
                              access_mode=M(mode=M.SINGLE_NODE_WRITER))
    return driver.stub("Node").NodePublishVolume(pb.NodePublishVolumeRequest(
        volume_id=vid, target_path=str(target), volume_capability=cap,
        secrets=secrets or {}, volume_context=ctx), timeout=120)


def unpublish(driver, vid, target):
    driver.stub("Node").NodeUnpublishVolume(pb.NodeUnpublishVolumeRequest(
        volume_id=vid, target_path=str(target)), timeout=60)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def _procs(group):
    try:
        return [int(x) for x in (group / "cgroup.procs").read_text().split()]
    except FileNotFoundError:
        return []


@pytest.fixture
def groups():
    """Real v1 memory cgroups: node/ and mounter/ (the containers), daemons/ (the node's
    share for volumes: the mounter sets DAEMONS_LIMIT). Emptied and removed at the end."""
    base = V1 / ("s3flash-csi-test-" + uuid.uuid4().hex[:12])
    for d in ("node", "mounter", "daemons"):
        (base / d).mkdir(parents=True)
    yield base
    leaves = [p for p in (base / "daemons").iterdir() if p.is_dir()]
    for g in [base / "node", base / "mounter"] + leaves:
        for pid in _procs(g):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for g in leaves + [base / "node", base / "mounter", base / "daemons", base]:
        wait_for(lambda: not _procs(g), 30, "cgroup %s to empty" % g)
        g.rmdir()


@pytest.fixture
def driver(tmp_path, groups):
    with running(tmp_path, cgroups={"node": groups / "node", "mounter": groups / "mounter"},
                 mounter_args=["--daemon-cgroup", str(groups / "daemons"),
                                "--daemons-memory-limit", "%dM" % (DAEMONS_LIMIT >> 20)]) as d:
        yield d


@pytest.fixture
def ctx(s3, bucket, endpoint):
    for prefix, data in R_OBJ.items():
        s3.put_object(Bucket=bucket, Key=prefix + "r.bin", Body=data)
    return {"bucketName": bucket, "endpointUrl": endpoint}


class Busy:
    """One pod's load on its volume: a reader checking every byte of r.bin, a writer making
    new files (each lands whole or fails: noted). `rounds` counts completed reads."""

    def __init__(self, target, expect):
        self.target, self.expect = Path(target), expect
        self.stop = threading.Event()
        self.rounds = self.wrote_rounds = 0
        self.bad_reads, self.read_errors, self.write_errors = [], [], []
        self.written = {}
        self.threads = [threading.Thread(target=self._reader, daemon=True),
                        threading.Thread(target=self._writer, daemon=True)]
        for t in self.threads:
            t.start()

    def _reader(self):
        while not self.stop.is_set():
            try:
                got = read(self.target / "r.bin")
                if got != self.expect:
                    self.bad_reads.append(len(got))
            except OSError as e:
                self.read_errors.append(e)
            self.rounds += 1

    def _writer(self):
        n = 0
        while not self.stop.is_set():
            name = "w-%d.bin" % n
            data = random.randbytes(random.randint(1, 600 * 1024))
            try:
                with open(self.target / name, "wb") as f:
                    f.write(data)
                self.written[name] = data
            except OSError as e:
                self.write_errors.append((name, e))
            n += 1
            self.wrote_rounds += 1

    def progress(self, more=2):
        """Wait (bounded) until both loops completed `more` further rounds."""
        r, w = self.rounds + more, self.wrote_rounds + more
        wait_for(lambda: self.rounds >= r and self.wrote_rounds >= w, 120,
                 "%s to keep serving" % self.target)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(120)


def test_volumes_outlive_node_and_mounter_restarts(driver, ctx, s3, bucket, groups, tmp_path):
    ta, tb = tmp_path / "pod-a", tmp_path / "pod-b"
    publish(driver, "vol-a", ta, dict(ctx, prefix="iso-a/"), ["allow-overwrite"])
    publish(driver, "vol-b", tb, dict(ctx, prefix="iso-b/"), ["allow-overwrite"])
    pids = driver.daemons()
    assert len(pids) == 2
    for key, pid in pids.items():  # each in its own cgroup, none in the mounter's
        assert _procs(groups / "daemons" / key) == [pid]
    assert not set(pids.values()) & set(_procs(groups / "mounter"))
    loads = [Busy(ta, R_OBJ["iso-a/"]), Busy(tb, R_OBJ["iso-b/"])]
    try:
        for b in loads:
            b.progress()
        # the mounter SIGKILLed, and a new one
        driver.kill("mounter")
        for b in loads:
            b.progress()
        driver.start_mounter()
        assert driver.daemons() == pids  # re-adopted
        # the node SIGKILLed, and a new one, which knows its publishes
        driver.kill("node")
        for b in loads:
            b.progress()
        driver.start_node()
        publish(driver, "vol-a", ta, dict(ctx, prefix="iso-a/"), ["allow-overwrite"])
        # the upgrade: both containers restarted (every process of each cgroup killed)
        driver.kill_container("mounter")
        driver.kill_container("node")
        for b in loads:
            b.progress()
        driver.start_mounter()
        driver.start_node()
        for b in loads:
            b.progress()
        assert driver.daemons() == pids
        publish(driver, "vol-b", tb, dict(ctx, prefix="iso-b/"), ["allow-overwrite"])
    finally:
        for b in loads:
            b.finish()
    for b, prefix in zip(loads, ("iso-a/", "iso-b/")):
        assert not b.bad_reads and not b.read_errors, (b.bad_reads, b.read_errors[:3])
        assert not b.write_errors, b.write_errors[:3]
        assert b.rounds > 8 and len(b.written) > 8
        for name, data in b.written.items():  # every write that succeeded landed whole
            got = s3.get_object(Bucket=bucket, Key=prefix + name)["Body"].read()
            assert got == data, (prefix + name, len(got), len(data))
    unpublish(driver, "vol-a", ta)
    unpublish(driver, "vol-b", tb)
    for key, pid in pids.items():
        wait_for(lambda: not pid_alive(pid), 30, "daemon %d to end" % pid)
        wait_for(lambda: not (groups / "daemons" / key).exists(), 30, "its cgroup to go")


def test_each_daemon_has_its_volumes_memory_limit(driver, ctx, groups, tmp_path):
    ta, tb = tmp_path / "a", tmp_path / "b"
    # Mountpoint's unit: a bare memory-target is MiB
    publish(driver, "vol-a", ta, dict(ctx, prefix="iso-a/"), ["memory-target=128"])
    publish(driver, "vol-b", tb, dict(ctx, prefix="iso-b/"))
    mounts = driver.mounter_call({"op": "list"})["mounts"]
    by_vol = {}
    for key, m in mounts.items():
        cmd = Path("/proc/%d/cmdline" % m["pid"]).read_bytes().split(b"\0")
        target = int(cmd[cmd.index(b"--memory-target") + 1].rstrip(b"M")) * MIB
        limit = int((Path(m["cgroup"]) / "memory.limit_in_bytes").read_text())
        by_vol[m["source"]] = (target, limit)
    # its own: 128 MiB and a quarter plus 64 MiB of headroom
    assert by_vol[ctx["bucketName"] + "/iso-a/"] == (128 * MIB, 128 * MIB + 32 * MIB
                                                     + HEADROOM_FIXED)
    # none asked: the mount's default share (an eighth) of what the daemons may use
    assert by_vol[ctx["bucketName"] + "/iso-b/"] == (256 * MIB, 256 * MIB + 64 * MIB
                                                     + HEADROOM_FIXED)
    # a target that cannot fit is refused at publish, naming the limit
    with pytest.raises(grpc.RpcError) as e:
        publish(driver, "vol-c", tmp_path / "c", dict(ctx, prefix="iso-a/"),
                ["memory-target=4G"])
    assert "does not fit" in e.value.details() and "2048 MiB" in e.value.details()
    unpublish(driver, "vol-a", ta)
    unpublish(driver, "vol-b", tb)


def test_a_daemon_over_its_limit_takes_no_other_volume(driver, ctx, s3, bucket, groups,
                                                       tmp_path):
    s3.put_object(Bucket=bucket, Key="iso-a/big.bin", Body=BIG)
    ta, tb = tmp_path / "a", tmp_path / "b"
    publish(driver, "vol-a", ta, dict(ctx, prefix="iso-a/"), ["memory-target=64M"])
    publish(driver, "vol-b", tb, dict(ctx, prefix="iso-b/"), ["allow-overwrite"])
    mounts = driver.mounter_call({"op": "list"})["mounts"]
    (key_a, a), = [(k, m) for k, m in mounts.items() if m["source"].endswith("/iso-a/")]
    pid_b = next(m["pid"] for m in mounts.values() if m["source"].endswith("/iso-b/"))
    leaf = Path(a["cgroup"])
    # forced over its limit: a little above what it uses now, then a 64 MiB read
    used = int((leaf / "memory.usage_in_bytes").read_text())
    (leaf / "memory.limit_in_bytes").write_text(str(used + MIB))
    load_b = Busy(tb, R_OBJ["iso-b/"])
    try:
        def killed():
            try:
                if read(ta / "big.bin") != BIG:
                    raise AssertionError("a wrong read before the OOM kill")
            except OSError as e:
                assert e.errno in (errno.ENOTCONN, errno.EIO, errno.ECONNABORTED), e
            return not pid_alive(a["pid"])
        wait_for(killed, 120, "the daemon over its limit to be OOM-killed")
        wait_for(lambda: key_a not in driver.mounter_call({"op": "list"})["mounts"], 30,
                 "the mounter to see the daemon gone")
        # the OOM killer of its own cgroup (the mounter read its count before removing it)
        assert "was killed by the OOM killer" in (driver.root / "mounter.log").read_text()
        load_b.progress(3)  # the other volume serves on
        assert pid_alive(pid_b)
        with pytest.raises(OSError) as e:
            read(ta / "r.bin")
        assert e.value.errno == errno.ENOTCONN
    finally:
        load_b.finish()
    assert not load_b.bad_reads and not load_b.read_errors and not load_b.write_errors
    assert read(tb / "r.bin") == R_OBJ["iso-b/"]
    unpublish(driver, "vol-a", ta)
    unpublish(driver, "vol-b", tb)
    s3.delete_object(Bucket=bucket, Key="iso-a/big.bin")


def test_sizes_read_as_the_cli_reads_them():
    """The mounter's and the node's sizes (a daemon's --memory-target, --daemons-memory-limit,
    max-cache-size against an emptyDir's limit) in the CLI's units: a bare number is MiB."""
    from s3flash.csi import cgroups, options
    assert cgroups.parse_size("128") == 128 * MIB
    assert cgroups.parse_size("128M") == 128 * MIB
    assert cgroups.parse_size("2G") == 2048 * MIB
    assert cgroups.parse_size("512K") == 512 << 10
    assert options.parse_size("64") == 64 * MIB  # the node's checks use the same parser
    with pytest.raises(ValueError):
        cgroups.parse_size("1.5G")


def test_cgroup_v2_limits(tmp_path, monkeypatch):
    """The v2 files (memory.max, "max" for none, memory.events' oom_kill) in a tree shaped
    as the kernel's (this machine's v2 hierarchy has no memory controller)."""
    from s3flash.csi import cgroups
    top = tmp_path / "cg"
    root = top / "kubepods" / "s3flash-csi"
    for d in (top, top / "kubepods", root):
        d.mkdir(exist_ok=True)
        (d / "cgroup.controllers").write_text("cpu memory pids\n")
        (d / "cgroup.subtree_control").write_text("")
        (d / "memory.max").write_text("max\n")
    (top / "kubepods" / "memory.max").write_text("%d\n" % (3 * 1024 * MIB))
    monkeypatch.setattr(cgroups, "_ram", lambda: 64 << 30)
    g = cgroups.DaemonCgroups(str(root), limit=4096 * MIB)
    assert g.v2 and (root / "memory.max").read_text() == str(4096 * MIB)
    assert g.available() == 3 * 1024 * MIB  # the smallest up the tree
    (top / "kubepods" / "memory.max").write_text("max\n")
    assert g.available() == 4096 * MIB
    procs = g.create("k" * 32, 300 * MIB)
    assert procs == str(root / ("k" * 32) / "cgroup.procs")
    assert g.limit("k" * 32) == 300 * MIB
    (root / ("k" * 32) / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n")
    assert g.oom_kills("k" * 32) == 1
    # the memory controller switched on from the top down
    assert all((d / "cgroup.subtree_control").read_text() == "+memory"
               for d in (top, top / "kubepods", root))


def test_static_keys_are_not_in_the_daemon_environment(driver, ctx, s3, bucket, rgw, tmp_path):
    """R9: nodePublishSecretRef keys reach the daemon through credential_process."""
    t = tmp_path / "s"
    secrets = {"key_id": rgw.access_key, "access_key": rgw.secret_key}
    publish(driver, "vol-s", t, dict(ctx, prefix="iso-a/"), ["allow-overwrite"],
            secrets=secrets)
    (pid,) = driver.daemons().values()
    env = Path("/proc/%d/environ" % pid).read_bytes()
    assert rgw.secret_key.encode() not in env and rgw.access_key.encode() not in env
    assert b"AWS_SECRET_ACCESS_KEY" not in env and b"AWS_ACCESS_KEY_ID" not in env
    assert read(t / "r.bin") == R_OBJ["iso-a/"]
    (t / "static.txt").write_bytes(b"with static keys")
    assert s3.get_object(Bucket=bucket, Key="iso-a/static.txt")["Body"].read() == \
        b"with static keys"
    # a new mounter has no keys in memory: kubelet's republish gives them back
    driver.kill_container("mounter")
    driver.start_mounter()
    assert list(driver.daemons().values()) == [pid]  # the same daemon, re-adopted
    publish(driver, "vol-s", t, dict(ctx, prefix="iso-a/"), ["allow-overwrite"],
            secrets=secrets)
    (t / "static2.txt").write_bytes(b"after the restart")
    assert s3.get_object(Bucket=bucket, Key="iso-a/static2.txt")["Body"].read() == \
        b"after the restart"
    unpublish(driver, "vol-s", t)


def test_pod_credentials_after_the_mounter_container_restarts(s3, bucket, rgw, endpoint, sts,
                                                             groups, tmp_path):
    """A daemon that a mounter before this one started gets its refreshed credentials from
    the new mounter (credential_process: the asker descends from the mount's daemon)."""
    s3.put_object(Bucket=bucket, Key="pub/f.txt", Body=b"data", ACL="public-read")
    s3.put_bucket_acl(Bucket=bucket, ACL="public-read")
    sts.answers = [(rgw.access_key, rgw.secret_key, 6),
                   (rgw.other_access_key, rgw.other_secret_key, 3600)]
    t = tmp_path / "p"
    with running(tmp_path, cgroups={"node": groups / "node", "mounter": groups / "mounter"},
                 mounter_args=["--daemon-cgroup", str(groups / "daemons")],
                 node_args=["--sts-endpoint", "http://127.0.0.1:%d/" % sts.server_port]) \
            as d, faultproxy(endpoint) as proxy:
        c = {"bucketName": bucket, "endpointUrl": proxy.endpoint, "prefix": "pub/",
             "authenticationSource": "pod", "roleArn": "arn:aws:iam::1:role/r",
             "csi.storage.k8s.io/pod.namespace": "ns",
             "csi.storage.k8s.io/serviceAccount.name": "sa",
             "csi.storage.k8s.io/serviceAccount.tokens": tokens("good-token")}
        publish(d, "vol-p", t, c, ["metadata-ttl=0"])
        assert read(t / "f.txt") == b"data"
        assert {e.get("access_key") for e in proxy.stats()["log"]} == {rgw.access_key}
        pids = d.daemons()
        d.kill_container("mounter")
        d.start_mounter()
        assert d.daemons() == pids
        publish(d, "vol-p", t, c, ["metadata-ttl=0"])  # kubelet's republish
        assert len(sts.calls) == 2

        def refreshed():
            os.listdir(t)  # a LIST each time (metadata-ttl=0)
            return proxy.stats()["log"][-1].get("access_key") == rgw.other_access_key
        wait_for(refreshed, 60, "the re-adopted daemon to sign with the refreshed keys")
        assert "not its daemon: refused" not in (d.root / "mounter.log").read_text()
        unpublish(d, "vol-p", t)
    s3.delete_object(Bucket=bucket, Key="pub/f.txt")


FOREIGN = r"""
import json, os, socket, sys
os.setgroups([])
os.setgid(int(sys.argv[2]))
os.setuid(int(sys.argv[2]))  # another user from here on
results = {}
for op in ("mount", "release", "update_credentials", "list"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(30)
    try:
        s.connect(sys.argv[1])
    except OSError as e:
        results[op] = "connect: " + e.__class__.__name__
        continue
    doc = {"op": op, "key": "0" * 32, "source": "bucket", "flags": [],
           "credentials": {"kind": "static", "values": {}}}
    if op == "mount":
        fd = os.open("/dev/null", os.O_RDONLY)
        socket.send_fds(s, [json.dumps(doc).encode()], [fd])
    else:
        s.sendall(json.dumps(doc).encode())
    results[op] = json.loads(s.recv(65536))
print(json.dumps(results))
"""


def foreign_calls(sock, uid):
    p = subprocess.run([sys.executable, "-c", FOREIGN, str(sock), str(uid)],
                       capture_output=True, timeout=60, cwd="/")
    assert p.returncode == 0, p.stderr.decode()
    return json.loads(p.stdout)


def test_foreign_callers_are_refused(driver):
    """R10: the socket's directory is the mounter's alone (0700); a caller of another uid
    that reaches the socket anyway is refused by SO_PEERCRED, every op."""
    run_dir = driver.mounter_sock.parent
    assert run_dir.stat().st_mode & 0o777 == 0o700
    assert all(v == "connect: PermissionError" for v in foreign_calls(driver.mounter_sock,
                                                                      65534).values())
    # a caller that reaches the socket anyway: a link to it in an open directory, the
    # socket's mode opened
    open_dir = Path(tempfile.mkdtemp(prefix="s3flash-csi-open-"))
    try:
        open_dir.chmod(0o755)
        os.link(driver.mounter_sock, open_dir / "mounter.sock")
        mode = driver.mounter_sock.stat().st_mode & 0o777
        os.chmod(driver.mounter_sock, 0o777)
        try:
            got = foreign_calls(open_dir / "mounter.sock", 65534)
        finally:
            os.chmod(driver.mounter_sock, mode)
    finally:
        shutil.rmtree(open_dir)
    for op, reply in got.items():
        assert reply["ok"] is False and "uid 65534 may not call" in reply["error"], (op, reply)
    assert "refused: only uid" in (driver.root / "mounter.log").read_text()


def test_the_mounter_refuses_a_socket_directory_open_to_others(tmp_path):
    """A --socket in a directory others may enter, holding other files (such as /tmp): the
    mounter neither closes that directory nor serves there; it exits, naming it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "someone-else.txt").write_text("x")
    p = subprocess.run([sys.executable, "-m", "s3flash.csi", "mounter", "--socket",
                        str(shared / "m.sock"), "--state-dir", str(tmp_path / "state")],
                       capture_output=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path
                                                                      if p)))
    assert p.returncode == 1
    assert "is not a private directory" in p.stderr.decode() and str(shared) in \
        p.stderr.decode()
    assert shared.stat().st_mode & 0o777 == 0o777 and not (shared / "m.sock").exists()


@pytest.mark.parametrize("doc, why", [
    ({"flags": ["--log-directory", "/etc"]}, "names a host directory"),
    ({"flags": ["--cache", "/etc"]}, "is not one a volume may set"),  # the request's cache field
    ({"flags": ["--log-file", "/etc/passwd"]}, "names a host file"),
    ({"flags": ["--sse-c-key", "fileb:///etc/shadow"]}, "names a host file"),
    ({"flags": ["--uid", "0;id"]}, "needs a value like"),
    ({"flags": ["--metrics-listen", "0.0.0.0:9"]}, "is the mounter's to decide"),
    ({"flags": ["--no-such-flag"]}, "is not one a volume may set"),
    ({"flags": ["/etc/passwd"]}, "is not --NAME"),
    ({"key": "../../../tmp/x"}, "is not a key the node makes"),
    ({"source": "Bad Bucket!"}, "is not a bucket name"),
    ({"source": "bucket/../other/"}, "'..' prefix component"),
    ({"cache": "/etc/ssl"}, "is not NAME/IDENTITY under the cache root"),
    ({"credentials": {"kind": "env"}}, "are not driver, static or pod"),
    # an emptyDir cache is wiped: never a named cache of another volume
    ({"cache": "CACHE_ROOT/named/" + "cd" * 16, "empty_dir": True}, "an emptyDir cache is"),
    ({"empty_dir": True}, "an emptyDir cache is"),
])
def test_the_mounter_checks_every_flag_itself(driver, doc, why):
    """Bad requests sent straight to the mounter socket (a compromised or buggy node)."""
    from s3flash.csi import sysmount
    req = {"op": "mount", "key": "ab" * 16, "source": "bucket", "flags": [],
           "target": "/tmp/x"}
    req.update(doc)
    if "cache" in req:
        req["cache"] = req["cache"].replace("CACHE_ROOT", str(driver.state / "cache"))
    fd = os.open("/dev/null", os.O_RDONLY)
    try:
        r = sysmount.call(str(driver.mounter_sock), req, [fd])
    finally:
        os.close(fd)
    assert r["ok"] is False and "refused by the mounter" in r["error"] and why in r["error"], r
    assert driver.daemons() == {}
