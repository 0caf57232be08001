"""One rank of the multi-host DCP runs: started by torchrun (gloo) in a compute namespace
(tests/integration/test_multirank.py, bench/multirank.py).

The state is `--tensors` float32 tensors of `--rows` x `--cols`, each a DTensor sharded by
rows over all ranks (Shard(0)), so every rank saves its own shard and a load with another
world size reshards. Tensor i holds arange(rows * cols) + 1000 * i + step: a load checks
every value of its shard against that.

Operations, run in the order given (OP=s3://bucket/path):
    save=PATH    dcp.save with --strategy (default, binary, hex, roundrobin)
    load=PATH    dcp.load into zeros and check the values
    fail=PATH    dcp.load must fail (the checkpoint is not loadable)
--kill-rank R: rank R SIGKILLs itself while writing its second item (mid-save) in the last
operation (a save).
Each rank writes --out/rank-R-N-OP.json per operation: seconds (its own), seconds_all (until
the slowest rank is done), bytes of its shard, the client's counters (S3Client.stats()).
The endpoint and keys come from S3FLASH_TEST_ENDPOINT and AWS_* in the environment.
"""
import argparse
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import CheckpointException, DefaultSavePlanner
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from s3flash import dcp as s3dcp


def strategy(name, epoch):
    if name == "default":
        return s3dcp.DefaultPrefixStrategy()
    if name == "binary":
        return s3dcp.BinaryPrefixStrategy(epoch_num=epoch)
    if name == "hex":
        return s3dcp.HexPrefixStrategy(epoch_num=epoch)
    if name == "roundrobin":
        return s3dcp.RoundRobinPrefixStrategy(["p0", "p1", "p2", "p3"], epoch_num=epoch)
    raise SystemExit(f"unknown strategy {name}")


def full(i, a):
    return torch.arange(a.rows * a.cols, dtype=torch.float32).reshape(a.rows, a.cols) + (
        1000 * i + a.step)


class KillingPlanner(DefaultSavePlanner):
    """Kills this process at its n-th resolve_data: a rank dying in the middle of its save."""

    def __init__(self, at):
        super().__init__()
        self.at, self.n = at, 0

    def resolve_data(self, write_item):
        self.n += 1
        if self.n == self.at:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().resolve_data(write_item)


def run_op(op, path, a, mesh, rank, region, endpoint, kill):
    """One save/load/fail; returns (seconds, bytes of this rank's shard, client counters)."""
    if op == "save":
        state = {f"t{i}": distribute_tensor(full(i, a), mesh, [Shard(0)])
                 for i in range(a.tensors)}
    else:
        state = {f"t{i}": distribute_tensor(torch.zeros(a.rows, a.cols), mesh, [Shard(0)])
                 for i in range(a.tensors)}
    nbytes = sum(t.to_local().numel() * 4 for t in state.values())
    dist.barrier()
    t0 = time.monotonic()
    if op == "save":
        w = s3dcp.S3StorageWriter(region, path, endpoint=endpoint,
                                  prefix_strategy=strategy(a.strategy, None))
        planner = KillingPlanner(2) if kill else None
        dcp.save(state, storage_writer=w, planner=planner)
        client = w.client
    else:
        r = s3dcp.S3StorageReader(region, path, endpoint=endpoint)
        try:
            dcp.load(state, storage_reader=r)
            loaded = True
        except (Exception, CheckpointException) as e:  # a BaseException: what ranks raised
            if op == "load":
                raise
            loaded = False
            print(f"rank {rank}: {path} did not load, as expected: {type(e).__name__}: "
                  f"{str(e).splitlines()[0][:200] if str(e) else ''}", flush=True)
        if op == "fail" and loaded:
            raise SystemExit(f"rank {rank}: {path} loaded, but it must not")
        if op == "load":
            for i in range(a.tensors):
                want = distribute_tensor(full(i, a), mesh, [Shard(0)]).to_local()
                if not torch.equal(state[f"t{i}"].to_local(), want):
                    raise SystemExit(f"rank {rank}: t{i} of {path} differs after the load")
        client = r.client
    elapsed = time.monotonic() - t0
    return elapsed, nbytes, client.stats()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ops", nargs="+", help="OP=s3://bucket/path, run in order (save, load, fail)")
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--cols", type=int, default=256)
    p.add_argument("--tensors", type=int, default=2)
    p.add_argument("--step", type=int, default=1)
    p.add_argument("--strategy", default="default")
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--out", required=True)
    a = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    endpoint = os.environ["S3FLASH_TEST_ENDPOINT"]
    region = os.environ.get("AWS_REGION", "us-east-1")
    os.makedirs(a.out, exist_ok=True)
    for n, spec in enumerate(a.ops):
        op, _, path = spec.partition("=")
        if op not in ("save", "load", "fail") or not path.startswith("s3://"):
            raise SystemExit(f"bad op {spec!r}: expected save=|load=|fail=s3://bucket/path")
        t0 = time.monotonic()
        kill = rank == a.kill_rank and n == len(a.ops) - 1
        elapsed, nbytes, stats = run_op(op, path, a, mesh, rank, region, endpoint, kill)
        dist.barrier()                      # the slowest rank sets the checkpoint's time
        with open(os.path.join(a.out, f"rank-{rank}-{n}-{op}.json"), "w") as f:
            json.dump({"rank": rank, "world": world, "op": op, "path": path,
                       "seconds": elapsed, "seconds_all": time.monotonic() - t0,
                       "bytes": nbytes, "stats": stats}, f)
        print(f"rank {rank}/{world}: {op} {path} ok in {elapsed:.2f} s", flush=True)
    # Every rank is past the last barrier and its report is written. Leave without gloo's
    # teardown: once, under load, destroy_process_group/interpreter exit aborted a rank there
    # ("terminate called without an active exception", SIGABRT) after all its work was done,
    # and torchrun then failed a run whose checkpoints were right.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
