"""Reading per-member assignments (``G/assignment/<member node>``, format in :mod:`wire`) from ZooKeeper."""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.serialization import GetData

from rebalanser import wire
from rebalanser.errors import CorruptDataError
from rebalanser.kazoo_private import full_path, send_all
from rebalanser.paths import GroupPaths
from rebalanser.wire import AssignmentHeader, MemberAssignment

ChunkCache = MutableMapping[str, tuple[str, ...]]  # chunk name -> its resource names
HEADER_RETRIES = 3


class _ChunkGone(Exception):
    pass


def read_member_assignment(zk: KazooClient, paths: GroupPaths, member_node: str) -> MemberAssignment | None:
    """The member's current assignment, None when there is none; raises CorruptDataError on garbage."""
    path = paths.member_assignment(member_node)
    try:
        data, _ = zk.get(path)
    except NoNodeError:
        return None
    return decode_assignment(zk, paths, member_node, data)


def decode_assignment(zk: KazooClient, paths: GroupPaths, member_node: str, data: bytes,
                      cache: ChunkCache | None = None) -> MemberAssignment:
    """Decodes a header read from the member's assignment node, reading the chunks it names that
    ``cache`` lacks (chunk names are digests of their data: a cached chunk never goes stale). A chunk
    found missing was most likely deleted after the coordinator replaced the header we read: the
    header is read again (a few times) before the value is taken for corrupt."""
    path = paths.member_assignment(member_node)
    chunks: ChunkCache = {} if cache is None else cache
    for _ in range(HEADER_RETRIES):
        header = wire.decode_assignment_header(data, path=path)
        if header.inline is not None:
            return header.inline
        try:
            _fetch(zk, paths, member_node, header, chunks)
        except _ChunkGone:
            try:
                fresh, _ = zk.get(path)
            except NoNodeError as exc:
                raise CorruptDataError("the assignment went away while it was read", path=path,
                                       kind="assignment") from exc
            if fresh == data:
                break
            data = fresh
            continue
        assignment = wire.join_chunks(header, chunks, path=path)
        _keep_only(chunks, header.chunks)
        return assignment
    raise CorruptDataError("a chunk the header names is missing", path=path, kind="assignment")


def _fetch(zk: KazooClient, paths: GroupPaths, member_node: str, header: AssignmentHeader,
           chunks: ChunkCache) -> None:
    """Reads the chunks ``header`` names that ``chunks`` lacks, pipelined, into ``chunks``."""
    missing = [c for c in dict.fromkeys(header.chunks) if c not in chunks]
    reads = [GetData(full_path(zk, paths.assignment_part(member_node, c)), None) for c in missing]
    for name, reply in zip(missing, send_all(zk, reads), strict=True):
        try:
            data, _ = reply.get()
        except NoNodeError:
            raise _ChunkGone(name) from None
        chunks[name] = wire.decode_chunk(name, data, path=paths.assignment_part(member_node, name))


def _keep_only(chunks: ChunkCache, names: Iterable[str]) -> None:
    keep = set(names)
    for name in [c for c in chunks if c not in keep]:
        del chunks[name]
