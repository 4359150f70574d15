"""Cold start: members joining a fresh group one after another claim each resource about once.

Evidence: the (resource, token) pairs every member was handed in ``on_assigned``. Each claim has its
own token (its creation zxid), so the number of distinct pairs is the number of claims created.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from kazoo.client import KazooClient
from rebalanser.claims import BATCH, ClaimBook
from rebalanser.client import Client
from rebalanser.containers import ensure_group
from rebalanser.options import Options
from rebalanser.paths import GroupPaths

from tests.support.recorder import Recorder
from tests.support.workers import wait_for

MEMBERS, RESOURCES = 8, 2_000


class ClaimLog(Recorder):
    """Records every (resource, token) pair handed to ``on_assigned``."""

    def __init__(self) -> None:
        super().__init__()
        self.pairs: set[tuple[str, int]] = set()
        self.changed_at = time.monotonic()

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        super().on_assigned(resources)
        with self.lock:
            self.pairs.update(resources.items())
            self.changed_at = time.monotonic()

    def on_revoked(self, resources: Sequence[str]) -> None:
        super().on_revoked(resources)
        with self.lock:
            self.changed_at = time.monotonic()


def create_resources(zk: KazooClient, group: str, names: list[str]) -> None:
    zk.ensure_path(f"{group}/resources")
    for start in range(0, len(names), 1000):
        txn = zk.transaction()
        for name in names[start : start + 1000]:
            txn.create(f"{group}/resources/{name}")
        assert not any(isinstance(r, Exception) for r in txn.commit())


def test_members_joining_a_fresh_group_one_by_one_claim_each_resource_about_once(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    names = [f"r{i:05d}" for i in range(RESOURCES)]
    create_resources(zk, group_path, names)
    logs = [ClaimLog() for _ in range(MEMBERS)]
    # A generous quiet period: on a loaded machine one start() may take longer than the default.
    clients = [
        Client(Options(zk_hosts, group_path, member_id=f"m{i}", create_group=True, session_timeout=10, min_interval=0.5,
                       initial_quiet=2.0, initial_max_wait=60), log)
        for i, log in enumerate(logs)
    ]
    try:
        for client in clients:  # one after another, as pods come up
            client.start()

        def settled() -> bool:
            owned = [log.owned for log in logs]
            sizes = [len(o) for o in owned]
            quiet = time.monotonic() - max(log.changed_at for log in logs) > 1.0
            return sum(sizes) == RESOURCES and len(set().union(*owned)) == RESOURCES and \
                max(sizes) - min(sizes) <= 1 and quiet

        wait_for(settled, 120, lambda: f"owned per member: {[len(log.owned) for log in logs]}")
        claims = len(set().union(*(log.pairs for log in logs)))
        print(f"\ncold start, {MEMBERS} members one by one, {RESOURCES} resources: {claims} claims created")
        assert claims <= 1.05 * RESOURCES, f"{claims} claims created for {RESOURCES} resources"
        assert not any(log.errors for log in logs), [log.errors for log in logs]
    finally:
        for client in clients:
            client.stop()


def test_a_claim_round_stops_between_batches_once_abandoned(zk: KazooClient, group_path: str) -> None:
    paths = GroupPaths.of(group_path)
    assert ensure_group(zk, paths, create_root=True)
    book = ClaimBook(zk, paths, "m0")
    book.reset(zk.client_id[0])
    wanted = [f"r{i:05d}" for i in range(3 * BATCH)]
    # A newer assignment has arrived: asked only between batches, so the first batch is written.
    result = book.claim(wanted, abandon=lambda: True)
    assert len(result.claimed) == BATCH and not result.blocked
    assert sorted(result.deferred) == wanted[BATCH:]
    assert sorted(zk.get_children(paths.owners)) == sorted(result.claimed), "only the first batch is written"
