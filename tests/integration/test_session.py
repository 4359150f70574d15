"""Session loss: pauses beyond the session timeout, forced expiry, both expiry policies."""

from __future__ import annotations

import time

from kazoo.client import KazooClient
from rebalanser.client import Client
from rebalanser.errors import SessionExpiredError
from rebalanser.options import ExpiryPolicy, Options

from tests.integration.conftest import add_resources
from tests.support.invariants import overlaps, token_regressions
from tests.support.recorder import Recorder
from tests.support.workers import Group, wait_for

RESOURCES = {f"r{i:02d}" for i in range(12)}


def settle(group: Group, zk: KazooClient, n: int) -> None:
    add_resources(zk, group.path, sorted(RESOURCES))
    for i in range(n):
        group.spawn(f"w{i}")
    group.wait_settled(RESOURCES, timeout=30)


def paused_beyond_session(group: Group, member: str, zk: KazooClient) -> None:
    """SIGSTOP until the server has expired the session and others took the resources over."""
    worker = group.workers[member]
    owned = worker.owned()
    assert owned
    worker.pause()
    try:
        others = [w for w in group.live() if w is not worker]
        wait_for(lambda: owned <= set().union(*(w.owned() for w in others)), group.session_timeout + 10,
                 "the paused worker's resources were not taken over")
        time.sleep(0.5)  # let the new owners work while the old one is frozen: evidence for overlaps
    finally:
        worker.resume()


def test_a_paused_follower_does_no_work_after_it_resumes(group: Group, zk: KazooClient) -> None:
    settle(group, zk, 3)
    follower = next(w for w in group.live() if w.of("role")[-1]["role"] == "follower")
    paused_beyond_session(group, follower.member_id, zk)
    wait_for(lambda: any(e["state"] == "expired" for e in follower.of("session")), 15, "no expiry seen")
    group.wait_settled(RESOURCES, timeout=group.session_timeout + 10)
    assert overlaps(group.events()) == []
    assert token_regressions(group.events()) == []
    assert follower.alive and follower.owned(), "reconnect policy: the member rejoins and works again"


def test_a_paused_coordinator_is_fenced_and_rejoins_as_follower(group: Group, zk: KazooClient) -> None:
    settle(group, zk, 3)
    coordinator = next(w for w in group.live() if w.of("role")[-1]["role"] == "coordinator")
    paused_beyond_session(group, coordinator.member_id, zk)
    group.wait_settled(RESOURCES, timeout=group.session_timeout + 10)
    wait_for(lambda: coordinator.of("role")[-1]["role"] == "follower", 10, "old coordinator did not step down")
    assert overlaps(group.events()) == []


def test_shutdown_policy_ends_the_worker_with_a_clear_error(group: Group, zk: KazooClient) -> None:
    add_resources(zk, group.path, sorted(RESOURCES))
    group.spawn("w0")
    group.spawn("w1", "--expiry-policy", "shutdown")
    group.wait_settled(RESOURCES, timeout=30)
    paused_beyond_session(group, "w1", zk)
    assert group.workers["w1"].wait(20) == 3
    assert group.workers["w1"].snapshot()[-1]["event"] == "stopped"
    err = next(group.log_dir.glob("w1.*.err")).read_text()
    assert "SessionExpiredError" in err
    assert overlaps(group.events()) == []


def expire_session(hosts: str, client: Client) -> None:
    """The documented way to force expiry: close the same session from a second connection."""
    twin = KazooClient(hosts=hosts, client_id=client.zk.client_id)
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def test_forced_expiry_with_reconnect_rejoins_and_gets_resources_back(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a", "b"])
    rec = Recorder()
    client = Client(Options(zk_hosts, group_path, member_id="m", create_group=True,
                            session_timeout=2, min_interval=0.1), rec)
    client.start()
    try:
        wait_for(lambda: rec.owned == {"a", "b"}, 10, "never assigned")
        old_tokens = {r: client.token(r) for r in ("a", "b")}
        expire_session(zk_hosts, client)
        wait_for(lambda: "expired" in rec.sessions, 10, f"sessions: {rec.sessions}")
        wait_for(lambda: rec.owned == {"a", "b"} and all(client.owns(r) for r in rec.owned), 15,
                 lambda: f"owned {rec.owned}, sessions {rec.sessions}")
        new_tokens = {r: client.token(r) for r in ("a", "b")}
        assert all(new_tokens[r] > old_tokens[r] for r in ("a", "b"))  # type: ignore[operator]
        members = zk.get_children(f"{group_path}/clients")
        assert len(members) == 1, f"ghost members: {members}"
    finally:
        client.stop()


def test_forced_expiry_with_shutdown_ends_the_client(zk_hosts: str, zk: KazooClient, group_path: str) -> None:
    add_resources(zk, group_path, ["a"])
    rec = Recorder()
    options = Options(zk_hosts, group_path, member_id="m", create_group=True,
                      session_timeout=2, expiry_policy=ExpiryPolicy.SHUTDOWN)
    client = Client(options, rec)
    client.start()
    wait_for(lambda: rec.owned == {"a"}, 10, "never assigned")
    expire_session(zk_hosts, client)
    assert client.wait(15), "client did not end"
    assert client.state.value == "Aborted"
    assert any(isinstance(e, SessionExpiredError) for e in rec.errors)
    assert not client.owns("a") and rec.owned == set()
