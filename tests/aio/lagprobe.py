"""A member on :class:`rebalanser.aio.Client` in a process of its own that meters its loop's lag.

``python -m tests.aio.lagprobe --zk HOSTS --group PATH``: prints one JSON line per assignment change
(``{"owned": n}``), and on SIGTERM leaves and prints ``{"lag": {...}}`` (seconds): what the loop saw
while the member took, handed over and took back its resources.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import signal
import statistics
import sys
import time
from collections.abc import Callable

from rebalanser import Options
from rebalanser.aio import Client

PERIOD = 0.005


def emit(**record: object) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


async def meter(samples: list[float], stop: asyncio.Event, busy: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        before, cpu = loop.time(), time.thread_time()
        await asyncio.sleep(PERIOD)
        samples.append(loop.time() - before - PERIOD)
        busy.append(time.thread_time() - cpu)


async def main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    samples: list[float] = []
    busy: list[float] = []
    metering = asyncio.create_task(meter(samples, stop, busy))
    options = Options(args.zk, args.group, member_id=args.id, session_timeout=10, min_interval=0.5)
    pauses: list[float] = []
    gcpu: list[float] = []
    gc.callbacks.append(_gc_timer(pauses, gcpu))
    async with Client(options) as client:
        changes = client.assignments()
        emit(joined=True)
        waiting = asyncio.create_task(stop.wait())
        while not stop.is_set():
            step = asyncio.create_task(anext(changes))
            done, _ = await asyncio.wait({step, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if step in done:
                emit(owned=len(step.result().owned))
            else:
                step.cancel()
    await metering
    worst = sorted(samples)[-5:]
    emit(lag={"samples": len(samples), "max": max(samples), "top5": worst,
              "p99": statistics.quantiles(samples, n=100)[98], "median": statistics.median(samples),
              "gc_max": max(pauses, default=0.0),
              "busy_max": max(busy), "busy_top5": sorted(busy)[-5:],
              "worst_busy": busy[samples.index(max(samples))], "gc_cpu_max": max(gcpu, default=0.0)})


def _gc_timer(pauses: list[float], cpu: list[float]) -> Callable[[str, dict[str, int]], None]:
    started = [0.0, 0.0]

    def timer(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.monotonic(), time.thread_time()]
        else:
            pauses.append(time.monotonic() - started[0])
            cpu.append(time.thread_time() - started[1])

    return timer


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--zk", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--id", default="aio")
    asyncio.run(main(p.parse_args()))
