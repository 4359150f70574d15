"""Fenced writes: every coordinator write is a ``multi`` that starts with two checks, so a write from a
deposed (zombie) coordinator fails as a whole:

1. ``check(G/epoch, version=epoch)``: the epoch this coordinator took is still the current one;
2. ``check(G/clients/<its member node>)``: the member node it took office with still exists. Member
   nodes are never re-created under the same name, so this holds even after ``G/epoch`` (or the whole
   group) was deleted and re-created and the versions of the new ``G/epoch`` count up from 0 again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NoNodeError, RolledBackError

from rebalanser.errors import EpochLostError, NotCoordinatorError

MAX_OPS = 800
MAX_BYTES = 700 * 1024


@dataclass
class Op:
    kind: str  # create | set | delete
    path: str
    data: bytes = b""

    @property
    def size(self) -> int:
        return len(self.path) + len(self.data) + 32


@dataclass
class FencedWriter:
    zk: KazooClient
    epoch_path: str
    epoch: int
    member_path: str | None = None  # the coordinator's own member node (None: the epoch alone fences)
    ops: list[Op] = field(default_factory=list)

    def create(self, path: str, data: bytes = b"") -> None:
        self.ops.append(Op("create", path, data))

    def set(self, path: str, data: bytes) -> None:
        self.ops.append(Op("set", path, data))

    def delete(self, path: str) -> None:
        self.ops.append(Op("delete", path))

    def commit(self) -> int:
        """Commits in batches, in order; returns the number of ZooKeeper multis sent.

        Raises NotCoordinatorError when the epoch moved on or the member node is gone (EpochLostError
        when ``G/epoch`` itself is gone), KazooException for other failures (the caller re-reads state
        before retrying: a batch may or may not have landed).
        """
        sent = 0
        for batch in _batches(self.ops):
            self._commit_batch(batch)
            sent += 1
        self.ops = []
        return sent

    def _commit_batch(self, batch: list[Op]) -> None:
        txn = self.zk.transaction()
        txn.check(self.epoch_path, self.epoch)
        fences = 1
        if self.member_path is not None:
            txn.check(self.member_path, -1)  # any version: it exists
            fences = 2
        for op in batch:
            if op.kind == "create":
                txn.create(op.path, op.data)
            elif op.kind == "set":
                txn.set_data(op.path, op.data)
            else:
                txn.delete(op.path)
        results = txn.commit()
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if not failures:
            return
        if isinstance(results[0], BadVersionError):
            raise NotCoordinatorError(f"epoch {self.epoch} is no longer current")
        if isinstance(results[0], NoNodeError):
            raise EpochLostError(f"{self.epoch_path} is gone (it held epoch {self.epoch})")
        if fences == 2 and isinstance(results[1], NoNodeError):
            raise NotCoordinatorError(f"our member node {self.member_path} is gone")
        first = failures[0]
        index = results.index(first)
        where = batch[index - fences].path if index >= fences else self.epoch_path
        raise FencedWriteError(f"{type(first).__name__} at {where}", first)


class FencedWriteError(KazooException):  # type: ignore[misc]
    """A batch failed for a reason other than the epoch (NodeExists, NoNode, ...)."""

    def __init__(self, message: str, cause: Exception) -> None:
        super().__init__(message)
        self.cause = cause


def _batches(ops: list[Op]) -> Iterator[list[Op]]:
    batch: list[Op] = []
    size = 0
    for op in ops:
        if batch and (len(batch) >= MAX_OPS or size + op.size > MAX_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(op)
        size += op.size
    if batch:
        yield batch
