"""The member's storage: the few reads and writes that joining, following and leaving make, as one
narrow interface (:class:`MemberStore`), implemented over kazoo (:class:`KazooMemberStore`).

Joining and following are written against this interface, so they run as well over an in-memory
store in tests (``tests/support/fake_member_store.py``) as over ZooKeeper, with the same test bodies
(``tests/unit/test_member_store.py``). What the interface says of watches is what ZooKeeper does: a
read arms a one-shot watch on the node read, whether it exists or not; a read that finds no node tells
whether the node appeared before the watch was armed (then read again: the watch fires only at the
next change). Claims are not here: they are the claim book's (:mod:`rebalanser.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import WatchedEvent

from rebalanser import wire
from rebalanser.membership import create_member_node
from rebalanser.paths import GroupPaths, MemberNode
from rebalanser.storage import ChunkCache, decode_assignment
from rebalanser.wire import BarrierRecord, MemberAssignment

T = TypeVar("T")
Watcher = Callable[[WatchedEvent], None]


@dataclass(frozen=True)
class NodeRead(Generic[T]):
    """What a watched read found: ``value`` (None: no node, or an empty one); ``appeared``: there was
    no node when it was read, but there was one when the watch was armed (read it again)."""

    value: T | None
    appeared: bool = False


@dataclass(frozen=True)
class Identity:
    """What a member node records of its member (:func:`rebalanser.membership.create_member_node`)."""

    member_id: str
    instance_digest: str | None = None
    pod: str | None = None
    pod_uid: str | None = None
    pod_namespace: str | None = None
    container: str | None = None


class MemberStore(Protocol):
    """What a member reads and writes of its group, apart from claims, the election and coordination."""

    def read_assignment(self, node: str, watch: Watcher) -> NodeRead[MemberAssignment]:
        """Member node ``node``'s assignment (raises CorruptDataError on garbage), watching it."""

    def read_barrier(self, watch: Watcher) -> NodeRead[BarrierRecord]:
        """``G/barrier`` (raises CorruptDataError on garbage), watching it."""

    def read_epoch(self) -> int:
        """The current coordinator epoch (``G/epoch``'s version; 0 when there is none)."""

    def create_member_node(self, deadline: float) -> MemberNode | None:
        """Creates our member node (None: the group is gone); retried after a lost connection until
        the monotonic ``deadline``, never twice."""

    def check_member_node(self, node: str, watch: Watcher | None) -> bool:
        """Whether member node ``node`` exists (``watch``: watching it)."""

    def create_stop_marker(self, generation: int, node: str) -> bool:
        """Marks member node ``node`` stopped for barrier ``generation``; False: that round is over."""

    def delete_assignment(self, node: str) -> None:
        """Deletes member node ``node``'s assignment, quietly (a graceful leave: the coordinator then
        gives no grace; the session's close deletes the rest)."""

    def delete_session_record(self, node: str) -> None:
        """Deletes member node ``node``'s session record, quietly (the node was evicted)."""

    def leave(self, node: str, stopped_for: int | None) -> None:
        """Deletes what member node ``node`` left in the group, each quietly, in this order: its
        assignment (the coordinator then gives no grace), the node, its session record and its stop
        marker of round ``stopped_for``."""


class KazooMemberStore:
    """:class:`MemberStore` over a kazoo client (called on the member's thread only)."""

    def __init__(self, zk: KazooClient, paths: GroupPaths, identity: Identity) -> None:
        self._zk, self.paths, self._identity = zk, paths, identity
        self._chunks: ChunkCache = {}  # our assignment's chunks read so far (storage.decode_assignment)

    def read_assignment(self, node: str, watch: Watcher) -> NodeRead[MemberAssignment]:
        data, appeared = self._read(self.paths.member_assignment(node), watch)
        if not data:
            return NodeRead(None, appeared)
        return NodeRead(decode_assignment(self._zk, self.paths, node, data, self._chunks))

    def read_barrier(self, watch: Watcher) -> NodeRead[BarrierRecord]:
        data, appeared = self._read(self.paths.barrier, watch)
        if not data:
            return NodeRead(None, appeared)
        return NodeRead(wire.decode_barrier(data, path=self.paths.barrier))

    def _read(self, path: str, watch: Watcher) -> tuple[bytes | None, bool]:
        """The node's data (None: no node), and whether a missing node appeared before the watch was
        armed: a ``get`` of a missing node arms no watch in kazoo, so an ``exists`` arms it."""
        try:
            data, _ = self._zk.get(path, watch=watch)
        except NoNodeError:
            return None, self._zk.exists(path, watch=watch) is not None
        return bytes(data), False

    def read_epoch(self) -> int:
        stat = self._zk.exists(self.paths.epoch)
        return int(stat.version) if stat else 0

    def create_member_node(self, deadline: float) -> MemberNode | None:
        who = self._identity
        try:
            return create_member_node(
                self._zk, self.paths, who.member_id, deadline, instance_digest=who.instance_digest, pod=who.pod,
                pod_uid=who.pod_uid, pod_namespace=who.pod_namespace, container=who.container)
        except NoNodeError:
            return None

    def check_member_node(self, node: str, watch: Watcher | None) -> bool:
        return self._zk.exists(self.paths.client(node), watch=watch) is not None

    def create_stop_marker(self, generation: int, node: str) -> bool:
        try:
            self._zk.create(self.paths.stop_marker(generation, node), b"", ephemeral=True)
        except NodeExistsError:
            pass
        except NoNodeError:
            return False
        return True

    def delete_assignment(self, node: str) -> None:
        self.delete_quietly(self.paths.member_assignment(node), recursive=True)

    def delete_session_record(self, node: str) -> None:
        self.delete_quietly(self.paths.session_record(node), recursive=False)

    def leave(self, node: str, stopped_for: int | None) -> None:
        self.delete_assignment(node)
        self.delete_quietly(self.paths.client(node), recursive=False)
        self.delete_quietly(self.paths.session_record(node), recursive=False)
        if stopped_for is not None:
            self.delete_quietly(self.paths.stop_marker(stopped_for, node), recursive=False)

    def delete_quietly(self, path: str, recursive: bool) -> None:
        """Deletes ``path`` (``recursive``: with its children, listing them only when it has some)."""
        try:
            self._zk.delete(path)
        except NotEmptyError:
            if recursive:
                self._delete_recursive(path)
        except (NoNodeError, KazooException):
            pass

    def _delete_recursive(self, path: str) -> None:
        try:
            self._zk.delete(path, recursive=True)
        except (NoNodeError, KazooException):
            pass
