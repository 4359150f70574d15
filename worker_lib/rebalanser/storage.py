"""Reading per-member assignments (``G/assignment/<member node>``, format in :mod:`wire`) from ZooKeeper."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rebalanser import wire
from rebalanser.errors import CorruptDataError
from rebalanser.paths import GroupPaths
from rebalanser.wire import MemberAssignment


def read_member_assignment(zk: KazooClient, paths: GroupPaths, member_node: str) -> MemberAssignment | None:
    """The member's current assignment, None when there is none; raises CorruptDataError on garbage."""
    path = paths.member_assignment(member_node)
    try:
        data, _ = zk.get(path)
    except NoNodeError:
        return None
    return decode_assignment(zk, paths, member_node, data)


def decode_assignment(zk: KazooClient, paths: GroupPaths, member_node: str, data: bytes) -> MemberAssignment:
    """Decodes a header read from the member's assignment node, reading its parts if it has any."""
    path = paths.member_assignment(member_node)
    header = wire.decode_assignment_header(data, path=path)
    if header.inline is not None:
        return header.inline
    parts: list[bytes] = []
    for i in range(header.parts):
        try:
            part, _ = zk.get(paths.assignment_part(member_node, wire.part_name(header.generation, i)))
        except NoNodeError as exc:
            raise CorruptDataError(f"part {i} is missing", path=path, kind="assignment") from exc
        parts.append(part)
    return wire.join_assignment_parts(header, parts, path=path)
