"""Reading and writing per-member assignments (``G/assignment/<member node>``) through :mod:`blobs`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rebalanser import blobs
from rebalanser.errors import CorruptDataError
from rebalanser.paths import GroupPaths


@dataclass(frozen=True)
class MemberAssignment:
    epoch: int
    generation: int
    resources: tuple[str, ...]
    algorithm: str = "ResourceBarrier"

    def payload(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch, "generation": self.generation, "algorithm": self.algorithm,
            "resources": list(self.resources),
        }

    @staticmethod
    def from_payload(value: Any) -> MemberAssignment:
        if not isinstance(value, dict):
            raise CorruptDataError("assignment payload is not an object")
        resources = value.get("resources")
        if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources):
            raise CorruptDataError("assignment payload has no list of resource names")
        try:
            return MemberAssignment(
                int(value["epoch"]), int(value["generation"]), tuple(resources),
                str(value.get("algorithm", "ResourceBarrier")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptDataError(f"assignment payload lacks epoch/generation: {exc}") from exc


def read_member_assignment(zk: KazooClient, paths: GroupPaths, member_node: str) -> MemberAssignment | None:
    """The member's current assignment, None when there is none; raises CorruptDataError on garbage."""
    path = paths.member_assignment(member_node)
    try:
        data, _ = zk.get(path)
    except NoNodeError:
        return None
    return decode_assignment(zk, paths, member_node, data)


def decode_assignment(zk: KazooClient, paths: GroupPaths, member_node: str, data: bytes) -> MemberAssignment:
    header = blobs.decode_header(data)
    if header.parts == 0:
        return MemberAssignment.from_payload(header.inline)
    parts: list[bytes] = []
    for i in range(header.parts):
        try:
            part, _ = zk.get(paths.assignment_part(member_node, blobs.part_name(header.generation, i)))
        except NoNodeError as exc:
            raise CorruptDataError(f"assignment part {i} of {member_node} is missing") from exc
        parts.append(part)
    return MemberAssignment.from_payload(blobs.join_parts(header, parts))
