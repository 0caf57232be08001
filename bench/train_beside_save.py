#!/usr/bin/env python3
"""Training beside a background save: the step time of a small CPU training loop (about
1 ms a step, one torch thread) alone and while a checkpoint save runs in the background,
and the longest time a thread that wanted the GIL waited for it. One run, every saver side
by side; a Markdown table on stdout.

  python3 bench/train_beside_save.py [--size 256M] [--step-ms 1] [--cpus 2] [--repeat 2]
                                     [--endpoint URL] [--local-dir DIR] [--skip ROW,...]
                                     [--self-check]

Savers (each: one warm-up save, then --repeat measured saves; steps are timed from the
moment save() returns until the save is committed, so the blocked staging time is its own
column, not in the step times):

  s3flash AsyncCheckpointer -> S3          s3flash.AsyncCheckpointer (in place upload)
  Lightning S3AsyncLightningCheckpoint     s3flash.lightning's async CheckpointIO
  DCP async_save + S3HostStager -> s3flash torch.distributed.checkpoint.async_save, thread
  DCP async_save (default stager) -> local DCP's own async_save to the local file system

How long threads wait to run, three ways:
- "main thread not running in a step": the step's wall time less the main thread's CPU
  time (time.thread_time): waiting for the GIL, or for a CPU.
- "this process": a probe thread sleeps 1 ms in a loop (the sleep releases the GIL) and
  records how late it runs Python again: the GIL's wait plus the CPUs' queue.
- "another process": the same probe in a process of its own on the same CPUs: the CPUs'
  queue alone. Where the two agree, the waits are the machine's load, not the GIL.
- The note: a second pass per saver with its background threads profiled
  (threading.setprofile) and training beside them: a call into C of five switch intervals
  (25 ms) or more during which no other thread of this process ran Python (neither the
  probe nor a training step ended; up to its last 15 ms) while the other process's probe
  woke once per 2.5 ms on average (so a CPU was free) kept the GIL; the longest is named.
  --self-check adds a thread in sorted() to show such a row.
The process is pinned to --cpus CPUs (default 2, as the issue measured).

The S3 server: --endpoint, else S3FLASH_TEST_ENDPOINT (tests/servers/rgw.sh env), keys from
S3FLASH_TEST_ACCESS_KEY / S3FLASH_TEST_SECRET_KEY (or the AWS_* environment). A bucket is
created for the run and removed after.
"""

import argparse
import os
import statistics
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_async import Env, make_state, parse_size  # noqa: E402  (the same bucket, state)


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


class Trainer:
    """An MLP on the CPU whose forward, backward and SGD step take about `step_ms`."""

    def __init__(self, step_ms):
        torch.manual_seed(0)
        self.off = []
        best = None
        for width in (64, 96, 128, 192, 256, 384, 512, 768, 1024):
            self._build(width)
            for _ in range(20):
                self.step()
            t = statistics.median(self.step() for _ in range(60))
            if best is None or abs(t - step_ms / 1e3) < abs(best[1] - step_ms / 1e3):
                best = (width, t)
            if t > step_ms / 1e3:
                break
        self.width = best[0]
        self._build(self.width)

    def _build(self, w):
        self.model = torch.nn.Sequential(torch.nn.Linear(w, w), torch.nn.ReLU(),
                                         torch.nn.Linear(w, w), torch.nn.ReLU(),
                                         torch.nn.Linear(w, w))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-4)
        self.x = torch.randn(64, w)

    def step(self):
        t, c = time.perf_counter(), time.thread_time()
        self.opt.zero_grad()
        self.model(self.x).square().mean().backward()
        self.opt.step()
        wall = time.perf_counter() - t
        self.off.append(wall - (time.thread_time() - c))  # not running: GIL, CPU queue
        return wall


class GilProbe:
    """A thread that sleeps 1 ms at a time and records how late it gets to run again."""

    def __init__(self, period=0.001):
        self.period = period
        self.lates = []
        self.wakes = []
        self._on = False
        self._stop = False
        self._t = threading.Thread(target=self._run, name="gil-probe", daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop:
            t = time.perf_counter()
            time.sleep(self.period)
            now = time.perf_counter()
            if self._on:
                self.lates.append(now - t - self.period)
                self.wakes.append(now)

    def start(self):
        self.lates = []
        self.wakes = []
        self._on = True

    def stop(self):
        self._on = False
        return list(self.lates)

    def close(self):
        self._stop = True
        self._t.join()


CONTROL = r"""
import sys, time, threading
lates = []
def run():
    while True:
        t = time.perf_counter()
        time.sleep(0.001)
        now = time.perf_counter()
        lates.append((now, now - t - 0.001))
        if len(lates) > 400000:
            del lates[:200000]
threading.Thread(target=run, daemon=True).start()
for line in sys.stdin:
    t0, t1 = map(float, line.split())
    w = sorted(l for t, l in list(lates) if t0 <= t <= t1)
    print(w[-1] if w else 0.0, w[min(len(w) - 1, int(round(0.99 * (len(w) - 1))))] if w else 0.0,
          len(w), flush=True)
"""


class ControlProbe:
    """The same probe in a process of its own (no GIL shared with this one), on the same
    CPUs: how late a thread wakes up from the CPUs' load alone."""

    def __init__(self):
        import subprocess
        self.p = subprocess.Popen([sys.executable, "-c", CONTROL], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)

    def window(self, t0, t1):
        """(longest, p99, wakes) of its lateness in [t0, t1] (time.perf_counter:
        CLOCK_MONOTONIC, the same clock in both processes)."""
        self.p.stdin.write(f"{t0} {t1}\n")
        self.p.stdin.flush()
        mx, p99, n = self.p.stdout.readline().split()
        return float(mx), float(p99), int(n)

    def close(self):
        self.p.stdin.close()
        self.p.wait()


# -- savers: each a context manager factory giving save(sd, i) -> wait() -------------------
class AsyncCk:
    name = "s3flash AsyncCheckpointer -> S3"

    def __init__(self, env):
        import s3flash
        self.ck = s3flash.AsyncCheckpointer(env.uri("async/"), region=env.region,
                                            endpoint=env.endpoint, keep_remote=1)

    def save(self, sd, i):
        fut = self.ck.save(sd, i)
        return lambda: (fut.result(), self.ck.wait())

    def close(self):
        self.ck.close()


class LightningAsync:
    name = "Lightning S3AsyncLightningCheckpoint -> S3"

    def __init__(self, env):
        from s3flash.lightning import S3AsyncLightningCheckpoint
        self.env = env
        self.p = S3AsyncLightningCheckpoint(env.region, endpoint=env.endpoint)

    def save(self, sd, i):
        self.p.save_checkpoint({"state_dict": sd, "epoch": i},
                               self.env.uri(f"lightning/epoch={i}.ckpt"))
        return self.p.wait

    def close(self):
        self.p.teardown()


class _Dcp:
    stager = None

    def __init__(self, env):
        self.env = env

    def writer(self, i):
        raise NotImplementedError

    def save(self, sd, i):
        import torch.distributed.checkpoint as dcp
        kw = {"async_stager": self.stager} if self.stager is not None else {}
        fut = dcp.async_save(sd, storage_writer=self.writer(i), **kw)
        fut = getattr(fut, "upload_completion", fut)
        return fut.result

    def close(self):
        pass


class DcpHostStager(_Dcp):
    name = "DCP async_save + S3HostStager -> s3flash S3"

    def __init__(self, env):
        super().__init__(env)
        from s3flash.dcp import S3HostStager
        self.stager = S3HostStager()

    def writer(self, i):
        from s3flash.dcp import S3StorageWriter
        return S3StorageWriter(self.env.region, self.env.uri(f"dcp-s3f-{i}/"),
                               endpoint=self.env.endpoint)


class DcpLocal(_Dcp):
    name = "DCP async_save (default stager) -> local disk"

    def writer(self, i):
        from torch.distributed.checkpoint import FileSystemWriter
        return FileSystemWriter(os.path.join(self.env.local, f"dcp-fs-{i}"))


class GilHog:
    """Not a saver: a thread that sorts a list of 2 million floats (one C call that holds
    the GIL throughout), to show what the probes report for work that holds it
    (--self-check)."""
    name = "self-check: a thread in sorted() (holds the GIL)"

    def __init__(self, env):
        import random
        self.data = [random.random() for _ in range(2_000_000)]

    def save(self, sd, i):
        t = threading.Thread(target=sorted, args=(self.data,), name="gil-hog")
        t.start()
        return t.join

    def close(self):
        pass


SAVERS = [AsyncCk, LightningAsync, DcpHostStager, DcpLocal]


class CallProfile:
    """Python-level calls into C made by the threads started while it is on (the savers'
    background threads), with their times: a call of more than `min_s` during which the
    probe thread never ran held the GIL for its whole length."""

    def __init__(self, min_s=0.005):
        self.min_s = min_s
        self.calls = []       # (start, seconds, name, thread)
        self._stacks = {}

    def _prof(self, frame, event, arg):
        if event == "c_call":
            self._stacks.setdefault(threading.get_ident(), []).append(
                (time.perf_counter(), arg))
        elif event in ("c_return", "c_exception"):
            st = self._stacks.get(threading.get_ident())
            if st:
                t0, fn = st.pop()
                d = time.perf_counter() - t0
                if d >= self.min_s:
                    self.calls.append((t0, d, getattr(fn, "__qualname__", str(fn)),
                                       threading.current_thread().name))

    def __enter__(self):
        threading.setprofile(self._prof)
        return self

    def __exit__(self, *exc):
        threading.setprofile(None)

    def longest_hold(self, ran, control):
        """(seconds, name) of the longest call that held the GIL, or (0, ""). `ran`: sorted
        times at which another thread of this process was running Python (the probe's
        wakes, the training thread's steps). A call into C either keeps the GIL throughout
        or lets it go around its work; it kept it when no other thread ran Python from its
        start until (at most three switch intervals before) its end, the call lasting
        five switch intervals or more, while the probe of another process woke once per
        2.5 ms on average (else the CPUs were busy, and the silence proves nothing)."""
        import bisect
        slack = 3 * sys.getswitchinterval()
        held = []
        for t0, d, name, thread in self.calls:
            if d < max(self.min_s, 5 * sys.getswitchinterval()):
                continue
            i = bisect.bisect_left(ran, t0)
            first = ran[i] if i < len(ran) else t0 + d
            silent = min(first, t0 + d) - t0
            if silent >= d - slack and control.window(t0, t0 + silent)[2] >= silent / 0.0025:
                held.append((d, f"{name} ({thread})"))
        return max(held, default=(0.0, ""))


def gil_holds(env, trainer, probe, control, cls, sd):
    """One save of `cls` after a warm-up, training beside it, its background threads
    profiled (a pass of its own: the profile slows their Python code down)."""
    saver = None
    try:
        with CallProfile() as prof:
            saver = cls(env)
            saver.save(sd, 0)()
            probe.start()
            t0 = time.perf_counter()
            wait = saver.save(sd, 1)
            done = threading.Event()
            threading.Thread(target=lambda: (wait(), done.set()), daemon=True).start()
            steps = []
            while not done.wait(0) or not steps:
                trainer.step()
                steps.append(time.perf_counter())
            t1 = time.perf_counter()
            probe.stop()
        calls = [c for c in prof.calls if t0 <= c[0] <= t1]
        prof.calls = calls
        return prof.longest_hold(sorted(probe.wakes + steps), control), len(calls)
    finally:
        if saver is not None:
            saver.close()


def measure(trainer, probe, control, saver, sd, repeat):
    """Steps timed while each of `repeat` saves runs (after one warm-up save)."""
    steps, lates, blocked, totals, ctl, offs = [], [], [], [], [], []
    for i in range(repeat + 1):
        t0 = time.perf_counter()
        wait = saver.save(sd, i)
        t1 = time.perf_counter()
        done = threading.Event()
        err = []

        def waiter():
            try:
                wait()
            except BaseException as e:  # noqa: BLE001  (reported in the row)
                err.append(e)
            done.set()
        w = threading.Thread(target=waiter, daemon=True)
        w.start()
        if i:
            probe.start()
        mine = []
        trainer.off = []
        while not done.is_set() or not mine:
            mine.append(trainer.step())
        t2 = time.perf_counter()
        late = probe.stop()
        w.join()
        if err:
            raise err[0]
        for t in sd.values():
            t.add_(1.0)
        c = control.window(t1, t2)[:2]
        if i:  # the first save is the warm-up (buffers allocated, pages faulted in)
            steps += mine
            lates += late
            offs += trainer.off
            blocked.append(t1 - t0)
            totals.append(t2 - t0)
            ctl.append(c)
    return steps, lates, blocked, totals, (max(m for m, _ in ctl), max(p for _, p in ctl)), offs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="256M")
    ap.add_argument("--step-ms", type=float, default=1.0)
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--endpoint", default=os.environ.get("S3FLASH_TEST_ENDPOINT"))
    ap.add_argument("--local-dir", default=None)
    ap.add_argument("--skip", default="", help="comma-separated saver-name substrings")
    ap.add_argument("--self-check", action="store_true",
                    help="add a row whose background thread holds the GIL (sorted())")
    a = ap.parse_args()
    if not a.endpoint:
        sys.exit("no S3 endpoint: --endpoint or S3FLASH_TEST_ENDPOINT")
    cpus = sorted(os.sched_getaffinity(0))[:a.cpus]
    os.sched_setaffinity(0, cpus)
    torch.set_num_threads(1)
    size = parse_size(a.size)
    skip = [s for s in a.skip.split(",") if s]
    env = Env(a)
    trainer = Trainer(a.step_ms)
    probe = GilProbe()
    control = ControlProbe()
    rows = []
    try:
        for _ in range(50):
            trainer.step()
        probe.start()
        t0 = time.perf_counter()
        trainer.off = []
        alone = [trainer.step() for _ in range(3000)]
        alone_late = probe.stop()
        c = control.window(t0, time.perf_counter())[:2]
        base_med, base_p99 = statistics.median(alone), pct(alone, 99)
        rows.append(("training alone", alone, alone_late, None, None, c, trainer.off, ""))
        for cls in SAVERS + ([GilHog] if a.self_check else []):
            if any(s in cls.name for s in skip):
                continue
            sd = make_state(size)
            saver = None
            try:
                saver = cls(env)
                steps, lates, blocked, totals, c, offs = measure(trainer, probe, control,
                                                                 saver, sd, a.repeat)
                (hold, what), n = gil_holds(env, trainer, probe, control, cls, sd)
                note = (f"longest C call holding the GIL: {hold * 1e3:.1f} ms, {what}" if hold
                        else f"none of its threads' {n} C calls over 5 ms held it")
                rows.append((cls.name, steps, lates, statistics.median(blocked),
                             statistics.median(totals), c, offs, note))
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # noqa: BLE001  (DCP raises CheckpointException)
                msg = [m for m in str(e).splitlines() if m.strip()] or [""]
                rows.append((cls.name, [], [], None, None, None, None,
                             f"failed: {type(e).__name__}: {msg[-1][:100]}"))
            finally:
                if saver is not None:
                    saver.close()
                del sd
            print(rows[-1][0], "done", file=sys.stderr)
    finally:
        probe.close()
        control.close()
        env.cleanup()
    print(f"# train_beside_save: torch {torch.__version__}, {len(cpus)} CPUs {cpus}, "
          f"state {a.size}, {a.repeat} saves per row after a warm-up, MLP width "
          f"{trainer.width} (64 x {trainer.width}, 3 layers, 1 torch thread)\n")
    print("| training | steps | step median (ms) | x alone | step p99 (ms) | x alone | "
          "main thread not running in a step, max (ms) | longest wait to run, this process "
          "(ms) | p99 | longest, another process (ms) | p99 | save blocked (s) | "
          "save to commit (s) | note |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, steps, lates, blocked, total, c, offs, note in rows:
        if not steps:
            print(f"| {name} | - | - | - | - | - | - | - | - | - | - | - | - | {note} |")
            continue
        med, p99 = statistics.median(steps), pct(steps, 99)
        print(f"| {name} | {len(steps)} | {med * 1e3:.2f} | {med / base_med:.2f} | "
              f"{p99 * 1e3:.2f} | {p99 / base_p99:.2f} | {max(offs) * 1e3:.1f} | "
              f"{max(lates, default=0) * 1e3:.1f} | {pct(lates, 99) * 1e3:.2f} | "
              f"{c[0] * 1e3:.1f} | {c[1] * 1e3:.2f} | "
              f"{'-' if blocked is None else f'{blocked:.3f}'} | "
              f"{'-' if total is None else f'{total:.2f}'} | {note} |")


if __name__ == "__main__":
    main()
