"""The fault proxy against a real ZooKeeper server: partitions are silent, cuts and write traps cause
ConnectionLoss, and a delivered write is applied although its reply is lost."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from tests.chaos.proxy import FaultProxy, RequestTap
from tests.support.workers import wait_for
from tests.support.zk import ZkCluster, admin_client


@pytest.fixture
def proxy(chaos_single: ZkCluster) -> Iterator[FaultProxy]:
    p = FaultProxy([s.address for s in chaos_single.servers])
    yield p
    p.close()


def client(hosts: str, states: list[str]) -> KazooClient:
    zk = KazooClient(hosts=hosts, timeout=2.0)
    zk.add_listener(lambda state: states.append(str(state)))
    zk.start(timeout=10)
    return zk


def test_a_blackhole_is_silent_until_the_session_expires(proxy: FaultProxy, chaos_single: ZkCluster) -> None:
    states: list[str] = []
    zk = client(proxy.hosts, states)
    try:
        path = f"/proxy-test/{uuid.uuid4().hex}"
        zk.create(path, ephemeral=True, makepath=True)
        with admin_client(chaos_single.hosts, start_timeout=10) as admin:
            proxy.blackhole()
            started = time.monotonic()
            wait_for(lambda: KazooState.SUSPENDED in states, 5, "client never noticed the partition")
            assert time.monotonic() - started > 0.5, "a partition must not look like a closed connection"
            wait_for(lambda: admin.exists(path) is None, 10, "the server never expired the partitioned session")
            proxy.restore()
            wait_for(lambda: KazooState.LOST in states, 10, f"client never learned of the expiry: {states}")
    finally:
        zk.stop()
        zk.close()


def test_a_cut_is_a_connection_loss_in_the_same_session(proxy: FaultProxy) -> None:
    states: list[str] = []
    zk = client(proxy.hosts, states)
    try:
        session = zk.client_id
        assert proxy.cut() >= 1
        wait_for(lambda: KazooState.SUSPENDED in states, 5, "no suspension after the cut")
        wait_for(lambda: zk.connected, 10, "no reconnection after the cut")
        assert zk.client_id == session and KazooState.LOST not in states
    finally:
        zk.stop()
        zk.close()


@pytest.mark.parametrize("deliver", [True, False])
def test_a_write_trap_loses_the_reply_or_the_request(proxy: FaultProxy, deliver: bool) -> None:
    states: list[str] = []
    zk = client(proxy.hosts, states)
    try:
        path = f"/proxy-test/{uuid.uuid4().hex}"
        zk.ensure_path("/proxy-test")
        trap = proxy.arm_write_trap(deliver=deliver, hold=0.05)
        with pytest.raises((ConnectionLoss, SessionExpiredError)):
            zk.create(path, b"x")
        assert trap.fired.wait(5) and trap.operation == "create"
        done = threading.Event()
        wait_for(lambda: zk.connected or done.is_set(), 10, "no reconnection after the trap")
        assert (zk.exists(path) is not None) is deliver
    finally:
        zk.stop()
        zk.close()


def test_a_tap_counts_requests_and_sabotages_the_chosen_one(proxy: FaultProxy, chaos_single: ZkCluster) -> None:
    """Request index 2 (not counting keep-alives or syncs) is applied, its reply lost; the next one
    dropped before it is sent would never reach the server; the counts name each request."""
    states: list[str] = []
    zk = client(proxy.hosts, states)
    try:
        base = f"/proxy-test/{uuid.uuid4().hex}"
        zk.ensure_path(base)
        tap = proxy.tap(RequestTap("lose-reply", 2))
        assert tap is not None
        zk.exists(base)
        zk.sync(base)  # background: not counted
        zk.get_children(base)
        with pytest.raises(ConnectionLoss):
            zk.create(f"{base}/applied")
        assert tap.fired.is_set()
        assert tap.seen == ["exists", "getChildren", "create"]
        assert zk.exists(f"{base}/applied") is not None, "a lose-reply request must be applied"
        drop = proxy.tap(RequestTap("drop", 0))
        assert drop is not None
        with pytest.raises(ConnectionLoss):
            zk.create(f"{base}/dropped")
        assert zk.exists(f"{base}/dropped") is None, "a dropped request must never reach the server"
        assert proxy.session is not None and proxy.session[0] == zk.client_id[0]
    finally:
        proxy.tap(None)
        zk.stop()
        zk.close()
