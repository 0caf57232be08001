"""Hosts as network namespaces, from Python: a thin wrapper over tests/servers/netns.sh for
the multi-host tests (test_netns.py, test_multirank.py) and bench/multirank.py.

    with Netns(2, prefix="s3ftest") as net:       # store + c1, c2
        net.popen("store", [sink, "--bind", net.addr("store"), ...])
        net.run("c1", ["python3", "client.py"])

Everything started through popen() runs inside a namespace, and `down` (on exit) ends what is
still running there, so a failed test leaves no server behind.
"""
import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tests", "servers", "netns.sh")


_why = []


def unavailable():
    """Why namespaces cannot be made here (a skip reason), or None. Probes by making one (a
    container without CAP_SYS_ADMIN lists namespaces but cannot add them)."""
    if _why:
        return _why[0]
    why = None
    if os.geteuid() != 0:
        why = "network namespaces need root"
    elif not shutil.which("ip") or not shutil.which("tc"):
        why = "iproute2 (ip, tc) is not installed"
    else:
        name = f"s3fprobe-{os.getpid()}"
        probe = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
        if probe.returncode != 0:
            why = f"`ip netns add` fails here: {probe.stderr.strip()}"
        else:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    _why.append(why)
    return why


class Netns:
    def __init__(self, computes, prefix="s3ftest", rate=None, store_rate=None):
        self.computes = computes
        self.prefix = prefix
        self.env = dict(os.environ, NETNS_PREFIX=prefix)
        self.procs = []
        args = ["up", str(computes)]
        if rate:
            args += ["--rate", rate]
        if store_rate:
            args += ["--store-rate", store_rate]
        self.script(*args)

    def script(self, *args, timeout=60):
        r = subprocess.run(["bash", SCRIPT, *args], env=self.env, capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"netns.sh {' '.join(args)}: rc {r.returncode}: {r.stderr}")
        return r.stdout

    def hosts(self):
        return self.script("hosts").split()

    def addr(self, host):
        return self.script("addr", host).strip()

    def cap(self, host, rate):
        self.script("cap", host, rate)

    def cmd(self, host, argv):
        """argv run in HOST's namespace."""
        return ["ip", "netns", "exec", f"{self.prefix}-{host}", *argv]

    def popen(self, host, argv, **kw):
        p = subprocess.Popen(self.cmd(host, argv), **kw)
        self.procs.append(p)
        return p

    def run(self, host, argv, **kw):
        return subprocess.run(self.cmd(host, argv), **kw)

    def down(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        self.script("down")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.down()


WORKER = os.path.join(ROOT, "tests", "integration", "multirank_worker.py")


def torchrun(net, hosts, nproc, args, env, log_dir, port, timeout=180):
    """multirank_worker.py under torchrun (gloo, static rendezvous on the first host) on each
    of HOSTS with NPROC ranks each; ranks are numbered host by host. Each rank's stdout and
    stderr go to LOG_DIR/<host>/<run>/attempt_0/<local rank>/, each torchrun's own output to
    LOG_DIR/<host>.torchrun.log. Returns [(host, rc, output)]."""
    import sys
    env = dict(env, GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS="1", LOGLEVEL="INFO")
    procs = []
    for k, host in enumerate(hosts):
        d = os.path.join(log_dir, host)
        os.makedirs(d, exist_ok=True)
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(hosts)),
                "--node_rank", str(k), "--nproc_per_node", str(nproc),
                "--master_addr", net.addr(hosts[0]), "--master_port", str(port),
                "--max_restarts", "0", "--monitor_interval", "0.2",
                "--log_dir", d, "--redirects", "3", WORKER, *args]
        procs.append((host, net.popen(host, argv, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)))
    out = []
    for host, p in procs:
        try:
            text, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
            text += f"\n[timed out after {timeout} s]"
        with open(os.path.join(log_dir, f"{host}.torchrun.log"), "w") as f:
            f.write(text)
        out.append((host, p.returncode, text))
    return out


def rank_logs(log_dir):
    """{global rank: stderr text} from a torchrun LOG_DIR (hosts in order, NPROC each)."""
    logs = {}
    for host in sorted((h for h in os.listdir(log_dir)
                        if os.path.isdir(os.path.join(log_dir, h))), key=lambda h: (len(h), h)):
        for dirpath, _, files in os.walk(os.path.join(log_dir, host)):
            if "stderr.log" in files:
                logs.setdefault(host, {})[int(os.path.basename(dirpath))] = open(
                    os.path.join(dirpath, "stderr.log"), errors="replace").read()
    ranks, base = {}, 0
    for host in sorted(logs, key=lambda h: (len(h), h)):
        for local in sorted(logs[host]):
            ranks[base + local] = logs[host][local]
        base += len(logs[host])
    return ranks


def s3_harness(net, host, endpoint, env, op, bucket, prefix=""):
    """boto3 from HOST (the root namespace cannot reach the store): op "create" makes BUCKET,
    "list" returns the keys under PREFIX. The harness's view, never the code under test."""
    import json
    import sys
    code = ("import boto3, json\n"
            f"s = boto3.client('s3', endpoint_url={endpoint!r})\n"
            f"if {op!r} == 'create':\n"
            f"    s.create_bucket(Bucket={bucket!r}); print('[]')\n"
            "else:\n"
            "    keys = []\n"
            "    for page in s.get_paginator('list_objects_v2').paginate(\n"
            f"            Bucket={bucket!r}, Prefix={prefix!r}):\n"
            "        keys += [o['Key'] for o in page.get('Contents', [])]\n"
            "    print(json.dumps(keys))\n")
    r = net.run(host, [sys.executable, "-c", code], env=env, capture_output=True, text=True,
                timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"s3 harness {op}: {r.stderr}")
    return json.loads(r.stdout)
