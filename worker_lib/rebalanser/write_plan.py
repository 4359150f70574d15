"""The coordinator's write plan: from the assignments stored and the ones wanted, the writes to make.

Pure: it reads nothing and writes nothing. The coordinator reads the layout, asks which departed
members' assignment nodes still exist (a member that left gracefully deleted its own), and commits
the plan's operations in one fenced write (:class:`rebalanser.writer.FencedWriter`).

Per member whose assignment changed (every member when ``force``): its assignment node is created
if new, the chunks the new value needs and the node lacks are created, then its header is set (a
reader that sees the new header finds every chunk it names); chunks no longer named are deleted
after the commit. Chunks are content-addressed (:func:`rebalanser.wire.encode_chunk`), so a
rebalance writes the chunks its moves touched, not every changed member's whole list.
Per departed member whose assignment node still exists: its parts, then the node, are deleted.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from rebalanser import wire
from rebalanser.config import Algorithm
from rebalanser.paths import GroupPaths
from rebalanser.wire import Blob, MemberAssignment
from rebalanser.writer import Op

Resources = tuple[str, ...]


@dataclass(frozen=True)
class WritePlan:
    ops: list[Op]  # in order, committed as one fenced write
    written: dict[str, Resources]  # what is stored once it is committed (departed members still in)
    parts: dict[str, list[str]]  # member node -> its chunk children once committed
    stale_parts: list[str]  # "<member node>/<chunk>": deleted after the commit
    departed: list[str]  # member nodes to forget once committed


def departed(written: Mapping[str, Resources], desired: Mapping[str, Resources]) -> list[str]:
    """Members with an assignment stored that no longer get one."""
    return [n for n in written if n not in desired]


def plan(
    paths: GroupPaths,
    written: Mapping[str, Resources],
    parts: Mapping[str, list[str]],
    desired: Mapping[str, Resources],
    generation: int,
    epoch: int,
    algorithm: Algorithm,
    force: bool,
    still_stored: Collection[str],
    stop: bool = True,
    encoded: Mapping[MemberAssignment, Blob] | None = None,
) -> WritePlan:
    """``still_stored``: those of :func:`departed` whose assignment node exists; ``stop`` False marks a
    Global Barrier generation that stopped nobody (members apply it at once). ``encoded``: assignments
    encoded beforehand (a memo: an assignment it lacks is encoded here, the bytes are the same)."""
    memo = encoded or {}
    ops: list[Op] = []
    new_written, new_parts = dict(written), {n: list(p) for n, p in parts.items()}
    stale: list[str] = []
    for node, resources in desired.items():
        if not force and written.get(node) == resources:
            continue
        value = MemberAssignment(epoch, generation, resources, algorithm.value, node, stop)
        blob = memo.get(value) or wire.encode_assignment(value)
        path = paths.member_assignment(node)
        if node not in written:
            ops.append(Op("create", path, b""))
            new_parts[node] = []
        stored = set(new_parts.get(node, []))
        ops += [Op("create", paths.assignment_part(node, name), data)
                for name, data in blob.chunks.items() if name not in stored]
        ops.append(Op("set", path, blob.header))
        stale += [f"{node}/{p}" for p in new_parts.get(node, []) if p not in blob.chunks]
        new_parts[node] = list(blob.chunks)
        new_written[node] = resources
    gone = departed(written, desired)
    for node in [n for n in gone if n in still_stored]:
        ops += [Op("delete", paths.assignment_part(node, part)) for part in new_parts.get(node, [])]
        ops.append(Op("delete", paths.member_assignment(node)))
    return WritePlan(ops, new_written, new_parts, stale, gone)
