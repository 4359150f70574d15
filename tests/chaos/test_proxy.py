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


def test_an_expire_tap_lets_the_server_expire_the_session_by_its_own_clock(
        proxy: FaultProxy, chaos_single: ZkCluster) -> None:
    """The ``expire`` fault is one a member can meet: the link goes silent at the chosen request, and the
    session ends only when the server's own clock says so, at least T after it last heard of the client
    (never at once while the client could still count on its lease). The request is never applied; the
    client learns of the expiry when the link is back."""
    from tests.chaos.explore import _await_expiry, live_sessions

    states: list[str] = []
    zk = client(proxy.hosts, states)
    try:
        base = f"/proxy-test/{uuid.uuid4().hex}"
        zk.ensure_path(base)
        session, timeout = zk.client_id[0], zk._session_timeout / 1000
        assert session in live_sessions(chaos_single)
        tap = proxy.tap(RequestTap("expire", 1, _await_expiry(chaos_single)))
        assert tap is not None
        heard = time.monotonic()  # the server hears of the session here for the last time
        zk.exists(base)
        with pytest.raises((ConnectionLoss, SessionExpiredError)):
            zk.create(f"{base}/held")
        wait_for(tap.fired.is_set, timeout=30, message="the session never expired")
        assert not tap.error, tap.error
        silence = (tap.ended_ns - tap.fired_ns) / 1e9
        assert silence >= timeout * 0.5, f"the session ended {silence:.2f} s into the silence (T = {timeout} s)"
        assert (tap.ended_ns / 1e9 - heard) >= timeout, "expired before T had passed since the server last heard"
        assert session not in live_sessions(chaos_single)
        wait_for(lambda: KazooState.LOST in states, timeout=15, message="the client never learnt of the expiry")
        with admin_client(chaos_single.hosts, start_timeout=10) as admin:
            assert admin.exists(f"{base}/held") is None, "the held request must never reach the server"
    finally:
        proxy.tap(None)
        zk.stop()
        zk.close()
