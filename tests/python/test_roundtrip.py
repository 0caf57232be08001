"""torch.save -> S3 -> torch.load, bit for bit, through every entry point."""

import io
import os

import pytest
import torch

import s3flash
from helpers import assert_same_state, assert_same_tensor, state_dict_of_size

MiB = 1 << 20


@pytest.mark.parametrize("nbytes", [4, 1 * MiB, 20 * MiB, 300 * MiB],
                         ids=["4B", "1MiB", "20MiB", "300MiB"])
def test_state_dict_round_trip(ckpt, uri, nbytes):
    sd = state_dict_of_size(nbytes, seed=nbytes)
    with ckpt.writer(uri) as w:
        torch.save(sd, w)
    assert w.info["size"] > nbytes
    with ckpt.reader(uri) as r:
        out = torch.load(r)
    assert_same_state(sd, out)


@pytest.mark.skipif(os.environ.get("S3FLASH_TEST_LARGE") != "1",
                    reason="set S3FLASH_TEST_LARGE=1 for the >1 GiB round trip")
def test_large_round_trip(ckpt, uri):
    sd = state_dict_of_size(1100 * MiB, seed=7, tensor_bytes=256 * MiB)
    s3flash.save(sd, uri, endpoint=ckpt.endpoint, region=ckpt.region)
    out = s3flash.load(uri, endpoint=ckpt.endpoint, region=ckpt.region)
    assert_same_state(sd, out)


def test_the_bytes_are_torch_save_bytes(ckpt, uri, s3, bucket, key):
    """The object holds exactly what torch.save writes to a file."""
    sd = state_dict_of_size(3 * MiB, seed=3)
    buf = io.BytesIO()
    torch.save(sd, buf)
    with ckpt.writer(uri) as w:
        torch.save(sd, w)
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == buf.getvalue()


DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128,
          torch.float8_e4m3fn, torch.float8_e5m2]


def test_dtypes(ckpt, uri):
    g = torch.Generator().manual_seed(1)
    sd = {}
    for dt in DTYPES:
        raw = torch.randint(0, 256, (3, 257 * torch.empty(0, dtype=dt).element_size()),
                            dtype=torch.uint8, generator=g)
        t = raw.view(dt)
        if dt == torch.bool:
            t = raw % 2 == 1
        sd[str(dt)] = t
    sd["scalar"] = torch.tensor(3.5)
    sd["empty"] = torch.empty(0, 4)
    sd["meta_int"] = 42
    with ckpt.writer(uri) as w:
        torch.save(sd, w)
    with ckpt.reader(uri) as r:
        out = torch.load(r)
    assert_same_state(sd, out)


def test_non_contiguous_tensors(ckpt, uri):
    base = torch.arange(64 * 64, dtype=torch.float32).reshape(64, 64)
    sd = {"t": base.t(), "strided": base[::3, 1::2], "expanded": torch.ones(4, 1).expand(4, 8),
          "narrow": base.narrow(1, 5, 7)}
    for t in sd.values():
        assert not t.is_contiguous()
    with ckpt.writer(uri) as w:
        torch.save(sd, w)
    with ckpt.reader(uri) as r:
        out = torch.load(r)
    for k in sd:
        assert_same_tensor(sd[k], out[k])
        assert torch.equal(sd[k], out[k])


def test_shared_storages_stay_shared(ckpt, uri):
    base = torch.randn(1000)
    sd = {"base": base, "head": base[:10], "tail": base[500:], "view": base.view(10, 100)}
    with ckpt.writer(uri) as w:
        torch.save(sd, w)
    with ckpt.reader(uri) as r:
        out = torch.load(r)
    ptr = out["base"].untyped_storage().data_ptr()
    for k in ("head", "tail", "view"):
        assert out[k].untyped_storage().data_ptr() == ptr
        assert torch.equal(out[k], sd[k])
    out["base"][600] = 12345.0
    assert out["tail"][100] == 12345.0


@pytest.mark.parametrize("constructor", [
    s3flash.S3ReaderConstructor.sequential(),
    s3flash.S3ReaderConstructor.range_based(),
    s3flash.S3ReaderConstructor.range_based(buffer_size=0),
    s3flash.S3ReaderConstructor.range_based(buffer_size=1 * MiB),
    s3flash.S3ReaderConstructor.dcp_optimized(),
], ids=["sequential", "range_based", "range_based_0", "range_based_1MiB", "dcp_optimized"])
def test_reader_constructors(region, endpoint, uri, constructor):
    sd = state_dict_of_size(40 * MiB, seed=5, tensor_bytes=3 * MiB)
    sd["small"] = torch.arange(5)
    ck = s3flash.S3Checkpoint(region=region, endpoint=endpoint, reader_constructor=constructor)
    with ck.writer(uri) as w:
        torch.save(sd, w)
    r = ck.reader(uri)
    kind = s3flash.S3ReaderConstructor.get_reader_type_string(constructor)
    # dcp_optimized with no item ranges handed over reads sequentially (as s3torchconnector)
    assert r.reader_type == ("sequential" if kind == "dcp_optimized" else kind)
    with r:
        out = torch.load(r)
    assert_same_state(sd, out)
    out2 = s3flash.load(uri, region=region, endpoint=endpoint, reader_constructor=constructor)
    assert_same_state(sd, out2)


def test_save_load_one_liners(region, endpoint, uri):
    sd = {"w": torch.randn(100, 100), "step": 7, "nested": {"b": torch.arange(3)}}
    s3flash.save(sd, uri, region=region, endpoint=endpoint)
    out = s3flash.load(uri, region=region, endpoint=endpoint)
    assert out["step"] == 7
    assert torch.equal(out["w"], sd["w"])
    assert torch.equal(out["nested"]["b"], sd["nested"]["b"])
    # torch.load arguments go through
    out = s3flash.load(uri, region=region, endpoint=endpoint, map_location="cpu",
                       weights_only=True)
    assert torch.equal(out["w"], sd["w"])


def test_config_round_trip(region, endpoint, uri):
    """A non-default S3ClientConfig (part size, in-flight requests, memory, checksum)."""
    cfg = s3flash.S3ClientConfig(part_size=5 * MiB, throughput_target_gbps=2.0, max_attempts=3,
                                 memory_limit=32 * MiB, checksum="crc64nvme",
                                 force_path_style=True)
    sd = state_dict_of_size(23 * MiB, seed=11)
    s3flash.save(sd, uri, region=region, endpoint=endpoint, s3client_config=cfg)
    out = s3flash.load(uri, region=region, endpoint=endpoint, s3client_config=cfg)
    assert_same_state(sd, out)


def test_s3client_config_defaults_match_s3torchconnector():
    c = s3flash.S3ClientConfig()
    assert c.throughput_target_gbps == 10.0
    assert c.part_size == 8 * MiB
    assert c.unsigned is False and c.force_path_style is False
    assert c.max_attempts == 10 and c.profile is None
    with pytest.raises(ValueError):
        s3flash.S3ClientConfig(part_size=1 * MiB)
    secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
    assert secret not in repr(s3flash.S3ClientConfig(access_key_id="AKID",
                                                     secret_access_key=secret))
