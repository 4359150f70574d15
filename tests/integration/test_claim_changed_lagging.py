"""A claim whose data someone changed is verified again only behind a ``sync``: a lagging server must not
vouch for a claim that was deleted after the change.

The owner's claim watch reports a change of the claim's data (an administrator's ``setData``); the owner
reads the claim again and, when it is still its own with its token, works on. The read alone would not
do when the owner's server lags behind the leader: the claim may have been deleted after the change,
and a server that has not applied the deletion still shows it. Here the owner's only server is a
follower that applied the change, is then cut off from the quorum (it keeps answering its clients for
``syncLimit`` ticks), and misses the deletion; the owner hears of the change only then. Behind a sync
(which that follower cannot answer) the owner stops the resource; with the read alone it would go on
working on a claim that no longer exists until its lease ran out.

Evidence: the owner's JSON event stream (its ticks, by resource and time).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.partition import PartitionableEnsemble, partitionable_ensemble
from tests.support.relay import Relay
from tests.support.workers import Group, Worker, wait_for
from tests.support.zk import admin_client

pytestmark = [pytest.mark.zk, pytest.mark.ensemble]

TICK_MS, SYNC_LIMIT, SESSION_TIMEOUT = 500, 10, 6.0
TAMPERED, UNTOUCHED = "r0", "r1"
#: a unit of work (50 ms) that began before the report may still end after it
GRACE_NS = 300_000_000
#: how long after the report the owner is watched (its lease has at least 2 s left)
OBSERVE_NS = 1_500_000_000


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[PartitionableEnsemble]:
    with partitionable_ensemble(tmp_path / "zk", tick_ms=TICK_MS, sync_limit=SYNC_LIMIT) as cluster:
        yield cluster


def ticks(worker: Worker, resource: str, after: int, before: int) -> list[int]:
    return [int(e["ts"]) for e in worker.of("tick") if e["resource"] == resource and after < e["ts"] < before]


def applied(server: str, path: str, data: bytes) -> bool:
    """Whether ``server`` alone shows ``path`` with ``data`` (a read answered by that server)."""
    with admin_client(server) as client:
        return bool(client.get(path)[0] == data)


def test_a_changed_claim_is_not_vouched_for_by_a_server_that_missed_its_deletion(
    ensemble: PartitionableEnsemble, tmp_path: Path
) -> None:
    leader = ensemble.leader()
    lagging = ensemble.followers()[0]
    host, port = lagging.address.split(":")
    link = Relay((host, int(port)), name="owner-link")  # the owner's only way to its server
    group = Group(link.address, "/claim-changed-lagging", tmp_path, session_timeout=SESSION_TIMEOUT,
                  min_interval=0.3, tick=0.05)
    with admin_client(leader.address) as admin:
        for name in (TAMPERED, UNTOUCHED):
            admin.create(f"{group.path}/resources/{name}", makepath=True)
        try:
            owner = group.spawn("owner")
            group.wait_settled({TAMPERED, UNTOUCHED}, timeout=30)
            claim = f"{group.path}/owners/{TAMPERED}"
            tampered = admin.get(claim)[0] + b" "
            link.hold()  # the owner hears nothing until the claim has been changed and then deleted
            admin.set(claim, tampered)
            wait_for(lambda: applied(lagging.address, claim, tampered), 5, "the follower never applied the change")
            ensemble.isolate(lagging.myid)  # it keeps answering reads, and misses what comes next
            admin.delete(claim)
            link.release()  # the change's notification arrives, from a server that still shows the claim
            released = time.monotonic_ns()
            wait_for(lambda: ticks(owner, UNTOUCHED, released + OBSERVE_NS, 1 << 63), 10,
                     "the owner stopped working on the untouched resource too: its lease ran out too early for "
                     "this test to tell anything")
            observed = time.monotonic_ns()
            late = ticks(owner, TAMPERED, released + GRACE_NS, observed)
            assert late == [], (
                f"the owner worked on {TAMPERED} {len(late)} times between {(late[0] - released) / 1e9:.2f}s and "
                f"{(late[-1] - released) / 1e9:.2f}s after hearing of the change, although its claim had been "
                "deleted: the lagging server's read vouched for it")

            ensemble.heal()  # the owner's session has expired meanwhile: it joins again and claims anew
            wait_for(lambda: ticks(owner, TAMPERED, observed, 1 << 63), SESSION_TIMEOUT + 40,
                     f"{TAMPERED} was never worked on again after the heal: {group.describe({TAMPERED})}")
        finally:
            group.stop_all()
            link.close()
