"""The lease prober against a real ZooKeeper server: negotiated timeout, expiry, behaviour while cut off."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState
from rebalanser.lease import Lease
from rebalanser.options import Options
from rebalanser.session import LeaseProber, make_client, session_timeout

from tests.support.relay import Relay
from tests.support.workers import wait_for

pytestmark = pytest.mark.zk


@pytest.fixture
def relay(zk_hosts: str) -> Iterator[Relay]:
    host, port = zk_hosts.split(",")[0].rsplit(":", 1)
    r = Relay((host, int(port)), name="zk")
    try:
        yield r
    finally:
        r.close()


def started(client: KazooClient) -> KazooClient:
    client.start(timeout=15)
    return client


def test_the_negotiated_timeout_is_known_when_connected_fires(zk_hosts: str) -> None:
    """The server caps the session timeout at 40 s; a listener must never see the requested 45 s."""
    seen: list[float] = []
    client = make_client(Options(zk_hosts, "/g", session_timeout=45))
    client.add_listener(lambda state: seen.append(session_timeout(client)) if state == KazooState.CONNECTED else None)
    try:
        started(client)
        # kazoo sets the client live before it calls the listeners (on its connection thread): start() may
        # return before the listener has run, so its answer is awaited, not read at once.
        wait_for(lambda: bool(seen), 10, "the listener never saw CONNECTED")
        assert seen == [40.0]
        assert session_timeout(client) == 40.0
    finally:
        client.stop()
        client.close()


def test_the_lease_is_renewed_while_connected_and_ends_once_when_cut_off_without_spinning(relay: Relay) -> None:
    client = started(make_client(Options(relay.address, "/g", session_timeout=1.0)))
    lease = Lease(0.8)
    expiries: list[float] = []
    prober = LeaseProber(client, "/", lease, lambda: expiries.append(time.monotonic()))
    wakeups = 0
    check = prober._check_expiry
    counting = threading.Event()

    def counted() -> None:
        nonlocal wakeups
        if counting.is_set():
            wakeups += 1
        check()

    prober._check_expiry = counted  # type: ignore[method-assign]
    prober.start()
    try:
        sid = client.client_id[0]
        wait_for(lambda: lease.valid(sid), 10, "the lease was never granted")  # a round trip
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # renewed throughout: never invalid for a healthy server
            assert lease.valid(sid), "the lease lapsed on a healthy connection"
            time.sleep(0.01)
        relay.hold()
        cut = time.monotonic()
        wait_for(lambda: bool(expiries), 5, "the lease never ran out after the cut")
        assert expiries[0] - cut <= 0.8 * 1.0 + 0.5, f"ran out {expiries[0] - cut:.2f}s after the cut"
        assert not lease.valid(sid)
        wait_for(lambda: not client.connected, 5, "kazoo never noticed the cut")
        counting.set()
        time.sleep(3)  # the measurement window: how often the prober wakes while cut off
        counting.clear()
        assert len(expiries) == 1, "one expiry, reported once"
        assert wakeups <= 3 * 12, f"the prober woke {wakeups} times in 3 s while disconnected"
    finally:
        relay.release()
        prober.stop()
        client.stop()
        client.close()
