"""An in-memory :class:`rebalanser.member_store.MemberStore`, for unit tests of joining and following.

Nodes are kept by path as decoded values; a read arms a one-shot watch on its path, whether the node
exists or not, and a change fires every watch armed on the path once, as ZooKeeper does (at once, on
the caller's thread). What the member writes (its node, its stop markers) and what the test writes in
the coordinator's place (assignments, ``G/barrier``, a round's stop directory) are both plain
:meth:`FakeMemberStore.put` and :meth:`FakeMemberStore.remove`."""

from __future__ import annotations

import itertools
import uuid

from kazoo.protocol.states import EventType, KeeperState, WatchedEvent
from rebalanser.member_store import NodeRead, Watcher
from rebalanser.paths import GroupPaths, MemberNode, member_prefix
from rebalanser.wire import BarrierRecord, MemberAssignment


class FakeMemberStore:
    def __init__(self, paths: GroupPaths, member_id: str) -> None:
        self.paths, self.member_id = paths, member_id
        self.nodes: dict[str, object] = {paths.root: b"", paths.clients: b"", paths.stopped: b""}
        self.epoch = 0
        self._watches: dict[str, set[Watcher]] = {}
        self._seq = itertools.count()

    # -- what the test does in others' place ---------------------------------------------------

    def put(self, path: str, value: object) -> None:
        kind = EventType.CHANGED if path in self.nodes else EventType.CREATED
        self.nodes[path] = value
        self._fire(path, kind)

    def remove(self, path: str) -> None:
        if self.nodes.pop(path, None) is not None:
            self._fire(path, EventType.DELETED)

    def _fire(self, path: str, kind: str) -> None:
        for watch in self._watches.pop(path, set()):
            watch(WatchedEvent(kind, KeeperState.CONNECTED, path))

    def _read(self, path: str, watch: Watcher) -> object | None:
        self._watches.setdefault(path, set()).add(watch)
        return self.nodes.get(path)

    # -- MemberStore ---------------------------------------------------------------------------

    def read_assignment(self, node: str, watch: Watcher) -> NodeRead[MemberAssignment]:
        value = self._read(self.paths.member_assignment(node), watch)
        return NodeRead(value if isinstance(value, MemberAssignment) else None)

    def read_barrier(self, watch: Watcher) -> NodeRead[BarrierRecord]:
        value = self._read(self.paths.barrier, watch)
        return NodeRead(value if isinstance(value, BarrierRecord) else None)

    def read_epoch(self) -> int:
        return self.epoch

    def create_member_node(self, deadline: float) -> MemberNode | None:
        if self.paths.root not in self.nodes:
            return None
        name = f"{member_prefix(uuid.uuid4().hex, self.member_id)}{next(self._seq):010d}"
        self.put(self.paths.client(name), b"")
        self.put(self.paths.session_record(name), b"")
        return MemberNode.parse(name)

    def check_member_node(self, node: str, watch: Watcher | None) -> bool:
        path = self.paths.client(node)
        return (self._read(path, watch) if watch is not None else self.nodes.get(path)) is not None

    def create_stop_marker(self, generation: int, node: str) -> bool:
        if self.paths.stopped_generation(generation) not in self.nodes:
            return False
        self.put(self.paths.stop_marker(generation, node), b"")
        return True

    def delete_assignment(self, node: str) -> None:
        self.remove(self.paths.member_assignment(node))

    def delete_session_record(self, node: str) -> None:
        self.remove(self.paths.session_record(node))

    def leave(self, node: str, stopped_for: int | None) -> None:
        self.delete_assignment(node)
        self.remove(self.paths.client(node))
        self.delete_session_record(node)
        if stopped_for is not None:
            self.remove(self.paths.stop_marker(stopped_for, node))

