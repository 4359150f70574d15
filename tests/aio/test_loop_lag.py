"""Nothing the library does blocks the user's loop, measured while a member on it takes 10k resources,
hands half of them to a newcomer and takes them back.

The member runs in a process of its own (:mod:`tests.aio.lagprobe`), as an asyncio service would, and
meters its loop every 5 ms: the wall-clock lag (how late a 5 ms sleep wakes up), and that lag net of
CPU waits, less the time the loop's thread, and the process's longest-waiting other thread (say one
holding the interpreter lock), spent runnable without a CPU. The net lag is what the program itself
costs its loop: work on the loop, waits for the interpreter lock while the member's or kazoo's threads
run, garbage collection. Its 99th percentile is held under 20 ms. On a quiet machine the two are the
same; on a loaded one the wall-clock lag is mostly the machine's (an idle loop in another process, the
control, metered over the same window, shows as much), so it is printed with the control's, not
asserted; nor is the maximum (see docs/asyncio.md for the figures).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.support.workers import Group, Worker, wait_for

pytestmark = pytest.mark.zk

RESOURCES = 10_000
LAG_BOUND = 0.020


def create_resources(zk: KazooClient, group: str, names: list[str]) -> None:
    zk.ensure_path(f"{group}/resources")
    for pending in [zk.create_async(f"{group}/resources/{n}") for n in names]:
        pending.get(timeout=60)


def ms(seconds: float) -> float:
    return round(seconds * 1e3, 1)


def owned(probe: Worker) -> int:
    counts = [e["owned"] for e in probe.snapshot() if "owned" in e]
    return counts[-1] if counts else -1


def ticked(worker: Worker) -> bool:
    return any(e["event"] == "tick" for e in worker.snapshot())


def test_loop_lag_p99_stays_under_20ms_while_rebalancing_10k_resources(
    zk_hosts: str, zk: KazooClient, group_path: str, tmp_path: Path
) -> None:
    create_resources(zk, group_path, [f"r{i:05d}" for i in range(RESOURCES)])
    probe = Worker("aio", ["--zk", zk_hosts, "--group", group_path], tmp_path, module="tests.aio.lagprobe")
    control = Worker("control", ["--control"], tmp_path, module="tests.aio.lagprobe")
    group = Group(zk_hosts, group_path, tmp_path, tick=5.0)  # the newcomer: a worker process
    phases: dict[str, float] = {}

    def reach(count: int, phase: str, started: float) -> None:
        wait_for(lambda: owned(probe) == count, 120, lambda: f"{phase}: the probe owns {owned(probe)}", poll=0.1)
        phases[phase] = time.monotonic() - started

    try:
        control.start()
        started = time.monotonic()
        probe.start()
        reach(RESOURCES, "take 10k", started)
        started = time.monotonic()
        newcomer = group.spawn("proc")
        reach(RESOURCES // 2, "hand over 5k", started)
        # The newcomer's start() returns after its first claim round, which may still be under way when
        # the probe has let go: a SIGTERM then ends a worker that has not joined (exit 143). Its own
        # events say when it works on its half, and its ticks (from its main loop, after start()) that
        # a SIGTERM now makes it leave.
        wait_for(lambda: len(newcomer.owned()) == RESOURCES // 2 and ticked(newcomer), 120,
                 lambda: f"the newcomer works on {len(newcomer.owned())} resources, ticked: {ticked(newcomer)}",
                 poll=0.1)
        started = time.monotonic()
        assert newcomer.terminate(120) == 0
        reach(RESOURCES, "take back 5k", started)
        for process in (control, probe):  # both stop metering at once
            process.signal(signal.SIGTERM)
        assert control.wait(30) == 0
        assert probe.wait(120) == 0
    finally:
        group.stop_all()
        for process in (probe, control):
            if process.alive:
                process.kill()
    lags = [e["lag"] for e in probe.snapshot() if "lag" in e]
    assert lags, "the probe did not report its loop lag"
    lag = lags[0]
    idle = next(e["lag"] for e in control.snapshot() if "lag" in e)
    print(f"control (an idle loop in another process, same window): p99 {ms(idle['p99'])} ms, "
          f"max {ms(idle['max'])} ms, median {ms(idle['median'])} ms; net of CPU waits p99 "
          f"{ms(idle['net_p99'])} ms, max {ms(idle['net_max'])} ms")
    print(f"probe net of CPU waits: p99 {ms(lag['net_p99'])} ms, max {ms(lag['net_max'])} ms")
    print(f"loop lag over {lag['samples']} periods: wall-clock max {ms(lag['max'])} ms (top 5 "
          f"{[ms(x) for x in lag['top5']]}), p99 {ms(lag['p99'])} ms, median {ms(lag['median'])} ms; the loop "
          f"thread busy at most {ms(lag['busy_max'])} ms (top 5 {[ms(x) for x in lag['busy_top5']]}), "
          f"{ms(lag['worst_busy'])} ms in the worst period; longest GC pause {ms(lag['gc_max'])} ms "
          f"({ms(lag['gc_cpu_max'])} ms CPU); phases " + ", ".join(f"{k} {v:.1f}s" for k, v in phases.items()))
    assert lag["net_p99"] < LAG_BOUND, (
        f"the loop's lag net of CPU waits reached {ms(lag['net_p99'])} ms at the 99th percentile")
