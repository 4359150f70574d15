"""Exclusive per-resource claims: ``G/owners/<resource>``, ephemeral, created by the owner's session.

ZooKeeper itself enforces that at most one session holds a claim. A claim is released only by the
session that holds it (checked through ``ephemeralOwner`` before every delete, and nobody else ever
deletes it), or by the server when that session ends. The claim's creation zxid (``czxid``) is the
resource's fencing token: zxids grow with every write to the ensemble, so each new claim of a
resource carries a larger token than every claim before it, across owners, sessions and even a
deletion and re-creation of the resource.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import WatchedEvent, ZnodeStat

from rebalanser.paths import GroupPaths

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimResult:
    claimed: dict[str, int]  # resource -> fencing token
    blocked: list[str]  # held by another session: wait for the release


BATCH = 500


def claim_all(
    zk: KazooClient, paths: GroupPaths, resources: Iterable[str], member_id: str, session_id: int
) -> ClaimResult:
    """Claims every free resource; ours already (same session) count as claimed.

    Free claims are created in ``multi`` batches: one transaction, so one zxid, so every resource of a
    batch gets the same fencing token. Existing claims are found first with pipelined reads, so a
    batch normally succeeds at the first attempt; a lost race just retries the rest.
    """
    claimed: dict[str, int] = {}
    blocked: list[str] = []
    free = _sort_existing(zk, paths, list(resources), session_id, claimed, blocked)
    data = json.dumps({"member": member_id}).encode()
    for start in range(0, len(free), BATCH):
        _create_batch(zk, paths, free[start : start + BATCH], data, session_id, claimed, blocked)
    return ClaimResult(claimed, blocked)


def _sort_existing(
    zk: KazooClient, paths: GroupPaths, resources: list[str], session_id: int,
    claimed: dict[str, int], blocked: list[str],
) -> list[str]:
    pending = [(r, zk.exists_async(paths.owner(r))) for r in resources]
    free = []
    for resource, result in pending:
        stat = result.get()
        if stat is None:
            free.append(resource)
        elif stat.ephemeralOwner == session_id:
            claimed[resource] = int(stat.czxid)
        else:
            blocked.append(resource)
    return free


def _create_batch(
    zk: KazooClient, paths: GroupPaths, batch: list[str], data: bytes, session_id: int,
    claimed: dict[str, int], blocked: list[str],
) -> None:
    while batch:
        txn = zk.transaction()
        for resource in batch:
            txn.create(paths.owner(resource), data, ephemeral=True)
        results = txn.commit()
        failed = [i for i, r in enumerate(results) if isinstance(r, NodeExistsError | NoNodeError)]
        if not failed:
            stat = zk.exists(paths.owner(batch[0]))
            if stat is not None and stat.ephemeralOwner == session_id:
                claimed.update(dict.fromkeys(batch, int(stat.czxid)))
            else:  # cannot happen while our session lives: our claims are deleted only by us
                blocked.extend(batch)
            return
        loser = batch[failed[0]]
        if isinstance(results[failed[0]], NoNodeError):
            zk.ensure_path(paths.owners)
        else:
            token = held_by(zk, paths, loser, session_id)
            if token is None:
                blocked.append(loser)
            else:
                claimed[loser] = token
            batch = batch[: failed[0]] + batch[failed[0] + 1 :]


def held_by(zk: KazooClient, paths: GroupPaths, resource: str, session_id: int) -> int | None:
    """The token if this session holds the claim, else None."""
    stat = zk.exists(paths.owner(resource))
    if stat is not None and stat.ephemeralOwner == session_id:
        return int(stat.czxid)
    return None


def watch_release(
    zk: KazooClient, paths: GroupPaths, resource: str, on_release: Callable[[str], None]
) -> bool:
    """Arms a one-shot watch on another session's claim; False when it is already gone."""

    def fired(event: WatchedEvent) -> None:
        on_release(resource)

    stat: ZnodeStat | None = zk.exists(paths.owner(resource), watch=fired)
    return stat is not None


def release(zk: KazooClient, paths: GroupPaths, resource: str, session_id: int) -> None:
    """Deletes the claim only if this session holds it. Raises ConnectionLoss etc. to be retried."""
    path = paths.owner(resource)
    stat = zk.exists(path)
    if stat is None or stat.ephemeralOwner != session_id:
        return
    try:
        zk.delete(path, version=stat.version)
    except NoNodeError:
        pass


def release_all(zk: KazooClient, paths: GroupPaths, resources: list[str], session_id: int) -> None:
    """Releases this session's claims on ``resources`` in ``multi`` batches (so their next owners are
    woken together). Claims held by another session are never touched. Raises ConnectionLoss etc.
    to be retried after reconnect (each retry re-checks ownership first)."""
    pending = [(r, zk.exists_async(paths.owner(r))) for r in resources]
    ours = []
    for resource, result in pending:
        stat = result.get()
        if stat is not None and stat.ephemeralOwner == session_id:
            ours.append((resource, int(stat.version)))
    for start in range(0, len(ours), BATCH):
        batch = ours[start : start + BATCH]
        txn = zk.transaction()
        for resource, version in batch:
            txn.delete(paths.owner(resource), version=version)
        results = txn.commit()
        if any(isinstance(r, Exception) for r in results):
            for resource, _ in batch:  # someone raced us (an administrator?): fall back one by one
                release(zk, paths, resource, session_id)
