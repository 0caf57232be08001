"""S3HostStager (s3flash/dcp.py): DCP's async stager over s3flash's reused host buffers
(s3flash/_staging.py's HostStager), a bounded pool of them.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional

from torch.distributed.checkpoint.staging import AsyncStager


class S3HostStager(AsyncStager):
    """An ``AsyncStager`` for ``dcp.async_save(..., async_stager=S3HostStager())`` whose host
    buffers are allocated once and reused from save to save (DCP's default stager allocates a
    fresh CPU copy each time; fresh pages fault in slowly).

    ``stage`` copies the state dict's tensors into a ``s3flash.HostStager`` arena (pinned,
    with non-blocking copies, when they are on a GPU) and returns the copy. An arena is free
    again once nothing references the previous copy (the previous ``async_save`` has finished
    writing it); while all `max_buffers` arenas are in use, ``stage`` waits for one
    (``timeout_s``, None: for ever; then TimeoutError). Memory stays bounded by
    `max_buffers` arenas.

    Works with any storage writer (``S3StorageWriter``, ``FileSystemWriter``).
    """

    _synchronize_after_execute = False

    def __init__(self, max_buffers: int = 2, pin_memory: Optional[bool] = None,
                 timeout_s: Optional[float] = None) -> None:
        if max_buffers < 1:
            raise ValueError(f"max_buffers must be >= 1, got {max_buffers}")
        self.max_buffers = max_buffers
        self.timeout_s = timeout_s
        self._pin = pin_memory
        self._cond = threading.Condition(threading.RLock())
        self._stagers: List[Any] = []

    def _freed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    @property
    def allocations(self) -> int:
        """Arenas allocated so far (a state that fits its arena allocates nothing)."""
        return sum(s.allocations for s in self._stagers)

    @property
    def stagers(self) -> List[Any]:
        return list(self._stagers)

    def stage(self, state_dict: Dict[str, Any]) -> Dict[str, Any]:
        import time
        from ._staging import HostStager
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        with self._cond:
            while True:
                free = [s for s in self._stagers if not s.in_use]
                if free:
                    hs = free[0]
                    break
                if len(self._stagers) < self.max_buffers:
                    hs = HostStager(self._pin, track_views=True, on_free=self._freed)
                    self._stagers.append(hs)
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"S3HostStager: all {self.max_buffers} staging buffers "
                                       "still hold earlier saves")
                self._cond.wait(left)
            return hs.stage(state_dict)

    def synchronize_staging(self) -> None:
        """Nothing to wait for: ``stage`` returns once the copies are done."""

    def close(self) -> None:
        with self._cond:
            self._stagers = [s for s in self._stagers if s.in_use]
