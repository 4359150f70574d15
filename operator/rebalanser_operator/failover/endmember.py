"""Confirmed-death failover, the ZooKeeper part: ends the session of a dead container instance's member.

    outcomes = end_instances(zk, "/rebalanser/shop/orders", pod, ended, owned=marker_is_ours)

A run first ``sync``s the group, so that it reads what the leader has committed, and checks the group
root's owner marker (``owned``): it acts only in a group its ResourceGroup owns. Then, for each member
node ``M`` chosen by :func:`failover.members_to_end`, with ``S`` its session (``ephemeralOwner``):

1. It reads ``M``'s session record ``G/sessions/<guid>-<id>`` (and ``M`` again, in the same round trip).
   The record must be an ephemeral node of the very session it names, and that session must be ``S``:
   nobody can write a record that aims the close at another session (only ``S`` can create an
   ephemeral node owned by ``S``).
2. It attaches to ``S`` with the recorded id and password and closes it
   (:class:`~rebalanser_operator.failover.sessionclose.SessionCloser`). ZooKeeper deletes every
   ephemeral node of ``S`` (``M``, its claims, stop markers and the record) in one transaction, as at
   ``S``'s expiry, and refuses every later request of ``S``. A session that has already ended is
   reported so by the attach: nothing to do.

The operator deletes nothing by path: a claim taken by a live member after ``S`` ended (every claim has
version 0) cannot be touched. A member node without a record (a worker of an older version) or with a
record that fails the checks is left to session expiry (:attr:`Outcome.NO_RECORD`, :attr:`Outcome.REFUSED`).

Round trips: the sync with the marker and the listing of ``G/clients``; the member nodes' reads; the
records' reads; then per member the attach (a TCP, and with TLS a TLS, handshake, and ZooKeeper's) and
the close. A run interrupted anywhere has changed nothing but, at most, ended ``S`` (docs/protocol.md,
"Confirmed-death failover").
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from rebalanser.errors import CorruptDataError
from rebalanser.paths import GroupPaths, MemberNode
from rebalanser.wire import MemberRecord, SessionRecord, decode_member, decode_session

from rebalanser_operator.failover.choice import EndedInstance, PodRef, members_to_end
from rebalanser_operator.failover.sessionclose import Closed, SessionCloser, Unreachable

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    """What ending one member did."""

    CLOSED = "closed"  # S closed by the operator: M, its claims, stop markers and record went at once
    ALREADY_ENDED = "already ended"  # S had ended before the close (expired, or closed by another run)
    NO_RECORD = "no session record"  # a worker of an older version: left to session expiry
    REFUSED = "session record refused"  # the record does not name M's session, or is bad data: left to expiry

    @property
    def final(self) -> bool:
        """Whether S is over (no expiry is still to come for this member)."""
        return self in (Outcome.CLOSED, Outcome.ALREADY_ENDED)


@dataclass(frozen=True)
class Ended:
    """What ending one member node did: its session, the instance it recorded, the outcome (and why a
    record was refused)."""

    member_node: str
    session: int
    instance: EndedInstance
    outcome: Outcome
    reason: str = ""


@dataclass(frozen=True)
class Aim:
    """The session a record lets the operator close (the pure check's verdict when it may)."""

    record: SessionRecord


class MemberChanged(Exception):
    """``M`` and its session record are gone (another run or the session's end came first)."""


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
    closer: SessionCloser | None = None,
) -> list[Ended]:
    """Ends the session of every member node of ``group`` that records ``pod`` and one of its ``ended``
    instances, after a ``sync`` and only if ``owned(<group root's data>)``; raises :class:`NotOwned`
    otherwise. ``closer``: how sessions are closed (default: as ``zk`` connects). A member whose close
    got no answer is left out (the next pod event tries again)."""
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
    sessions = _read_sessions(zk, paths, list(chosen))  # one round trip for all of them
    closer = closer if closer is not None else SessionCloser.like(zk)
    outcomes = []
    for name, instance in chosen.items():
        try:
            outcomes.append(_end(closer, paths, name, instance, members[name][1], sessions[name]))
        except MemberChanged:
            log.info("member node %s went meanwhile", paths.client(name))
        except Unreachable as exc:
            log.warning("failover: %s; the next pod event tries again", exc)
    return outcomes


def end_member(
    zk: KazooClient, paths: GroupPaths, name: str, instance: EndedInstance, stat: ZnodeStat | None = None,
    closer: SessionCloser | None = None,
) -> Ended:
    """Ends ``M``'s session as :func:`end_instances` does for a member it chose (``stat``: ``M``'s, read
    now when not given); :class:`MemberChanged` when ``M`` is gone."""
    if stat is None:
        stat = zk.exists(paths.client(name))
    if stat is None or not stat.ephemeralOwner:
        raise MemberChanged(paths.client(name))
    sessions = _read_sessions(zk, paths, [name])
    return _end(closer if closer is not None else SessionCloser.like(zk), paths, name, instance, stat, sessions[name])


def _end(closer: SessionCloser, paths: GroupPaths, name: str, instance: EndedInstance, stat: ZnodeStat,
         read: tuple[Any, Any]) -> Ended:
    session = int(stat.ephemeralOwner)
    try:
        replies = _replies(*read)
    except NoAuthError:
        reason = "the record is not readable with the group's credentials"
        log.warning("failover: member node %s (session 0x%x): %s; left to session expiry", paths.client(name),
                    session, reason)
        return Ended(name, session, instance, Outcome.REFUSED, reason)
    verdict = aim(paths, name, session, *replies)
    if not isinstance(verdict, Aim):
        outcome, reason = verdict
        if outcome is None:
            raise MemberChanged(paths.client(name))
        log.warning("failover: member node %s (session 0x%x): %s%s; left to session expiry",
                    paths.client(name), session, outcome.value, f" ({reason})" if reason else "")
        return Ended(name, session, instance, outcome, reason)
    closed = closer.close(verdict.record.session_id, verdict.record.password)
    outcome = Outcome.CLOSED if closed is Closed.DONE else Outcome.ALREADY_ENDED
    log.info("session 0x%x of member node %s: %s", session, paths.client(name), outcome.value)
    return Ended(name, session, instance, outcome)


def aim(
    paths: GroupPaths, name: str, session: int, record: tuple[bytes, ZnodeStat] | None, member: ZnodeStat | None,
) -> Aim | tuple[Outcome | None, str]:
    """Whether the operator may close ``session`` (``M``'s ``ephemeralOwner``, as read) for member node
    ``name``, from what it read next: the session record (data and ``Stat``; None: none) and ``M`` again.
    An :class:`Aim` only for a record that is an ephemeral node of the session it names, that session
    being ``M``'s. Otherwise the outcome (None: ``M`` and the record are gone, the session has ended)
    and why."""
    if record is None:
        return (None, "") if member is None else (Outcome.NO_RECORD, "a worker of an older version?")
    data, stat = record
    try:
        decoded = decode_session(data, path=paths.session_record(name))
    except CorruptDataError as exc:
        return Outcome.REFUSED, exc.reason
    if int(stat.ephemeralOwner) != decoded.session_id:
        return Outcome.REFUSED, (f"the record names session 0x{decoded.session_id & (2**64 - 1):x} but is owned by "
                                 f"0x{int(stat.ephemeralOwner) & (2**64 - 1):x}")
    if decoded.session_id != session:
        return Outcome.REFUSED, f"the record is of session 0x{decoded.session_id & (2**64 - 1):x}, not the member's"
    return Aim(decoded)


def _read_sessions(zk: KazooClient, paths: GroupPaths, names: list[str]) -> dict[str, tuple[Any, Any]]:
    """Each member node's session record and the node itself, read again: pipelined, one round trip."""
    return {name: (zk.get_async(paths.session_record(name)), zk.exists_async(paths.client(name))) for name in names}


def _replies(record: Any, member: Any) -> tuple[tuple[bytes, ZnodeStat] | None, ZnodeStat | None]:
    try:
        data, stat = record.get()
        found: tuple[bytes, ZnodeStat] | None = (bytes(data), stat)
    except NoNodeError:
        found = None
    return found, member.get()


def _children(listing: Any) -> list[str] | None:
    """The outcome of a ``get_children_async`` (None: the parent does not exist)."""
    try:
        return list(listing.get())
    except NoNodeError:
        return None
