"""Confirmed-death failover, the ZooKeeper part: ends the member nodes of a dead container instance.

    outcomes = end_instances(zk, "/rebalanser/shop/orders", "orders-0", {"3f…"})

For each member node ``M`` chosen by :func:`failover.members_to_end`, with ``S`` its session
(``ephemeralOwner``): the claims under ``G/owners`` owned by ``S`` go in ``multi`` batches that each
start with ``check(M)``; then ``S``'s stop markers and ``M`` itself in one ``multi`` that starts with
``check(M)``. Every step is idempotent and decided from what ZooKeeper holds, so a run interrupted at
any point is completed by the next one (docs/protocol.md, "Confirmed-death failover").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, RolledBackError
from rebalanser.errors import CorruptDataError
from rebalanser.paths import GroupPaths, MemberNode
from rebalanser.wire import MemberRecord, decode_member

from rebalanser_operator.failover import members_to_end

log = logging.getLogger(__name__)

#: Deletes per multi (claims are small; ZooKeeper caps a request at 1 MiB).
BATCH = 500


@dataclass(frozen=True)
class Ended:
    """What ending one member node did: claims and stop markers deleted, and whether ``M`` went now."""

    member_node: str
    session: int
    claims: int
    markers: int
    ended: bool


class MemberChanged(Exception):
    """``M`` is gone or changed under the run (another run finished first): nothing more to do."""


def read_members(zk: KazooClient, paths: GroupPaths) -> dict[str, MemberRecord | None]:
    """Every member node's record (None when it cannot be parsed); pipelined reads."""
    try:
        names = zk.get_children(paths.clients)
    except NoNodeError:
        return {}
    pending = [(n, zk.get_async(paths.client(n))) for n in names if MemberNode.parse(n) is not None]
    records: dict[str, MemberRecord | None] = {}
    for name, reply in pending:
        try:
            data, stat = reply.get()
        except NoNodeError:
            continue
        if not stat.ephemeralOwner:
            continue  # a persistent node is not a member
        try:
            records[name] = decode_member(data, path=paths.client(name))
        except CorruptDataError:
            records[name] = None
    return records


def end_instances(zk: KazooClient, group: str, pod_name: str, nonces: Iterable[str]) -> list[Ended]:
    """Ends every member node of ``group`` that records ``pod_name`` and one of ``nonces``."""
    paths = GroupPaths.of(group)
    chosen = members_to_end(pod_name, nonces, read_members(zk, paths))
    outcomes = []
    for name in chosen:
        try:
            outcomes.append(end_member(zk, paths, name))
        except MemberChanged:
            log.info("member node %s went meanwhile", paths.client(name))
    return outcomes


def end_member(zk: KazooClient, paths: GroupPaths, name: str) -> Ended:
    """Deletes the claims and stop markers of ``M``'s session, then ``M``; see the module docstring."""
    member_path = paths.client(name)
    stat = zk.exists(member_path)
    if stat is None or not stat.ephemeralOwner:
        raise MemberChanged(member_path)
    session = int(stat.ephemeralOwner)
    claims = _owned_children(zk, [paths.owners], session)
    for start in range(0, len(claims), BATCH):
        _commit(zk, member_path, stat.version, [("delete", p) for p in claims[start:start + BATCH]])
    markers = _owned_children(zk, _generation_dirs(zk, paths), session)
    ops = [("delete", p) for p in markers] + [("delete", member_path)]
    for start in range(0, len(ops), BATCH):
        _commit(zk, member_path, stat.version, ops[start:start + BATCH])
    log.info("ended member node %s (session 0x%x): %d claims, %d stop markers", member_path, session,
             len(claims), len(markers))
    return Ended(name, session, len(claims), len(markers), True)


def _generation_dirs(zk: KazooClient, paths: GroupPaths) -> list[str]:
    try:
        return [f"{paths.stopped}/{child}" for child in zk.get_children(paths.stopped)]
    except NoNodeError:
        return []


def _owned_children(zk: KazooClient, parents: list[str], session: int) -> list[str]:
    """Children of ``parents`` that are ephemeral nodes of ``session`` (pipelined ``exists``)."""
    pending: list[tuple[str, Any]] = []
    for parent in parents:
        try:
            children = zk.get_children(parent)
        except NoNodeError:
            continue
        pending.extend((f"{parent}/{c}", zk.exists_async(f"{parent}/{c}")) for c in children)
    owned = []
    for path, reply in pending:
        stat = reply.get()
        if stat is not None and stat.ephemeralOwner == session:
            owned.append(path)
    return owned


def _commit(zk: KazooClient, member_path: str, version: int, ops: list[tuple[str, str]]) -> None:
    """One ``multi``: ``check(M)`` then the deletes. A delete of a node gone meanwhile is retried without
    it; a failed check means ``M`` changed (:class:`MemberChanged`)."""
    remaining = [path for _, path in ops]
    while remaining:
        tx = zk.transaction()
        tx.check(member_path, version)
        for path in remaining:
            tx.delete(path)
        results = tx.commit()
        failed = [i for i, r in enumerate(results) if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if not failed:
            return
        if failed[0] == 0:
            raise MemberChanged(member_path)
        gone = {remaining[i - 1] for i in failed if isinstance(results[i], NoNodeError)}
        if not gone:
            raise results[failed[0]]
        remaining = [p for p in remaining if p not in gone]
