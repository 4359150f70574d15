"""A read-only snapshot of a group, for ``rebalanser status`` and the operator's status mirror."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rebalanser import wire
from rebalanser.errors import CorruptDataError
from rebalanser.paths import GroupPaths, MemberNode
from rebalanser.storage import read_member_assignment

log = logging.getLogger(__name__)


@dataclass
class GroupStatus:
    path: str
    exists: bool
    members: list[str] = field(default_factory=list)  # member ids, in election order
    coordinator: str | None = None
    epoch: int = 0
    resources: list[str] = field(default_factory=list)
    assignments: dict[str, list[str]] = field(default_factory=dict)  # member id -> sorted resources
    generation: int = 0
    last_rebalance: wire.RebalanceRecord | None = None
    rejected: list[str] = field(default_factory=list)  # data that could not be parsed, with reasons
    pods: dict[str, str] = field(default_factory=dict)  # member id -> the pod its member node records

    @property
    def assigned(self) -> set[str]:
        live = set(self.resources)
        return {r for rs in self.assignments.values() for r in rs if r in live}

    @property
    def unassigned(self) -> list[str]:
        return sorted(set(self.resources) - self.assigned)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path, "exists": self.exists, "members": self.members,
            "coordinator": self.coordinator, "epoch": self.epoch, "generation": self.generation,
            "resources": len(self.resources), "assigned": len(self.assigned),
            "unassigned": self.unassigned, "assignments": self.assignments,
            "lastRebalance": self.last_rebalance.to_dict() if self.last_rebalance else None,
            "rejected": self.rejected, "pods": self.pods,
        }


def read_group_status(zk: KazooClient, path: str) -> GroupStatus:
    paths = GroupPaths.of(path)
    if zk.exists(paths.root) is None:
        return GroupStatus(path=paths.root, exists=False)
    status = GroupStatus(path=paths.root, exists=True)
    members = _members(zk, paths)
    status.members = [m.member_id for m in members]
    status.coordinator = members[0].member_id if members else None
    epoch = zk.exists(paths.epoch)
    status.epoch = epoch.version if epoch else 0
    status.resources = sorted(_children(zk, paths.resources))
    records = [(m, zk.get_async(paths.client(m.name))) for m in members]  # pipelined, read below
    _read_assignments(zk, paths, members, status)
    status.pods = pods_of(records)
    status.last_rebalance = _last_rebalance(zk, paths, status)
    return status


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return list(zk.get_children(path))
    except NoNodeError:
        return []


def _members(zk: KazooClient, paths: GroupPaths) -> list[MemberNode]:
    parsed = (MemberNode.parse(name) for name in _children(zk, paths.clients))
    return sorted(m for m in parsed if m is not None)


def _read_assignments(zk: KazooClient, paths: GroupPaths, members: list[MemberNode], status: GroupStatus) -> None:
    for member in members:
        try:
            assignment = read_member_assignment(zk, paths, member.name)
        except CorruptDataError as exc:
            status.rejected.append(f"assignment of {member.member_id}: {exc.reason}")
            continue
        if assignment is None:
            continue
        status.generation = max(status.generation, assignment.generation)
        status.assignments[member.member_id] = sorted(assignment.resources)


def pods_of(records: list[tuple[MemberNode, Any]]) -> dict[str, str]:
    """Member id -> the pod name its member node records (a worker started with ``POD_NAME``), from
    pipelined reads of the member nodes (``zk.get_async``); a node gone or unreadable is left out."""
    pods: dict[str, str] = {}
    for member, reply in records:
        try:
            data, _ = reply.get()
            record = wire.decode_member(data)
        except (NoNodeError, CorruptDataError):
            continue
        if record.pod:
            pods[member.member_id] = record.pod
    return pods


def _last_rebalance(zk: KazooClient, paths: GroupPaths, status: GroupStatus) -> wire.RebalanceRecord | None:
    try:
        data, _ = zk.get(paths.state)
        return wire.decode_rebalance(data, path=paths.state)
    except NoNodeError:
        return None
    except CorruptDataError as exc:
        status.rejected.append(f"G/state: {exc.reason}")
        return None
