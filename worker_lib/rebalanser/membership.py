"""Group membership: protected ephemeral-sequential member znodes and the herd-free election order.

A member znode is named ``<guid>-<member id>-<sequence>``. The guid is new for every join, so a
create retried after ConnectionLoss can find the node it may already have made (never a ghost
member). The member with the lowest sequence is the coordinator; every other member watches only
its predecessor, so a departure wakes exactly one member.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoNodeError, OperationTimeoutError
from kazoo.protocol.states import WatchedEvent

from rebalanser.paths import GroupPaths, MemberNode, member_prefix

log = logging.getLogger(__name__)


def list_members(zk: KazooClient, paths: GroupPaths) -> list[MemberNode]:
    """Live members in election order; foreign children are ignored (and logged once per call)."""
    try:
        names = zk.get_children(paths.clients)
    except NoNodeError:
        return []
    members = []
    for name in names:
        node = MemberNode.parse(name)
        if node is None:
            log.warning("ignoring foreign child %s/%s", paths.clients, name)
        else:
            members.append(node)
    return sorted(members)


def create_member_node(zk: KazooClient, paths: GroupPaths, member_id: str, deadline: float) -> MemberNode:
    """Creates this member's znode exactly once, even when a create is retried after ConnectionLoss."""
    guid = uuid.uuid4().hex
    prefix = member_prefix(guid, member_id)
    data = json.dumps({"id": member_id, "joined": time.time()}).encode()
    while True:
        try:
            created = zk.create(paths.client(prefix), data, ephemeral=True, sequence=True)
            node = MemberNode.parse(created.rsplit("/", 1)[1])
            assert node is not None
            return node
        except (ConnectionLoss, OperationTimeoutError):
            found = _find_own(zk, paths, prefix, deadline)
            if found is not None:
                return found
        except NoNodeError:
            zk.ensure_path(paths.clients)
        if time.monotonic() > deadline:
            raise TimeoutError("could not create the member znode before the deadline")


def _find_own(zk: KazooClient, paths: GroupPaths, prefix: str, deadline: float) -> MemberNode | None:
    while time.monotonic() < deadline:
        try:
            for name in zk.get_children(paths.clients):
                if name.startswith(prefix):
                    return MemberNode.parse(name)
            return None
        except (ConnectionLoss, OperationTimeoutError):
            time.sleep(0.1)
    return None


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


def stale_same_id(zk: KazooClient, paths: GroupPaths, member_id: str, session_id: int) -> list[MemberNode]:
    """Member nodes with our id left by another session (e.g. our previous one, not yet expired)."""
    stale = []
    for member in list_members(zk, paths):
        if member.member_id != member_id:
            continue
        stat = zk.exists(paths.client(member.name))
        if stat is not None and stat.ephemeralOwner != session_id:
            stale.append(member)
    return stale
