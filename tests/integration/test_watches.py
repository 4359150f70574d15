"""ChildrenTrigger on a real server: it survives deletion and re-creation of its node, and a
reconnection that kazoo answers by dropping every watch."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from rebalanser.watches import ChildrenTrigger

from tests.chaos.proxy import FaultProxy
from tests.support.workers import wait_for
from tests.support.zk import admin_client


class Counter:
    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self) -> None:
        with self.lock:
            self.calls += 1


@pytest.fixture
def proxied(zk_hosts: str) -> Iterator[tuple[FaultProxy, KazooClient]]:
    proxy = FaultProxy(zk_hosts.split(","))
    try:
        with admin_client(proxy.hosts) as client:
            yield proxy, client
    finally:
        proxy.close()


def test_the_trigger_follows_deletion_and_re_creation(zk: KazooClient, zk_hosts: str, group_path: str) -> None:
    path = f"{group_path}/resources"
    zk.ensure_path(path)
    seen = Counter()
    with admin_client(zk_hosts) as client:
        trigger = ChildrenTrigger(client, path, seen)
        with pytest.raises(LookupError):
            _ = trigger.children  # nothing listed yet: a caller must list by itself
        trigger.start()
        try:
            assert seen.calls == 1 and trigger.children == []
            zk.create(f"{path}/a")
            wait_for(lambda: seen.calls == 2, 10, "a new child was not seen")
            assert trigger.children == ["a"], "a change is listed before it is reported"
            zk.delete(path, recursive=True)
            wait_for(lambda: seen.calls >= 3, 10, "the deletion was not seen")
            wait_for(lambda: trigger.children is None, 10, "the deleted node is still listed")
            after_delete = seen.calls
            zk.create(f"{path}/b", makepath=True)
            wait_for(lambda: seen.calls > after_delete, 10, "the re-created node was not seen")
            settled = seen.calls
            zk.create(f"{path}/c")
            wait_for(lambda: seen.calls > settled, 10, "children of the re-created node were not seen")
        finally:
            trigger.stop()
        stopped = seen.calls
        witness = Counter()  # a second trigger on the same client: when it has seen a change, so would have the first
        other = ChildrenTrigger(client, path, witness)
        other.start()
        try:
            zk.create(f"{path}/d")
            wait_for(lambda: witness.calls == 2, 10, "the witness never saw the change")
            assert seen.calls == stopped, "a stopped trigger still called back"
        finally:
            other.stop()


def test_a_change_made_while_disconnected_is_seen_after_reconnecting(
    zk: KazooClient, group_path: str, proxied: tuple[FaultProxy, KazooClient]
) -> None:
    proxy, client = proxied
    path = f"{group_path}/clients"
    zk.ensure_path(path)
    seen = Counter()
    trigger = ChildrenTrigger(client, path, seen)
    trigger.start()
    session = client.client_id[0]
    try:
        proxy.blackhole()  # reconnection attempts go nowhere until restored
        assert proxy.cut() >= 1
        wait_for(lambda: not client.connected, 10, "the client never noticed the cut")
        zk.create(f"{path}/while-away")
        proxy.restore()
        wait_for(lambda: seen.calls == 2, 15, "a change made during the disconnection was never seen")
        assert client.client_id is not None and client.client_id[0] == session, "the session must survive"
        zk.create(f"{path}/after")  # and the watch is armed again
        wait_for(lambda: seen.calls == 3, 10, "the watch was not armed again after reconnecting")
    finally:
        trigger.stop()


def test_a_data_trigger_follows_creation_changes_deletion_and_reconnection(
    zk: KazooClient, group_path: str, proxied: tuple[FaultProxy, KazooClient]
) -> None:
    """DataTrigger (the coordinator's watch on G/epoch, G/config, G/barrier): called at the start, then
    at each change (creation and deletion included) and for a change made while disconnected; it ends
    when its callback returns False."""
    from rebalanser.watches import DataTrigger

    proxy, client = proxied
    path = f"{group_path}/config"
    zk.ensure_path(group_path)
    seen: list[bytes | None] = []
    keep = threading.Event()
    keep.set()

    def on_data(data: bytes | None, _stat: object) -> bool:
        seen.append(data)
        return keep.is_set()

    DataTrigger(client, path, on_data).start()
    assert seen == [None], "called once at the start, with no node"
    zk.create(path, b"1")
    wait_for(lambda: seen[-1:] == [b"1"], 10, lambda: f"the creation was not seen: {seen}")
    zk.set(path, b"2")
    wait_for(lambda: seen[-1:] == [b"2"], 10, lambda: f"the change was not seen: {seen}")
    proxy.blackhole()
    proxy.cut()
    zk.set(path, b"3")  # while the trigger's client is cut off
    proxy.restore()
    wait_for(lambda: seen[-1:] == [b"3"], 20, lambda: f"the change made while disconnected was not seen: {seen}")
    zk.delete(path)
    wait_for(lambda: seen[-1:] == [None], 10, lambda: f"the deletion was not seen: {seen}")
    keep.clear()
    zk.create(path, b"4")
    wait_for(lambda: seen[-1:] == [b"4"], 10, lambda: f"the re-creation was not seen: {seen}")
    calls = len(seen)
    witnessed: list[bytes | None] = []  # a second trigger, same client: once it saw the change, so would the first

    def witness(data: bytes | None, _stat: object) -> bool:
        witnessed.append(data)
        return True

    DataTrigger(client, path, witness).start()
    zk.set(path, b"5")
    wait_for(lambda: witnessed[-1:] == [b"5"], 10, lambda: f"the witness never saw the change: {witnessed}")
    assert len(seen) == calls and seen[-1] == b"4", f"called again after returning False: {seen}"
