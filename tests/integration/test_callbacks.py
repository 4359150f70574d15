"""User callbacks: graceful stop ordering, hanging and raising stop callbacks."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from kazoo.client import KazooClient
from rebalanser.client import Client, StopTimeoutError
from rebalanser.handler import Handler
from rebalanser.options import Options

from tests.integration.conftest import add_resources
from tests.support.workers import wait_for


class Blocking(Handler):
    """on_revoked blocks until released (or raises), so the test can look at ZooKeeper meanwhile."""

    def __init__(self, raise_error: bool = False) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.owned: set[str] = set()
        self.errors: list[Exception] = []
        self.raise_error = raise_error

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        self.owned |= set(resources)

    def on_revoked(self, resources: Sequence[str]) -> None:
        self.entered.set()
        self.release.wait(60)
        self.owned -= set(resources)
        if self.raise_error:
            raise RuntimeError("stop callback failed")

    def on_error(self, error: Exception) -> None:
        self.errors.append(error)


def client(hosts: str, group: str, handler: Handler, **kw: float) -> Client:
    return Client(Options(hosts, group, member_id="m", session_timeout=2, min_interval=0.1, **kw), handler)  # type: ignore[arg-type]


def test_graceful_stop_keeps_claims_and_membership_until_the_stop_callback_returns(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a"])
    handler = Blocking()
    c = client(zk_hosts, group_path, handler)
    c.start()
    wait_for(lambda: handler.owned == {"a"}, 10, "never assigned")
    stopper = threading.Thread(target=c.stop)
    stopper.start()
    assert handler.entered.wait(10)
    assert not c.owns("a"), "ownership must end before the stop callback runs"
    assert zk.exists(f"{group_path}/owners/a") is not None, "claim released while the owner still stops"
    assert zk.get_children(f"{group_path}/clients"), "member znode removed before the stop callback returned"
    handler.release.set()
    stopper.join(10)
    assert zk.exists(f"{group_path}/owners/a") is None
    assert zk.get_children(f"{group_path}/clients") == []


def test_a_hanging_stop_callback_is_bounded_and_reported(zk_hosts: str, zk: KazooClient, group_path: str) -> None:
    add_resources(zk, group_path, ["a"])
    handler = Blocking()
    c = client(zk_hosts, group_path, handler, stop_timeout=0.5)
    c.start()
    try:
        wait_for(lambda: handler.owned == {"a"}, 10, "never assigned")
        zk.delete(f"{group_path}/resources/a")  # revokes "a"; its callback hangs
        wait_for(lambda: zk.exists(f"{group_path}/owners/a") is None, 10, "claim never released")
        assert any(isinstance(e, StopTimeoutError) for e in handler.errors)
        assert not c.owns("a")
    finally:
        handler.release.set()
        c.stop()


def test_a_raising_stop_callback_is_reported_and_the_resource_moves_on(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a"])
    handler = Blocking(raise_error=True)
    handler.release.set()
    c = client(zk_hosts, group_path, handler)
    c.start()
    try:
        wait_for(lambda: handler.owned == {"a"}, 10, "never assigned")
        zk.delete(f"{group_path}/resources/a")
        wait_for(lambda: zk.exists(f"{group_path}/owners/a") is None, 10, "claim never released")
        assert any(isinstance(e, RuntimeError) for e in handler.errors)
        zk.create(f"{group_path}/resources/a")
        wait_for(lambda: c.owns("a"), 10, "re-created resource never reassigned")
    finally:
        c.stop()
