"""A torch.save zip built in place around tensors already staged in a host arena.

The arena (``HostStager(zip_layout=True)``) holds each storage at a 64-byte aligned offset
with at least ``HEADER_GAP`` free bytes before it, and free room after the last one. Here,
off the training thread: torch's own pickler (``torch.serialization._save``) runs against a
recording zip writer, which learns the records (data.pkl and the small ones, and which storage
is ``data/N``); each storage's CRC-32 is computed where it lies; its local header is written
into the gap just before it (the gap filled exactly with a padding extra field, as torch pads
for alignment); the small records, the central directory and the zip64 end records go after
the last storage. The result is one contiguous buffer, ``arena[0:size]``, that is a valid
torch.save file: the engine uploads it in place (no copy), and ``torch.load`` reads it.

Nothing here is needed for correctness: when a state does not fit the scheme (a storage
outside the arena, more tail than the room left), ``build`` raises ``Unsupported`` and the
caller falls back to ``torch.save`` into a stream.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import zlib
from typing import Any, Dict, List, Tuple

HEADER_GAP = 128          # bytes reserved before each storage for its local header
ALIGN = 64                # torch's storage alignment in the zip
ARCHIVE = "archive"
_U32 = 0xFFFFFFFF
_DOS_DATE = (0 << 9) | (1 << 5) | 1   # 1980-01-01, as torch writes
_VERSION = 45                          # zip64
_FLAGS = 0x0800                        # names are UTF-8


class Unsupported(Exception):
    """This state cannot be laid out in place; use the streaming path."""


# -- CRC-32 combination (zlib's crc32_combine, x^(2^n) mod p form) -------------------------
_P = 0xEDB88320


def _multmodp(a: int, b: int) -> int:
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _P if b & 1 else b >> 1
    return p


_X2N = [1 << 30]
for _ in range(31):
    _X2N.append(_multmodp(_X2N[-1], _X2N[-1]))


def _x2nmodp(n: int, k: int) -> int:
    p = 1 << 31
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of A+B from crc32(A), crc32(B) and len(B)."""
    return _multmodp(_x2nmodp(len2, 3), crc1) ^ crc2


# -- zip structures ------------------------------------------------------------------------
def _local_header(name: bytes, crc: int, size: int, total_len: int = 0) -> bytes:
    """A stored entry's local header; padded with an extra field to `total_len` bytes when
    given (>= the natural length)."""
    extra = b""
    if size >= _U32:
        extra = struct.pack("<HHQQ", 1, 16, size, size)
        s32 = _U32
    else:
        s32 = size
    base = 30 + len(name) + len(extra)
    if total_len:
        pad = total_len - base - 4
        if pad < 0 or pad > 0xFFFF:
            raise Unsupported(f"no room for the header of {name!r}")
        extra += struct.pack("<HH", 0x4246, pad) + b"\0" * pad  # "FB": torch's padding id
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, _VERSION, _FLAGS, 0, 0, _DOS_DATE, crc,
                       s32, s32, len(name), len(extra)) + name + extra


def _central_header(name: bytes, crc: int, size: int, offset: int) -> bytes:
    fields = []
    s32 = size
    o32 = offset
    if size >= _U32:
        fields += [size, size]
        s32 = _U32
    if offset >= _U32:
        fields.append(offset)
        o32 = _U32
    extra = struct.pack("<HH", 1, 8 * len(fields)) + struct.pack(f"<{len(fields)}Q", *fields) \
        if fields else b""
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, _VERSION, _VERSION, _FLAGS, 0, 0,
                       _DOS_DATE, crc, s32, s32, len(name), len(extra), 0, 0, 0, 0,
                       o32) + name + extra


class _RecordingZip:
    """What torch.serialization._save writes into: records noted, nothing copied."""

    def __init__(self) -> None:
        self.small: List[Tuple[str, bytes]] = []
        self.storages: List[Tuple[str, Any, int]] = []

    def write_record(self, name: str, data: Any, nbytes: int) -> None:
        if isinstance(data, str):
            data = data.encode()
        if isinstance(data, (bytes, bytearray)):
            self.small.append((name, bytes(data[:nbytes])))
        else:
            self.storages.append((name, data, nbytes))

    def write_record_metadata(self, name: str, nbytes: int) -> None:
        raise Unsupported("metadata-only records")


def _torch_save_records() -> Any:
    """torch.serialization._save (private to torch: its shape is checked, and another shape
    is Unsupported, so that a torch that changed it falls back to torch.save)."""
    import inspect
    import torch
    fn = getattr(torch.serialization, "_save", None)
    try:
        params = list(inspect.signature(fn).parameters) if fn is not None else []
    except (TypeError, ValueError):
        params = []
    if params != ["obj", "zip_file", "pickle_module", "pickle_protocol",
                  "_disable_byteorder_record"]:
        raise Unsupported("torch.serialization._save has another signature")
    return fn


def _tail(small: List[Tuple[str, bytes]], central: List[bytes], cursor: int
          ) -> Tuple[bytearray, int]:
    """What follows the last storage at offset `cursor`: the small records (with torch's
    `version` and `.data/serialization_id`), the central directory (the small records first,
    as torch has it, then `central`, the storages'), and the zip64 end records. Returns
    (bytes, records)."""
    tail = bytearray()
    sid = "".join(str(b % 10) for b in os.urandom(40)).encode()
    small = small + [("version", b"3\n"), (".data/serialization_id", sid)]
    small_central = []
    for name, data in small:
        zname = f"{ARCHIVE}/{name}".encode()
        crc = zlib.crc32(data)
        offset = cursor + len(tail)
        tail += _local_header(zname, crc, len(data)) + data
        small_central.append(_central_header(zname, crc, len(data), offset))
    central = small_central + central
    cd_offset = cursor + len(tail)
    cd = b"".join(central)
    tail += cd
    n = len(central)
    z64_offset = cursor + len(tail)
    tail += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, _VERSION, _VERSION, 0, 0, n, n,
                        len(cd), cd_offset)
    tail += struct.pack("<IIQI", 0x07064B50, 0, z64_offset, 1)
    tail += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(n, 0xFFFF), min(n, 0xFFFF),
                        min(len(cd), _U32), min(cd_offset, _U32), 0)
    return tail, n


def stream(obj: Any, write: Any, pickle_protocol: int = 2) -> int:
    """Write torch.save's zip of `obj` through `write` (a stream's write; each storage goes
    as one memoryview of its bytes, never copied here), each storage at a 64-byte aligned
    offset as torch.save places it. torch.save into a Python stream keeps the GIL in its
    zip writer's calls (measured: 85-230 ms in write_end_of_file for a DCP item beside a
    training loop, bench/train_beside_save.py); here the CRCs are zlib's, which lets the GIL
    go, and the writes are the stream's. Raises Unsupported before writing anything when
    `obj` does not fit (a storage not on the CPU, metadata-only records, another torch):
    use torch.save then. Returns the bytes written."""
    import torch
    rec = _RecordingZip()
    _torch_save_records()(obj, rec, pickle, pickle_protocol, False)
    views = []
    empty: List[str] = []
    for name, storage, nbytes in rec.storages:
        if storage.device.type != "cpu":
            raise Unsupported("storage not on the CPU")
        if not nbytes:  # zero bytes: with the small records
            empty.append(name)
            continue
        t = torch.empty(0, dtype=torch.uint8).set_(storage)
        views.append((name, memoryview(t.numpy())[:nbytes]))
    pos = 0
    central: List[bytes] = []
    for name, mv in views:
        zname = f"{ARCHIVE}/{name}".encode()
        n = len(mv)
        natural = 30 + len(zname) + (20 if n >= _U32 else 0) + 4  # + the padding field
        start = (pos + natural + ALIGN - 1) // ALIGN * ALIGN
        crc = zlib.crc32(mv)
        write(_local_header(zname, crc, n, total_len=start - pos))
        write(mv)
        central.append(_central_header(zname, crc, n, pos))
        pos = start + n
    tail, _ = _tail(list(rec.small) + [(name, b"") for name in empty], central, pos)
    write(tail)
    return pos + len(tail)


def build(staged: Any, arena: Any, used_end: int, capacity: int,
          pickle_protocol: int = 2) -> Tuple[int, int, Dict[str, Any]]:
    """Lay the zip of `staged` out in `arena` (a uint8 CPU tensor whose storages hold the
    staged tensors; `used_end` is the end of the last storage, `capacity` the arena's size).
    Returns (size, CRC-32 of arena[0:size], details). Raises Unsupported (nothing usable
    written: the caller falls back) when the layout does not fit."""
    rec = _RecordingZip()
    _torch_save_records()(staged, rec, pickle, pickle_protocol, False)
    base = arena.data_ptr()
    mv = memoryview(arena.numpy()) if arena.numel() else memoryview(b"")
    segs: List[Tuple[int, int, str]] = []  # (offset, nbytes, name)
    empty: List[str] = []
    for name, storage, nbytes in rec.storages:
        if storage.device.type != "cpu":
            raise Unsupported("storage not on the CPU")
        if not nbytes:  # zero bytes: no place in the arena, goes with the small records
            empty.append(name)
            continue
        off = storage.data_ptr() - base
        if off < HEADER_GAP or off + nbytes > used_end or off % ALIGN:
            raise Unsupported(f"storage {name} is not in the staging arena")
        segs.append((off, nbytes, name))
    small = list(rec.small) + [(name, b"") for name in empty]
    segs.sort()
    for a, b in zip(segs, segs[1:]):
        if a[0] + a[1] + HEADER_GAP > b[0]:
            raise Unsupported("storages overlap or their gap is too small")
    # every byte from 0 to the end of the last storage must belong to a record
    cursor = 0
    crc_all = 0
    central: List[bytes] = []
    for off, n, name in segs:
        zname = f"{ARCHIVE}/{name}".encode()
        crc = zlib.crc32(mv[off:off + n])
        hdr = _local_header(zname, crc, n, total_len=off - cursor)
        mv[cursor:off] = hdr
        crc_all = zlib.crc32(hdr, crc_all)
        crc_all = crc32_combine(crc_all, crc, n)
        central.append(_central_header(zname, crc, n, cursor))
        cursor = off + n
    tail, n = _tail(small, central, cursor)
    size = cursor + len(tail)
    if size > capacity:
        raise Unsupported(f"tail of {len(tail)} bytes does not fit")
    mv[cursor:size] = tail
    crc_all = zlib.crc32(tail, crc_all)
    return size, crc_all, {"tail": len(tail), "records": n, "sys": sys.byteorder}
