"""The server-to-server partition harness (tests/support/partition.py) cuts real ZooKeeper links."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.handlers.threading import KazooTimeoutError

from tests.support.partition import partitionable_ensemble
from tests.support.workers import wait_for
from tests.support.zk import admin_client

pytestmark = [pytest.mark.zk, pytest.mark.ensemble]

TICK_MS, SYNC_LIMIT = 250, 8  # the isolated follower gives up on its leader after 2 s


def test_an_isolated_follower_keeps_serving_its_clients_from_a_stale_copy_until_it_gives_up(tmp_path: Path) -> None:
    with partitionable_ensemble(tmp_path, tick_ms=TICK_MS, sync_limit=SYNC_LIMIT) as ensemble:
        leader = ensemble.leader()
        victim, other = ensemble.followers()
        with admin_client(victim.address) as on_victim, admin_client(leader.address) as on_leader:
            on_leader.create("/p", b"before")
            on_victim.sync("/")
            assert on_victim.get("/p")[0] == b"before"

            ensemble.isolate(victim.myid)
            assert ensemble.cut_pairs() == {(victim.myid, s.myid) for s in (leader, other)} | {
                (s.myid, victim.myid) for s in (leader, other)}

            on_leader.set("/p", b"after")  # the leader and the other follower are still a quorum
            assert on_leader.get("/p")[0] == b"after"
            assert on_victim.get("/p")[0] == b"before", "the isolated follower answers reads from its own copy"
            with pytest.raises(KazooTimeoutError):  # a sync needs the leader: it cannot complete
                on_victim.sync_async("/").get(timeout=1.0)

            limit = TICK_MS * SYNC_LIMIT / 1000
            wait_for(lambda: victim.mode() != "follower", limit + 10,
                     lambda: f"the isolated follower still follows after {limit + 10}s: {victim.mode()}")
            assert leader.mode() == "leader" and other.mode() == "follower"

        ensemble.heal()
        assert ensemble.cut_pairs() == set()
        wait_for(lambda: victim.mode() == "follower", 30, lambda: f"did not rejoin after heal: {victim.mode()}")
        with admin_client(victim.address) as on_victim:
            on_victim.sync("/")
            assert on_victim.get("/p")[0] == b"after"


def test_a_cut_between_two_followers_leaves_the_ensemble_serving(tmp_path: Path) -> None:
    """Cutting one pair is not an isolation: both followers still reach the leader."""
    with partitionable_ensemble(tmp_path, tick_ms=TICK_MS, sync_limit=SYNC_LIMIT) as ensemble:
        leader = ensemble.leader()
        a, b = ensemble.followers()
        ensemble.cut(a.myid, b.myid)
        with admin_client(leader.address) as on_leader, admin_client(a.address) as on_a:
            on_leader.create("/q", b"1")
            on_a.sync("/")  # completes: a reaches the leader through its own, uncut link
            assert on_a.get("/q")[0] == b"1"
        assert {s.mode() for s in (a, b)} == {"follower"}
