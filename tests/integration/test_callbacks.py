"""User callbacks: graceful stop ordering, hanging and raising stop callbacks."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from kazoo.protocol.states import KeeperState
from kazoo.security import OPEN_ACL_UNSAFE, make_acl
from rebalanser.client import Client, StopTimeoutError
from rebalanser.config import Algorithm
from rebalanser.errors import SessionExpiredError
from rebalanser.handler import Handler
from rebalanser.options import ExpiryPolicy, Options

from tests.integration.conftest import add_resources
from tests.integration.test_session import expire_session
from tests.support.recorder import Recorder
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
    return Client(Options(hosts, group, member_id="m", create_group=True,
                          session_timeout=2, min_interval=0.1, **kw), handler)  # type: ignore[arg-type]


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


class Timeline(Handler):
    """Records when each resource callback starts and ends; ``on_assigned`` overruns until released."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[tuple[str, tuple[str, ...], int, int]] = []  # (callback, resources, start, end)
        self.assigning = threading.Event()
        self.finish_assigning = threading.Event()
        self.errors: list[Exception] = []

    def _record(self, name: str, resources: tuple[str, ...], start: int) -> None:
        with self.lock:
            self.spans.append((name, resources, start, time.monotonic_ns()))

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        start = time.monotonic_ns()
        self.assigning.set()
        self.finish_assigning.wait(30)
        self._record("on_assigned", tuple(sorted(resources)), start)

    def on_revoked(self, resources: Sequence[str]) -> None:
        self._record("on_revoked", tuple(sorted(resources)), time.monotonic_ns())

    def on_error(self, error: Exception) -> None:
        self.errors.append(error)

    def names(self) -> list[str]:
        with self.lock:
            return [name for name, *_ in self.spans]


def test_an_overrunning_on_assigned_never_runs_alongside_on_revoked(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    """The member stops waiting for an overrunning ``on_assigned`` after ``start_timeout``; a revocation
    of the same resource meanwhile is released after ``stop_timeout`` (reported), but its ``on_revoked``
    runs only once ``on_assigned`` has returned."""
    add_resources(zk, group_path, ["a"])
    handler = Timeline()
    c = client(zk_hosts, group_path, handler, start_timeout=0.3, stop_timeout=0.5)
    c.start()
    try:
        assert handler.assigning.wait(10), "never assigned"
        zk.delete(f"{group_path}/resources/a")
        wait_for(lambda: zk.exists(f"{group_path}/owners/a") is None, 10,
                 "the claim was not released while on_assigned overran")
        assert sum(isinstance(e, StopTimeoutError) for e in handler.errors) >= 1, handler.errors
        handler.finish_assigning.set()
        wait_for(lambda: sorted(handler.names()) == ["on_assigned", "on_revoked"], 10, lambda: f"spans {handler.spans}")
        spans = {name: (resources, start, end) for name, resources, start, end in handler.spans}
        assigned_end, (revoked, revoked_start, _) = spans["on_assigned"][2], spans["on_revoked"]
        assert revoked == ("a",)
        assert revoked_start >= assigned_end, (
            f"on_revoked started {(assigned_end - revoked_start) / 1e6:.0f} ms before on_assigned returned"
        )
    finally:
        handler.finish_assigning.set()
        c.stop()


class FailingReporter(Recorder):
    def on_error(self, error: Exception) -> None:
        super().on_error(error)
        raise RuntimeError("on_error itself failed")


def test_a_raising_on_error_while_aborting_still_closes_the_client(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a"])
    rec = FailingReporter()
    options = Options(zk_hosts, group_path, member_id="m", create_group=True,
                      session_timeout=2, expiry_policy=ExpiryPolicy.SHUTDOWN)
    c = Client(options, rec)
    c.start()
    try:
        wait_for(lambda: rec.owned == {"a"}, 10, "never assigned")
        expire_session(zk_hosts, c)
        wait_for(lambda: "closed" in rec.sessions, 15, lambda: f"never closed: sessions {rec.sessions}")
        assert any(isinstance(e, SessionExpiredError) for e in rec.errors), rec.errors
        assert c.wait(5), "the member thread did not end"
        wait_for(lambda: c.zk.client_state == KeeperState.CLOSED, 5,
                 lambda: f"the ZooKeeper client was left running ({c.zk.client_state})")
    finally:
        c.stop()


class HangingStop(Handler):
    """``on_revoked`` of ``a`` hangs until released; records every ``on_assigned`` and session state."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.hanging = threading.Event()
        self.assigned: list[tuple[str, ...]] = []
        self.sessions: list[str] = []

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        self.assigned.append(tuple(sorted(resources)))

    def on_revoked(self, resources: Sequence[str]) -> None:
        if "a" in resources:
            self.hanging.set()
            self.release.wait(60)

    def on_session(self, state: str) -> None:
        self.sessions.append(state)


class Worked(Handler):
    def __init__(self) -> None:
        self.owned: set[str] = set()

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        self.owned |= set(resources)

    def on_revoked(self, resources: Sequence[str]) -> None:
        self.owned -= set(resources)


def test_a_member_granted_a_resource_whose_stop_callback_still_hangs_steps_aside_until_it_returns(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    """``a`` is granted again while its ``on_revoked`` still hangs: ``on_assigned(a)`` would have to
    wait for it, possibly forever. The member leaves the group instead (no claim, no member node), so
    another member works on ``a``; it joins again once the hanging call has returned."""
    add_resources(zk, group_path, ["a"])
    handler = HangingStop()
    c = client(zk_hosts, group_path, handler, stop_timeout=0.3)
    c.start()
    other: Client | None = None
    try:
        wait_for(lambda: handler.assigned == [("a",)], 10, "never assigned")
        zk.delete(f"{group_path}/resources/a")
        assert handler.hanging.wait(10), "a was never revoked"
        zk.create(f"{group_path}/resources/a")
        wait_for(lambda: "standby" in handler.sessions, 10,
                 lambda: f"the member never stepped aside: sessions {handler.sessions}")
        wait_for(lambda: zk.get_children(f"{group_path}/clients") == [], 10,
                 lambda: f"its member node stayed: {zk.get_children(f'{group_path}/clients')}")
        assert zk.exists(f"{group_path}/owners/a") is None, "it kept the claim on a while on standby"
        worked = Worked()
        other = Client(Options(zk_hosts, group_path, member_id="n", create_group=True,
                               session_timeout=2, min_interval=0.1), worked)
        other.start()
        wait_for(lambda: worked.owned == {"a"}, 10, lambda: f"a never moved to the other member: {worked.owned}")
        assert handler.assigned == [("a",)], f"on_assigned ran while on_revoked(a) hung: {handler.assigned}"
        handler.release.set()
        add_resources(zk, group_path, ["b"])
        wait_for(lambda: "rejoining" in handler.sessions and len(handler.assigned) == 2, 15,
                 lambda: f"never rejoined after the call returned: {handler.sessions}, {handler.assigned}")
        wait_for(lambda: len(worked.owned) == 1, 10, lambda: f"not balanced again: the other owns {worked.owned}")
    finally:
        handler.release.set()
        c.stop()
        if other is not None:
            other.stop()


def _stop_markers_of(zk: KazooClient, group: str, session: int) -> list[str]:
    markers = []
    for generation in zk.get_children(f"{group}/stopped"):
        for marker in zk.get_children(f"{group}/stopped/{generation}"):
            stat = zk.exists(f"{group}/stopped/{generation}/{marker}")
            if stat is not None and stat.ephemeralOwner == session:
                markers.append(f"{generation}/{marker}")
    return markers


def test_a_member_on_standby_leaves_no_stop_marker_behind(zk_hosts: str, zk: KazooClient, group_path: str) -> None:
    """Global Barrier: a member that steps aside keeps its session, so a stop marker it created for a
    round stayed, held by a session that is no member's, until some later round dropped it (the
    campaign, seed 7202: none came). Stepping aside deletes it with the member node."""
    add_resources(zk, group_path, ["a"])
    handler = HangingStop()
    c = Client(Options(zk_hosts, group_path, member_id="m", create_group=True,
                       session_timeout=2, min_interval=0.1, stop_timeout=0.3,
                       algorithm=Algorithm.GLOBAL_BARRIER), handler)
    c.start()
    try:
        wait_for(lambda: handler.assigned == [("a",)], 10, "never assigned")
        session = c.zk.client_id[0]
        zk.delete(f"{group_path}/resources/a")
        assert handler.hanging.wait(10), "a was never revoked"
        zk.create(f"{group_path}/resources/a")
        wait_for(lambda: "standby" in handler.sessions, 10,
                 lambda: f"the member never stepped aside: sessions {handler.sessions}")
        wait_for(lambda: zk.get_children(f"{group_path}/clients") == [], 10, "its member node stayed")
        wait_for(lambda: _stop_markers_of(zk, group_path, session) == [], 10,
                 lambda: f"stop markers of the member on standby: {_stop_markers_of(zk, group_path, session)}")
    finally:
        handler.release.set()
        c.stop()


def test_a_member_node_left_on_standby_is_deleted_even_when_the_first_attempt_fails(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    """The campaign (seed 7405, a leader kill): a member stepped aside just before its connection
    dropped, so deleting its member node failed, and it tried again only on the next session event.
    The node kept it in the group, assigned resources it never works on while on standby. Here the
    first deletion fails for lack of the right to delete; once that is given back, the node goes."""
    add_resources(zk, group_path, ["a"])
    handler = HangingStop()
    c = client(zk_hosts, group_path, handler, stop_timeout=0.3)
    c.start()
    clients = f"{group_path}/clients"
    try:
        wait_for(lambda: handler.assigned == [("a",)], 10, "never assigned")
        zk.delete(f"{group_path}/resources/a")
        assert handler.hanging.wait(10), "a was never revoked"
        zk.set_acls(clients, [make_acl("world", "anyone", read=True, write=True, create=True, admin=True)])
        zk.create(f"{group_path}/resources/a")
        wait_for(lambda: "standby" in handler.sessions, 10,
                 lambda: f"the member never stepped aside: sessions {handler.sessions}")
        assert zk.get_children(clients), "the member node went although it could not be deleted"
        zk.set_acls(clients, OPEN_ACL_UNSAFE)
        wait_for(lambda: zk.get_children(clients) == [], 10,
                 lambda: f"the member node left on standby stayed: {zk.get_children(clients)}")
    finally:
        zk.set_acls(clients, OPEN_ACL_UNSAFE)
        handler.release.set()
        c.stop()


def _nodes_of(zk: KazooClient, clients: str, session: int) -> list[str]:
    nodes = []
    for name in zk.get_children(clients):
        stat = zk.exists(f"{clients}/{name}")
        if stat is not None and stat.ephemeralOwner == session:
            nodes.append(name)
    return nodes


def test_standby_does_not_end_while_the_member_node_left_on_it_still_exists(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    """Issue 19, A: the overrunning callback returns while the member node left on standby could not
    be deleted yet. Rejoining then would give the session two member nodes (the old one assigned
    resources nobody works on, and possibly elected). The member rejoins only once the old node is
    gone; it keeps trying to delete it every T/4."""
    add_resources(zk, group_path, ["a"])
    handler = HangingStop()
    c = client(zk_hosts, group_path, handler, stop_timeout=0.3)
    c.start()
    clients = f"{group_path}/clients"
    try:
        wait_for(lambda: handler.assigned == [("a",)], 10, "never assigned")
        session = c.zk.client_id[0]
        zk.delete(f"{group_path}/resources/a")
        assert handler.hanging.wait(10), "a was never revoked"
        zk.set_acls(clients, [make_acl("world", "anyone", read=True, write=True, create=True, admin=True)])
        zk.create(f"{group_path}/resources/a")
        wait_for(lambda: "standby" in handler.sessions, 10,
                 lambda: f"the member never stepped aside: sessions {handler.sessions}")
        handler.release.set()  # the callback returns; the old member node cannot be deleted yet
        deadline = time.monotonic() + 3.0  # 1.5 T: several attempts to delete it, and time to rejoin
        while time.monotonic() < deadline:
            nodes = _nodes_of(zk, clients, session)
            assert len(nodes) <= 1, f"two member nodes in one session: {nodes}"
            assert "rejoining" not in handler.sessions, "rejoined while its old member node still existed"
            time.sleep(0.05)
        zk.set_acls(clients, OPEN_ACL_UNSAFE)
        wait_for(lambda: "rejoining" in handler.sessions, 10,
                 lambda: f"never rejoined once the old node could go: {handler.sessions}")
        wait_for(lambda: len(handler.assigned) == 2, 10, lambda: f"no work after rejoining: {handler.assigned}")
        assert len(_nodes_of(zk, clients, session)) == 1
    finally:
        zk.set_acls(clients, OPEN_ACL_UNSAFE)
        handler.release.set()
        c.stop()


class _ReleaseLost:
    """A claim book's client whose next transaction, once armed, is never sent: ConnectionLoss, as when
    the connection drops just before it (the member's own client otherwise)."""

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self.armed = False

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)

    def transaction(self) -> object:
        txn = self._client.transaction()
        if self.armed:
            self.armed = False

            def lost() -> object:
                raise ConnectionLoss("injected: the connection dropped before the release was sent")

            txn.commit = lost
        return txn


class ArmsOnStandby(HangingStop):
    """Arms the fault as the member steps aside (this runs on its thread, before it releases)."""

    def __init__(self) -> None:
        super().__init__()
        self.fault: _ReleaseLost | None = None

    def on_session(self, state: str) -> None:
        super().on_session(state)
        if state == "standby" and self.fault is not None:
            self.fault.armed = True


def test_a_claim_whose_release_failed_as_the_member_stepped_aside_is_released_on_standby(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    """Issue 19, B (chaos seed 7405: a step-aside just before a connection drop): releasing the claims
    fails as the member steps aside. It must not keep them while on standby (their next owner would
    wait for them as long as the callback hangs): it tries again every T/4."""
    add_resources(zk, group_path, ["a", "b"])
    handler = ArmsOnStandby()
    c = client(zk_hosts, group_path, handler, stop_timeout=0.3)
    c.start()
    other: Client | None = None
    try:
        wait_for(lambda: handler.assigned == [("a", "b")], 10, lambda: f"never assigned: {handler.assigned}")
        handler.fault = c._loop._book.zk = _ReleaseLost(c.zk)  # type: ignore[assignment]
        zk.delete(f"{group_path}/resources/a")
        assert handler.hanging.wait(10), "a was never revoked"
        zk.create(f"{group_path}/resources/a")
        wait_for(lambda: "standby" in handler.sessions, 10,
                 lambda: f"the member never stepped aside: sessions {handler.sessions}")
        worked = Worked()
        other = Client(Options(zk_hosts, group_path, member_id="n", create_group=True,
                               session_timeout=2, min_interval=0.1), worked)
        other.start()
        wait_for(lambda: worked.owned == {"a", "b"}, 10,
                 lambda: f"the other member never got to work on everything: {worked.owned}; the claim on b "
                         f"is held by {zk.exists(f'{group_path}/owners/b')}")
        assert not handler.fault.armed, "the fault was never hit: the test did not test anything"
    finally:
        handler.release.set()
        c.stop()
        if other is not None:
            other.stop()
