"""A member on :class:`rebalanser.aio.Client` in a process of its own that meters its loop's lag.

``python -m tests.aio.lagprobe --zk HOSTS --group PATH``: prints one JSON line per assignment change
(``{"owned": n}``), and on SIGTERM leaves and prints ``{"lag": {...}}`` (seconds): what the loop saw
while the member took, handed over and took back its resources.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import cProfile
import gc
import json
import os
import signal
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable

from rebalanser import Options
from rebalanser.aio import Client

PERIOD = 0.005
_TRACE = bool(os.environ.get("REBALANSER_LAGPROBE_TRACE"))


def emit(**record: object) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class RunQueue:
    """How long this process's threads have waited for a CPU while runnable (Linux schedstat): the
    loop's thread, and the longest waiter among the others (on a loaded machine, typically a thread
    holding the interpreter lock, descheduled while the loop waits for that lock)."""

    def __init__(self) -> None:
        self._own = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        self._others: dict[str, int] = {}
        self._refreshed = 0.0

    def read(self) -> tuple[float, dict[str, float]]:
        now = time.monotonic()
        if now - self._refreshed > 0.1:  # threads come and go
            self._refreshed = now
            self._refresh()
        return _waited(self._own), {tid: _waited(fd) for tid, fd in self._others.items()}

    def _refresh(self) -> None:
        me = str(threading.get_native_id())
        alive = set(os.listdir("/proc/self/task")) - {me}
        for tid in set(self._others) - alive:
            os.close(self._others.pop(tid))
        for tid in alive - set(self._others):
            try:
                self._others[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            except OSError:
                pass


def _waited(fd: int) -> float:
    try:
        return int(os.pread(fd, 100, 0).split()[1]) / 1e9
    except (OSError, IndexError):
        return 0.0


async def meter(samples: list[float], stop: asyncio.Event, busy: list[float], net: list[float]) -> None:
    """Every period: how late the loop woke up (wall-clock), the CPU its thread used, and the lateness
    net of CPU waits: less the time the loop's thread and the longest-waiting other thread of the
    process spent runnable without a CPU (the machine's share of the lag, not the program's)."""
    loop = asyncio.get_running_loop()
    queue = RunQueue()
    while not stop.is_set():
        before, cpu, (own, others) = loop.time(), time.thread_time(), queue.read()
        await asyncio.sleep(PERIOD)
        samples.append(loop.time() - before - PERIOD)
        own_after, others_after = queue.read()
        other = max((w - others[t] for t, w in others_after.items() if t in others), default=0.0)
        net.append(max(0.0, samples[-1] - (own_after - own) - other))
        if _TRACE and samples[-1] > 0.010:
            sys.stderr.write(f"LAG {time.monotonic():.3f} {samples[-1] * 1e3:.1f} ms net {net[-1] * 1e3:.1f}\n")
        busy.append(time.thread_time() - cpu)


async def main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    samples: list[float] = []
    busy: list[float] = []
    net: list[float] = []
    metering = asyncio.create_task(meter(samples, stop, busy, net))
    pauses: list[float] = []
    gcpu: list[float] = []
    gc.callbacks.append(_gc_timer(pauses, gcpu))
    if args.control:
        emit(joined=True)
        await stop.wait()
    else:
        await member(args, stop)
    await metering
    emit(lag={"samples": len(samples), "max": max(samples), "top5": sorted(samples)[-5:],
              "p99": statistics.quantiles(samples, n=100)[98], "median": statistics.median(samples),
              "net_p99": statistics.quantiles(net, n=100)[98], "net_max": max(net),
              "gc_max": max(pauses, default=0.0),
              "busy_max": max(busy), "busy_top5": sorted(busy)[-5:],
              "worst_busy": busy[samples.index(max(samples))], "gc_cpu_max": max(gcpu, default=0.0)})


async def member(args: argparse.Namespace, stop: asyncio.Event) -> None:
    options = Options(args.zk, args.group, member_id=args.id, create_group=True, session_timeout=10, min_interval=0.5)
    async with Client(options) as client:
        changes = client.assignments()
        emit(joined=True)
        waiting = asyncio.create_task(stop.wait())
        while not stop.is_set():
            step = asyncio.create_task(anext(changes))
            done, _ = await asyncio.wait({step, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if step in done:
                emit(owned=len(step.result().owned))
                if _TRACE:
                    sys.stderr.write(f"OWNED {time.monotonic():.3f} {len(step.result().owned)}\n")
                    kinds = Counter(type(o).__name__ for o in gc.get_objects())
                    sys.stderr.write(f"HEAP {sum(kinds.values())} {kinds.most_common(8)}\n")
            else:
                step.cancel()


def _gc_timer(pauses: list[float], cpu: list[float]) -> Callable[[str, dict[str, int]], None]:
    started = [0.0, 0.0]

    def timer(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.monotonic(), time.thread_time()]
        else:
            pauses.append(time.monotonic() - started[0])
            cpu.append(time.thread_time() - started[1])
            if _TRACE:
                sys.stderr.write(f"GC {time.monotonic():.3f} gen {info.get('generation')} "
                                 f"{pauses[-1] * 1e3:.1f} ms ({cpu[-1] * 1e3:.1f} ms CPU) "
                                 f"on {threading.current_thread().name}\n")

    return timer


def _thread_cpu() -> None:
    """Diagnosis only (``REBALANSER_LAGPROBE_TRACE=1``): CPU seconds per thread, from /proc, at exit."""
    seen: dict[int, tuple[str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")

    def sample() -> None:
        while True:
            for thread in threading.enumerate():
                tid = thread.native_id
                try:
                    with open(f"/proc/self/task/{tid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                seen[tid or 0] = (thread.name, (int(fields[11]) + int(fields[12])) / tick)
            time.sleep(0.2)

    def report() -> None:
        for name, cpu in sorted(seen.values(), key=lambda v: -v[1]):
            sys.stderr.write(f"CPU {name} {cpu:.2f} s\n")

    threading.Thread(target=sample, daemon=True, name="cpu-sampler").start()
    atexit.register(report)


def _count_requests() -> None:
    """Diagnosis only (``REBALANSER_LAGPROBE_TRACE=1``): ZooKeeper requests sent, by kind, at exit."""
    from kazoo.client import KazooClient

    counts: Counter[str] = Counter()
    call = KazooClient._call

    def counted(self: KazooClient, request: object, async_object: object) -> object:
        counts[f"{type(request).__name__}{'+watch' if getattr(request, 'watcher', None) else ''}"] += 1
        return call(self, request, async_object)

    KazooClient._call = counted
    atexit.register(lambda: sys.stderr.write(f"REQUESTS {dict(counts.most_common())}\n"))


def _trace_member() -> None:
    """Diagnosis only (``REBALANSER_LAGPROBE_TRACE=1``): each event the member handles, with its
    wall and CPU time, and every ZooKeeper-heavy claim operation."""
    from rebalanser.claims import ClaimBook
    from rebalanser.client import Client as Member

    def timed(cls: type, name: str) -> None:
        inner = getattr(cls, name)

        def wrapper(self: object, *args: object, **kwargs: object) -> object:
            t, c = time.monotonic(), time.thread_time()
            try:
                return inner(self, *args, **kwargs)
            finally:
                what = type(args[0]).__name__ if name == "_dispatch" else f"{name}({_size(args)})"
                sys.stderr.write(f"DO {t:.3f} {what} {(time.monotonic() - t) * 1e3:.1f} ms "
                                 f"({(time.thread_time() - c) * 1e3:.1f} ms CPU)\n")

        setattr(cls, name, wrapper)

    timed(Member, "_dispatch")
    for name in ("claim", "release", "watch_releases", "_taken", "_still_ours"):
        timed(ClaimBook, name)


def _size(args: tuple[object, ...]) -> str:
    first = args[0] if args else None
    return str(len(first)) if isinstance(first, list | set | frozenset | dict | tuple) else "?"


def _profile_threads(directory: str) -> None:
    """Diagnosis only (``REBALANSER_LAGPROBE_PROFILE=dir``): a cProfile per thread, dumped at exit."""
    profiles: list[tuple[str, cProfile.Profile]] = []

    def begin(*_: object) -> None:
        profiler = cProfile.Profile()
        profiles.append((threading.current_thread().name, profiler))
        profiler.enable()

    def dump() -> None:
        for i, (name, profiler) in enumerate(profiles):
            profiler.disable()
            profiler.dump_stats(f"{directory}/{i:02d}-{name}.prof")

    threading.setprofile(begin)
    atexit.register(dump)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--zk")
    p.add_argument("--group")
    p.add_argument("--control", action="store_true", help="no member: the loop of an idle program")
    p.add_argument("--id", default="aio")
    if _TRACE:
        _thread_cpu()
        _count_requests()
        _trace_member()
    if os.environ.get("REBALANSER_LAGPROBE_PROFILE"):
        _profile_threads(os.environ["REBALANSER_LAGPROBE_PROFILE"])
    asyncio.run(main(p.parse_args()))
