#!/usr/bin/env python3
"""The reference model of `s3flash mount` run concurrently (issue 19): several processes
issue seeded random operations on a small set of overlapping names through one mount, each
recording what it did and when (CLOCK_MONOTONIC, shared by the processes), and a checker
decides whether every result is one docs/SEMANTICS.md allows under that concurrency.

Names: f0 f1 f2 (the root), d/g0 d/g1 (d/ also holds d/keep, never touched, so d always
exists) and e/h/x (the only key under e/: its directories come and go with it). Operations
(each one in the worker that drew it, start to end timed): write (open O_CREAT|O_TRUNC, one
write of a content unique to that write, close), read (open, read all, close), stat,
readdir of "", d, e, e/h, unlink, rename of a file to another name (possibly over one).

## The allowed outcomes

A *mutation* of a name n is an operation that may change it: a write of n that got a handle
(whatever its close said), an unlink of n that did not fail with ENOENT/EBUSY/ENOTDIR, a
rename from or to n that did not fail that way. Each mutation takes effect at one instant
inside its interval [start, end]; the effects a mutation can leave on n: a write, "being
written" while it runs and then its version; an unlink, absent; a rename, n absent (its
source), or n holding some version (its destination: any version written before the
rename ended, since which one it copied is not recorded).

For an operation Q on n with interval [qs, qe]:
  P = the mutations of n (other than Q) that ended before qs; the *last* ones are those of P
      that no other mutation of P started after the end of (the mutations that may have
      been applied last), or the initial state when P is empty;
  C = the mutations of n (other than Q) that overlap [qs, qe].
The states n may have during Q are the effects of the last ones and of C (a mutation of C
also leaves n as it was before it: the last ones' effects cover that). So:

- read: the bytes of exactly one such version (never a mix of two, never cut short:
  compared whole by sha256); ENOENT only if "absent" is one of the states; EBUSY only if
  "being written" is, or a write of n overlaps Q whatever its result (docs/SEMANTICS.md: an
  overwrite told ESTALE makes the name "being overwritten" for read opens until its retry
  has come, inside that write's interval, and the retry may still fail: EBUSY, ENOENT);
  EIO only if C is not empty (the object changed under the open handle).
  Nothing else (ENOTCONN, EIO without a concurrent change, an unknown byte string).
- stat: ENOENT only if "absent" is possible; a size only if it is that of a possible version
  or, while a write may be running, 0..its length.
- readdir of a directory D: a name n directly in D (file, or the first component of a
  deeper name) is listed only if one of its names may be present during the listing, and
  is missing only if all of them may be absent; no other names ever (no temporary objects).
  ENOENT (e, e/h) only if all the names under it may be absent.
- write: succeeds, or EBUSY (another mutation of n overlaps), or ENOENT (e/h/x while e/h may
  be gone). Its close never fails.
- unlink: succeeds only if n may be present; ENOENT only if it may be absent; EBUSY only if
  it may be being written, or a write of n overlaps it whatever its result (an overwrite
  told ESTALE pins the name from its retry's lookup until its retry's open is answered,
  which may still fail: docs/SEMANTICS.md).
- rename a -> b: as unlink for a (ENOENT, EBUSY), ENOENT also when b's directory may be
  gone, EBUSY also when b may be being written or a write of b overlaps it, EIO only when
  a mutation of a or b overlaps (the copy pinned to a's ETag found it replaced).
- At the end (every worker done): each name read through the mount and through boto3 is
  in one of the states the last mutations allow, and both agree.

The operation sequence of each worker is a function of (seed, worker): a seed reproduces
the same operations, not the same interleaving (that is the scheduler's).

    python3 tests/integration/mount_concurrent.py worker --root M --seed S --worker I \\
        --ops K --out F.json
"""

import argparse
import errno
import hashlib
import json
import os
import random
import sys
import time

NAMES = ["f0", "f1", "f2", "d/g0", "d/g1", "e/h/x"]
FIXED = {"d/keep": b"keep"}              # never touched: d always exists
DIRS = ["", "d", "e", "e/h"]
INITIAL = {"f0": ("init", 0, 3000), "d/g0": ("init", 1, 5000), "e/h/x": ("init", 2, 700)}


def content(tag, seq, size):
    """The bytes of a version: its name repeated, so any mix of two is detected."""
    head = f"<{tag}:{seq}:{size}>".encode()
    return (head * (size // len(head) + 1))[:size]


def sha(b):
    return hashlib.sha256(b).hexdigest()


def errname(e):
    return errno.errorcode.get(e.errno, str(e.errno))


# ---- the worker -----------------------------------------------------------------------------

def draw_ops(seed, worker, n):
    rnd = random.Random(f"{seed}/{worker}")
    ops = []
    for i in range(n):
        kind = rnd.choices(["write", "read", "stat", "readdir", "unlink", "rename"],
                           [4, 5, 2, 2, 2, 2])[0]
        if kind == "readdir":
            ops.append({"op": kind, "dir": rnd.choice(DIRS)})
        elif kind == "rename":
            a, b = rnd.sample(NAMES, 2)
            ops.append({"op": kind, "name": a, "to": b})
        elif kind == "write":
            ops.append({"op": kind, "name": rnd.choice(NAMES), "seq": i,
                        "size": rnd.choice([24, 700, 4096, 70000, 300000])})
        else:
            ops.append({"op": kind, "name": rnd.choice(NAMES)})
    return ops


def apply(root, op, worker):
    p = lambda n: os.path.join(root, n)  # noqa: E731
    kind = op["op"]
    if kind == "write":
        data = content(f"w{worker}", op["seq"], op["size"])
        try:
            fd = os.open(p(op["name"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            return {"err": errname(e), "opened": False}
        try:
            os.write(fd, data)
        except OSError as e:
            os.close(fd)
            return {"err": errname(e), "opened": True}
        try:
            os.close(fd)
        except OSError as e:
            return {"err": errname(e), "opened": True}
        return {"ok": sha(data), "opened": True}
    if kind == "read":
        try:
            with open(p(op["name"]), "rb") as f:
                b = f.read()
        except OSError as e:
            return {"err": errname(e)}
        return {"ok": sha(b), "len": len(b)}
    if kind == "stat":
        try:
            return {"ok": os.stat(p(op["name"])).st_size}
        except OSError as e:
            return {"err": errname(e)}
    if kind == "readdir":
        try:
            return {"ok": sorted(os.listdir(p(op["dir"]) if op["dir"] else root))}
        except OSError as e:
            return {"err": errname(e)}
    if kind == "unlink":
        try:
            os.unlink(p(op["name"]))
            return {"ok": None}
        except OSError as e:
            return {"err": errname(e)}
    if kind == "rename":
        try:
            os.rename(p(op["name"]), p(op["to"]))
            return {"ok": None}
        except OSError as e:
            return {"err": errname(e)}
    raise ValueError(kind)


def worker_main(a):
    recs = []
    for op in draw_ops(a.seed, a.worker, a.ops):
        t0 = time.monotonic()
        res = apply(a.root, op, a.worker)
        t1 = time.monotonic()
        recs.append({"worker": a.worker, **op, "start": t0, "end": t1, **res})
        with open(a.out + ".tmp", "w") as f:      # what was done so far, if it wedges
            json.dump(recs, f)
    os.replace(a.out + ".tmp", a.out)


# ---- the checker ----------------------------------------------------------------------------

class Version:
    def __init__(self, tag, seq, size, start):
        self.data = content(tag, seq, size)
        self.sha = sha(self.data)
        self.size = size
        self.start = start


class Checker:
    def __init__(self, records):
        self.recs = sorted(records, key=lambda r: r["start"])
        self.versions = {}         # sha -> Version
        for n, (tag, seq, size) in INITIAL.items():
            v = Version(tag, seq, size, float("-inf"))
            self.versions[v.sha] = v
        for r in self.recs:
            if r["op"] == "write":
                v = Version(f"w{r['worker']}", r["seq"], r["size"], r["start"])
                self.versions[v.sha] = v
        self.writes = {n: [r for r in self.recs if r["op"] == "write" and r["name"] == n]
                       for n in NAMES}    # every write, opened or not
        self.muts = {n: [] for n in NAMES}
        for r in self.recs:
            for n, effect in self.effects(r):
                self.muts[n].append((r, effect))

    def effects(self, r):
        """[(name, effect)] of a mutation; effect: ("write", Version) | ("absent",) |
        ("any", end)."""
        err = r.get("err")
        if r["op"] == "write" and r.get("opened"):
            return [(r["name"], ("write", self.versions[sha(content(
                f"w{r['worker']}", r["seq"], r["size"]))]))]
        if r["op"] == "unlink" and err not in ("ENOENT", "EBUSY", "ENOTDIR", "EISDIR"):
            return [(r["name"], ("absent",))]
        if r["op"] == "rename" and err not in ("ENOENT", "EBUSY", "ENOTDIR", "EISDIR"):
            return [(r["name"], ("absent",)), (r["to"], ("any", r["end"]))]
        return []

    def states(self, n, q):
        """The states n may have during q: ("absent",), ("version", Version),
        ("writing", Version), ("any", t)."""
        qs, qe = q["start"], q["end"]
        before = [(m, e) for m, e in self.muts[n] if m is not q and m["end"] < qs]
        during = [(m, e) for m, e in self.muts[n] if m is not q and m["end"] >= qs
                  and m["start"] <= qe]
        last = [(m, e) for m, e in before
                if not any(o["start"] > m["end"] for o, _ in before)]
        out = []
        if not last:
            if n in INITIAL:
                out.append(("version", self.versions[sha(content(*INITIAL[n]))]))
            else:
                out.append(("absent",))
        for m, e in last:
            out.append(("version", e[1]) if e[0] == "write" and "ok" in m else
                       ("absent",) if e[0] == "absent" else
                       ("any", e[1]) if e[0] == "any" else ("failed", None))
        for m, e in during:
            if e[0] == "write":
                out += [("writing", e[1]), ("version", e[1])]
            elif e[0] == "absent":
                out.append(("absent",))
            else:
                out.append(("any", e[1]))
        if any(s[0] == "failed" for s in out):
            # a write whose close failed: no object, the one before stays (not tracked)
            out = [s for s in out if s[0] != "failed"] + [("absent",), ("any", qe)]
        return out, bool(during)

    def version_ok(self, states, digest, qe):
        for s in states:
            if s[0] == "version" and s[1].sha == digest:
                return True
            if s[0] == "any":
                v = self.versions.get(digest)
                if v is not None and v.start <= min(s[1], qe):
                    return True
        return False

    def write_overlaps(self, n, q):
        """Does a write of n overlap q, whatever its result?"""
        return any(w["start"] <= q["end"] and w["end"] >= q["start"] for w in self.writes[n])

    @staticmethod
    def may(states, kind):
        return any(s[0] == kind for s in states)

    def check(self, r):
        """None, or why r is forbidden."""
        kind, err = r["op"], r.get("err")
        if kind == "readdir":
            return self.check_readdir(r)
        n = r["name"]
        st, overlapped = self.states(n, r)
        absent = self.may(st, "absent")
        present = any(s[0] != "absent" for s in st)
        writing = self.may(st, "writing")
        dir_gone = n.startswith("e/") and absent
        if kind == "read":
            if err is None:
                return None if self.version_ok(st, r["ok"], r["end"]) else \
                    f"read {r.get('len')} bytes that are no version {n} could hold then"
            if err == "ENOENT" and (absent or dir_gone):
                return None
            if err == "EBUSY" and (writing or self.write_overlaps(n, r)):
                return None
            if err == "EIO" and overlapped:
                return None
            return f"read: {err}"
        if kind == "stat":
            if err is None:
                sizes = {s[1].size for s in st if s[0] == "version"}
                if r["ok"] in sizes or (writing and any(
                        s[0] == "writing" and r["ok"] <= s[1].size for s in st)) or \
                        self.may(st, "any"):
                    return None
                return f"stat size {r['ok']}, possible: {sorted(sizes)}"
            if err == "ENOENT" and absent:
                return None
            return f"stat: {err}"
        if kind == "write":
            if err is None:
                return None
            if not r.get("opened") and err == "EBUSY" and overlapped:
                return None
            if not r.get("opened") and err == "ENOENT" and dir_gone:
                return None
            return f"write: {err} (opened: {r.get('opened')})"
        if kind == "unlink":
            if err is None:
                return None if present else "unlink succeeded on a name that was absent"
            if err == "ENOENT" and absent:
                return None
            if err == "EBUSY" and (writing or self.write_overlaps(n, r)):
                return None
            return f"unlink: {err}"
        if kind == "rename":
            to = r["to"]
            st2, over2 = self.states(to, r)
            if err is None:
                return None if present else "rename succeeded from a name that was absent"
            if err == "ENOENT" and (absent or (to.startswith("e/") and self.may(st2,
                                                                             "absent"))):
                return None
            if err == "EBUSY" and (writing or self.may(st2, "writing") or overlapped
                                   or over2 or self.write_overlaps(n, r)
                                   or self.write_overlaps(to, r)):
                return None
            if err == "EIO" and (overlapped or over2):
                return None
            return f"rename: {err}"
        return f"unknown op {kind}"

    def check_readdir(self, r):
        d = r["dir"]
        pre = d + "/" if d else ""
        entries = {}          # listed name -> the names it stands for
        for n in list(NAMES) + list(FIXED):
            if n.startswith(pre):
                entries.setdefault(n[len(pre):].split("/", 1)[0], []).append(n)
        poss = {}
        for e, names in entries.items():
            present = absent_all = False
            absent_all = True
            for n in names:
                if n in FIXED:
                    present, absent_all = True, False
                    continue
                st, _ = self.states(n, r)
                present |= any(s[0] != "absent" for s in st)
                absent_all &= self.may(st, "absent")
            poss[e] = (present, absent_all)
        if "err" in r:
            if r["err"] == "ENOENT" and d.startswith("e") and all(a for _, a in poss.values()):
                return None
            return f"readdir {d!r}: {r['err']}"
        listed = set(r["ok"])
        for name in listed:
            if name not in poss:
                return f"readdir {d!r} listed {name!r}, a name nothing made"
            if not poss[name][0]:
                return f"readdir {d!r} listed {name!r}, absent throughout"
        for name, (present, absent_all) in poss.items():
            if name not in listed and not absent_all:
                return f"readdir {d!r} left out {name!r}, present throughout"
        return None

    def final_states(self, t):
        q = {"start": t, "end": t}
        return {n: self.states(n, q)[0] for n in NAMES}

    def check_final(self, view, t, who):
        """view: {name: sha or None}; [why] for each name not allowed."""
        bad = []
        for n, st in self.final_states(t).items():
            got = view.get(n)
            if got is None:
                if not self.may(st, "absent"):
                    bad.append(f"{who}: {n} is missing at the end")
            elif not self.version_ok(st, got, t):
                bad.append(f"{who}: {n} holds no version it may hold at the end")
        return bad


def describe(r):
    what = r["op"] + " " + (r.get("dir", "") if r["op"] == "readdir" else r["name"])
    if r["op"] == "rename":
        what += " -> " + r["to"]
    if r["op"] == "write":
        what += f" ({r['size']} bytes w{r['worker']}:{r['seq']})"
    res = ("err " + r["err"]) if "err" in r else f"ok {str(r['ok'])[:40]}"
    return f"[{r['start']:.3f}..{r['end']:.3f}] w{r['worker']} {what}: {res}"


def check_all(records, final_views, t_end):
    """[(why, record)] of every forbidden result, then the end state's."""
    c = Checker(records)
    bad = [(why, r) for r in c.recs for why in [c.check(r)] if why]
    for who, view in final_views.items():
        bad += [(why, None) for why in c.check_final(view, t_end, who)]
    return bad


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--root", required=True)
    w.add_argument("--seed", type=int, required=True)
    w.add_argument("--worker", type=int, required=True)
    w.add_argument("--ops", type=int, default=30)
    w.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "worker":
        worker_main(a)


if __name__ == "__main__":
    sys.exit(main())
