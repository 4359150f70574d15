"""What a user writing a worker relies on, stated in the Handler's docstrings and docs/protocol.md
("What a handler sees"): ``owned()`` agrees with ``owns()``, ``connected`` comes once per session, the
wait for an earlier incarnation is reported, callbacks carry deltas, a token belongs to the claim, and
``G/config`` wins over the workers' own algorithm."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence

from kazoo.client import KazooClient
from rebalanser.admin import GroupAdmin, connect
from rebalanser.client import Client
from rebalanser.config import Algorithm, GroupConfig
from rebalanser.membership import create_member_node
from rebalanser.options import Options
from rebalanser.paths import GroupPaths

from tests.integration.conftest import add_resources
from tests.support.recorder import Recorder
from tests.support.workers import wait_for


class Calls(Recorder):
    """Every on_assigned/on_revoked call as it came; on_revoked blocks while ``hold`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, dict[str, int] | list[str]]] = []
        self.hold = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        self.calls.append(("assigned", dict(resources)))
        super().on_assigned(resources)

    def on_revoked(self, resources: Sequence[str]) -> None:
        self.calls.append(("revoked", list(resources)))
        if self.hold.is_set():
            self.entered.set()
            self.release.wait(60)
        super().on_revoked(resources)


def options(hosts: str, group: str, member_id: str = "m", **kw: object) -> Options:
    return Options(hosts, group, member_id=member_id, create_group=True, session_timeout=2, min_interval=0.1, **kw)  # type: ignore[arg-type]


def test_owned_and_owns_agree_while_stop_runs(zk_hosts: str, zk: KazooClient, group_path: str) -> None:
    add_resources(zk, group_path, ["a", "b"])
    handler = Calls()
    client = Client(options(zk_hosts, group_path), handler)
    client.start()
    stopper = threading.Thread(target=client.stop)
    try:
        wait_for(lambda: handler.owned == {"a", "b"}, 20, "never assigned")
        assert set(client.owned()) == {r for r in ("a", "b") if client.owns(r)} == {"a", "b"}
        handler.hold.set()
        stopper.start()
        assert handler.entered.wait(20), "the stop callback never ran"
        assert client.owned() == {} and not client.owns("a") and not client.owns("b"), client.owned()
    finally:
        handler.release.set()
        if stopper.is_alive():
            stopper.join(20)
        client.stop(10)


def test_connected_is_reported_once_and_the_wait_for_an_earlier_incarnation_is_visible(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a"])
    earlier = KazooClient(hosts=zk_hosts, timeout=10)
    earlier.start(timeout=15)
    handler = Calls()
    client = Client(options(zk_hosts, group_path), handler)
    starter = threading.Thread(target=client.start, daemon=True)
    try:
        create_member_node(earlier, GroupPaths.of(group_path), "m", time.monotonic() + 10)
        starter.start()
        wait_for(lambda: "waiting" in handler.sessions, 20, lambda: f"no waiting event: {handler.sessions}")
        earlier.stop()  # the earlier incarnation's node goes: the member joins
        wait_for(lambda: handler.owned == {"a"}, 30, lambda: f"never assigned: {handler.sessions}")
        starter.join(30)
        assert handler.sessions[:2] == ["connected", "waiting"], handler.sessions
        assert handler.sessions.count("connected") == 1, handler.sessions
    finally:
        client.stop(10)
        earlier.stop()
        earlier.close()


def test_callbacks_carry_deltas(zk_hosts: str, zk: KazooClient, group_path: str) -> None:
    """Each call names only what changed: a second resource arrives alone, a removed one leaves alone."""
    add_resources(zk, group_path, ["a"])
    handler = Calls()
    client = Client(options(zk_hosts, group_path), handler)
    client.start()
    try:
        wait_for(lambda: handler.owned == {"a"}, 20, "never assigned a")
        zk.create(f"{group_path}/resources/b")
        wait_for(lambda: handler.owned == {"a", "b"}, 20, "never assigned b")
        zk.delete(f"{group_path}/resources/a")
        wait_for(lambda: handler.owned == {"b"}, 20, "a never revoked")
        assert [(kind, sorted(names)) for kind, names in handler.calls] == [
            ("assigned", ["a"]), ("assigned", ["b"]), ("revoked", ["a"])]
    finally:
        client.stop(10)


def test_a_global_barrier_round_revokes_and_reassigns_with_the_same_token(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    """The token belongs to the claim: a resource that stays with its owner through a Global Barrier
    round is revoked and assigned again, and keeps its token (no new claim was made)."""
    add_resources(zk, group_path, ["a", "b", "c", "d"])
    first, second = Calls(), Calls()
    one = Client(options(zk_hosts, group_path, "m1", algorithm=Algorithm.GLOBAL_BARRIER), first)
    two = Client(options(zk_hosts, group_path, "m2", algorithm=Algorithm.GLOBAL_BARRIER), second)
    one.start()
    try:
        wait_for(lambda: first.owned == {"a", "b", "c", "d"}, 20, "m1 never got everything")
        tokens = dict(one.owned())
        two.start()
        wait_for(lambda: len(second.owned) == 2 and len(first.owned) == 2, 30,
                 lambda: f"no even split: {first.owned} {second.owned}")
        kept = first.owned
        regranted = [names for kind, names in first.calls[1:] if kind == "assigned"]
        assert any(set(names) == kept for names in regranted), first.calls  # revoked, then assigned again
        assert {r: one.owned()[r] for r in kept} == {r: tokens[r] for r in kept}, (one.owned(), tokens)
    finally:
        two.stop(10)
        one.stop(10)


def test_the_groups_config_wins_over_the_workers_algorithm(zk_hosts: str, zk: KazooClient, group_path: str) -> None:
    """Precedence: G/config when present, else each worker's own Options.algorithm (the coordinator's
    decides, as it runs the rebalance)."""
    with connect(zk_hosts) as admin:
        GroupAdmin(admin, group_path).create(GroupConfig(algorithm=Algorithm.GLOBAL_BARRIER))
    add_resources(zk, group_path, ["a", "b"])
    handler = Calls()
    client = Client(options(zk_hosts, group_path, algorithm=Algorithm.RESOURCE_BARRIER), handler)
    client.start()
    try:
        wait_for(lambda: handler.owned == {"a", "b"}, 20, "never assigned")
        wait_for(lambda: zk.exists(f"{group_path}/state") is not None, 20, "no rebalance recorded")
        assert json.loads(zk.get(f"{group_path}/state")[0])["algorithm"] == "GlobalBarrier"
    finally:
        client.stop(10)
