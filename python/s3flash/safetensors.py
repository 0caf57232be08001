"""s3flash.safetensors: safetensors files from and to S3, following safetensors' own API.

    from s3flash.safetensors import load_file, save_file, safe_open, load_model
    tensors = load_file("s3://bucket/model.safetensors")
    save_file(tensors, "s3://bucket/copy.safetensors", metadata={"format": "pt"})
    with safe_open("s3://bucket/model.safetensors", framework="pt") as f:
        rows = f.get_slice("embed.weight")[1000:2000]   # fetches only those rows

What is fetched when (docs/PYTHON.md, "safetensors"):
- the header: one ranged GET of the file's first HEADER_CHUNK bytes (1 MiB), which holds the
  whole header of most files; a second ranged GET of the rest only when the header is longer.
  The header is parsed and validated in C (s3f_safetensors_parse) before any tensor byte is
  asked for: a hostile file fails with SafetensorError naming what was wrong.
- load_file: one ranged download of the data section, in parallel parts, straight into the
  tensors' storages (each allocated with torch.empty, given as the download's regions in file
  order): one copy from the socket. Every part is pinned to the header's ETag (If-Match): an
  object replaced meanwhile fails with S3PreconditionFailed, never mixes two versions.
- safe_open: the header at open; get_tensor fetches that tensor's bytes only; get_slice's
  __getitem__ fetches the rows of the first dimension the index needs (the others are sliced
  in memory).
- save_file: the header is computed first (the offsets follow from dtypes and shapes), then
  the header and every tensor are streamed through one writer (a multipart upload; no file,
  no buffer of the whole file); the object appears complete at the end or not at all.

device="cuda": the data section is fetched into reused pinned host buffers and copied to the
device (non-blocking) from there. This path has not been run in this project's tests (no
GPU here).
"""

from __future__ import annotations

import json
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterable, List, Optional, Tuple

from . import _s3flash
from ._client import S3Client, _shared_client
from ._config import S3ClientConfig

HEADER_CHUNK = 1 << 20       # the first ranged GET: the header of most files
CUDA_STAGING = 64 << 20      # bytes of each of the two pinned staging buffers (cuda)
SHARD_PARALLEL = 4           # shards of a sharded model fetched at once
INDEX_NAME = "model.safetensors.index.json"

# safetensors' dtypes, in the order of its Dtype enum (save_file sorts by it, descending)
DTYPE_ORDER = ("BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
               "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16", "I32",
               "U32", "F32", "C64", "F64", "I64", "U64")
_TORCH_NAMES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "F8_E5M2": "float8_e5m2",
    "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz", "I16": "int16", "U16": "uint16", "F16": "float16",
    "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32",
    "C64": "complex64", "F64": "float64", "I64": "int64", "U64": "uint64",
}


class SafetensorError(ValueError):
    """A file that is not a valid safetensors file (its header says what was wrong), or a
    dtype torch does not have."""


def _torch_dtype(name: str) -> Any:
    import torch
    attr = _TORCH_NAMES.get(name)
    dt = getattr(torch, attr, None) if attr else None
    if dt is None:
        raise SafetensorError(f"dtype {name} has no torch dtype in torch {torch.__version__}")
    return dt


def _dtype_name(dtype: Any) -> str:
    import torch
    for name, attr in _TORCH_NAMES.items():
        if getattr(torch, attr, None) == dtype:
            return name
    raise SafetensorError(f"dtype {dtype} cannot be saved in a safetensors file")


def _split(uri: str) -> Tuple[str, str]:
    bucket, key = _s3flash.parse_uri(uri)
    if not key:
        raise _s3flash.S3ValueError(f"invalid S3 URI {uri!r}: no object key")
    return bucket, key


def _client(client: Optional[S3Client], region: Optional[str], endpoint: Optional[str],
            s3client_config: Optional[S3ClientConfig]) -> S3Client:
    return client if client is not None else _shared_client(region, endpoint, s3client_config)


class _Header:
    """A parsed, validated header and the object it was read from (its ETag pins the rest)."""

    def __init__(self, native: Any, bucket: str, key: str):
        self.native, self.bucket, self.key = native, bucket, key
        self.uri = f"s3://{bucket}/{key}"
        try:
            first, info = native.get_range(bucket, key, 0, HEADER_CHUNK)
        except _s3flash.S3Exception as e:
            if getattr(e, "code", "") == "InvalidRange":  # S3's 416 to a range of 0 bytes
                raise SafetensorError(f"{self.uri}: the file is empty, not a safetensors "
                                      f"file") from e
            raise
        self.size, self.etag = info["size"], info["etag"]
        try:
            n = _s3flash.safetensors_header_length(first[:8], self.size)
            if 8 + n > len(first):  # a long header: the rest, pinned to the same object
                rest, _ = native.get_range(bucket, key, len(first), 8 + n - len(first),
                                           if_match=self.etag)
                first += rest
            h = _s3flash.parse_safetensors_header(first, self.size)
            self.first = first  # [0, len(first)) of the object: the header and data after it
        except ValueError as e:
            if isinstance(e, _s3flash.S3Exception):
                raise
            raise SafetensorError(f"{self.uri}: {e}") from None
        self.data_offset = h["data_offset"]
        self.data_bytes = h["data_bytes"]
        self.metadata: Optional[Dict[str, str]] = h["metadata"]
        self.entries = h["tensors"]  # (name, dtype, shape, begin, end), in file order
        self.by_name = {e[0]: e for e in self.entries}

    def fetch(self, begin: int, regions: List[Any], reuse: bool = False) -> None:
        """Bytes from `begin` of the data section into the regions (writable buffers). With
        reuse (load_file), those the header's GET already brought (it reads HEADER_CHUNK
        bytes) are copied from it and only the rest is downloaded (nothing more for a file
        within the first GET)."""
        have = memoryview(self.first)[self.data_offset + begin:] \
            if reuse and self.data_offset + begin < len(self.first) else b""
        rest = []
        for r in regions:
            if not len(r):
                continue
            k = min(len(have), len(r))
            if k:
                r[:k] = have[:k]
                have = have[k:]
                begin += k
            if k < len(r):
                rest.append(r[k:])
        regions = rest
        if regions:
            self.native.download_range_into(self.bucket, self.key, self.data_offset + begin,
                                            regions, if_match=self.etag)

    def entry(self, name: str) -> Tuple[str, str, Tuple[int, ...], int, int]:
        try:
            return self.by_name[name]
        except KeyError:
            raise SafetensorError(f"{self.uri}: no tensor named {name!r}") from None


def _bytes_of(t: Any) -> Any:
    """A writable view of a contiguous CPU tensor's bytes (any dtype)."""
    import torch
    return t.reshape(-1).view(torch.uint8).numpy()


def _empty(entry: Tuple[str, str, Tuple[int, ...], int, int]) -> Any:
    import torch
    _, dtype, shape, _, _ = entry
    return torch.empty(shape, dtype=_torch_dtype(dtype))


def _to_device(h: _Header, device: Any) -> Dict[str, Any]:
    """The data section through two reused pinned buffers into tensors on `device`: window
    after window, each copied to its tensors (non-blocking) while the next one downloads."""
    import torch
    out = {e[0]: torch.empty(e[2], dtype=_torch_dtype(e[1]), device=device)
           for e in h.entries}
    flat = {name: t.reshape(-1).view(torch.uint8) for name, t in out.items() if t.numel()}
    size = min(CUDA_STAGING, max(h.data_bytes, 1))
    stages = [torch.empty(size, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
    done: List[Any] = [None, None]  # the event after the copies out of each buffer
    pos, k = 0, 0
    while pos < h.data_bytes:
        n = min(size, h.data_bytes - pos)
        if done[k] is not None:
            done[k].synchronize()  # the copies out of this buffer have finished
        stage = stages[k]
        h.fetch(pos, [stage[:n].numpy()])
        for name, _, _, begin, end in h.entries:
            lo, hi = max(begin, pos), min(end, pos + n)
            if lo < hi:
                flat[name][lo - begin:hi - begin].copy_(stage[lo - pos:hi - pos],
                                                        non_blocking=True)
        done[k] = torch.cuda.Event()
        done[k].record()
        pos += n
        k ^= 1
    torch.cuda.synchronize()
    return out


def _load(h: _Header, device: Any) -> Dict[str, Any]:
    import torch
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        return _to_device(h, dev)
    out = {e[0]: _empty(e) for e in h.entries}
    h.fetch(0, [_bytes_of(out[e[0]]) for e in h.entries if e[4] > e[3]], reuse=True)
    if dev.type != "cpu":
        out = {k: v.to(dev) for k, v in out.items()}
    return out


def load_file(uri: str, device: Any = "cpu", *, client: Optional[S3Client] = None,
              region: Optional[str] = None, endpoint: Optional[str] = None,
              s3client_config: Optional[S3ClientConfig] = None) -> Dict[str, Any]:
    """The tensors of the safetensors file at `uri` (s3://bucket/key), as
    safetensors.torch.load_file gives them: a header GET, then one ranged download of the
    data section straight into the tensors (see the module's doc). `client`: an S3Client
    (else one shared per region, endpoint and config)."""
    bucket, key = _split(uri)
    c = _client(client, region, endpoint, s3client_config)
    return _load(_Header(c.native, bucket, key), device)


class _Slice:
    """safetensors' PySafeSlice: a tensor's shape and dtype, and [index] fetching only the
    rows of the first dimension the index needs."""

    def __init__(self, h: _Header, entry: Tuple[str, str, Tuple[int, ...], int, int],
                 device: Any):
        self._h, self._e, self._device = h, entry, device

    def get_shape(self) -> List[int]:
        return list(self._e[2])

    def get_dtype(self) -> str:
        return self._e[1]

    def _rows(self, lo: int, hi: int) -> Any:
        """Rows [lo, hi) of the first dimension, fetched."""
        import torch
        name, dtype, shape, begin, end = self._e
        row = (end - begin) // shape[0] if shape[0] else 0
        t = torch.empty((hi - lo,) + tuple(shape[1:]), dtype=_torch_dtype(dtype))
        if t.numel():
            self._h.fetch(begin + lo * row, [_bytes_of(t)])
        return t

    def __getitem__(self, index: Any) -> Any:
        shape = self._e[2]
        idx = index if isinstance(index, tuple) else (index,)
        first = idx[0] if idx else None
        if shape and isinstance(first, int) and not isinstance(first, bool):
            i = first + shape[0] if first < 0 else first
            if not 0 <= i < shape[0]:
                raise IndexError(f"index {first} is out of bounds for dimension 0 with size "
                                 f"{shape[0]}")
            t = self._rows(i, i + 1)[0]
            if idx[1:]:
                t = t[idx[1:]]
        elif shape and isinstance(first, slice) and (first.step or 1) > 0:
            rows = range(*first.indices(shape[0]))
            lo, hi = (rows[0], rows[-1] + 1) if len(rows) else (0, 0)
            t = self._rows(lo, hi)[::first.step or 1]
            if idx[1:]:
                t = t[(slice(None),) + idx[1:]]
        else:  # anything else (Ellipsis, None, a scalar's [()]): the whole tensor, indexed
            t = _fetch_whole(self._h, self._e)[index]
        return t.to(self._device) if str(self._device) != "cpu" else t


def _fetch_whole(h: _Header, entry: Tuple[str, str, Tuple[int, ...], int, int]) -> Any:
    t = _empty(entry)
    if entry[4] > entry[3]:
        h.fetch(entry[3], [_bytes_of(t)])
    return t


class safe_open:  # noqa: N801  (safetensors' name)
    """safetensors.safe_open over S3: the header is read at open; keys(), metadata(),
    get_tensor(name) (that tensor's bytes only), get_slice(name)[index] (the rows it needs).
    Use as a context manager, as safetensors' own."""

    def __init__(self, uri: str, framework: str = "pt", device: Any = "cpu", *,
                 client: Optional[S3Client] = None, region: Optional[str] = None,
                 endpoint: Optional[str] = None,
                 s3client_config: Optional[S3ClientConfig] = None):
        if framework not in ("pt", "torch", "pytorch"):
            raise SafetensorError(f"framework {framework!r}: only 'pt' (torch) is supported")
        bucket, key = _split(uri)
        c = _client(client, region, endpoint, s3client_config)
        self._h = _Header(c.native, bucket, key)
        self._device = device

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def keys(self) -> List[str]:
        return sorted(self._h.by_name)

    def offset_keys(self) -> List[str]:
        return [e[0] for e in self._h.entries]

    def metadata(self) -> Optional[Dict[str, str]]:
        return None if self._h.metadata is None else dict(self._h.metadata)

    def get_tensor(self, name: str) -> Any:
        t = _fetch_whole(self._h, self._h.entry(name))
        return t.to(self._device) if str(self._device) != "cpu" else t

    def get_slice(self, name: str) -> _Slice:
        return _Slice(self._h, self._h.entry(name), self._device)


# ---- save ----------------------------------------------------------------------------

def _find_shared(tensors: Dict[str, Any]) -> List[List[str]]:
    """Names whose tensors overlap in one storage (what safetensors refuses to save)."""
    import torch
    groups: Dict[Tuple[Any, int, int], List[str]] = {}
    for name, t in tensors.items():
        if t.device == torch.device("meta"):
            continue
        ptr, nbytes = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
        if ptr and nbytes:
            groups.setdefault((t.device, ptr, nbytes), []).append(name)
    failing = []
    for names in groups.values():
        if len(names) < 2:
            continue
        areas = sorted((tensors[n].data_ptr(), tensors[n].data_ptr() +
                        tensors[n].numel() * tensors[n].element_size(), n) for n in names)
        group, stop = [areas[0][2]], areas[0][1]
        for start, end, n in areas[1:]:
            if start < stop:
                group.append(n)
            else:
                if len(group) > 1:
                    failing.append(group)
                group = [n]
            stop = max(stop, end)
        if len(group) > 1:
            failing.append(group)
    return failing


def _check_tensors(tensors: Any) -> None:
    import torch
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    sparse = []
    for k, v in tensors.items():
        if not isinstance(k, str):
            raise ValueError(f"Key {k!r} is invalid, expected str but received {type(k)}")
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"Key `{k}` is invalid, expected torch.Tensor but received "
                             f"{type(v)}")
        if v.layout != torch.strided:
            sparse.append(k)
    if sparse:
        raise ValueError(f"You are trying to save a sparse tensors: `{sparse}` which this "
                         f"library does not support.")
    failing = [set(g) for g in _find_shared(tensors)]
    if failing:
        raise RuntimeError(
            f"Some tensors share memory, this will lead to duplicate memory on disk and "
            f"potential differences when loading them again: {failing}.\nA potential way to "
            f"correctly save your model is to use `save_model`.\nMore information at "
            f"https://huggingface.co/docs/safetensors/torch_shared_tensors")


def build_header(tensors: Dict[str, Any],
                 metadata: Optional[Dict[str, str]] = None) -> Tuple[bytes, List[str]]:
    """The bytes before the data (the 8-byte length and the JSON header, padded with spaces
    to a multiple of 8) and the names in the order of their data, as safetensors lays a
    file out: by dtype (the widest first, in the order of safetensors' Dtype), then name."""
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise ValueError("metadata must be a dict of str to str")
    names = sorted(tensors, key=lambda n: (-DTYPE_ORDER.index(_dtype_name(tensors[n].dtype)),
                                           n))
    head: Dict[str, Any] = {}
    if metadata is not None:
        head["__metadata__"] = metadata
    pos = 0
    for n in names:
        t = tensors[n]
        size = t.numel() * t.element_size()
        head[n] = {"dtype": _dtype_name(t.dtype), "shape": list(t.shape),
                   "data_offsets": [pos, pos + size]}
        pos += size
    text = json.dumps(head, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, names


def save_file(tensors: Dict[str, Any], uri: str, metadata: Optional[Dict[str, str]] = None,
              *, client: Optional[S3Client] = None, region: Optional[str] = None,
              endpoint: Optional[str] = None,
              s3client_config: Optional[S3ClientConfig] = None) -> None:
    """Write `tensors` as a safetensors file at `uri`, laid out as safetensors.torch.save_file
    lays it out (safetensors' loader reads it bit-exactly). Streamed: the header first, then
    each tensor's bytes, through one writer (multipart upload; no file, no whole-file
    buffer). Tensors that share storage are refused as safetensors refuses them
    (RuntimeError); a non-contiguous tensor or one on another device is copied to a
    contiguous CPU tensor when its turn comes (safetensors refuses non-contiguous ones).
    The object appears complete at the end, or not at all."""
    _check_tensors(tensors)
    head, names = build_header(tensors, metadata)
    bucket, key = _split(uri)
    c = _client(client, region, endpoint, s3client_config)
    with c.put_object(bucket, key) as w:
        w.write(head)
        for n in names:
            t = tensors[n].detach()
            if t.numel():
                w.write(_bytes_of(t.to("cpu").contiguous()))


# ---- sharded models and load_model ---------------------------------------------------

def _read_json(c: S3Client, bucket: str, key: str) -> Any:
    got = c.native.download_whole(bucket, key)
    assert got is not None  # None only with a max_size
    try:
        return json.loads(got[0])
    except ValueError as e:
        raise SafetensorError(f"s3://{bucket}/{key}: not JSON: {e}") from None


def load_sharded(uri: str, device: Any = "cpu", *, client: Optional[S3Client] = None,
                 region: Optional[str] = None, endpoint: Optional[str] = None,
                 s3client_config: Optional[S3ClientConfig] = None,
                 max_parallel: int = SHARD_PARALLEL) -> Dict[str, Any]:
    """Every tensor of a model: `uri` is a safetensors file, a model.safetensors.index.json
    (its weight_map's shards), or a prefix ending in "/" (its index, else its one
    model.safetensors). Shards are fetched `max_parallel` at a time. A missing shard raises
    S3NotFoundError naming the shard and the index, with S3's code and request id."""
    bucket, key = _s3flash.parse_uri(uri)
    c = _client(client, region, endpoint, s3client_config)
    if key.endswith(".safetensors"):
        return load_file(uri, device, client=c)
    if not key or key.endswith("/"):
        try:
            index = _read_json(c, bucket, key + INDEX_NAME)
            key = key + INDEX_NAME
        except _s3flash.S3NotFoundError:
            return load_file(f"s3://{bucket}/{key}model.safetensors", device, client=c)
    else:
        index = _read_json(c, bucket, key)
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict) or not all(isinstance(v, str) for v in wmap.values()):
        raise SafetensorError(f"s3://{bucket}/{key}: no weight_map of tensor names to shards")
    base = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
    shards = sorted(set(wmap.values()))

    def one(shard: str) -> Dict[str, Any]:
        try:
            return load_file(f"s3://{bucket}/{base}{shard}", device, client=c)
        except _s3flash.S3Exception as e:
            e.args = (f"shard {shard} of s3://{bucket}/{key}: {e}",)
            raise

    out: Dict[str, Any] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(shards)))) as pool:
        for shard, got in zip(shards, pool.map(one, shards)):
            out.update(got)
    missing = [n for n, s in wmap.items() if n not in out]
    if missing:
        raise SafetensorError(f"s3://{bucket}/{key}: {len(missing)} tensor(s) of the "
                              f"weight_map are in no shard, e.g. {missing[0]!r} "
                              f"(in {wmap[missing[0]]})")
    return out


def _duplicate_names(model_state: Dict[str, Any], preferred: Iterable[str]) -> Dict[str, List[str]]:
    try:  # safetensors' own rule for tied weights, when it is installed
        from safetensors.torch import _remove_duplicate_names
    except ImportError:
        return {}
    return _remove_duplicate_names(model_state, preferred_names=list(preferred))


def load_model(model: Any, uri: str, strict: bool = True, device: Any = "cpu", *,
               client: Optional[S3Client] = None, region: Optional[str] = None,
               endpoint: Optional[str] = None,
               s3client_config: Optional[S3ClientConfig] = None) -> Tuple[List[str], List[str]]:
    """safetensors.torch.load_model over S3 (a file, an index json or a prefix, as
    load_sharded): loads the tensors into `model` and returns (missing, unexpected);
    strict raises RuntimeError naming them, as safetensors does."""
    state = load_sharded(uri, device, client=client, region=region, endpoint=endpoint,
                         s3client_config=s3client_config)
    to_removes = _duplicate_names(model.state_dict(), state.keys())
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = set(missing)
    for group in to_removes.values():
        for name in group:
            if name not in missing:
                unexpected.append(name)
            else:
                missing.remove(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            error += "\n    Missing key(s) in state_dict: " + ", ".join(
                f'"{k}"' for k in sorted(missing))
        if unexpected:
            error += "\n    Unexpected key(s) in state_dict: " + ", ".join(
                f'"{k}"' for k in sorted(unexpected))
        raise RuntimeError(error)
    return list(missing), list(unexpected)


__all__ = ["HEADER_CHUNK", "SafetensorError", "build_header", "load_file", "load_model",
           "load_sharded", "safe_open", "save_file"]
