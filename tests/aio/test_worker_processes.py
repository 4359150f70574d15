"""``rebalanser worker --api asyncio`` in separate processes on real ZooKeeper, judged from their JSON
events alone: alone, and mixed with threaded workers (one protocol, two APIs)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.integration.conftest import add_resources
from tests.support.invariants import liveness_problems, overlaps, token_regressions
from tests.support.workers import Group

pytestmark = pytest.mark.zk

RESOURCES = {f"r{i:02d}" for i in range(24)}


def check(group: Group) -> None:
    events = group.events()
    assert overlaps(events) == []
    assert token_regressions(events) == []
    start_ns = time.monotonic_ns()
    time.sleep(0.5)  # an observation window for liveness evidence, not synchronisation
    live = {w.proc.pid for w in group.live() if w.proc}
    assert liveness_problems(group.events(), RESOURCES, live, start_ns, time.monotonic_ns()) == []


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
