"""Confirmed-death failover, the ZooKeeper part: ends the member nodes of a dead container instance.

    outcomes = end_instances(zk, "/rebalanser/shop/orders", pod, ended, owned=marker_is_ours)

A run first ``sync``s the group, so that it reads what the leader has committed (a lagging follower
may still show a claim the dead session released and a live member took since), and checks the
group root's owner marker (``owned``): it acts only in a group its ResourceGroup owns. Then, for each
member node ``M`` chosen by :func:`failover.members_to_end`, with ``S`` its session
(``ephemeralOwner``):

1. ``M`` is deleted first, at the version read. This fences ``S``: every write a member makes to its
   claims is a ``multi`` that starts with ``check(M)``, so a late request of the dead process that
   reaches the server from now on changes nothing.
2. Every claim under ``G/owners`` and every stop marker whose ``ephemeralOwner`` is ``S`` is deleted
   at the version read (in ``multi`` batches, claims first; a batch in which one went or changed
   meanwhile is done again one by one, leaving that one alone). No second ``sync`` is needed: the
   server answered the delete of ``M`` only once it had applied it, so the reads that follow on the
   same session see every write committed before it, which includes every claim ``S`` made.

The run's round trips are the failover's latency (the claims hold the resources back from their new
owners): the member nodes are read once (their ``Stat`` is the one ``M`` is deleted at), and the
listings and ``Stat`` reads of each step are pipelined.

A run interrupted between 1 and 2 leaves ``S``'s remaining claims to session expiry (as without the
failover); the fence is already in place. Nothing is decided from memory (docs/protocol.md,
"Confirmed-death failover").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError
from kazoo.protocol.states import ZnodeStat
from rebalanser.errors import CorruptDataError
from rebalanser.paths import GroupPaths, MemberNode
from rebalanser.wire import MemberRecord, decode_member

from rebalanser_operator.failover.choice import EndedInstance, PodRef, members_to_end

log = logging.getLogger(__name__)

#: Deletes per multi (claims are small; ZooKeeper caps a request at 1 MiB).
BATCH = 500


@dataclass(frozen=True)
class Ended:
    """What ending one member node did: its session, the instance it recorded, claims and stop
    markers deleted."""

    member_node: str
    session: int
    instance: EndedInstance
    claims: int
    markers: int


class MemberChanged(Exception):
    """``M`` is gone or changed under the run (another run or the session's end came first)."""


class NotOwned(Exception):
    """The group root does not carry this ResourceGroup's owner marker (or does not exist)."""


def _read_members(
    zk: KazooClient, paths: GroupPaths, listing: Any = None,
) -> dict[str, tuple[MemberRecord | None, ZnodeStat]]:
    """Every member node's record (None when it cannot be parsed) and ``Stat``; pipelined reads
    (``listing``: a ``get_children_async`` of ``G/clients`` already sent)."""
    names = _children(listing if listing is not None else zk.get_children_async(paths.clients))
    if names is None:
        return {}
    pending = [(n, zk.get_async(paths.client(n))) for n in names if MemberNode.parse(n) is not None]
    records: dict[str, tuple[MemberRecord | None, ZnodeStat]] = {}
    for name, reply in pending:
        try:
            data, stat = reply.get()
        except NoNodeError:
            continue
        if not stat.ephemeralOwner:
            continue  # a persistent node is not a member
        try:
            records[name] = (decode_member(data, path=paths.client(name)), stat)
        except CorruptDataError:
            records[name] = (None, stat)
    return records


def end_instances(
    zk: KazooClient, group: str, pod: PodRef, ended: Iterable[EndedInstance], *, owned: Callable[[bytes], bool],
) -> list[Ended]:
    """Ends every member node of ``group`` that records ``pod`` and one of its ``ended`` instances,
    after a ``sync`` and only if ``owned(<group root's data>)``; raises :class:`NotOwned` otherwise."""
    paths = GroupPaths.of(group)
    # One round trip: the server answers a session's requests in order, so the reads sent behind the
    # sync are answered after it, from state at least as new as the leader's when it took the sync.
    synced = zk.sync_async(paths.root)
    root, listing = zk.get_async(paths.root), zk.get_children_async(paths.clients)
    synced.get()
    try:
        data, _ = root.get()
    except NoNodeError as exc:
        raise NotOwned(paths.root) from exc
    if not owned(data):
        raise NotOwned(paths.root)
    members = _read_members(zk, paths, listing)
    chosen = members_to_end(pod, ended, {name: record for name, (record, _) in members.items()})
    outcomes = []
    for name, instance in chosen.items():
        try:
            outcomes.append(end_member(zk, paths, name, instance, members[name][1]))
        except MemberChanged:
            log.info("member node %s went meanwhile", paths.client(name))
    return outcomes


def end_member(
    zk: KazooClient, paths: GroupPaths, name: str, instance: EndedInstance, stat: ZnodeStat | None = None,
) -> Ended:
    """Fences ``M``'s session by deleting ``M`` (at the version of ``stat``, read now when not given),
    then deletes that session's claims and stop markers."""
    member_path = paths.client(name)
    if stat is None:
        stat = zk.exists(member_path)
    if stat is None or not stat.ephemeralOwner:
        raise MemberChanged(member_path)
    session = int(stat.ephemeralOwner)
    removal = zk.delete_async(member_path, version=stat.version)
    # Sent behind the delete on the same session, so answered after it: one round trip for the three.
    claims_listing, stopped_listing = zk.get_children_async(paths.owners), zk.get_children_async(paths.stopped)
    try:
        removal.get()
    except (NoNodeError, BadVersionError, NotEmptyError) as exc:
        raise MemberChanged(member_path) from exc
    listed = {paths.owners: _children(claims_listing)}
    generations = [f"{paths.stopped}/{child}" for child in _children(stopped_listing) or []]
    deleted = _delete_owned_paths(zk, [paths.owners, *generations], session, listed)
    claims = sum(1 for path in deleted if path.startswith(paths.owners + "/"))
    markers = len(deleted) - claims
    log.info("ended member node %s (session 0x%x): %d claims, %d stop markers", member_path, session, claims, markers)
    return Ended(name, session, instance, claims, markers)


def _children(listing: Any) -> list[str] | None:
    """The outcome of a ``get_children_async`` (None: the parent does not exist)."""
    try:
        return list(listing.get())
    except NoNodeError:
        return None


def _owned_children(
    zk: KazooClient, parents: list[str], session: int, listed: Mapping[str, list[str] | None] | None = None,
) -> dict[str, int]:
    """path -> version of each child of ``parents`` that is an ephemeral node of ``session``, in the
    order of ``parents`` (pipelined: the listings not in ``listed`` together, then the ``Stat`` reads
    together)."""
    known = listed or {}
    listings = [(parent, zk.get_children_async(parent)) for parent in parents if parent not in known]
    children_of = {**known, **{parent: _children(listing) for parent, listing in listings}}
    pending: list[tuple[str, Any]] = []
    for parent in parents:
        pending.extend((f"{parent}/{c}", zk.exists_async(f"{parent}/{c}")) for c in children_of[parent] or [])
    owned = {}
    for path, reply in pending:
        stat = reply.get()
        if stat is not None and stat.ephemeralOwner == session:
            owned[path] = int(stat.version)
    return owned


def _delete_owned(zk: KazooClient, parents: list[str], session: int) -> int:
    """How many children of ``parents`` owned by ``session`` :func:`_delete_owned_paths` deleted."""
    return len(_delete_owned_paths(zk, parents, session))


def _delete_owned_paths(
    zk: KazooClient, parents: list[str], session: int, listed: Mapping[str, list[str] | None] | None = None,
) -> list[str]:
    """Deletes, at the version read, the children of ``parents`` that ``session`` owns: in ``multi``
    batches (one round trip and one transaction per :data:`BATCH`), and a batch that fails because one
    of them went or changed meanwhile one by one, leaving that one alone. Returns the paths this run
    deleted. ``listed``: the children of some of ``parents``, already listed."""
    owned = list(_owned_children(zk, parents, session, listed).items())
    deleted: list[str] = []
    for start in range(0, len(owned), BATCH):
        batch = owned[start:start + BATCH]
        tx = zk.transaction()
        for path, version in batch:
            tx.delete(path, version=version)
        if not any(isinstance(r, Exception) for r in tx.commit()):
            deleted.extend(path for path, _ in batch)
            continue
        pending = [(path, zk.delete_async(path, version=version)) for path, version in batch]
        for path, reply in pending:
            try:
                reply.get()
                deleted.append(path)
            except (NoNodeError, BadVersionError):
                log.info("%s went or changed meanwhile: left alone", path)
    return deleted
