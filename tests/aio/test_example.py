"""examples/asyncio_worker.py, run as a user would, against real ZooKeeper: two consumers share the
resources, work only on what they own (judged from their own output), and hand over on SIGTERM."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.integration.conftest import add_resources
from tests.support.invariants import overlaps, token_regressions
from tests.support.workers import Worker, wait_for

pytestmark = pytest.mark.zk

RESOURCES = {f"r{i}" for i in range(6)}


def consumer(name: str, hosts: str, group: str, log_dir: Path) -> Worker:
    args = ["--zk", hosts, "--group", group, "--id", name, "--session-timeout", "2", "--period", "0.05"]
    return Worker(name, args, log_dir, module="examples.asyncio_worker").start()


def ticked_outside_ownership(worker: Worker) -> list[str]:
    """Ticks on a resource the consumer had not been assigned, or had already been revoked."""
    owned: set[str] = set()
    wrong = []
    for event in worker.snapshot():
        if event["event"] == "assigned":
            owned |= set(event["resources"])
        elif event["event"] == "revoked":
            owned -= set(event["resources"])
        elif event["event"] == "tick" and event["resource"] not in owned:
            wrong.append(event["resource"])
    return wrong


def test_the_asyncio_example_works_only_on_owned_resources(
    zk_hosts: str, zk: KazooClient, group_path: str, tmp_path: Path
) -> None:
    add_resources(zk, group_path, sorted(RESOURCES))
    a = consumer("a", zk_hosts, group_path, tmp_path)
    b = consumer("b", zk_hosts, group_path, tmp_path)
    workers = [a, b]
    try:
        def shared() -> bool:
            mine = [w.owned() for w in workers]
            return mine[0] | mine[1] == RESOURCES and not mine[0] & mine[1] and len(mine[0]) == 3
        wait_for(shared, 30, lambda: f"a {sorted(a.owned())}, b {sorted(b.owned())}")
        wait_for(lambda: {e["resource"] for w in workers for e in w.of("tick")} == RESOURCES, 10,
                 "not every resource was worked on")
        assert a.terminate() == 0 and a.of("stopped")
        wait_for(lambda: b.owned() == RESOURCES, 30, lambda: f"b owns {sorted(b.owned())}")
        ticks_b = len(b.of("tick"))
        wait_for(lambda: {e["resource"] for e in b.of("tick")[ticks_b:]} == RESOURCES, 10,
                 "b does not work on what it took over")
    finally:
        for w in workers:
            if w.alive:
                w.terminate()
    assert b.proc is not None and b.proc.returncode == 0
    events = sorted((e for w in workers for e in w.snapshot()), key=lambda e: e["ts"])
    assert overlaps(events) == []
    assert token_regressions(events) == []
    assert ticked_outside_ownership(a) == [] and ticked_outside_ownership(b) == []
