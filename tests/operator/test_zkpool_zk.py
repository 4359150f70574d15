"""The shared connection registry against real ZooKeeper servers."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
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
        assert time.monotonic() - started < 1.0
        assert not pool.wait_connected(client, 1.0)
        cluster.start()
        assert pool.wait_connected(client, 30), "the pooled client never connected after the server started"
        client.ensure_path("/pool-test")
        assert pool.is_connected(cluster.hosts)
    finally:
        pool.close()
        cluster.stop()


def test_credentials_are_added_once(zk_hosts: str) -> None:
    pool = ZooKeeperPool()
    try:
        client = pool.acquire(zk_hosts, "ns/a")
        assert pool.wait_connected(client, 15)
        credentials = DigestCredentials("u", "p")
        pool.authenticate(client, credentials)
        pool.authenticate(client, credentials)
        assert ("digest", "u:p") in client.auth_data and len(client.auth_data) == 1
        assert "p" not in repr(credentials)
    finally:
        pool.close()
