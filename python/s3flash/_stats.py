"""What a save and a dataset report while they run: ``SaveStats`` (one per checkpoint save:
AsyncCheckpointer, the DCP writer, the Lightning plugins) and ``DatasetStats`` (the samples
and bytes a dataset handed out, and their rates). docs/METRICS.md (Python) defines each field.

Everything here is plain Python on the caller's data: a save's clock readings
(time.monotonic) and a dataset's counters, updated once per item.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any, Callable, Dict, Optional

__all__ = ["DatasetStats", "SaveStats"]


@dataclasses.dataclass(frozen=True)
class SaveStats:
    """One checkpoint save, as timed by the writer that made it (seconds by
    ``time.monotonic``).

    ``save_seconds``: from the save's call (``save``, ``save_checkpoint``, DCP's stage or
    set-up) to its commit; the phases below lie within it, one after the other, and what
    is left is waiting (for the host buffers of the previous save, in the queue, DCP's
    planning). ``blocked_seconds``: how long the caller (training) waited for the save
    call to return: the staging and any wait for the host buffers for the asynchronous
    savers, the whole save for the synchronous ones; None where the writer cannot know
    (a DCP writer saving on a thread of its own after another stager staged).
    ``staging_seconds``: the copy into host buffers (0 where nothing is staged).
    ``upload_seconds``: the serialization and upload of the data, up to the last part's
    completion. ``commit_seconds``: what makes the save visible after that (a manifest,
    DCP's ``.metadata``; 0 where the upload's completion is the commit). ``bytes``: the
    bytes written to S3 by this save (the objects and the commit record).
    ``throughput_bytes_per_s``: ``bytes / upload_seconds``, the rate of the upload
    itself (0 when upload_seconds is 0).
    """

    uri: str
    step: Optional[int]
    bytes: int
    save_seconds: float
    blocked_seconds: Optional[float]
    staging_seconds: float
    upload_seconds: float
    commit_seconds: float

    @classmethod
    def blocking(cls, uri: str, step: Optional[int], nbytes: int,
                 seconds: float) -> "SaveStats":
        """A save that blocked its caller throughout, with nothing staged and its
        upload's completion as its commit: blocked, upload and save times are one."""
        return cls(uri, step, nbytes, seconds, seconds, 0.0, seconds, 0.0)

    @property
    def throughput_bytes_per_s(self) -> float:
        return self.bytes / self.upload_seconds if self.upload_seconds > 0 else 0.0

    def as_metrics(self, prefix: str = "checkpoint/") -> Dict[str, float]:
        """The metrics a logger takes (``prefix`` + ``save_seconds``, ``blocked_seconds``
        (left out when None), ``staging_seconds``, ``upload_seconds``, ``commit_seconds``,
        ``bytes``, ``throughput_bytes_per_s``)."""
        m = {"save_seconds": self.save_seconds, "blocked_seconds": self.blocked_seconds,
             "staging_seconds": self.staging_seconds, "upload_seconds": self.upload_seconds,
             "commit_seconds": self.commit_seconds, "bytes": float(self.bytes),
             "throughput_bytes_per_s": self.throughput_bytes_per_s}
        return {prefix + k: float(v) for k, v in m.items() if v is not None}


def _report(callback: Optional[Callable[[Any], None]], stats: Any, who: str) -> None:
    """Call a user's stats callback; its error is a warning, never the save's or the
    read's failure."""
    if callback is None:
        return
    try:
        callback(stats)
    except Exception as e:  # noqa: BLE001
        warnings.warn(f"s3flash.{who}: the stats callback {callback!r} raised {e!r}",
                      RuntimeWarning)


@dataclasses.dataclass(frozen=True)
class DatasetStats:
    """What a dataset handed out in this process since it was built or
    ``reset_stats()`` was called: ``samples`` (items: one per transform), ``bytes`` (each
    item's object size as known after its transform without a request: the bytes fetched,
    else the listing's size; 0 for an object of unknown size never read), ``seconds``
    (from the first item asked for to the last one handed out, by time.monotonic), and
    the rates over those seconds."""

    samples: int
    bytes: int
    seconds: float

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    def as_metrics(self, prefix: str = "dataset/") -> Dict[str, float]:
        return {prefix + "samples": float(self.samples), prefix + "bytes": float(self.bytes),
                prefix + "samples_per_s": self.samples_per_s,
                prefix + "bytes_per_s": self.bytes_per_s}


def _item_bytes(reader: Any) -> int:
    """An item's object size, as its reader knows it with no request."""
    data = getattr(reader, "_data", None)
    if data is not None:
        return len(data)
    known = getattr(reader, "_known", None)
    if known:
        return int(known[0])
    return int(getattr(reader, "_listed_size", None) or 0)


class _DatasetCounter:
    """A dataset's counters (one per process: DataLoader workers count in their copy).
    ``on_stats`` gets a DatasetStats at most every ``interval_s`` seconds, and at the end
    of each pass of an iterable dataset."""

    __slots__ = ("on_stats", "interval_s", "samples", "bytes", "t0", "t_last", "t_report")

    def __init__(self, on_stats: Optional[Callable[[DatasetStats], None]],
                 interval_s: float):
        if not interval_s >= 0:
            raise ValueError(f"stats_interval_s must be >= 0, got {interval_s}")
        self.on_stats = on_stats
        self.interval_s = interval_s
        self.reset()

    def reset(self) -> None:
        self.samples = self.bytes = 0
        self.t0: Optional[float] = None
        self.t_last = self.t_report = 0.0

    def begin(self) -> None:
        if self.t0 is None:
            self.t0 = self.t_report = time.monotonic()

    def add(self, reader: Any) -> None:
        if self.t0 is None:
            self.begin()
        self.samples += 1
        self.bytes += _item_bytes(reader)
        now = self.t_last = time.monotonic()
        if self.on_stats is not None and now - self.t_report >= self.interval_s:
            self.report(now)

    def snapshot(self) -> DatasetStats:
        seconds = self.t_last - self.t0 if self.t0 is not None and self.samples else 0.0
        return DatasetStats(self.samples, self.bytes, max(seconds, 0.0))

    def report(self, now: Optional[float] = None) -> None:
        self.t_report = time.monotonic() if now is None else now
        _report(self.on_stats, self.snapshot(), "dataset")

    def __getstate__(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)
