"""HostStager: snapshots of tensors in host buffers allocated once and reused, the copy a
save pauses the caller for (AsyncCheckpointer, s3flash.dcp's S3HostStager, the Lightning
plugin). With ``zip_layout`` the buffers leave room for s3flash/_zipimage.py to build the
torch.save file around the staged bytes, so the upload reads them in place.
"""

from __future__ import annotations

import copy
import ctypes
import threading
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["HostStager"]

_ALIGN = 64


def _storage_bytes(t: Any) -> Any:
    """The whole storage of `t` as a uint8 tensor on t's device (no copy)."""
    import torch
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def _stageable(t: Any) -> bool:
    import torch
    return (t.layout == torch.strided and not t.is_quantized and t.device.type != "meta"
            and type(t) in (torch.Tensor, torch.nn.Parameter))


class HostStager:
    """Host buffers for snapshots of tensors, allocated once and reused.

    ``stage(obj)`` returns a copy of `obj` (dicts, lists, tuples rebuilt; other leaves
    deep-copied) whose tensors live in one host arena: each distinct storage of the input gets
    its own storage in the arena (so shared storages stay shared, views stay views), and the
    arena is reused as long as the next state fits (``allocations`` counts the arenas
    allocated, ``capacity`` is the arena's size). Storages on a CUDA device are copied with
    ``non_blocking=True`` into pinned memory, then waited for (an event per device) before
    ``stage`` returns. Tensors that are not plain strided ones (sparse, quantized, tensor
    subclasses) are cloned to the CPU instead (counted in ``cloned``).

    Not thread-safe: one caller stages at a time, and the snapshot is valid until the next
    ``stage``. With ``track_views``, ``live_views`` counts the staged tensors still
    referenced (``in_use``: the snapshot is still alive somewhere), and ``on_free`` is called
    when the last one goes.

    With ``zip_layout``, the arena is laid out for ``s3flash._zipimage``: each storage at a
    64-byte aligned offset after a gap for its zip header, and room after the last one for
    the pickle, the small records and the central directory, so the whole torch.save file
    can be built in place around the staged bytes.
    """

    def __init__(self, pin_memory: Optional[bool] = None, track_views: bool = False,
                 on_free: Any = None, zip_layout: bool = False):
        self._pin = pin_memory
        self.zip_layout = zip_layout
        self.used_end = 0        # end of the last staged storage in the arena
        self.tail_hint = 0       # extra room after it (zip_layout), grown when short
        self._track = track_views
        self._on_free = on_free
        self._live_lock = threading.Lock()
        self.live_views = 0
        self._arena: Any = None
        self.capacity = 0
        self.allocations = 0
        self.cloned = 0
        self._slots: Dict[Tuple[int, int], Any] = {}   # (offset, nbytes) -> uint8 tensor

    def _want_pinned(self, any_cuda: bool) -> bool:
        import torch
        if self._pin is not None:
            return bool(self._pin) and torch.cuda.is_available()
        return any_cuda and torch.cuda.is_available()

    def _reserve(self, nbytes: int, pinned: bool) -> None:
        import torch
        if self._arena is not None and nbytes <= self.capacity and \
                bool(self._arena.is_pinned()) == pinned:
            return
        self._arena = None
        self._slots = {}
        cap = max(nbytes, _ALIGN)
        self._arena = torch.empty(cap, dtype=torch.uint8, pin_memory=pinned)
        self.capacity = cap
        self.allocations += 1

    def _slot(self, offset: int, nbytes: int) -> Any:
        """A uint8 tensor with a storage of its own over arena[offset:offset+nbytes]."""
        import torch
        s = self._slots.get((offset, nbytes))
        if s is None:
            if nbytes == 0:
                s = torch.empty(0, dtype=torch.uint8)
            else:
                arr = (ctypes.c_ubyte * nbytes).from_address(self._arena.data_ptr() + offset)
                arr._s3flash_arena = self._arena  # type: ignore[attr-defined]  # kept alive by them
                s = torch.frombuffer(memoryview(arr), dtype=torch.uint8)
            self._slots[(offset, nbytes)] = s
        return s

    @property
    def in_use(self) -> bool:
        return self.live_views > 0

    def _view_freed(self) -> None:
        with self._live_lock:
            self.live_views -= 1
            last = self.live_views == 0
        if last and self._on_free is not None:
            self._on_free()

    def _track_view(self, v: Any) -> None:
        if self._track:
            import weakref
            with self._live_lock:
                self.live_views += 1
            weakref.finalize(v, self._view_freed)

    @property
    def arena(self) -> Any:
        """The arena (a uint8 CPU tensor), None before the first stage."""
        return self._arena

    def arena_ptr(self) -> int:
        """Address of the arena (0 before the first stage): a second stage of a state that fits
        uses the same one."""
        return 0 if self._arena is None else int(self._arena.data_ptr())

    def stage(self, obj: Any) -> Any:
        import torch
        storages: "OrderedDict[Tuple[str, int, int], Any]" = OrderedDict()
        tensors: List[Any] = []

        def collect(o: Any) -> None:
            if isinstance(o, torch.Tensor):
                if _stageable(o):
                    st = o.untyped_storage()
                    storages.setdefault((str(o.device), st.data_ptr(), st.nbytes()), o)
                    tensors.append(o)
            elif isinstance(o, dict):
                for v in o.values():
                    collect(v)
            elif isinstance(o, (list, tuple)):
                for v in o:
                    collect(v)

        collect(obj)
        any_cuda = any(k[0].startswith("cuda") for k in storages)
        pinned = self._want_pinned(any_cuda)
        layout: Dict[Tuple[str, int, int], int] = {}
        total = 0
        if self.zip_layout:
            from ._zipimage import HEADER_GAP
            for k in storages:
                if not k[2]:
                    continue  # zero bytes: an empty storage outside the arena
                total = (total + HEADER_GAP + _ALIGN - 1) // _ALIGN * _ALIGN
                layout[k] = total
                total += k[2]
            self.used_end = total
            total += (1 << 20) + 512 * len(storages) + self.tail_hint
        else:
            for k in storages:
                layout[k] = total
                total += (k[2] + _ALIGN - 1) // _ALIGN * _ALIGN
            self.used_end = total
        self._reserve(total, pinned)

        # copy every distinct storage into its slot
        devices = set()
        staged_storage: Dict[Tuple[str, int, int], Any] = {}
        for k, t in storages.items():
            slot = self._slot(layout.get(k, 0), k[2])
            if k[2]:
                src = _storage_bytes(t)
                if t.device.type == "cuda":
                    slot.copy_(src, non_blocking=True)
                    devices.add(t.device)
                else:
                    slot.copy_(src)
            staged_storage[k] = slot.untyped_storage()
        used = {(layout.get(k, 0), k[2]) for k in storages}
        self._slots = {o: v for o, v in self._slots.items() if o in used}  # bounded
        for d in devices:  # the device-to-host copies are done before the caller goes on
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(d))
            ev.synchronize()

        def rebuild(o: Any) -> Any:
            if isinstance(o, torch.Tensor):
                if not _stageable(o):
                    self.cloned += 1
                    return o.detach().to("cpu", copy=True)
                st = o.untyped_storage()
                s = staged_storage[(str(o.device), st.data_ptr(), st.nbytes())]
                v = torch.empty(0, dtype=o.dtype).set_(s, o.storage_offset(), o.size(),
                                                       o.stride())
                self._track_view(v)
                if isinstance(o, torch.nn.Parameter):
                    return torch.nn.Parameter(v, requires_grad=o.requires_grad)
                return v
            if isinstance(o, dict):
                if type(o) in (dict, OrderedDict):
                    out = type(o)()
                else:
                    try:  # the same mapping type (defaultdict...), emptied
                        out = copy.copy(o)
                        out.clear()
                    except Exception:
                        out = {}
                for kk, vv in o.items():
                    out[kk] = rebuild(vv)
                if hasattr(o, "_metadata"):  # nn.Module.state_dict()'s version info
                    out._metadata = copy.deepcopy(o._metadata)  # type: ignore[attr-defined]
                return out
            if isinstance(o, list):
                return [rebuild(v) for v in o]
            if isinstance(o, tuple):
                items = [rebuild(v) for v in o]
                return o.__class__(*items) if hasattr(o, "_fields") else o.__class__(items)
            try:
                return copy.deepcopy(o)
            except Exception:
                return o

        return rebuild(obj)
