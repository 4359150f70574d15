"""Round trips a coordinator spends between a membership change and its write (issue 30), counted on
its own session against a real ZooKeeper.

Evidence: the requests the coordinator's session sends, in order, and the znodes as the test's own
session reads them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kazoo.client import KazooClient
from rebalanser.client import Client
from rebalanser.options import Options
from rebalanser.paths import GroupPaths

from tests.integration.conftest import add_resources
from tests.support.recorder import Recorder
from tests.support.workers import wait_for

RESOURCES = [f"r{i:02d}" for i in range(12)]


def options(hosts: str, group: str, member: str, **kw: Any) -> Options:
    return Options(hosts, group, member_id=member, create_group=True, session_timeout=2, min_interval=0.1, **kw)


@contextmanager
def requests_recorded(store: Any, request: str, label: str) -> Iterator[list[tuple[str, str]]]:
    """While open, each call of the coordinator session's ``request`` (``f"{label} {path}"``) and each
    assignment write (``"write"``), in order, with the name of the thread that made it; put back after."""
    trail: list[tuple[str, str]] = []
    lock = threading.Lock()
    sent, write_assignments = getattr(store._zk, request), store.write_assignments

    def note(what: str) -> None:
        with lock:
            trail.append((threading.current_thread().name, what))

    def sent_recorded(path: str, *args: Any, **kwargs: Any) -> Any:
        note(f"{label} {path}")
        return sent(path, *args, **kwargs)

    def write_recorded(*args: Any, **kwargs: Any) -> Any:
        note("write")
        return write_assignments(*args, **kwargs)

    setattr(store._zk, request, sent_recorded)
    store.write_assignments = write_recorded
    try:
        yield trail
    finally:
        setattr(store._zk, request, sent)
        store.write_assignments = write_assignments


@pytest.mark.parametrize("grace", [0.0, 30.0])
def test_a_departed_members_assignment_is_checked_once_while_the_plan_is_made(
    zk_hosts: str, zk: KazooClient, group_path: str, grace: float,
) -> None:
    """After a leave, whether the leaver's assignment node is still there (a graceful leaver deletes its
    own) is asked before the plan, so the answer arrives while it is made: the write that follows sends
    no request of its own first. Before, that check was a round trip between the plan and the write.
    With a departure grace, the same answer tells a graceful leaver (no grace: its resources move at
    once) from a vanished member, without a second request."""
    add_resources(zk, group_path, RESOURCES)
    recorders = {m: Recorder() for m in ("m0", "m1", "m2")}
    clients = {m: Client(options(zk_hosts, group_path, m, departure_grace=grace), r) for m, r in recorders.items()}
    clients["m0"].start()
    wait_for(lambda: clients["m0"].role == "coordinator", 15, "m0 never coordinated")
    for m in ("m1", "m2"):
        clients[m].start()
    try:
        wait_for(lambda: all(len(r.owned) == 4 for r in recorders.values()), 30,
                 lambda: f"never balanced: {[sorted(r.owned) for r in recorders.values()]}")
        coordinator: Any = clients["m0"]._coordinator
        store, paths = coordinator._store, GroupPaths.of(group_path)
        leaver = clients["m2"].member_node
        assert leaver is not None
        checked = paths.member_assignment(leaver)
        with requests_recorded(store, "exists_async", "exists") as trail:  # from the leave on
            clients["m2"].stop()
            wait_for(lambda: len(recorders["m0"].owned | recorders["m1"].owned) == len(RESOURCES)
                     and len(recorders["m0"].owned) == len(recorders["m1"].owned) == 6, 30,
                     lambda: f"the leaver's resources never moved: {sorted(recorders['m0'].owned)}, "
                             f"{sorted(recorders['m1'].owned)}")
        asked = [what for _, what in trail]
        assert "write" in asked, f"the coordinator never wrote after the leave: {asked}"
        first_write = asked.index("write")
        assert f"exists {checked}" in asked[:first_write], (
            f"the leaver's assignment node was not checked before the write began: {asked}")
        assert asked.count(f"exists {checked}") == 1, f"checked more than once: {asked}"
        assert zk.exists(checked) is None, "the leaver's assignment node is still there"
    finally:
        for client in clients.values():
            client.stop()


def test_a_rebalance_woken_by_a_join_plans_with_the_watchs_listing_of_the_members(
    zk_hosts: str, zk: KazooClient, group_path: str,
) -> None:
    """The watch on ``G/clients`` lists the members as it is armed again, and the rebalance it wakes plans
    with that listing: the coordinator's own thread lists them no second time before its write (it did
    before, one round trip between the change and the plan)."""
    add_resources(zk, group_path, RESOURCES)
    recorders = {m: Recorder() for m in ("m0", "m1", "m2")}
    clients = {m: Client(options(zk_hosts, group_path, m), r) for m, r in recorders.items()}
    clients["m0"].start()
    wait_for(lambda: clients["m0"].role == "coordinator", 15, "m0 never coordinated")
    clients["m1"].start()
    try:
        wait_for(lambda: len(recorders["m0"].owned) == len(recorders["m1"].owned) == 6, 30,
                 lambda: f"never balanced: {[sorted(r.owned) for r in recorders.values()]}")
        coordinator: Any = clients["m0"]._coordinator
        store, members = coordinator._store, GroupPaths.of(group_path).clients
        with requests_recorded(store, "get_children", "list") as asked:  # from the join on
            clients["m2"].start()
            wait_for(lambda: all(len(r.owned) == 4 for r in recorders.values()), 30,
                     lambda: f"the joiner never got its share: {[sorted(r.owned) for r in recorders.values()]}")
        writes = [i for i, (_, request) in enumerate(asked) if request == "write"]
        assert writes, f"the coordinator never wrote after the join: {asked}"
        before_write = asked[:writes[0]]
        assert any(request == f"list {members}" for _, request in before_write), (
            f"the watch on G/clients did not list the members again before the write: {asked}")
        writer = asked[writes[0]][0]
        assert (writer, f"list {members}") not in before_write, (
            f"the coordinator's thread ({writer}) listed the members again before its write: {asked}")
    finally:
        for client in clients.values():
            client.stop()
