"""Which ephemeral nodes under a path the calling session holds, in one request: ZooKeeper's
``getEphemerals`` (servers 3.6 and later). kazoo has no method for it, so this module defines the
request (the wire format of ZooKeeper's own client: a path prefix in, a list of paths out) and sends it
through kazoo's ordinary request queue. The answer costs in proportion to the session's own ephemeral
nodes, never to the number of nodes under the path (other members' claims)."""

from __future__ import annotations

from typing import Any, NamedTuple

from kazoo.client import KazooClient
from kazoo.protocol.serialization import int_struct, read_string, write_string

from rebalanser.kazoo_private import full_path, send

GET_EPHEMERALS = 103  # ZooKeeper's op code


class _GetEphemerals(NamedTuple):
    prefix: str
    type: int = GET_EPHEMERALS

    def serialize(self) -> bytearray:
        data = bytearray()
        data.extend(write_string(self.prefix))
        return data

    @classmethod
    def deserialize(cls, data: Any, offset: int) -> list[str]:
        count = int_struct.unpack_from(data, offset)[0]
        offset += int_struct.size
        paths = []
        for _ in range(max(count, 0)):
            path, offset = read_string(data, offset)
            paths.append(path)
        return paths


def own_ephemerals(zk: KazooClient, prefix: str) -> set[str]:
    """The paths (without kazoo's chroot) of the calling session's ephemeral nodes whose path starts
    with ``prefix``. Raises what a request raises (ConnectionLoss, ...), and kazoo's
    ``UnimplementedError`` when the server is older than 3.6."""
    chroot = zk.chroot or ""
    paths: list[str] = send(zk, _GetEphemerals(full_path(zk, prefix, trailing=prefix.endswith("/")))).get()
    return {p[len(chroot):] if chroot and p.startswith(chroot) else p for p in paths}
