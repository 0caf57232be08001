"""PyTorch Distributed Checkpoint (torch.distributed.checkpoint) storage in S3.

``S3StorageWriter`` and ``S3StorageReader`` have s3torchconnector's names and signatures
(``s3torchconnector.dcp``), plus ``endpoint``::

    import torch.distributed.checkpoint as dcp
    from s3flash.dcp import S3StorageWriter, S3StorageReader

    dcp.save(state_dict, storage_writer=S3StorageWriter(region, "s3://bucket/ckpt/step-100",
                                                        endpoint="http://127.0.0.1:7480"))
    dcp.load(state_dict, storage_reader=S3StorageReader(region, "s3://bucket/ckpt/step-100",
                                                        endpoint="http://127.0.0.1:7480"))

The layout is FileSystemWriter's: ``__{rank}_{n}.distcp`` objects (each item a ``torch.save``
record at a recorded offset) and a pickled ``.metadata`` with the same ``_StorageInfo``
entries, so a checkpoint copied to a disk (``s3flash cp --recursive``) loads with
``FileSystemReader``, and the other way round.

Saving: every rank streams its items into ``thread_count`` objects at once (one engine writer
each; each writer's parts upload in parallel while Python serializes the next item). The
coordinator writes ``.metadata`` in ``finish()``, which torch calls only once every rank's
``write_data`` has succeeded: a checkpoint becomes visible complete, or not at all. Before any
rank writes, the coordinator deletes an older ``.metadata`` at the same path, so a save that
fails half-way over an older checkpoint leaves no loadable mix of the two. ``.metadata`` is
written with ``If-None-Match: *``: when another writer committed at the same path during
the save, this save fails (RuntimeError) instead of replacing that commit.

Loading: the items of the plan are grouped by object, sorted by offset and merged into
ranges (gaps up to ``max_gap_size`` of ``S3ReaderConstructor.dcp_optimized()``, 1 MiB
otherwise); the ranges are fetched in parallel, each one with parallel part-sized ranged
GETs straight into one buffer, and the tensors are copied from that buffer into the state
dict's tensors (one copy: the ``torch.save`` record is located in place, not re-read).

This module keeps the public names; what each serves lives in a module of its own: the
paths and S3FileSystem (s3flash/_dcp_fs.py), the writer and the prefix strategies
(s3flash/_dcp_writer.py), the reader (s3flash/_dcp_reader.py) and the async stager
(s3flash/_dcp_staging.py).
"""


from __future__ import annotations

from ._dcp_fs import DEFAULT_SUFFIX, S3FileSystem  # noqa: F401
from ._dcp_reader import S3StorageReader
from ._dcp_staging import S3HostStager
from ._dcp_writer import (BinaryPrefixStrategy, DefaultPrefixStrategy, HexPrefixStrategy,
                          NumericPrefixStrategy, RoundRobinPrefixStrategy,
                          S3PrefixStrategyBase, S3StorageWriter, _S3StoragePrefix)  # noqa: F401

__all__ = [
    "S3FileSystem",
    "S3StorageWriter",
    "S3StorageReader",
    "S3PrefixStrategyBase",
    "DefaultPrefixStrategy",
    "RoundRobinPrefixStrategy",
    "NumericPrefixStrategy",
    "BinaryPrefixStrategy",
    "HexPrefixStrategy",
    "S3HostStager",
]
