"""Group membership: protected ephemeral-sequential member znodes and the herd-free election order.

A member znode is named ``<guid>-<member id>-<sequence>``. The guid is new for every join, so a
create retried after ConnectionLoss can find the node it may already have made (never a ghost
member). The member with the lowest sequence is the coordinator; every other member watches only
its predecessor, so a departure wakes exactly one member.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from rebalanser.containers import ensure_container
from rebalanser.credentials import session_record_acl
from rebalanser.paths import GroupPaths, MemberNode, member_prefix
from rebalanser.wire import MemberRecord, SessionRecord, encode_member, encode_session
from rebalanser.zk import Companion, create_protected, new_guid

log = logging.getLogger(__name__)


class Roster:
    """Lists the live members of a group in election order.

    Only ephemeral member znodes are members: a persistent node under ``G/clients`` (left by an
    administrator or a tool) is never taken for a member, so it can neither be elected coordinator
    nor block the election; it is reported once through ``on_fake`` and otherwise ignored. Each
    member znode's owner is read once (one pipelined read per new name: names are unique per join)."""

    def __init__(
        self, zk: KazooClient, paths: GroupPaths, on_fake: Callable[[str], None] | None = None,
        known: Mapping[str, int] | None = None,
    ) -> None:
        """``known``: owners already read (another roster's :meth:`known`), not read again."""
        self._zk, self._paths, self._on_fake = zk, paths, on_fake
        self._owners: dict[str, int] = dict(known or {})  # member znode name -> ephemeralOwner (0: a persistent fake)

    def __call__(self, names: list[str] | None = None) -> list[MemberNode]:
        """``names``: a listing of ``G/clients`` already read (a watch's), else it is listed now."""
        if names is None:
            try:
                names = self._zk.get_children(self._paths.clients)
            except NoNodeError:
                return []
        parsed = []
        for name in names:
            node = MemberNode.parse(name)
            if node is None:
                log.warning("ignoring foreign child %s/%s", self._paths.clients, name)
            else:
                parsed.append(node)
        self._learn_owners([m.name for m in parsed])
        return sorted(m for m in parsed if self._owners.get(m.name))

    def known(self) -> dict[str, int]:
        """Every member znode's owner read so far (to seed another roster: names are unique per join)."""
        return dict(self._owners)

    def owner(self, member: MemberNode) -> int:
        """The session that owns a member listed by the last call (0 for none)."""
        return self._owners.get(member.name, 0)

    def _learn_owners(self, names: list[str]) -> None:
        unknown = [n for n in names if n not in self._owners]
        pending = [(n, self._zk.exists_async(self._paths.client(n))) for n in unknown]
        self._owners = {n: o for n, o in self._owners.items() if n in names}
        for name, reply in pending:
            stat = reply.get()
            if stat is None:
                continue  # gone meanwhile
            self._owners[name] = int(stat.ephemeralOwner)
            if not stat.ephemeralOwner:
                log.error("ignoring %s/%s: a persistent node is not a member", self._paths.clients, name)
                if self._on_fake is not None:
                    self._on_fake(self._paths.client(name))


def list_members(zk: KazooClient, paths: GroupPaths) -> list[MemberNode]:
    """The live members now (a one-off :class:`Roster`, for callers that list once)."""
    return Roster(zk, paths)()


def create_member_node(
    zk: KazooClient, paths: GroupPaths, member_id: str, deadline: float,
    *, instance_digest: str | None = None, pod: str | None = None, pod_uid: str | None = None,
    pod_namespace: str | None = None, container: str | None = None,
) -> MemberNode:
    """Creates this member's znode exactly once, even when a create is retried after ConnectionLoss.
    Its data records the instance nonce's digest and the pod's namespace, name, UID and container
    when given (confirmed-death failover; never the nonce itself). The same ``multi`` creates the
    session record (``G/sessions/<guid>-<id>``: this session's id and password, readable only by the
    group's digest identities, :func:`~rebalanser.credentials.session_record_acl`), with which the
    operator's failover closes the session once the kubelet reports this instance ended."""
    prefix = member_prefix(new_guid(), member_id)
    data = encode_member(MemberRecord(
        member_id, time.time(), pod=pod, pod_uid=pod_uid, instance_digest=instance_digest,
        pod_namespace=pod_namespace, container=container,
    ))
    # A missing G/clients or G/sessions is made again, but never G itself: the group may be being deleted.
    name = create_protected(
        zk, paths.clients, prefix, data, deadline=deadline,
        on_no_parent=lambda: ensure_container(zk, paths.clients) and ensure_container(zk, paths.sessions),
        companions=[session_companion(zk, paths, prefix)],
    )
    node = MemberNode.parse(name)
    assert node is not None
    return node


def session_companion(zk: KazooClient, paths: GroupPaths, prefix: str) -> Companion:
    """The session record to create with the member node of ``prefix``: the session the client is in
    now. Should the ``multi`` be sent in a later session (an expiry in between), the record names
    another session than its own ``ephemeralOwner``, and the operator refuses it (session expiry then
    ends the member, as without the record)."""
    ids = zk.client_id
    session, password = (int(ids[0]), bytes(ids[1])) if ids else (0, bytes(16))
    return Companion(paths.session_record(prefix), encode_session(SessionRecord(session, password)),
                     session_record_acl(zk.default_acl))


def predecessor(members: list[MemberNode], me: MemberNode) -> MemberNode | None:
    """The member just before ``me`` in election order, or None when ``me`` is the coordinator."""
    before = [m for m in members if m.seq < me.seq]
    return before[-1] if before else None


def watch_predecessor(
    zk: KazooClient, paths: GroupPaths, node: MemberNode, on_gone: Callable[[], None]
) -> bool:
    """Arms a one-shot watch on ``node``; returns False when it is already gone."""

    def fired(event: WatchedEvent) -> None:
        on_gone()

    return zk.exists(paths.client(node.name), watch=fired) is not None


def stale_same_id(roster: Roster, member_id: str, session_id: int) -> list[MemberNode]:
    """Member nodes with our id left by another session (e.g. our previous one, not yet expired)."""
    return [m for m in roster() if m.member_id == member_id and roster.owner(m) != session_id]
