"""s3flash.fsspec against the real RGW: every operation of S3FlashFileSystem, fsspec's
registry resolving s3:// to it, configuration from storage_options, errors, pandas, and
Lightning's TorchCheckpointIO writing to s3:// through it."""

import hashlib
import io
import os
import pickle
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import pytest

fsspec = pytest.importorskip("fsspec")

import s3flash  # noqa: E402
import s3flash.fsspec  # noqa: E402
from s3flash.fsspec import S3FlashFileSystem  # noqa: E402

from conftest import exists, faultproxy  # noqa: E402
from helpers import fsspec_registered  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def registered():
    with fsspec_registered() as cls:
        yield cls


@pytest.fixture(scope="module")
def fs(endpoint):
    return fsspec.filesystem("s3", endpoint_url=endpoint)


@pytest.fixture
def base(bucket):
    """A fresh prefix: bucket/t-XXXX (no protocol, as fsspec names paths)."""
    return f"{bucket}/t-{uuid.uuid4().hex[:8]}"


def test_registry_resolves_to_s3flash(endpoint, rgw):
    assert isinstance(fsspec.filesystem("s3", endpoint_url=endpoint), S3FlashFileSystem)
    assert isinstance(fsspec.filesystem("s3a", endpoint_url=endpoint), S3FlashFileSystem)
    fs, path = fsspec.core.url_to_fs("s3://b/k/x.ckpt", endpoint_url=endpoint)
    assert isinstance(fs, S3FlashFileSystem) and path == "b/k/x.ckpt"
    from lightning.fabric.utilities.cloud_io import get_filesystem
    assert isinstance(get_filesystem("s3://b/run/"), S3FlashFileSystem)
    # defaults given to register() reach instances built without options; pickled (dask,
    # multiprocessing) an instance keeps them
    cls = s3flash.fsspec.register(endpoint_url=endpoint)
    try:
        fs = fsspec.filesystem("s3")
        assert fs.endpoint_url == endpoint
        back = pickle.loads(pickle.dumps(fs))
        assert type(back) is S3FlashFileSystem and back.endpoint_url == endpoint
    finally:
        s3flash.fsspec.register()
    assert issubclass(cls, S3FlashFileSystem)


def test_entry_point_declared():
    import tomllib
    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    # s3:// and s3a:// go to s3flash._fsspec_s3: s3fs's class whenever s3fs is importable
    # (tests/python/test_lightning_s3_default.py), s3flash's otherwise
    assert eps["fsspec.specs"] == {"s3flash": "s3flash.fsspec:S3FlashFileSystem",
                                   "s3": "s3flash._fsspec_s3:S3FileSystem",
                                   "s3a": "s3flash._fsspec_s3:S3FileSystem"}
    from importlib.metadata import PackageNotFoundError, distribution
    try:
        dist = distribution("s3flash")
    except PackageNotFoundError:
        return  # running from a source tree (tests/python/devenv.sh): nothing installed
    if not Path(s3flash.__file__).resolve().is_relative_to(
            Path(dist.locate_file("s3flash")).resolve()):
        return  # the package under test is not the installed one (devenv.sh stage)
    got = {e.name: e.value for e in dist.entry_points if e.group == "fsspec.specs"}
    assert got.get("s3flash") == "s3flash.fsspec:S3FlashFileSystem"
    assert got.get("s3") == got.get("s3a") == "s3flash._fsspec_s3:S3FileSystem"


def test_configuration_from_storage_options(rgw, bucket, monkeypatch):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        monkeypatch.delenv(k, raising=False)
    fs = fsspec.filesystem("s3", key=rgw.access_key, secret=rgw.secret_key,
                           client_kwargs={"endpoint_url": rgw.endpoint,
                                          "region_name": rgw.region},
                           config_kwargs={"s3": {"addressing_style": "path"}})
    fs.pipe(f"{bucket}/conf.txt", b"c")
    assert fs.cat(f"s3://{bucket}/conf.txt") == b"c"
    assert fs.s3client_config.force_path_style and fs.region == rgw.region
    assert "secret" not in repr(fs.s3client_config).lower() or \
        rgw.secret_key not in repr(fs.s3client_config)
    bad = fsspec.filesystem("s3", endpoint_url=rgw.endpoint, key=rgw.access_key,
                            secret="wrong" + rgw.secret_key[5:])
    with pytest.raises(PermissionError):
        bad.ls(bucket)
    with pytest.raises(PermissionError):
        fsspec.filesystem("s3", endpoint_url=rgw.endpoint, anon=True).cat(f"{bucket}/conf.txt")
    with pytest.raises(ValueError):
        fsspec.filesystem("s3", endpoint_url=rgw.endpoint, key=rgw.access_key)


def test_other_users_bucket_is_permission_error(rgw, s3_other, endpoint):
    name = f"s3fpy-other-{uuid.uuid4().hex[:8]}"
    s3_other.create_bucket(Bucket=name)
    s3_other.put_object(Bucket=name, Key="k", Body=b"x")
    try:
        fs = fsspec.filesystem("s3", endpoint_url=endpoint)
        for op in (lambda: fs.ls(name), lambda: fs.cat(f"{name}/k"),
                   lambda: fs.open(f"{name}/k", "rb"), lambda: fs.info(f"{name}/k")):
            with pytest.raises(PermissionError):
                op()
    finally:
        s3_other.delete_object(Bucket=name, Key="k")
        s3_other.delete_bucket(Bucket=name)


def test_ls_info_exists_isdir(fs, s3, base):
    bucket = base.split("/")[0]
    fs.pipe({f"{base}/a.txt": b"aaa", f"{base}/d/b.bin": b"bb", f"{base}/d/e/c": b"c"})
    s3.put_object(Bucket=bucket, Key=base.split("/", 1)[1] + "/marker/", Body=b"")
    detail = fs.ls(base)
    assert [(e["name"], e["type"], e["size"]) for e in detail] == [
        (f"{base}/a.txt", "file", 3), (f"{base}/d", "directory", 0),
        (f"{base}/marker", "directory", 0)]
    assert isinstance(detail[0]["LastModified"], datetime) and detail[0]["ETag"]
    assert fs.ls(f"s3://{base}/d/", detail=False) == [f"{base}/d/b.bin", f"{base}/d/e"]
    assert fs.ls(f"{base}/marker") == []                       # an empty directory (marker)
    assert fs.ls(f"{base}/a.txt", detail=False) == [f"{base}/a.txt"]
    info = fs.info(f"s3://{base}/a.txt")
    assert (info["type"], info["size"], info["name"]) == ("file", 3, f"{base}/a.txt")
    assert fs.info(f"{base}/d")["type"] == "directory"
    assert fs.info(bucket)["type"] == "directory"
    assert fs.exists(f"{base}/a.txt") and fs.exists(f"{base}/d") and fs.exists(bucket)
    assert not fs.exists(f"{base}/nope") and not fs.exists(f"{base}/a.tx")
    assert not fs.exists(f"nobucket-{uuid.uuid4().hex[:8]}/x")
    assert fs.isdir(f"{base}/d") and fs.isdir(f"{base}/d/e") and fs.isdir(bucket)
    assert not fs.isdir(f"{base}/a.txt") and not fs.isdir(f"{base}/nope")
    assert fs.isfile(f"{base}/a.txt") and not fs.isfile(f"{base}/d")
    for op in (fs.info, fs.ls, fs.cat, lambda p: fs.open(p, "rb")):
        with pytest.raises(FileNotFoundError):
            op(f"{base}/nope")
    assert fs.find(base) == [f"{base}/a.txt", f"{base}/d/b.bin", f"{base}/d/e/c"]
    assert fs.find(base, withdirs=True) == [
        base, f"{base}/a.txt", f"{base}/d", f"{base}/d/b.bin", f"{base}/d/e", f"{base}/d/e/c",
        f"{base}/marker"]
    assert fs.find(base, maxdepth=1) == [f"{base}/a.txt"]
    assert fs.glob(f"{base}/d/*") == [f"{base}/d/b.bin", f"{base}/d/e"]
    assert fs.glob(f"s3://{base}/**/c") == [f"{base}/d/e/c"]
    assert fs.du(base) == 6
    assert [root for root, _, _ in fs.walk(base)] == [base, f"{base}/d", f"{base}/d/e",
                                                     f"{base}/marker"]
    m = fs.modified(f"{base}/a.txt")
    assert m.tzinfo is not None and abs((datetime.now(timezone.utc) - m).total_seconds()) < 3600
    assert fs.created(f"{base}/a.txt") == m
    with pytest.raises(IsADirectoryError):
        fs.modified(f"{base}/d")


def test_cat_ranges_and_pipe(fs, base):
    data = bytes(range(256)) * 1000
    fs.pipe_file(f"s3://{base}/r", data)
    assert fs.cat_file(f"{base}/r") == data
    assert fs.cat_file(f"{base}/r", 10, 20) == data[10:20]
    assert fs.cat_file(f"{base}/r", start=-100) == data[-100:]
    assert fs.cat_file(f"{base}/r", 5, -5) == data[5:-5]
    assert fs.cat_file(f"{base}/r", end=7) == data[:7]
    assert fs.cat_file(f"{base}/r", len(data) - 3, len(data) + 100) == data[-3:]
    assert fs.cat_file(f"{base}/r", 50, 40) == b""
    assert fs.cat(f"{base}/r", start=1000, end=1004) == data[1000:1004]
    assert fs.cat_ranges([f"{base}/r", f"{base}/r"], [0, 256], [4, 260]) == [data[:4],
                                                                              data[:4]]
    fs.pipe({f"{base}/p1": b"one", f"{base}/p2": memoryview(b"two")})
    assert fs.cat([f"{base}/p1", f"{base}/p2"]) == {f"{base}/p1": b"one", f"{base}/p2": b"two"}
    fs.pipe_file(f"{base}/empty", b"")
    assert fs.cat(f"{base}/empty") == b"" and fs.size(f"{base}/empty") == 0
    with pytest.raises(FileExistsError):
        fs.pipe_file(f"{base}/p1", b"x", mode="create")
    assert fs.head(f"{base}/r", 3) == data[:3] and fs.tail(f"{base}/r", 3) == data[-3:]


def test_open_read_and_write(fs, s3, base):
    bucket, prefix = base.split("/", 1)
    big = os.urandom(20 << 20) + b"tail"   # several parts
    with fs.open(f"s3://{base}/big", "wb") as f:
        for i in range(0, len(big), 3 << 20):
            f.write(memoryview(big)[i:i + (3 << 20)])
        assert not exists(s3, bucket, f"{prefix}/big")  # nothing until close
    with fs.open(f"{base}/big", "rb") as f:
        assert f.size == len(big) and f.read(10) == big[:10]
        f.seek(-4, io.SEEK_END)
        assert f.read() == b"tail"
        f.seek(1 << 20)
        buf = bytearray(1000)
        assert f.readinto(buf) == 1000 and bytes(buf) == big[1 << 20:(1 << 20) + 1000]
    with fs.open(f"{base}/t.txt", "w") as f:
        f.write("héllo\nworld\n")
    with fs.open(f"{base}/t.txt", "r") as f:
        assert f.read() == "héllo\nworld\n"
    with fs.open(f"{base}/t.txt", "rb") as f:
        assert list(f) == ["héllo\n".encode(), b"world\n"]
    with fsspec.open(f"s3://{base}/t.txt", "rt", endpoint_url=fs.endpoint_url) as f:
        assert f.readline() == "héllo\n"
    # an exception inside `with`: no object, in binary and in text mode
    for mode in ("wb", "w"):
        with pytest.raises(RuntimeError):
            with fs.open(f"{base}/failed-{mode}", mode) as f:
                f.write(b"x" * (6 << 20) if mode == "wb" else "y" * 100)
                raise RuntimeError("boom")
        assert not exists(s3, bucket, f"{prefix}/failed-{mode}")
    with pytest.raises(FileExistsError):
        fs.open(f"{base}/t.txt", "xb")
    with fs.open(f"{base}/x.bin", "xb") as f:
        f.write(b"new")
    assert fs.cat(f"{base}/x.bin") == b"new"
    with pytest.raises(NotImplementedError):
        fs.open(f"{base}/t.txt", "r+b")


def test_transaction(fs, s3, base):
    bucket, prefix = base.split("/", 1)
    with fs.transaction:
        with fs.open(f"{base}/tx1", "wb") as f:
            f.write(b"1")
        assert not exists(s3, bucket, f"{prefix}/tx1")  # completed at commit
    assert fs.cat(f"{base}/tx1") == b"1"
    with pytest.raises(RuntimeError):
        with fs.transaction:
            with fs.open(f"{base}/tx2", "wb") as f:
                f.write(b"2")
            raise RuntimeError("rollback")
    assert not exists(s3, bucket, f"{prefix}/tx2")
    assert s3.list_multipart_uploads(Bucket=bucket, Prefix=f"{prefix}/tx").get("Uploads",
                                                                              []) == []


def test_put_get_recursive(fs, base, tmp_path):
    src = tmp_path / "src"
    (src / "sub" / "deep").mkdir(parents=True)
    files = {"a.bin": os.urandom(9 << 20), "sub/b.txt": b"bee", "sub/deep/c": b"",
             "sub/deep/d": os.urandom(1000)}
    for name, data in files.items():
        (src / name).write_bytes(data)
    fs.put_file(str(src / "a.bin"), f"s3://{base}/one/a.bin")
    assert fs.cat(f"{base}/one/a.bin") == files["a.bin"]
    fs.put(str(src) + "/", f"{base}/tree/", recursive=True)
    assert sorted(fs.find(f"{base}/tree")) == sorted(f"{base}/tree/{n}" for n in files)
    for name, data in files.items():
        assert fs.cat(f"{base}/tree/{name}") == data
    dst = tmp_path / "dst"
    fs.get(f"s3://{base}/tree/", str(dst) + "/", recursive=True)
    for name, data in files.items():
        assert (dst / name).read_bytes() == data
    fs.get_file(f"{base}/one/a.bin", str(tmp_path / "single"))
    assert (tmp_path / "single").read_bytes() == files["a.bin"]
    with pytest.raises(FileNotFoundError):
        fs.get_file(f"{base}/one/nope", str(tmp_path / "nope"))
    assert not (tmp_path / "nope").exists()
    assert [p.name for p in tmp_path.iterdir() if "s3flash" in p.name] == []  # no temp left
    out = io.BytesIO()
    fs.get_file(f"{base}/tree/sub/b.txt", out)
    assert out.getvalue() == b"bee"


def test_rm_recursive_batched_and_rm_file(fs, s3, base):
    bucket, prefix = base.split("/", 1)
    names = [f"{base}/many/{i:04d}" for i in range(1010)]   # two DeleteObjects batches
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: fs.pipe_file(n, b"x"), names))
    fs.pipe({f"{base}/keep": b"k", f"{base}/many-not/x": b"y"})
    s3.put_object(Bucket=bucket, Key=f"{prefix}/many/dir/", Body=b"")
    fs.rm(f"s3://{base}/many", recursive=True)
    assert fs.find(base) == [f"{base}/keep", f"{base}/many-not/x"]
    assert not exists(s3, bucket, f"{prefix}/many/dir/")
    fs.rm_file(f"{base}/keep")
    fs.rm(f"{base}/many-not/x")
    assert fs.find(base) == []
    with pytest.raises(FileNotFoundError):
        fs.rm(f"{base}/gone", recursive=True)
    fs.pipe({f"{base}/g/1.txt": b"1", f"{base}/g/2.bin": b"2"})
    fs.rm(f"{base}/g/*.txt")
    assert fs.find(base) == [f"{base}/g/2.bin"]


def test_mkdir_makedirs_rmdir_touch_copy(fs, s3, base):
    new = f"s3fpy-fsmk-{uuid.uuid4().hex[:8]}"
    fs.mkdir(new)
    assert fs.exists(new) and fs.ls(new) == []
    with pytest.raises(FileExistsError):
        fs.mkdir(new)
    fs.makedirs(f"{new}/a/b", exist_ok=True)        # no-op below a bucket
    assert fs.ls(new) == []
    fs.touch(f"{new}/a/b/t")
    assert fs.cat(f"{new}/a/b/t") == b""
    with pytest.raises(ValueError):
        fs.touch(f"{new}/a/b/t", truncate=False)
    with pytest.raises(OSError):
        fs.rmdir(f"{new}/a")
    with pytest.raises(OSError):
        fs.rmdir(new)                                # not empty
    fs.rm(f"{new}/a", recursive=True)
    fs.rmdir(new)
    assert not fs.exists(new)
    other = f"s3fpy-fsmk-{uuid.uuid4().hex[:8]}"
    fs.makedirs(f"{other}/x/y")                     # creates the missing bucket
    assert fs.exists(other)
    fs.rmdir(other)

    fs.pipe({f"{base}/c/a": b"A" * 100, f"{base}/c/s/b": b"B"})
    fs.cp_file(f"s3://{base}/c/a", f"s3://{base}/copy/a")
    assert fs.cat(f"{base}/copy/a") == b"A" * 100
    fs.copy(f"{base}/c/", f"{base}/c2/", recursive=True)
    assert fs.find(f"{base}/c2") == [f"{base}/c2/a", f"{base}/c2/s/b"]
    with pytest.raises(FileNotFoundError):
        fs.cp_file(f"{base}/c/nope", f"{base}/c/x")
    fs.mv(f"{base}/copy/a", f"{base}/moved")
    assert fs.exists(f"{base}/moved") and not fs.exists(f"{base}/copy/a")


def test_pandas_read_csv_and_to_csv(rgw, bucket):
    pd = pytest.importorskip("pandas")
    opts = {"endpoint_url": rgw.endpoint, "key": rgw.access_key, "secret": rgw.secret_key}
    uri = f"s3://{bucket}/pandas-{uuid.uuid4().hex[:8]}.csv"
    df = pd.DataFrame({"a": range(1000), "b": [f"r{i}" for i in range(1000)]})
    df.to_csv(uri, index=False, storage_options=opts)
    back = pd.read_csv(uri, storage_options=opts)
    assert back.equals(df)
    fs = fsspec.filesystem("s3", **opts)
    fs.pipe(uri.replace(".csv", "-2.csv"), b"x,y\n1,2\n3,4\n")
    assert pd.read_csv(uri.replace(".csv", "-2.csv"), storage_options=opts)["y"].sum() == 6


def test_lightning_torch_checkpoint_io_through_fsspec(bucket, endpoint):
    """Lightning without the s3flash plugin: TorchCheckpointIO writes s3:// with fsspec
    (a transaction, open "wb") and reads it back, all through S3FlashFileSystem."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("lightning")
    from lightning.pytorch.plugins.io import TorchCheckpointIO
    cls = s3flash.fsspec.register(endpoint_url=endpoint)
    try:
        io_ = TorchCheckpointIO()
        uri = f"s3://{bucket}/tio-{uuid.uuid4().hex[:8]}/x.ckpt"
        io_.save_checkpoint({"w": torch.arange(10), "epoch": 2}, uri)
        c = io_.load_checkpoint(uri, weights_only=True)
        assert c["epoch"] == 2 and torch.equal(c["w"], torch.arange(10))
        io_.remove_checkpoint(uri)
        assert not fsspec.filesystem("s3").exists(uri)
        with pytest.raises(FileNotFoundError):
            io_.load_checkpoint(uri)
    finally:
        s3flash.fsspec.register()
    assert issubclass(cls, S3FlashFileSystem)


class _MyFS(S3FlashFileSystem):
    """A user's subclass (importable: pickle names it)."""

    def hello(self):
        return "hello"


def test_subclass_survives_pickling(endpoint, bucket):
    fs = _MyFS(endpoint_url=endpoint)
    back = pickle.loads(pickle.dumps(fs))
    assert type(back) is _MyFS and back.hello() == "hello"
    assert back.endpoint_url == endpoint
    back.pipe_file(f"{bucket}/pickled-sub", b"p")
    assert fs.cat_file(f"{bucket}/pickled-sub") == b"p"


def test_rm_missing_raises_and_buckets_as_s3fs(fs, s3, base):
    bucket, prefix = base.split("/", 1)
    # a missing key, a key in a missing bucket, a missing bucket: FileNotFoundError
    with pytest.raises(FileNotFoundError):
        fs.rm(f"{base}/nope")
    with pytest.raises(FileNotFoundError):
        fs.rm([f"{base}/nope2"])
    missing = f"s3fpy-nobucket-{uuid.uuid4().hex[:8]}"
    for p, rec in ((f"{missing}/k", False), (f"{missing}/k", True), (missing, False),
                   (missing, True)):
        with pytest.raises(FileNotFoundError):
            fs.rm(p, recursive=rec)
    # a prefix without recursive: IsADirectoryError, and nothing deleted
    fs.pipe({f"{base}/d/x": b"x", f"{base}/f": b"f"})
    with pytest.raises(IsADirectoryError):
        fs.rm(f"{base}/d")
    assert exists(s3, bucket, f"{prefix}/d/x")
    fs.rm(f"{base}/f")
    assert not exists(s3, bucket, f"{prefix}/f")
    # a bucket: rm(recursive=True) deletes its objects and the bucket (s3fs); without
    # recursive, only an empty bucket is removed
    new = f"s3fpy-fsrm-{uuid.uuid4().hex[:8]}"
    fs.mkdir(new)
    fs.pipe({f"{new}/a": b"a", f"{new}/b/c": b"c"})
    with pytest.raises(OSError):
        fs.rm(new)
    assert fs.exists(f"{new}/a")
    fs.rm(f"s3://{new}", recursive=True)
    assert not fs.exists(new)
    fs.mkdir(new)
    fs.rm(new)
    assert not fs.exists(new)


def test_mkdir_in_missing_bucket_without_parents(fs):
    missing = f"s3fpy-nobucket-{uuid.uuid4().hex[:8]}"
    with pytest.raises(FileNotFoundError):
        fs.mkdir(f"{missing}/a", create_parents=False)
    assert not fs.exists(missing)
    fs.mkdir(f"{missing}/a")                     # create_parents (default): the bucket
    try:
        assert fs.exists(missing)
        with pytest.raises(FileExistsError):
            fs.makedirs(missing)
        fs.makedirs(missing, exist_ok=True)
    finally:
        fs.rmdir(missing)


def test_ls_root_lists_buckets(fs, bucket, endpoint, rgw, s3_other):
    """ls("") is ListBuckets (as s3fs): the caller's buckets as directories; anonymous, the
    root lists nothing. Another user's bucket is not listed."""
    name = f"s3fpy-other-{uuid.uuid4().hex[:8]}"
    s3_other.create_bucket(Bucket=name)
    try:
        names = fs.ls("", detail=False)
        assert bucket in names and name not in names
        # "s3://" is the root too (the server is shared: other processes' buckets may come
        # and go between two listings, so each is checked for this test's own two buckets)
        root = fs.ls("s3://", detail=False)
        assert bucket in root and name not in root
        e = {x["name"]: x for x in fs.ls("")}[bucket]
        assert e["type"] == "directory" and e["size"] == 0
        assert isinstance(e["CreationDate"], datetime)
        assert bucket in fs.glob("s3fpy-*")
        assert fsspec.filesystem("s3", endpoint_url=endpoint, anon=True).ls("") == []
    finally:
        s3_other.delete_bucket(Bucket=name)


def test_append_as_s3fs(endpoint, s3, base):
    """"ab" as s3fs: a missing object is created; a small one (< 5 MiB) is read and written
    again; a larger one is copied on the server as the first part of a multipart upload (the
    result's part 1 is exactly the old object), then the appended bytes follow."""
    bucket, prefix = base.split("/", 1)
    fs = S3FlashFileSystem(endpoint_url=endpoint,
                           s3client_config=s3flash.S3ClientConfig(part_size=5 << 20))
    with fs.open(f"{base}/new", "ab") as f:
        f.write(b"first")
    assert fs.cat(f"{base}/new") == b"first"
    with fs.open(f"{base}/new", "ab") as f:
        assert f.tell() == 5
        f.write(b"+second")
    assert fs.cat(f"{base}/new") == b"first+second"
    with fs.open(f"{base}/new", "a") as f:             # text mode
        f.write("+third")
    assert fs.cat(f"{base}/new") == b"first+second+third"

    old = os.urandom((6 << 20) + 3)
    fs.pipe_file(f"{base}/big", old)
    extra = os.urandom((11 << 20) + 5)                 # two full parts and a tail
    with fs.open(f"{base}/big", "ab") as f:
        assert f.tell() == len(old)
        f.write(extra[:7])
        f.write(memoryview(extra)[7:])
        assert f.tell() == len(old) + len(extra)
        assert fs.cat(f"{base}/big") == old           # nothing changes before close
    assert fs.cat(f"{base}/big") == old + extra
    # the multipart ETag, MD5 of the parts' MD5s: part 1 is exactly the old object, then
    # the appended bytes in parts of 5 MiB
    M = 5 << 20
    parts = [old, extra[:M], extra[M:2 * M], extra[2 * M:]]
    want = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-4"
    assert s3.head_object(Bucket=bucket, Key=f"{prefix}/big")["ETag"].strip('"') == want
    # an exception inside `with`: the object is as it was, no upload left
    with pytest.raises(RuntimeError):
        with fs.open(f"{base}/big", "ab") as f:
            f.write(b"x" * (6 << 20))
            raise RuntimeError("boom")
    assert fs.cat(f"{base}/big") == old + extra
    assert s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", []) == []
    # in a transaction: completed at commit
    with fs.transaction:
        with fs.open(f"{base}/big", "ab") as f:
            f.write(b"tx")
        assert fs.size(f"{base}/big") == len(old) + len(extra)
    assert fs.tail(f"{base}/big", 4) == extra[-2:] + b"tx"


def test_append_copy_refused_aborts(endpoint, s3, base, region):
    """The server refusing the copy of the existing object (412: the object was replaced
    since the HEAD, x-amz-copy-source-if-match; answered here by the fault proxy between
    client and RGW) fails the open, aborts the upload, and leaves the object as it was."""
    bucket, prefix = base.split("/", 1)
    old = os.urandom(5 << 20)
    with faultproxy(endpoint) as proxy:
        fs = S3FlashFileSystem(endpoint_url=proxy.endpoint,
                               config_kwargs={"s3": {"addressing_style": "path"}})
        fs.pipe_file(f"{base}/pinned", old)
        proxy.set_faults([{"match": {"method": "PUT", "query": "partNumber=1"},
                           "action": "respond", "status": 412,
                           "s3_error": {"code": "PreconditionFailed",
                                        "message": "At least one of the pre-conditions "
                                                   "you specified did not hold"}}])
        with pytest.raises(s3flash.S3Exception) as ei:
            fs.open(f"{base}/pinned", "ab")
        assert "PRECONDITION" in str(ei.value.status)
        log = [(e["method"], e["query"]) for e in proxy.stats()["log"]]
        assert any(m == "PUT" and "partNumber=1" in q for m, q in log)   # the copy
        assert any(m == "DELETE" and "uploadId=" in q for m, q in log)   # the abort
    assert s3.get_object(Bucket=bucket, Key=f"{prefix}/pinned")["Body"].read() == old
    assert s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", []) == []
