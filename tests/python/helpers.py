"""Helpers of the Python package tests."""

import contextlib
from concurrent.futures import ThreadPoolExecutor

import torch


def put_objects(s3, bucket, objects, threads=8):
    """PUT {key: body} with boto3, `threads` at a time (the harness's own view of S3)."""
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]),
                    objects.items()))


@contextlib.contextmanager
def fsspec_registered(**defaults):
    """s3flash's filesystem is fsspec's s3:// (with these default options) inside the block;
    fsspec's registry is as it was again after."""
    import s3flash.fsspec
    from fsspec.registry import _registry
    saved = {p: _registry.get(p) for p in s3flash.fsspec.PROTOCOLS}
    try:
        yield s3flash.fsspec.register(**defaults)
    finally:
        for p, c in saved.items():
            if c is None:
                _registry.pop(p, None)
            else:
                _registry[p] = c


def storage_bytes(t):
    """The bytes of a tensor's whole storage, as a uint8 tensor."""
    return torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())


def assert_same_tensor(a, b):
    """Bit-exact: same dtype, shape, strides, offset, and the same bytes in the storage."""
    assert a.dtype == b.dtype
    assert a.shape == b.shape
    assert a.stride() == b.stride()
    assert a.storage_offset() == b.storage_offset()
    assert torch.equal(storage_bytes(a), storage_bytes(b))


def assert_same_state(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert_same_tensor(a[k], b[k])
        else:
            assert a[k] == b[k]


def state_dict_of_size(nbytes, seed=0, tensor_bytes=16 << 20):
    """A state dict of float32 tensors (random bits) totalling about `nbytes`."""
    g = torch.Generator().manual_seed(seed)
    sd = {}
    left = nbytes
    i = 0
    while left > 0:
        n = min(left, tensor_bytes)
        elems = max(1, n // 4)
        sd[f"layer{i}.weight"] = torch.randint(-2**31, 2**31 - 1, (elems,), dtype=torch.int32,
                                               generator=g).view(torch.float32)
        left -= elems * 4
        i += 1
    return sd
