"""The status loop's read of one group: every watch armed and every node read in one pipelined round.

    snapshot = read_with_watches(zk, "/rebalanser/shop/orders", watcher)
    snapshot.group      # what ``rebalanser.status.read_group_status`` returns
    snapshot.config     # G/config as read in the same round (None when missing or not valid)
    snapshot.root_data  # the group root's data (its owner marker), read in the same round

One round trip arms one-shot watches on ``G``, ``G/clients``, ``G/resources``, ``G/epoch``,
``G/state`` and ``G/config`` and reads the children, the rebalance record and the config; a second
reads every member's node (the pod it records) and assignment (pipelined too). ZooKeeper answers one
session's requests in order, so each watch is armed before the read it guards: a change after the
read always fires a watch.
With a thousand groups on one operator, a refresh costs two round trips instead of one per node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent
from rebalanser import wire
from rebalanser.config import GroupConfig
from rebalanser.errors import CorruptDataError
from rebalanser.paths import GroupPaths, MemberNode
from rebalanser.status import GroupStatus, pods_of
from rebalanser.storage import decode_assignment

log = logging.getLogger(__name__)

Watcher = Callable[[WatchedEvent], None]


@dataclass(frozen=True)
class Snapshot:
    group: GroupStatus
    config: GroupConfig | None
    pods: dict[str, str] = field(default_factory=dict)  # member id -> the pod it recorded (POD_NAME)
    root_data: bytes | None = None  # the group root's data (its owner marker), None when there is no root
    #: live members whose node records no pod UID or no container instance (KubeletConfirmed cannot end them)
    unconfirmable: tuple[str, ...] = ()


def read_with_watches(zk: KazooClient, path: str, watcher: Watcher) -> Snapshot:
    paths = GroupPaths.of(path)
    root = zk.exists_async(paths.root, watch=watcher)
    marker = zk.get_async(paths.root)
    clients = zk.get_children_async(paths.clients, watch=watcher)
    resources = zk.get_children_async(paths.resources, watch=watcher)
    epoch = zk.exists_async(paths.epoch, watch=watcher)
    for node in (paths.state, paths.config):
        zk.exists_async(node, watch=watcher)
    state = zk.get_async(paths.state)
    config = zk.get_async(paths.config)
    exists = root.get() is not None
    config_value = config_of(config, paths.config)
    try:
        root_data: bytes | None = marker.get()[0]
    except NoNodeError:
        root_data = None
    if not exists or root_data is None:
        return Snapshot(GroupStatus(path=paths.root, exists=False), config_value)
    status = GroupStatus(path=paths.root, exists=True)
    members = sorted(m for m in (MemberNode.parse(n) for n in _children(zk, clients, paths.clients, watcher))
                     if m is not None)
    status.members = [m.member_id for m in members]
    status.coordinator = members[0].member_id if members else None
    stat = epoch.get()
    status.epoch = stat.version if stat else 0
    status.resources = sorted(_children(zk, resources, paths.resources, watcher))
    records = [(m, zk.get_async(paths.client(m.name))) for m in members]
    _assignments(zk, paths, members, status)
    status.last_rebalance = _rebalance(state, paths.state, status)
    status.pods = pods_of(records)
    return Snapshot(status, config_value, status.pods, root_data, unconfirmable_of(records))


def unconfirmable_of(records: list[tuple[MemberNode, Any]]) -> tuple[str, ...]:
    """Member ids whose node lacks what confirmed-death failover matches a terminated container on (the
    pod UID, and the instance's digest or nonce), from the pipelined reads; unreadable nodes are left out."""
    found = []
    for member, reply in records:
        try:
            record = wire.decode_member(reply.get()[0])
        except (NoNodeError, CorruptDataError):
            continue
        if not record.pod_uid or (record.instance_digest is None and record.instance is None):
            found.append(member.member_id)
    return tuple(found)


def _children(zk: KazooClient, reply: Any, path: str, watcher: Watcher) -> list[str]:
    """The children from a pipelined read; a missing container gets an existence watch instead."""
    try:
        return list(reply.get())
    except NoNodeError:
        zk.exists(path, watch=watcher)
        return []


def _assignments(zk: KazooClient, paths: GroupPaths, members: list[MemberNode], status: GroupStatus) -> None:
    replies = [(m, zk.get_async(paths.member_assignment(m.name))) for m in members]
    for member, reply in replies:
        try:
            data, _ = reply.get()
        except NoNodeError:
            continue
        try:
            assignment = decode_assignment(zk, paths, member.name, data)
        except CorruptDataError as exc:
            status.rejected.append(f"assignment of {member.member_id}: {exc.reason}")
            continue
        status.generation = max(status.generation, assignment.generation)
        status.assignments[member.member_id] = sorted(assignment.resources)


def _rebalance(reply: Any, path: str, status: GroupStatus) -> wire.RebalanceRecord | None:
    try:
        data, _ = reply.get()
        return wire.decode_rebalance(data, path=path)
    except NoNodeError:
        return None
    except CorruptDataError as exc:
        status.rejected.append(f"G/state: {exc.reason}")
        return None


def config_of(reply: Any, path: str) -> GroupConfig | None:
    """``G/config`` from a read's ``reply``; None when it is missing or not a valid config (either way,
    drift to repair; :func:`rebalanser_operator.apply.reconcile.read_config` reads it the same way)."""
    try:
        data, _ = reply.get()
        return wire.decode_config(data, path=path)
    except NoNodeError:
        return None
    except CorruptDataError as exc:
        log.warning("rejecting %s: %s", path, exc.reason)
        return None
