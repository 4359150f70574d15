"""The shared connection registry against real ZooKeeper servers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl
from rebalanser_operator.zkpool import DigestCredentials, ZooKeeperPool

from tests.support.zk import free_port, make_cluster

pytestmark = pytest.mark.zk


def test_one_client_per_connect_string_closed_by_the_last_user(zk_hosts: str) -> None:
    pool = ZooKeeperPool()
    try:
        first = pool.acquire(zk_hosts, "ns/a")
        second = pool.acquire(zk_hosts, "ns/b")
        assert first is second and pool.connections() == 1
        assert pool.wait_connected(first, 15)
        pool.release("ns/a")
        assert first.connected and pool.users(zk_hosts) == {"ns/b"}
        pool.release("ns/b")
        assert pool.connections() == 0 and not first.connected
    finally:
        pool.close()


def test_switching_connect_strings_releases_the_old_one(zk_hosts: str) -> None:
    pool = ZooKeeperPool()
    try:
        dead = f"127.0.0.1:{free_port()}"
        old = pool.acquire(dead, "ns/a")
        pool.acquire(zk_hosts, "ns/a")
        assert pool.connections() == 1 and pool.users(dead) == set()
        assert old.client_state == "CLOSED" or not old.connected
    finally:
        pool.close()


def test_unreachable_ensemble_never_blocks_and_is_used_once_it_starts(tmp_path: Path) -> None:
    cluster = make_cluster(tmp_path / "late", size=1)
    pool = ZooKeeperPool(max_reconnect_delay=0.5)
    try:
        started = time.monotonic()
        client = pool.acquire(cluster.hosts, "ns/a")
        assert time.monotonic() - started < 3.0  # milliseconds expected; blocking on the connect takes its timeout
        assert not pool.wait_connected(client, 1.0)
        cluster.start()
        assert pool.wait_connected(client, 30), "the pooled client never connected after the server started"
        client.ensure_path("/pool-test")
        assert pool.is_connected(cluster.hosts)
    finally:
        pool.close()
        cluster.stop()


def test_each_set_of_credentials_has_a_session_of_its_own(zk_hosts: str) -> None:
    """Before: one session per connect string, and every group's credentials were added to it: a
    session holding tenant A's and tenant B's passwords wrote, for A, whatever B's ACL allowed."""
    pool = ZooKeeperPool()
    tenant_a, tenant_b = DigestCredentials("a", "pa"), DigestCredentials("b", "pb")
    try:
        a = pool.acquire(zk_hosts, "ns-a/g", credentials=(tenant_a,))
        a2 = pool.acquire(zk_hosts, "ns-a/h", credentials=(tenant_a,))
        b = pool.acquire(zk_hosts, "ns-b/g", credentials=(tenant_b,))
        anonymous = pool.acquire(zk_hosts, "ns-c/g")
        assert a is a2 and a is not b and anonymous not in (a, b)
        assert pool.connections() == 3
        assert {auth for _, auth in a.auth_data} == {"a:pa"}
        assert {auth for _, auth in b.auth_data} == {"b:pb"}
        assert not anonymous.auth_data
        for client in (a, b, anonymous):
            assert pool.wait_connected(client, 15)
        # ZooKeeper's view: b's session may not write what only a may.
        a.create("/pool-tenancy-a", acl=[make_digest_acl("a", "pa", all=True)])
        try:
            with pytest.raises(NoAuthError):
                b.set("/pool-tenancy-a", b"x")
        finally:
            a.delete("/pool-tenancy-a")
        # Credentials changing: the user moves to a new session, the old one closes with its last user.
        rotated = pool.acquire(zk_hosts, "ns-b/g", credentials=(DigestCredentials("b", "pb2"), tenant_b))
        assert rotated is not b and pool.connections() == 3
        assert "pb" not in repr(tenant_b) and "pb2" not in repr(DigestCredentials("b", "pb2"))
    finally:
        pool.close()


def test_a_survey_is_what_a_step_plans_its_session_from(zk_hosts: str) -> None:
    """The session a user's needs give, the one it holds, who holds the first, and the other sessions of
    its namespace: one read of the pool, agreeing with the single questions."""
    pool = ZooKeeperPool()
    try:
        secret = DigestCredentials("op", "password")
        pool.acquire(zk_hosts, "shop/a")
        pool.acquire(zk_hosts, "shop/b", credentials=(secret,))
        pool.acquire(zk_hosts, "pay/c", credentials=(secret,))
        survey = pool.survey(zk_hosts, None, (secret,), "shop/a", "shop/")
        assert survey.key == pool.session_key(zk_hosts, None, (secret,)) and survey.held == pool.holding("shop/a")
        assert survey.held != survey.key and survey.holders == {"shop/b", "pay/c"} == pool.holders(survey.key)
        assert survey.neighbours == 1 == pool.sessions_of("shop/", besides="shop/a")  # shop/b's; not pay/c's
        assert pool.survey(f"127.0.0.1:{free_port()}", None, (), "shop/a", "shop/").holders == frozenset()
    finally:
        pool.close()
