"""``rebalanser worker --api asyncio`` in separate processes on real ZooKeeper, judged from their JSON
events alone: alone, and mixed with threaded workers (one protocol, two APIs)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.integration.conftest import add_resources
from tests.support.invariants import liveness_problems, overlaps, token_regressions
from tests.support.workers import Group, wait_for

pytestmark = pytest.mark.zk

RESOURCES = {f"r{i:02d}" for i in range(24)}


def check(group: Group) -> None:
    events = group.events()
    assert overlaps(events) == []
    assert token_regressions(events) == []
    start_ns = time.monotonic_ns()
    time.sleep(0.5)  # an observation window for liveness evidence, not synchronisation
    end_ns = time.monotonic_ns()
    live = {w.proc.pid for w in group.live() if w.proc}

    # Each worker's events are read from its stdout by a thread of its own, behind the worker's writes: the
    # window's ticks are awaited (bounded), not only those read by its end. Only "never worked on" clears
    # as they come; a second owner, a dead worker's tick or a non-resource stays.
    def problems() -> list[str]:
        return liveness_problems(group.events(), RESOURCES, live, start_ns, end_ns)

    wait_for(lambda: not problems(), 10, lambda: f"liveness problems in the window: {problems()}")


@pytest.mark.parametrize("apis", [("asyncio", "asyncio", "asyncio"), ("asyncio", "threads", "asyncio")])
def test_asyncio_workers_share_hand_over_and_stop_cleanly(
    zk_hosts: str, zk: KazooClient, group_path: str, tmp_path: Path, apis: tuple[str, ...]
) -> None:
    add_resources(zk, group_path, sorted(RESOURCES))
    group = Group(zk_hosts, group_path, tmp_path)
    try:
        for i, api in enumerate(apis):
            group.spawn(f"w{i}", "--api", api, "--simulate-stop-delay", "0.1")
        group.wait_settled(RESOURCES, timeout=30)
        check(group)
        leaver = group.workers["w0"]
        assert leaver.terminate() == 0
        assert leaver.of("stopped") and leaver.of("revoked"), "the asyncio worker did not stop its resources"
        group.wait_settled(RESOURCES, timeout=group.session_timeout + group.min_interval + 10)
        check(group)
    finally:
        group.stop_all()
    assert all(w.proc is not None and w.proc.returncode == 0 for w in group.all_workers())
    assert zk.get_children(f"{group_path}/clients") == []
