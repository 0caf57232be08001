"""Each `s3flash mount` daemon in a cgroup of its own (docs/KUBERNETES.md, "Upgrade and
restarts"): a leaf named by its mount key under the mounter's --daemon-cgroup directory, a
cgroup outside the mounter container's own. A container restart (runc kills every process of
the container's cgroup) then never reaches a daemon, and each daemon's memory limit is its
own: what its volume asks for (its memory target, plus headroom for the process itself and
its credential_process), inside what the --daemon-cgroup directory allows (the node's share
for volumes). An OOM kill ends one volume's daemon, never another's.

Both cgroup versions: v2 (memory.max; the mounter enables the memory controller for the
leaves) and v1 (the memory hierarchy's memory.limit_in_bytes)."""

import os
import re

MIB = 1 << 20
# what a daemon needs beyond its memory target: the process and its libraries, kernel
# memory charged to it, and its credential_process (a Python child) while it runs
HEADROOM_FIXED = 64 * MIB
V1_NO_LIMIT = 1 << 62
_SIZE = re.compile(r"^([0-9]{1,12})([KMGT]?)$")


def parse_size(text):
    """'512M' -> bytes, as the s3flash CLI reads --memory-target and --max-cache-size: K M G T
    in powers of 1024, and a bare number in MiB (Mountpoint's unit: '512' is 512 MiB)."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError("%r is not a size like 512M" % text)
    return int(m.group(1)) << (10 * " KMGT".index(m.group(2) or "M"))


def default_target(available):
    """The mount's own default (src/mount/mount.c): an eighth of the memory, 64 MiB..8 GiB."""
    return min(max(available // 8, 64 * MIB), 8 << 30)


def headroom(target):
    return target // 4 + HEADROOM_FIXED


def _ram():
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _read_limit(path):
    try:
        with open(path) as f:
            v = f.read().strip()
    except OSError:
        return None
    if v == "max":
        return None
    try:
        n = int(v)
    except ValueError:
        return None
    return None if n >= V1_NO_LIMIT else n


class DaemonCgroups:
    """The leaves under `root`, a directory of a cgroup hierarchy with the memory controller
    (made if missing; `limit`: its own memory limit, what all the daemons may use)."""

    def __init__(self, root, limit=None):
        self.root = os.path.normpath(root)
        os.makedirs(self.root, exist_ok=True)
        self.v2 = os.path.exists(os.path.join(self.root, "cgroup.controllers"))
        self.limit_file = "memory.max" if self.v2 else "memory.limit_in_bytes"
        if self.v2:
            # the leaves get a memory.max: the controller on for root's children, and for
            # root and the cgroups between it and the top, from the top down (each parent
            # must have it for its child to); where one refuses, the check below says so
            chain, d = [], self.root
            while os.path.exists(os.path.join(d, "cgroup.controllers")):
                chain.append(d)
                if os.path.dirname(d) == d:
                    break
                d = os.path.dirname(d)
            for d in reversed(chain):
                try:
                    with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
                        f.write("+memory")
                except OSError:
                    pass
        if not os.path.exists(os.path.join(self.root, self.limit_file)):
            raise OSError("%s is not a cgroup with the memory controller (no %s): the daemons' "
                          "memory limits cannot be set" % (self.root, self.limit_file))
        if limit:  # all the daemons together (--daemons-memory-limit)
            with open(os.path.join(self.root, self.limit_file), "w") as f:
                f.write(str(limit))

    def available(self):
        """What all the daemons together may use: the smallest limit of root and the cgroups
        above it, or the RAM."""
        best, d = _ram(), self.root
        while os.path.exists(os.path.join(d, self.limit_file)):
            v = _read_limit(os.path.join(d, self.limit_file))
            if v is not None and v < best:
                best = v
            up = os.path.dirname(d)
            if up == d:
                break
            d = up
        return best

    def leaf(self, key):
        return os.path.join(self.root, key)

    def create(self, key, limit):
        """The leaf of mount `key`, limited to `limit` bytes; the path of its cgroup.procs
        (where the daemon's starting process writes its pid before it runs s3flash)."""
        d = self.leaf(key)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, self.limit_file), "w") as f:
            f.write(str(limit))
        return os.path.join(d, "cgroup.procs")

    def limit(self, key):
        return _read_limit(os.path.join(self.leaf(key), self.limit_file))

    def pids(self, key):
        try:
            with open(os.path.join(self.leaf(key), "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    def oom_kills(self, key):
        """How many processes the OOM killer killed in the leaf (its limit reached): v2
        memory.events, v1 memory.oom_control (Linux 4.13+); 0 if not known."""
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            with open(os.path.join(self.leaf(key), name)) as f:
                for line in f:
                    k, _, v = line.partition(" ")
                    if k == "oom_kill":
                        return int(v)
        except (OSError, ValueError):
            pass
        return 0

    def remove(self, key):
        """The leaf of a daemon that ended (kept while a process is in it)."""
        try:
            os.rmdir(self.leaf(key))
        except FileNotFoundError:
            pass
        except OSError:
            return False
        return True
