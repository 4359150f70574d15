"""Arms a deletion watch on many nodes in one request: ZooKeeper's ``setWatches``.

A client sends this request after reconnecting, to set again the watches its session had; the server
accepts it at any time. For each path of its data list, relative to a zxid ``Z``:

- no node there: the server fires ``NodeDeleted`` at once;
- a node last changed after ``Z`` (``mzxid > Z``): the server fires ``NodeDataChanged`` at once;
- otherwise: a data watch is set, as ``exists`` with a watch would set on that node, and it fires when
  the node is deleted (or changed).

So for nodes created by one transaction of zxid ``Z`` and never written again (claims), the watches
are set on exactly those nodes, and a node that is gone or was replaced since is reported at once.
One request instead of one ``exists`` per node: kazoo spends about as much on each request as the
server does, and a member claims hundreds of resources at once.

kazoo has no method for it: this module defines the request (ZooKeeper's wire format: the zxid, then
three lists of paths: data, exist and child watches) and sends it through kazoo's ordinary request
queue. kazoo itself registers a watcher only when a read's reply comes, so the caller's watcher is
registered here first, before the request is sent: a watch the server fires at once finds it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from kazoo.client import KazooClient
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.serialization import int_struct, long_struct, write_string
from kazoo.protocol.states import WatchedEvent

from rebalanser.kazoo_private import add_data_watcher, full_path, send

SET_WATCHES = 101  # ZooKeeper's op code


class _SetWatches(NamedTuple):
    relative_zxid: int
    data: Sequence[str]
    type: int = SET_WATCHES

    def serialize(self) -> bytearray:
        out = bytearray(long_struct.pack(self.relative_zxid))
        out.extend(int_struct.pack(len(self.data)))
        for path in self.data:
            out.extend(write_string(path))
        out.extend(int_struct.pack(0))  # no exist watches
        out.extend(int_struct.pack(0))  # no child watches
        return out

    @classmethod
    def deserialize(cls, _data: Any, _offset: int) -> bool:
        return True  # the reply has no body


def watch_unchanged(zk: KazooClient, zxid: int, folder: str, names: Sequence[str],
                    watcher: Callable[[WatchedEvent], None]) -> None:
    """Sets ``watcher`` as the data watch of each node ``folder/<name>`` (``folder`` without kazoo's
    chroot; each name one path segment, as a resource's) that exists and has not changed since
    ``zxid``; for the others it is called at once, with ``DELETED`` (no node) or ``CHANGED`` (a newer
    node). Waits for the server's reply. Raises what a request raises (ConnectionLoss, ...)."""
    if names:
        send_watch_unchanged(zk, zxid, folder, names, watcher).get()


def send_watch_unchanged(zk: KazooClient, zxid: int, folder: str, names: Sequence[str],
                         watcher: Callable[[WatchedEvent], None]) -> IAsyncResult:
    """:func:`watch_unchanged`'s request, sent: its result is ready once the server has answered (the
    notifications it fires at once come before the answer, on the same connection). The folder's path
    on the server is made once, and each node's from it (as a claim transaction makes its creates)."""
    prefix = full_path(zk, folder)
    full = [f"{prefix}/{name}" for name in names]
    for path in full:
        add_data_watcher(zk, path, watcher)
    return send(zk, _SetWatches(zxid, full))
