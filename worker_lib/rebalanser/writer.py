"""Epoch-fenced writes: every coordinator write is a ``multi`` that starts with a ``check`` of the
epoch znode's version, so a write from a deposed (zombie) coordinator fails as a whole."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, RolledBackError

from rebalanser.errors import NotCoordinatorError

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
    ops: list[Op] = field(default_factory=list)

    def create(self, path: str, data: bytes = b"") -> None:
        self.ops.append(Op("create", path, data))

    def set(self, path: str, data: bytes) -> None:
        self.ops.append(Op("set", path, data))

    def delete(self, path: str) -> None:
        self.ops.append(Op("delete", path))

    def commit(self) -> int:
        """Commits in batches, in order; returns the number of ZooKeeper multis sent.

        Raises NotCoordinatorError when the epoch moved on, KazooException for other failures
        (the caller re-reads state before retrying: a batch may or may not have landed).
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
        first = failures[0]
        index = results.index(first)
        where = batch[index - 1].path if index > 0 else self.epoch_path
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
