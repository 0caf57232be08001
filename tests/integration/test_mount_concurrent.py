"""The reference model run concurrently (issue 19; the rules: mount_concurrent.py): 6
processes issue seeded random operations on overlapping names through one mount, behind the
fault proxy (requests delayed at random, DELETEs past the 1 s TTL), with TTLs 0 and the
default; a result the rules forbid, or a wedged mount (the watchdog of mountutil.py aborts
its connection), fails the test.

    S3FLASH_CONCURRENT_SEEDS=1,2,3   the seeds (default 1,2; 1 under ASan: build-asan)
    S3FLASH_CONCURRENT_OPS=N         operations per process (default 20)

A failure prints every record (start..end, worker, operation, result) in time order, with
the forbidden ones marked.
"""

import hashlib
import json
import os
import sys
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest

from faults import faultproxy_factory  # noqa: F401 (a fixture)
from mount_concurrent import FIXED, INITIAL, NAMES, check_all, content, describe
from helpers import wait_for
from mountutil import Mount, Watchdog, _stack, _state, mount_supported

pytestmark = pytest.mark.skipif(mount_supported() is not None,
                                reason=mount_supported() or "")

HERE = Path(__file__).resolve().parent
WORKERS = 6
SEEDS = [int(s) for s in os.environ.get(
    "S3FLASH_CONCURRENT_SEEDS",
    "1" if "asan" in os.environ.get("S3FLASH_BUILD_DIR", "") else "1,2").split(",")]
OPS = int(os.environ.get("S3FLASH_CONCURRENT_OPS", "20"))
TTLS = {"ttl0": ["--metadata-ttl", "0", "--negative-metadata-ttl", "0"], "ttl-default": []}


# Strict. The divergences loaded runs found were stale answers reaching the kernel, a writer
# or a reader across a rename, unlink, close or overwrite; each is fixed, with a
# deterministic test below where a request can be held in its window. Before the last
# round, loops of seeds x both TTLs, two at a time on the 2-core machine (load average
# 11-19), failed about 1 run in 30-70 (a read open through an inode a rename had moved in
# the kernel only, a second ESTALE of an overwrite's retry, a cut read); at its end 202
# loaded runs (seeds 615, 624, 801-850 and 901-949, both TTLs) passed, none failed.
# Issue 28 (an overwrite's retry refused again: 'write: ESTALE' under TSan): seeds 1-96
# and 101-120, both TTLs, 226 runs under TSan and 234 beside `stress-ng --cpu 2` (load
# average 8-28): no write ESTALE; two reads EBUSY under TSan (seeds 27, 74: a read open of
# an inode a running rename had moved was judged by the new name), fixed; the last 72 runs
# (32 TSan, 40 loaded) on the final code passed.
@pytest.mark.parametrize("ttl", list(TTLS))
@pytest.mark.parametrize("seed", SEEDS)
def test_concurrent_model(cli_path, rgw, s3, bucket, tmp_path, faultproxy_factory,  # noqa: F811
                          seed, ttl):
    u = urllib.parse.urlsplit(rgw.endpoint)
    proxy = faultproxy_factory(u.hostname, u.port)
    pfx = f"cc{seed}-{ttl}-{uuid.uuid4().hex[:6]}/"
    for n, (tag, sq, size) in INITIAL.items():
        s3.put_object(Bucket=bucket, Key=pfx + n, Body=content(tag, sq, size))
    for n, b in FIXED.items():
        s3.put_object(Bucket=bucket, Key=pfx + n, Body=b)
    proxy.set_faults([
        {"match": {"method": "DELETE", "probability": 0.3, "seed": seed},
         "action": "delay", "seconds": 1.2},
        {"match": {"probability": 0.2, "seed": seed + 1000}, "action": "delay",
         "seconds": 0.2},
    ])
    m = Mount(cli_path, proxy.endpoint, rgw.access_key, rgw.secret_key, f"{bucket}/{pfx}",
              tmp_path / "m", ["--allow-delete", "--allow-overwrite", "--allow-rename",
                               *TTLS[ttl]], region=rgw.region,
              log_path=str(tmp_path / "m.log")).start()
    wd = Watchdog(m, bound_s=60)
    outs = [tmp_path / f"w{i}.json" for i in range(WORKERS)]
    try:
        try:
            wd.parallel([[sys.executable, str(HERE / "mount_concurrent.py"), "worker",
                          "--root", m.dir, "--seed", seed, "--worker", i, "--ops", OPS,
                          "--out", outs[i]] for i in range(WORKERS)],
                        what=f"{WORKERS} workers, seed {seed}, {ttl}")
        except AssertionError as e:
            done = []
            for o in outs:
                for p in (o, Path(str(o) + ".tmp")):
                    try:
                        done += json.loads(p.read_text())
                    except (OSError, ValueError):   # none yet, or cut by the kill
                        pass
            done.sort(key=lambda r: r["start"])
            raise AssertionError(f"{e}\nseed {seed} {ttl}: what the workers had done:\n"
                                 + "\n".join(describe(r) for r in done[-60:])) from None
        records = [r for o in outs for r in json.loads(o.read_text())]
        t_end = max(r["end"] for r in records)
        view = {}
        for n in NAMES:
            op = wd.run(["sh", "-c", 'cat "$1" 2>/dev/null | sha256sum; test -e "$1"', "sh",
                         f"{m.dir}/{n}"], check=False, what=f"read {n} at the end")
            view[n] = op.text.split()[0] if op.rc == 0 else None
        bucket_view = {}
        for n in NAMES:
            try:
                b = s3.get_object(Bucket=bucket, Key=pfx + n)["Body"].read()
                bucket_view[n] = hashlib.sha256(b).hexdigest()
            except s3.exceptions.NoSuchKey:
                bucket_view[n] = None
        bad = check_all(records, {"the mount": view, "the bucket": bucket_view}, t_end)
        if view != bucket_view:
            bad.append((f"the mount and the bucket differ at the end: "
                        f"{ {n: (view[n] or '-')[:8] for n in NAMES} } vs "
                        f"{ {n: (bucket_view[n] or '-')[:8] for n in NAMES} }", None))
        if bad:
            marked = {id(r): why for why, r in bad if r is not None}
            lines = [describe(r) + (f"   <-- FORBIDDEN: {marked[id(r)]}" if id(r) in marked
                                    else "")
                     for r in sorted(records, key=lambda r: r["start"])]
            pytest.fail(f"seed {seed} {ttl}: {len(bad)} forbidden results: "
                        f"{[w for w, _ in bad][:10]}\n" + "\n".join(lines))
    finally:
        wd.close()


# ---- the races the concurrent model found, one by one, made deterministic --------------------
#
# Each holds one request of the mount at the fault proxy (or starts from a state the model
# reached by chance) so that the interleaving the loaded runs hit comes every time.

RACE_OPTS = ["--allow-delete", "--allow-overwrite", "--allow-rename"]


# open(argv[1], O_WRONLY|O_TRUNC), write b"new": prints the errno's name, or argv[2]
OVERWRITE = r"""
import errno, os, sys
try:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)
except OSError as e:
    print(errno.errorcode[e.errno])
else:
    os.write(fd, b"new")
    os.close(fd)
    print(sys.argv[2])
"""

# a reader of argv[1] held open (through the page cache) until argv[3] exists; prints
# "opened" or the errno's name, then touches argv[2]
HOLD_READER = r"""
import errno, os, sys, time
try:
    f = open(sys.argv[1], "rb")
except OSError as e:
    print(errno.errorcode[e.errno], flush=True)
    open(sys.argv[2], "w").close()
    sys.exit(0)
print("opened", flush=True)
open(sys.argv[2], "w").close()
deadline = time.monotonic() + 30
while not os.path.exists(sys.argv[3]) and time.monotonic() < deadline:
    time.sleep(0.01)
f.close()
"""

# open(argv[1], O_WRONLY|O_TRUNC|O_CREAT), write b"new", close: "written" or the errno
CREAT_OVERWRITE = r"""
import errno, os, sys
try:
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC | os.O_CREAT, 0o644)
except OSError as e:
    print(errno.errorcode[e.errno])
    sys.exit(0)
os.write(fd, b"new")
os.close(fd)
print("written")
"""

@pytest.fixture
def race_mount(cli_path, rgw, s3, bucket, tmp_path, faultproxy_factory):  # noqa: F811
    """race_mount(objects, options[, base]) -> (Mount, Watchdog, proxy, prefix): a mount of
    a new prefix holding `objects` ({name: bytes}), through a fault proxy, with `base`
    (default RACE_OPTS) and `options`; stopped at the end."""
    made = []

    def make(objects, options, base=RACE_OPTS):
        u = urllib.parse.urlsplit(rgw.endpoint)
        proxy = faultproxy_factory(u.hostname, u.port)
        pfx = f"race-{uuid.uuid4().hex[:8]}/"
        for n, b in objects.items():
            s3.put_object(Bucket=bucket, Key=pfx + n, Body=b)
        m = Mount(cli_path, proxy.endpoint, rgw.access_key, rgw.secret_key,
                  f"{bucket}/{pfx}", tmp_path / f"m{len(made)}", [*base, *options],
                  region=rgw.region, log_path=str(tmp_path / f"m{len(made)}.log")).start()
        wd = Watchdog(m, bound_s=30)
        made.append(wd)
        return m, wd, proxy, pfx

    yield make
    for wd in made:
        wd.close()


def bucket_body(s3, bucket, key):
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None


def fired(proxy, rule=0):
    return proxy.faults()[rule].get("fired", 0) >= 1


def test_readdirplus_page_older_than_an_unlink(race_mount, s3, bucket):
    """A directory handle opened while its listing is cached keeps a copy of it; an unlink
    made before the handle is read must not come back through the READDIRPLUS entries
    (with a node id, the kernel makes a dentry of the deleted name: stat succeeds, reads
    fail EIO; the model saw it as 'f0 empty on the mount, absent in the bucket')."""
    m, wd, _, pfx = race_mount({"f": b"F" * 700, "g": b"G" * 24}, ["--metadata-ttl", "30"])
    op = wd.py(r"""
import errno, json, os, sys
root = sys.argv[1]
first = sorted(os.listdir(root))              # the listing, now cached
fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)   # its handle copies the cached listing
os.unlink(os.path.join(root, "f"))
later = sorted(os.listdir(fd))                # READDIRPLUS from that copy
os.close(fd)
try:
    st = os.stat(os.path.join(root, "f")).st_size
except OSError as e:
    st = errno.errorcode[e.errno]
try:
    with open(os.path.join(root, "f"), "rb") as f:
        rd = len(f.read())
except OSError as e:
    rd = errno.errorcode[e.errno]
print(json.dumps({"first": first, "later": later, "stat": st, "read": rd}))
""", m.dir, what="listdir, opendir, unlink, readdir of the handle, stat")
    r = json.loads(op.out)
    assert r["first"] == ["f", "g"]
    assert "g" in r["later"]                  # f may be listed: the copy predates the unlink
    assert r["stat"] == "ENOENT" and r["read"] == "ENOENT", r
    assert bucket_body(s3, bucket, pfx + "f") is None


@pytest.mark.parametrize("creat", [False, True], ids=["trunc", "creat-trunc"])
def test_trunc_open_held_across_a_rename(race_mount, s3, bucket, creat):
    """open(a, O_WRONLY|O_TRUNC [|O_CREAT]) whose lookup came before `mv a b` and whose
    OPEN is answered after it (its LIST of a/ held at the proxy while the rename runs,
    its HEAD answered before): the OPEN names the inode the rename moved to b, with an
    answer from S3 older than the rename. The name a is gone: the open is ENOENT
    (docs/SEMANTICS.md: ESTALE, then the VFS looks a up again), with O_CREAT it creates
    a; b keeps the renamed object, on the mount and in the bucket (a writer on the moved
    inode would leave b's inode with a's new ETag: b reads EIO)."""
    old = b"<old a>" * 100
    m, wd, proxy, pfx = race_mount({"a": old}, TTLS["ttl0"])
    q = "prefix=" + urllib.parse.quote(pfx + "a/", safe="")
    # the lookup's LIST of a/ is the first after the rule is set, the OPEN's the second
    proxy.set_faults([{"match": {"method": "GET", "query": q, "nth": 2}, "action": "delay",
                       "seconds": 3}])
    new = b"<new a>" * 50
    writer = wd.start([sys.executable, "-c", r"""
import errno, os, sys
flags = os.O_WRONLY | os.O_TRUNC | (os.O_CREAT if sys.argv[3] == "1" else 0)
try:
    fd = os.open(sys.argv[1], flags, 0o644)
except OSError as e:
    print(errno.errorcode[e.errno])
    sys.exit(0)
os.write(fd, sys.argv[2].encode())
os.close(fd)
print("written")
""", f"{m.dir}/a", new.decode(), int(creat)], what="open(a, O_TRUNC), write, close")
    try:
        wait_for(lambda: fired(proxy) or writer.proc.poll() is not None, timeout=20,
                 what="the OPEN's LIST of a/ held at the proxy")
        assert fired(proxy), f"the writer ended before its OPEN's LIST: {writer!r}"
        wd.run(["mv", f"{m.dir}/a", f"{m.dir}/b"], what="mv a b (while the OPEN waits)")
    finally:
        wd.wait([writer])
    assert writer.rc == 0, writer
    assert writer.text.strip() == ("written" if creat else "ENOENT")
    assert bucket_body(s3, bucket, pfx + "b") == old
    assert wd.read(f"{m.dir}/b") == old
    assert bucket_body(s3, bucket, pfx + "a") == (new if creat else None)
    assert wd.exists(f"{m.dir}/a") == creat
    if creat:
        assert wd.read(f"{m.dir}/a") == new


def test_write_open_during_an_unlink_is_busy(race_mount, s3, bucket):
    """open(f, O_WRONLY|O_TRUNC) while the unlink of f waits for its DELETE: EBUSY (the name
    is reserved as a rename's are). A handle given then would upload a version that the
    DELETE may remove after close returned 0, or that outlives an unlink that succeeded."""
    m, wd, proxy, pfx = race_mount({"f": b"F" * 700}, ["--metadata-ttl", "30"])
    assert wd.read(f"{m.dir}/f") == b"F" * 700    # the kernel holds f's dentry and inode
    proxy.set_faults([{"match": {"method": "DELETE", "path": "/f$"}, "action": "delay",
                       "seconds": 2}])
    unlink = wd.start(["rm", "-f", f"{m.dir}/f"], what="rm f (its DELETE held 2 s)")
    try:
        wait_for(lambda: fired(proxy), timeout=20, what="the DELETE held at the proxy")
        op = wd.py(OVERWRITE, f"{m.dir}/f", "opened",
                   what="open(f, O_WRONLY|O_TRUNC) during the unlink")
    finally:
        wd.wait([unlink])
    assert unlink.rc == 0, unlink
    assert op.text.strip() == "EBUSY"
    assert bucket_body(s3, bucket, pfx + "f") is None
    assert not wd.exists(f"{m.dir}/f")


def test_overwrite_right_after_a_rename(race_mount, s3, bucket):
    """`mv a b; echo > b` within the TTL: the kernel opens b's entry, the inode the rename
    moved there, which the daemon answers ESTALE once (the open may have come from a
    lookup of a); the VFS looks b up again and the overwrite goes through. No ESTALE
    reaches the caller, a stays gone, and b holds the new bytes on the mount and in S3."""
    m, wd, _, pfx = race_mount({"a": b"A" * 700}, ["--metadata-ttl", "30"])
    op = wd.py(r"""
import os, sys
root = sys.argv[1]
os.stat(os.path.join(root, "a"))
os.rename(os.path.join(root, "a"), os.path.join(root, "b"))
for i in range(3):
    with open(os.path.join(root, "b"), "wb") as f:
        f.write(b"new %d" % i)
""", m.dir, what="stat a, mv a b, three overwrites of b")
    assert op.rc == 0, op
    assert wd.read(f"{m.dir}/b") == b"new 2"
    assert bucket_body(s3, bucket, pfx + "b") == b"new 2"
    assert bucket_body(s3, bucket, pfx + "a") is None
    assert not wd.exists(f"{m.dir}/a")


def test_listing_cache_never_keeps_the_object_being_replaced(race_mount, s3, bucket,
                                                             tmp_path):
    """A LIST made while f is overwritten in place (open with O_TRUNC, not closed) shows
    S3's old object: readdir hands out the bytes written so far, and the listing cache
    must not keep the old object's attributes either. Else the next opendir copies them
    and READDIRPLUS gives the kernel the old size for the inode being written (stat then
    says 5000 for a file of 10 bytes, and a read of the new version is cut or padded)."""
    m, wd, _, pfx = race_mount({"f": b"o" * 5000}, ["--metadata-ttl", "30"])
    assert wd.read(f"{m.dir}/f") == b"o" * 5000     # the kernel holds f: O_TRUNC in place
    opened, go = tmp_path / "opened", tmp_path / "go"
    writer = wd.start([sys.executable, "-c", r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_TRUNC)
os.write(fd, b"new bytes!")
open(sys.argv[2], "w").close()
deadline = time.monotonic() + 30
while not os.path.exists(sys.argv[3]) and time.monotonic() < deadline:
    time.sleep(0.01)
os.close(fd)
""", f"{m.dir}/f", opened, go], what="overwrite f in place, held open")
    try:
        wait_for(lambda: opened.exists() or writer.proc.poll() is not None, 20, "the writer")
        assert opened.exists(), f"the writer failed: {wd.wait([writer])}"
        sizes = wd.py(r"""
import json, os, sys
out = []
for i in range(3):                           # the second and third from the listing cache
    with os.scandir(sys.argv[1]) as it:
        out.append({e.name: e.stat().st_size for e in it if e.is_file()})
out.append(os.stat(os.path.join(sys.argv[1], "f")).st_size)
print(json.dumps(out))
""", m.dir, what="ls -l three times and stat f, while f is written")
        got = json.loads(sizes.out)
        assert got == [{"f": 10}, {"f": 10}, {"f": 10}, 10], got
    finally:
        go.touch()
        wd.wait([writer])
    assert writer.rc == 0, writer
    assert bucket_body(s3, bucket, pfx + "f") == b"new bytes!"
    op = wd.py("import os, sys; print(os.stat(sys.argv[1]).st_size)", f"{m.dir}/f")
    assert op.text.strip() == "10"
    assert wd.read(f"{m.dir}/f") == b"new bytes!"


def test_read_open_of_an_inode_a_rename_moved_from_a_let_go_name(race_mount, s3, bucket,
                                                                  tmp_path):
    """`mv a b` while an overwrite of a was told ESTALE (a handle reads a through the page
    cache) and looks a up again: the daemon let go of a's inode (its path stays /a) and the
    retry's lookup made a new one current, which the rename moves to b; the kernel's rename
    moves its own entry of a, which names the old inode, to b. An open of b for reading
    then reaches the old inode: it must not read key a (deleted: EIO, as before the fix;
    or EBUSY while a is 'being overwritten'), it is answered ESTALE and the VFS looks b up
    again: b's bytes. The reader of a reads nothing, so that b's read is not served from
    the old inode's page cache. The CopyObject of the rename is held at the proxy while
    the overwrite is tried."""
    old = b"<old a>" * 200
    m, wd, proxy, pfx = race_mount({"a": old}, ["--metadata-ttl", "30"])
    opened, go = tmp_path / "opened", tmp_path / "go"
    reader = wd.start([sys.executable, "-c", r"""
import os, sys, time
f = open(sys.argv[1], "rb")                   # a's inode, through the page cache (its
open(sys.argv[2], "w").close()               # pages are not read: b's read must GET)
deadline = time.monotonic() + 30
while not os.path.exists(sys.argv[3]) and time.monotonic() < deadline:
    time.sleep(0.01)
f.close()
""", f"{m.dir}/a", opened, go], what="a reader of a, held open")
    try:
        wait_for(lambda: opened.exists() or reader.proc.poll() is not None, 20, "the reader")
        assert opened.exists(), f"the reader failed: {wd.wait([reader])}"
        proxy.set_faults([{"match": {"method": "PUT", "path": "/b$"}, "action": "delay",
                           "seconds": 4}])
        mv = wd.start(["mv", f"{m.dir}/a", f"{m.dir}/b"], what="mv a b (its copy held 4 s)")
        wait_for(lambda: fired(proxy) or mv.proc.poll() is not None, timeout=20,
                 what="the rename's CopyObject held at the proxy")
        assert fired(proxy), f"the rename ended before its copy: {wd.wait([mv])}"
        overwrite = wd.py(OVERWRITE, f"{m.dir}/a", "written",
                          what="open(a, O_WRONLY|O_TRUNC) while the rename copies a")
        wd.wait([mv])
        assert mv.rc == 0, mv
        # the overwrite's retry looked a up while the rename held its directory: a is gone
        assert overwrite.text.strip() == "ENOENT", overwrite
        op = wd.py(r"""
import errno, os, sys
try:
    with open(sys.argv[1], "rb") as f:
        sys.stdout.buffer.write(f.read())
except OSError as e:
    print("error " + errno.errorcode[e.errno])
""", f"{m.dir}/b", what="read b")
        assert op.out == old, op.out[:100]
    finally:
        go.touch()
        wd.wait([reader])
    assert bucket_body(s3, bucket, pfx + "b") == old
    assert bucket_body(s3, bucket, pfx + "a") is None


@pytest.mark.parametrize("held", ["lookup", "open"])
def test_overwrite_retry_slower_than_the_old_bound_meets_no_new_reader(race_mount, s3, bucket,
                                                                       tmp_path, held):
    """open(a, O_WRONLY|O_TRUNC|O_CREAT) while a handle reads a through the page cache is
    answered ESTALE once, and reads of a are EBUSY until the retry has opened. The retry
    can be slow (its lookup waits for S3, or for a directory lock the kernel holds for a
    rename or unlink with a delayed DELETE): here the LIST of a/ of its lookup ("lookup")
    or of its OPEN ("open") is held 6 s at the proxy, and a new reader comes meanwhile
    (2.5 s in, for the lookup). With a 2 s bound, or with the guard dropped when the
    retry's OPEN arrived rather than when it was answered, the reader got the page cache of
    the inode the retry opens, and the retry's second ESTALE reached the caller (the
    concurrent model saw 'write: ESTALE'). Now the reader is EBUSY, the overwrite goes
    through."""
    old = b"<old a>" * 300
    m, wd, proxy, pfx = race_mount({"a": old}, TTLS["ttl0"])
    opened, go = tmp_path / "opened", tmp_path / "go"
    r1 = wd.start([sys.executable, "-c", HOLD_READER, f"{m.dir}/a", opened, go],
                  what="a reader of a, held open")
    r2 = None
    try:
        wait_for(lambda: opened.exists(), 20, "the first reader")
        assert r1.proc.poll() is None, wd.wait([r1])
        # the LISTs of a/ after this: the writer's lookup, its OPEN's, its retry's lookup
        # (the revalidation, a new inode: then the kernel's lookup of the name again) and
        # its retry's OPEN's: the 3rd or the 5th is held
        q = "prefix=" + urllib.parse.quote(pfx + "a/", safe="")
        nth = 3 if held == "lookup" else 5
        proxy.set_faults([{"match": {"method": "GET", "query": q, "nth": nth},
                           "action": "delay", "seconds": 6}])
        writer = wd.start([sys.executable, "-c", CREAT_OVERWRITE, f"{m.dir}/a"],
                          what="open(a, O_WRONLY|O_TRUNC|O_CREAT), write, close")
        wait_for(lambda: fired(proxy) or writer.proc.poll() is not None, timeout=20,
                 what=f"the retry's {held}'s LIST of a/ held at the proxy")
        assert fired(proxy), f"the writer ended before its retry's {held}: {writer!r}"
        if held == "lookup":
            time.sleep(2.5)   # past the old 2 s bound of the guard (the LIST is held 6 s)
        opened2 = tmp_path / "opened2"
        r2 = wd.start([sys.executable, "-c", HOLD_READER, f"{m.dir}/a", opened2, go],
                      what="a second reader of a, 2.5 s into the retry")
        wait_for(lambda: opened2.exists(), 20, "the second reader's open")
        assert writer.proc.poll() is None, "the retry's lookup was answered before the reader"
        wd.wait([writer])
        assert writer.text.strip() == "written", writer
        assert r2.text.strip() == "EBUSY", r2
    finally:
        go.touch()
        wd.wait([r1] + ([r2] if r2 else []))
    assert bucket_body(s3, bucket, pfx + "a") == b"new"
    assert wd.read(f"{m.dir}/a") == b"new"


# argv[1]: "rename" (argv[2] -> argv[3]) or "unlink" (argv[2]): "done" or the errno
CHANGE = r"""
import errno, os, sys
try:
    if sys.argv[1] == "rename":
        os.rename(sys.argv[2], sys.argv[3])
    else:
        os.unlink(sys.argv[2])
    print("done")
except OSError as e:
    print(errno.errorcode[e.errno])
"""


@pytest.mark.parametrize("change", ["rename-onto", "unlink", "rename-away"])
def test_overwrite_retry_name_changed_between_its_lookup_and_open(race_mount, s3, bucket,
                                                                   tmp_path, change):
    """An overwrite of a told ESTALE (a handle reads a through the page cache) looks a up
    again and opens what it found; here its OPEN's LIST of a/ is held 6 s at the proxy and
    meanwhile a is changed again: `mv b a`, `rm a` or `mv a c`. Before, the change went
    through and the OPEN, on an inode that was no longer a's, was answered ESTALE a second
    time: the caller saw it (the concurrent model: 'write: ESTALE (opened: False)'). Now
    the name is pinned from the retry's lookup until its OPEN is answered: the change is
    EBUSY (a is being overwritten) and the overwrite goes through."""
    old = b"<old a>" * 300
    m, wd, proxy, pfx = race_mount({"a": old, "b": b"<b>" * 50}, TTLS["ttl0"])
    opened, go = tmp_path / "opened", tmp_path / "go"
    r1 = wd.start([sys.executable, "-c", HOLD_READER, f"{m.dir}/a", opened, go],
                  what="a reader of a, held open")
    try:
        wait_for(lambda: opened.exists(), 20, "the reader")
        assert r1.proc.poll() is None, wd.wait([r1])
        # the LISTs of a/ from here: the writer's lookup, its OPEN's, its retry's lookup
        # (the revalidation), the kernel's lookup of the name again, the retry's OPEN's
        q = "prefix=" + urllib.parse.quote(pfx + "a/", safe="")
        proxy.set_faults([{"match": {"method": "GET", "query": q, "nth": 5},
                           "action": "delay", "seconds": 6}])
        writer = wd.start([sys.executable, "-c", CREAT_OVERWRITE, f"{m.dir}/a"],
                          what="open(a, O_WRONLY|O_TRUNC|O_CREAT), write, close")
        wait_for(lambda: fired(proxy) or writer.proc.poll() is not None, timeout=20,
                 what="the retry's OPEN's LIST of a/ held at the proxy")
        assert fired(proxy), f"the writer ended before its retry's OPEN: {writer!r}"
        args = {"rename-onto": ["rename", f"{m.dir}/b", f"{m.dir}/a"],
                "unlink": ["unlink", f"{m.dir}/a"],
                "rename-away": ["rename", f"{m.dir}/a", f"{m.dir}/c"]}[change]
        op = wd.py(CHANGE, *args, what=f"{change} while the retry's OPEN waits")
        assert writer.proc.poll() is None, "the retry's OPEN was answered before the change"
        wd.wait([writer])
        assert writer.text.strip() == "written", writer
        assert op.text.strip() == "EBUSY", op
    finally:
        go.touch()
        wd.wait([r1])
    assert bucket_body(s3, bucket, pfx + "a") == b"new"
    assert wd.read(f"{m.dir}/a") == b"new"
    assert bucket_body(s3, bucket, pfx + "b") == b"<b>" * 50
    assert bucket_body(s3, bucket, pfx + "c") is None


def test_overwrite_retry_lands_on_an_inode_a_rename_brought_in(race_mount, s3, bucket,
                                                                tmp_path):
    """`mv b a` (its copy held 4 s at the proxy) while an overwrite of a is told ESTALE (a
    handle reads a through the page cache) and another handle reads b through the page
    cache: the retry's lookup of a comes while the rename runs. Before, the retry's OPEN
    reached the inode the rename moved from b to a, which b's reader holds: a second
    ESTALE, to the caller. Now the retry's lookup waits for the rename's end, and lets go
    of that inode (its reader keeps it): the retry opens a new inode of a."""
    old_b = b"<old b>" * 300
    m, wd, proxy, pfx = race_mount({"a": b"<old a>" * 300, "b": old_b}, TTLS["ttl0"])
    opened1, opened2, go = tmp_path / "opened1", tmp_path / "opened2", tmp_path / "go"
    r1 = wd.start([sys.executable, "-c", HOLD_READER, f"{m.dir}/a", opened1, go],
                  what="a reader of a, held open")
    r2 = wd.start([sys.executable, "-c", HOLD_READER, f"{m.dir}/b", opened2, go],
                  what="a reader of b, held open")
    mv = None
    try:
        wait_for(lambda: opened1.exists() and opened2.exists(), 20, "the readers")
        assert r1.proc.poll() is None and r2.proc.poll() is None, wd.wait([r1, r2])
        proxy.set_faults([{"match": {"method": "PUT", "path": "/a$"}, "action": "delay",
                           "seconds": 4}])
        mv = wd.start([sys.executable, "-c", CHANGE, "rename", f"{m.dir}/b", f"{m.dir}/a"],
                      what="rename b -> a (its copy held 4 s)")
        wait_for(lambda: fired(proxy) or mv.proc.poll() is not None, timeout=20,
                 what="the rename's CopyObject held at the proxy")
        assert fired(proxy), f"the rename ended before its copy: {wd.wait([mv])}"
        writer = wd.py(CREAT_OVERWRITE, f"{m.dir}/a",
                       what="open(a, O_WRONLY|O_TRUNC|O_CREAT) while the rename copies b")
        wd.wait([mv])
        assert mv.text.strip() == "done", mv
        assert writer.text.strip() == "written", writer
    finally:
        go.touch()
        wd.wait([r1, r2])
    assert bucket_body(s3, bucket, pfx + "a") == b"new"
    assert wd.read(f"{m.dir}/a") == b"new"
    assert bucket_body(s3, bucket, pfx + "b") is None


# 8 processes, each open(name, O_WRONLY|O_CREAT|O_TRUNC), write its own bytes, close, 60
# times: prints {"ok": n, errno name: n, ...} as JSON
CREAT_TRUNC = r"""
import errno, json, os, sys
from multiprocessing import Pool

def one(i):
    out = {}
    for k in range(60):
        try:
            fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            key = errno.errorcode[e.errno]
        else:
            try:
                os.write(fd, b"<%d:%d>" % (i, k) * 100)
                os.close(fd)
                key = "ok"
            except OSError as e:
                key = "write/close " + errno.errorcode[e.errno]
        out[key] = out.get(key, 0) + 1
    return out

with Pool(8) as p:
    total = {}
    for o in p.map(one, range(8)):
        for k, n in o.items():
            total[k] = total.get(k, 0) + n
print(json.dumps(total))
"""


@pytest.mark.parametrize("overwrite", [True, False], ids=["allow-overwrite", "no-overwrite"])
def test_concurrent_creat_trunc_is_never_eexist(race_mount, s3, bucket, overwrite):
    """open(O_CREAT|O_TRUNC) without O_EXCL by 8 processes at once on one name, 60 each,
    --metadata-ttl 0 (negative entries kept 1 s): one creates the file, the others meet it
    being written (EBUSY) or, once it exists, replace it (--allow-overwrite) or are refused
    EPERM (without). Never EEXIST: POSIX gives that only to O_EXCL (issue 28 R12: an
    8-process stress saw it 2 times in 442)."""
    base = RACE_OPTS if overwrite else [o for o in RACE_OPTS if o != "--allow-overwrite"]
    m, wd, _, pfx = race_mount({}, ["--metadata-ttl", "0", "--negative-metadata-ttl", "1"],
                               base)
    op = wd.py(CREAT_TRUNC, f"{m.dir}/f", what="8 processes creat(f) with O_TRUNC, 60 each",
               timeout=120)
    got = json.loads(op.out)
    allowed = {"ok", "EBUSY"} | (set() if overwrite else {"EPERM"})
    assert set(got) <= allowed, got
    assert got.get("ok", 0) >= 1, got
    if not overwrite:
        assert got.get("ok") == 1, got        # the one that created it
    body = bucket_body(s3, bucket, pfx + "f")
    assert body is not None and len(body) in {len(b"<%d:%d>" % (i, k) * 100)
                                              for i in range(8) for k in range(60)}


def blocked_on_a_directory_lock(pid):
    """The process waits in the kernel for the locks of a rename's directories (not for
    the mount); without its kernel stack, any uninterruptible wait."""
    stack = _stack(pid)
    if not stack:
        return _state(pid) == "D"
    return stack[0] in ("lock_two_directories", "lock_rename", "rwsem_down_write_slowpath",
                        "down_write_nested", "down_write")


def test_rename_into_a_directory_an_unlink_emptied_meanwhile(race_mount, s3, bucket):
    """`rm e/h/x` (its DELETE held at the proxy) while `rename(d/g, e/h/x)` waits for the
    lock of e/h that the unlink holds: the rename resolved e/h before the unlink found e/h
    and e empty and invalidated them, so the kernel moves x into its old entry of e/h.
    Lookups of e/h/x while the rename's copy is held find e missing (it is, in S3), and the
    kernel keeps that negative entry (--negative-metadata-ttl). Once the rename has
    returned, e/h/x is the renamed file on the mount as in the bucket (the concurrent
    model, seed 2 ttl-default, saw ENOENT for e/h/x and e/h until its end)."""
    g = b"<g>" * 1000
    m, wd, proxy, pfx = race_mount({"e/h/x": b"<x>" * 300, "d/g": g, "d/keep": b"k"},
                                   ["--metadata-ttl", "30", "--negative-metadata-ttl", "30"])
    # the kernel holds e, e/h, e/h/x, d and d/g (the rename's walk sends nothing)
    assert wd.read(f"{m.dir}/e/h/x") == b"<x>" * 300
    assert wd.read(f"{m.dir}/d/g") == g
    proxy.set_faults([
        {"match": {"method": "DELETE", "path": "/e/h/x$"}, "action": "delay", "seconds": 20},
        {"match": {"method": "PUT", "path": "/e/h/x$"}, "action": "delay", "seconds": 20},
    ])
    unlink = wd.start(["rm", "-f", f"{m.dir}/e/h/x"], what="rm e/h/x (its DELETE held)")
    mv = None
    try:
        wait_for(lambda: fired(proxy, 0) or unlink.proc.poll() is not None, timeout=20,
                 what="the unlink's DELETE held at the proxy")
        assert fired(proxy, 0), f"the unlink ended before its DELETE: {unlink!r}"
        mv = wd.start([sys.executable, "-c", "import os, sys; os.rename(sys.argv[1], sys.argv[2])",
                       f"{m.dir}/d/g", f"{m.dir}/e/h/x"], what="rename d/g -> e/h/x")
        wait_for(lambda: blocked_on_a_directory_lock(mv.proc.pid) or mv.proc.poll() is not None,
                 timeout=20, what="the rename waiting for the lock of e/h")
        assert mv.proc.poll() is None, f"the rename ended before the unlink: {mv!r}"
        proxy.release(0)
        wd.wait([unlink])
        assert unlink.rc == 0, unlink
        wait_for(lambda: fired(proxy, 1) or mv.proc.poll() is not None, timeout=20,
                 what="the rename's CopyObject held at the proxy")
        assert fired(proxy, 1), f"the rename ended before its copy: {mv!r}"
        # e and e/h are gone in S3 for now: the lookups find them missing
        during = [wd.exists(f"{m.dir}/e/h/x"), wd.exists(f"{m.dir}/e/h"),
                  wd.exists(f"{m.dir}/e")]
        proxy.release(1)
    finally:
        proxy.release()
        wd.wait([unlink] + ([mv] if mv else []))
    assert mv.rc == 0, mv
    assert during == [False, False, False], during
    # read-after-write for the mount's own rename, at once (the negative entries last 30 s)
    assert wd.exists(f"{m.dir}/e/h/x")
    assert wd.read(f"{m.dir}/e/h/x") == g
    assert wd.listdir(f"{m.dir}/e/h") == ["x"]
    assert bucket_body(s3, bucket, pfx + "e/h/x") == g
    assert bucket_body(s3, bucket, pfx + "d/g") is None
    assert not wd.exists(f"{m.dir}/d/g")
