"""`s3flash mount --cache-xz BUCKET`: the shared block cache in an S3 Express One Zone
directory bucket (docs/CACHE.md, "The shared cache"), as Mountpoint's shared cache: several
nodes (here: daemons with their own local caches, or none) mount the source with one cache
bucket; a block one node read from the source is PUT there in the background and the others
read it from there instead of the source. Every block read from the cache bucket is checked
(its header names this bucket, key, ETag and offset; the CRC32C of its data) before use;
errors of the cache bucket never fail a read.

The source and the cache bucket are directory buckets of the sink's --express emulation
(bench/sink_express.c: sessions checked on every request), behind the fault proxy, which
counts each request by method and path (GETs of the source's keys vs of the cache's) and
answers 503 for the cache bucket where a test asks. Every wait is a bounded poll of the
proxy's counts or of the mount's metrics.
"""
import os
import subprocess

import pytest

from faults import faultproxy_factory, s3_error  # noqa: F401 (fixture)
from helpers import wait_for
from metricsutil import URL_RE, parse, scrape, total
from mountutil import Mount, mount_supported, stop_mounts
from test_express import BUCKET, data, sink_cli, xsink  # noqa: F401 (fixtures)

CACHE = "xzcache--use1-az4--x-s3"
CHECK_KEY = "s3flash-v1/_s3flash_cache_metadata"
BLOCKS = f"/{CACHE}/s3flash-v1/"  # the paths of the cache's block objects (and CHECK_KEY)


@pytest.fixture
def proxy(xsink, faultproxy_factory):  # noqa: F811
    return faultproxy_factory("127.0.0.1", xsink.port)


@pytest.fixture
def pcli(cli_path, proxy, tmp_path):
    """The CLI through the proxy (uploads, and the cache's objects read and planted)."""
    return sink_cli(cli_path, proxy, tmp_path / "home")


@pytest.fixture
def nodes(cli_path, proxy, tmp_path):
    why = mount_supported()
    if why:
        pytest.skip(why)
    mounts = []

    def node(prefix, options=(), env=None):
        i = len(mounts)
        m = Mount(cli_path, proxy.endpoint, "AKIDEXPRESSTEST", "express-secret",
                  f"{BUCKET}/{prefix}/", tmp_path / f"node{i}",
                  ["--metadata-ttl", "0", "--metrics-listen", "127.0.0.1:0", *options],
                  log_path=str(tmp_path / f"node{i}.log"),
                  env={"S3FLASH_RETRY_BASE_MS": "20", **(env or {})})
        mounts.append(m)
        return m.start()

    yield node
    stop_mounts(mounts)


def requests(proxy, method, path_prefix):
    """{path: count} of the proxy's requests of `method` whose path starts so."""
    out = {}
    for k, n in proxy.stats()["requests"].items():
        meth, _, path = k.partition(" ")
        if meth == method and path.startswith(path_prefix):
            out[path] = out.get(path, 0) + n
    return out


def cache_puts(proxy):
    return {p: n for p, n in requests(proxy, "PUT", BLOCKS).items()
            if not p.endswith(CHECK_KEY)}


def cache_gets(proxy):
    return requests(proxy, "GET", BLOCKS)


def metrics(m):
    with open(m.log_path, "rb") as f:
        url = URL_RE.search(f.read()).group(1).decode()
    return parse(scrape(url))


def xz(m, name):
    return total(metrics(m), f"s3flash_cache_xz_{name}_total")


def read(m, name):
    with open(os.path.join(m.dir, name), "rb") as f:
        return f.read()


FILES = {"a.bin": 1 << 20, "b.bin": 300_000, "c.txt": 1, "d.bin": 5000}
LARGE = {"big.bin": 3 << 20}  # over the shared cache's 1 MiB: never cached there


def upload(pcli, prefix, files, seed=0):
    out = {}
    for i, (name, size) in enumerate(files.items()):
        out[name] = data(size, seed=seed * 100 + i + 1)
        pcli.ok("cp", "-", f"s3://{BUCKET}/{prefix}/{name}", input=out[name])
    return out


def fill(proxy, m, want, n_puts):
    """Read every file through node m (right bytes) and wait until its PUTs reached the
    cache bucket."""
    for name, body in want.items():
        assert read(m, name) == body, name
    wait_for(lambda: len(cache_puts(proxy)) >= n_puts, 30,
             f"{n_puts} PUTs of blocks into {CACHE}")
    return cache_puts(proxy)


def test_second_node_reads_the_blocks_from_the_shared_cache(nodes, proxy, pcli, tmp_path):
    want = upload(pcli, "share", {**FILES, **LARGE})
    a = nodes("share", ["--cache-xz", CACHE, "--cache", str(tmp_path / "local-a")])
    puts = fill(proxy, a, want, len(FILES))
    assert len(puts) == len(FILES), puts  # a block object each small one, the large none
    assert xz(a, "put_bytes") == sum(FILES.values())
    proxy.reset()
    # node b: its own (empty) local cache, the same shared cache
    b = nodes("share", ["--cache-xz", CACHE, "--cache", str(tmp_path / "local-b")])
    for name, body in want.items():
        assert read(b, name) == body, name
    src = requests(proxy, "GET", f"/{BUCKET}/share/")
    assert set(src) == {f"/{BUCKET}/share/big.bin"}, src  # the small ones came from the cache
    assert len(cache_gets(proxy)) == len(FILES)
    assert xz(b, "hits") == len(FILES) and xz(b, "hit_bytes") == sum(FILES.values())
    assert xz(b, "invalid") == 0 and xz(b, "errors") == 0
    assert cache_puts(proxy) == {}  # b PUT nothing: every block was there
    # what b took from the shared cache went into its local cache too: a node on that local
    # cache (b unmounted, its cache queue written) asks neither bucket for them
    b.stop()
    proxy.reset()
    c = nodes("share", ["--cache-xz", CACHE, "--cache", str(tmp_path / "local-b")])
    for name in FILES:
        assert read(c, name) == want[name], name
    assert requests(proxy, "GET", f"/{BUCKET}/share/") == {}
    assert cache_gets(proxy) == {}


def test_without_a_local_cache(nodes, proxy, pcli):
    want = upload(pcli, "nolocal", FILES, seed=2)
    a = nodes("nolocal", ["--cache-xz", CACHE])
    fill(proxy, a, want, len(FILES))
    proxy.reset()
    b = nodes("nolocal", ["--cache-xz", CACHE])
    for name, body in want.items():
        assert read(b, name) == body
    assert requests(proxy, "GET", f"/{BUCKET}/nolocal/") == {}
    assert xz(b, "hits") == len(FILES)


@pytest.mark.parametrize("how", ["flipped-byte", "another-objects-block", "truncated"])
def test_a_corrupt_or_planted_block_is_refused(nodes, proxy, pcli, tmp_path, how):
    want = upload(pcli, f"bad-{how}", {"x.bin": 200_000, "y.bin": 200_000}, seed=3)
    a = nodes(f"bad-{how}", ["--cache-xz", CACHE])
    keys = sorted(fill(proxy, a, want, 2))
    # the cache objects' names are hashes: tell x's from y's by the key their header names
    bodies = {k: pcli.ok("cat", f"s3://{k.lstrip('/')}").out for k in keys}
    kx = next(k for k, v in bodies.items() if b"/x.bin" in v[:400])
    ky = next(k for k in keys if k != kx)
    if how == "flipped-byte":  # the last data byte: the header still names the block
        planted = bodies[kx][:-1] + bytes([bodies[kx][-1] ^ 1])
    elif how == "another-objects-block":
        planted = bodies[ky]  # y's whole block (a valid block of another object)
    else:
        planted = bodies[kx][:-1000]
    pcli.ok("cp", "-", f"s3://{kx.lstrip('/')}", input=planted)
    proxy.reset()
    b = nodes(f"bad-{how}", ["--cache-xz", CACHE])
    assert read(b, "x.bin") == want["x.bin"]
    assert read(b, "y.bin") == want["y.bin"]
    assert requests(proxy, "GET", f"/{BUCKET}/bad-{how}/") == {f"/{BUCKET}/bad-{how}/x.bin": 1}
    assert xz(b, "invalid") == 1 and xz(b, "hits") == 1
    with open(b.log_path) as f:
        assert "is not block 0 of" in f.read()
    # b read x from the source and PUT the right block over the planted one
    wait_for(lambda: cache_puts(proxy).get(kx, 0) >= 1, 30, "the good block PUT back")
    assert pcli.ok("cat", f"s3://{kx.lstrip('/')}").out == bodies[kx]
    proxy.reset()
    c = nodes(f"bad-{how}", ["--cache-xz", CACHE])
    assert read(c, "x.bin") == want["x.bin"]
    assert requests(proxy, "GET", f"/{BUCKET}/bad-{how}/") == {}


def test_cache_bucket_failing_never_fails_a_read(nodes, proxy, pcli):
    want = upload(pcli, "down", FILES, seed=4)
    a = nodes("down", ["--cache-xz", CACHE])
    fill(proxy, a, want, len(FILES))
    proxy.reset()
    b = nodes("down", ["--cache-xz", CACHE])  # checks the bucket (one PUT) before this
    proxy.set_faults([s3_error("ServiceUnavailable", 503, match={"path": f"^/{CACHE}/"})])
    for name, body in want.items():
        assert read(b, name) == body, name
    # every file came from the source; the first failure bypassed the cache for the rest
    assert set(requests(proxy, "GET", f"/{BUCKET}/down/")) == {
        f"/{BUCKET}/down/{n}" for n in FILES}
    assert xz(b, "errors") >= 1 and xz(b, "hits") == 0
    with open(b.log_path) as f:
        log = f.read()
    assert f"shared cache {CACHE}: GET" in log and "ServiceUnavailable" in log
    assert b.alive()


def test_object_changed_at_the_source_old_blocks_unused(nodes, proxy, pcli):
    want = upload(pcli, "etag", {"m.bin": 100_000}, seed=5)
    a = nodes("etag", ["--cache-xz", CACHE])
    old = fill(proxy, a, want, 1)
    new = data(100_000, seed=55)  # same size, new bytes: a new ETag
    pcli.ok("cp", "-", f"s3://{BUCKET}/etag/m.bin", input=new)
    proxy.reset()
    b = nodes("etag", ["--cache-xz", CACHE])
    assert read(b, "m.bin") == new
    assert requests(proxy, "GET", f"/{BUCKET}/etag/") == {f"/{BUCKET}/etag/m.bin": 1}
    got = cache_gets(proxy)
    assert len(got) == 1 and not set(got) & set(old)  # the new version's name, not the old
    assert xz(b, "hits") == 0 and xz(b, "invalid") == 0
    wait_for(lambda: set(cache_puts(proxy)) == set(got), 30, "the new version's block PUT")


def test_refused_before_mounting(cli_path, proxy, tmp_path, faultproxy_factory):  # noqa: F811
    why = mount_supported()
    if why:
        pytest.skip(why)
    d = tmp_path / "mnt"
    d.mkdir()
    env = Mount(cli_path, proxy.endpoint, "AKIDEXPRESSTEST", "express-secret", "x", d).env()
    base = [str(cli_path), "--endpoint-url", proxy.endpoint, "--force-path-style", "mount",
            "--foreground"]
    for bad, msg in [("plain-bucket", "needs an S3 Express One Zone directory bucket"),
                     (f"s3://{CACHE}/prefix/", "with no prefix")]:
        r = subprocess.run([*base, "--cache-xz", bad, f"{BUCKET}/x/", str(d)], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and msg in r.stderr, r.stderr
    # a cache bucket that does not take a block: the mount fails, naming it and what S3 said
    proxy.set_faults([s3_error("AccessDenied", 403, match={"method": "PUT",
                                                           "path": f"^/{CACHE}/"})])
    r = subprocess.run([*base, "--cache-xz", CACHE, f"{BUCKET}/x/", str(d)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r.stderr
    assert f"--cache-xz {CACHE}" in r.stderr and "AccessDenied" in r.stderr, r.stderr
    assert os.listdir(d) == []
