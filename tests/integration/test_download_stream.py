"""s3f_download_stream (what `s3flash cp s3://b/k -` uses): in-order delivery through the
reader's parallel ranged GETs, checked against moto, which keeps the FULL_OBJECT CRC32C the
engine sent, through the fault proxy: the bytes exact and the checksum verified, a byte
flipped on the wire caught (S3F_ERR_CHECKSUM), and an object of one part in one GET.
(Filling a slow link: test_link_fill.py, test_link_fill_sink.py.)"""
import subprocess

from test_engine_faults import (SIZE, Run, driver_argv, gets, moto_drv_env,  # noqa: F401
                                moto_object, moto_proxy, sha, sha_file)
from test_xfer import moto_env  # noqa: F401  (fixture)


def stream(proxy, env, key, dst, **extra):
    argv = driver_argv("download_stream", "engine-faults", key, dst)
    p = subprocess.run(argv, env=moto_drv_env(env, proxy, FAULT_VERIFY=1, S3FLASH_LOG="debug",
                                              **extra),
                       capture_output=True, text=True, timeout=120)
    r = Run(p, 0)
    print(r)
    return r


def test_stream_exact_and_verified(moto_proxy, moto_object, tmp_path):
    proxy, env = moto_proxy
    key, data = moto_object
    proxy.reset()
    r = stream(proxy, env, key, tmp_path / "obj")
    assert r.rc == 0, r
    assert sha_file(tmp_path / "obj") == sha(data)
    assert "verified CRC32C" in r.err, r
    log = [e for e in proxy.stats()["log"] if e["path"].endswith("/" + key)]
    assert [e["method"] for e in log].count("HEAD") == 1
    ranged = [e for e in log if e["method"] == "GET"]
    assert len(ranged) > 1 and all(e["range"] for e in ranged), log  # several ranged GETs


def test_stream_corrupted_byte_is_caught(moto_proxy, moto_object, tmp_path):
    proxy, env = moto_proxy
    key, data = moto_object
    proxy.reset()
    proxy.set_faults([{"match": dict(gets(key), nth=2), "action": "corrupt_response_byte",
                       "at": "random", "seed": 5, "xor": 0x08}])
    r = stream(proxy, env, key, tmp_path / "obj")
    assert proxy.stats()["faults_total"] == 1
    assert r.rc == 1, r
    assert r.status == "S3F_ERR_CHECKSUM", r
    assert "CRC32C" in r.kv["error"], r


def test_stream_one_part_is_one_get(moto_proxy, moto_object, tmp_path):
    """An object no larger than a part: HEAD, then one GET without a Range; a byte flipped
    in it is caught by the checksum all the same."""
    proxy, env = moto_proxy
    key, data = moto_object
    proxy.reset()
    r = stream(proxy, env, key, tmp_path / "obj", FAULT_PART_BYTES=SIZE)
    assert r.rc == 0, r
    assert sha_file(tmp_path / "obj") == sha(data)
    log = [(e["method"], e["range"]) for e in proxy.stats()["log"]
           if e["path"].endswith("/" + key)]
    assert log == [("HEAD", None), ("GET", None)], log
    proxy.reset()
    proxy.set_faults([{"match": gets(key), "action": "corrupt_response_byte",
                       "at": "random", "seed": 6, "xor": 0x10}])
    r = stream(proxy, env, key, tmp_path / "obj2", FAULT_PART_BYTES=SIZE)
    assert proxy.stats()["faults_total"] == 1
    assert r.rc == 1, r
    assert r.status == "S3F_ERR_CHECKSUM", r
