"""An administrator's actions on ZooKeeper, as the chaos harness takes them: every request bounded in
time and retried across connection trouble, so that a step never hangs on a server that is down.

Subtrees are deleted in one ``multi`` (listed, then deleted atomically; listed again if someone wrote
under them meanwhile). An administrator who deletes a live member's claim znode takes away what makes
ownership exclusive: a member cannot learn of it before the deletion has happened, and another
member may claim the resource at once. Deleting a whole group in one transaction takes the member
znodes and the claims away at the same instant, so a member learns that its node is gone no later
than anyone else learns that its claims are; the library is judged on what it does with that news.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.protocol.states import ZnodeStat

T = TypeVar("T")
_TRANSIENT = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)


class AdminError(RuntimeError):
    """An administrator's action did not complete within its patience."""


class Admin:
    """Bounded administrator's requests through one (already started) client."""

    def __init__(self, zk: KazooClient, request_timeout: float = 10.0, patience: float = 60.0) -> None:
        self.zk, self.request_timeout, self.patience = zk, request_timeout, patience

    def _bounded(self, call: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.patience
        while True:
            try:
                return call()
            except (*_TRANSIENT, self.zk.handler.timeout_exception) as exc:
                if time.monotonic() > deadline:
                    raise AdminError(f"gave up after {self.patience:.0f}s: {exc!r}") from exc
                time.sleep(0.2)

    # -- reads -------------------------------------------------------------------------------------

    def get(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        def read() -> tuple[bytes, ZnodeStat] | None:
            try:
                data, stat = self.zk.get_async(path).get(timeout=self.request_timeout)
            except NoNodeError:
                return None
            return bytes(data), stat

        return self._bounded(read)

    def exists(self, path: str) -> ZnodeStat | None:
        return self._bounded(lambda: self.zk.exists_async(path).get(timeout=self.request_timeout))

    def children(self, path: str) -> list[str]:
        def read() -> list[str]:
            try:
                return list(self.zk.get_children_async(path).get(timeout=self.request_timeout))
            except NoNodeError:
                return []

        return self._bounded(read)

    def subtree(self, path: str) -> list[str]:
        """``path`` and every node under it, children before parents; [] if it does not exist."""
        if self.exists(path) is None:
            return []
        nodes: list[str] = []
        for child in self.children(path):
            nodes += self.subtree(f"{path}/{child}")
        return [*nodes, path]

    # -- writes ------------------------------------------------------------------------------------

    def create(self, path: str, data: bytes = b"", makepath: bool = False) -> bool:
        """A persistent node; False if it already existed (a retried create that landed included)."""

        def write() -> bool:
            try:
                self.zk.create_async(path, data, makepath=makepath).get(timeout=self.request_timeout)
            except NodeExistsError:
                return False
            return True

        return self._bounded(write)

    def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat | None:
        """Sets data (only at ``version`` unless -1); None if the node is gone or has another version."""

        def write() -> ZnodeStat | None:
            try:
                return self.zk.set_async(path, data, version).get(timeout=self.request_timeout)
            except (NoNodeError, KazooException) as exc:
                if isinstance(exc, _TRANSIENT):
                    raise
                return None

        return self._bounded(write)

    def write(self, path: str, data: bytes) -> ZnodeStat:
        """Sets the data of ``path``, creating it (and its parents) if missing."""
        for _ in range(20):
            stat = self.set(path, data)
            if stat is not None:
                return stat
            self.create(path, data, makepath=True)
            got = self.get(path)
            if got is not None and got[0] == data:
                return got[1]
        raise AdminError(f"could not write {path}")

    def delete(self, path: str, version: int = -1) -> bool:
        """Deletes one node (only at ``version`` unless -1); False if it was not there (or changed)."""

        def remove() -> bool:
            try:
                self.zk.delete_async(path, version).get(timeout=self.request_timeout)
            except (NoNodeError, NotEmptyError):
                return False
            except KazooException as exc:
                if isinstance(exc, _TRANSIENT):
                    raise
                return False
            return True

        return self._bounded(remove)

    def _commit(self, ops: list[tuple[str, str, bytes]]) -> list[object]:
        """One ``multi`` of creates and deletes; its per-operation results (exceptions included)."""

        def commit() -> list[object]:
            transaction = self.zk.transaction()
            for op, path, data in ops:
                if op == "create":
                    transaction.create(path, data)
                else:
                    transaction.delete(path)
            return list(transaction.commit_async().get(timeout=self.request_timeout))

        return self._bounded(commit)

    def delete_tree(self, path: str, attempts: int = 50) -> int:
        """Deletes ``path`` and everything under it in one transaction; returns how many nodes went.
        Listed again and retried when a node appeared or vanished between the listing and the delete."""
        for _ in range(attempts):
            nodes = self.subtree(path)
            if not nodes:
                return 0
            results = self._commit([("delete", node, b"") for node in nodes])
            if not any(isinstance(r, Exception) for r in results):
                return len(nodes)
            time.sleep(0.005)
        raise AdminError(f"{path}: the subtree kept changing; not deleted in {attempts} attempts")

    def ensure(self, nodes: list[tuple[str, bytes]]) -> list[str]:
        """Creates every missing node of ``nodes`` (parents first), in one transaction when possible;
        returns the paths that were already there."""
        for _ in range(20):
            present = [p for p, _ in nodes if self.exists(p) is not None]
            missing = [(p, d) for p, d in nodes if p not in present]
            if not missing:
                return present
            results = self._commit([("create", p, d) for p, d in missing])
            if not any(isinstance(r, Exception) for r in results):
                return present
        raise AdminError(f"could not create {[p for p, _ in nodes][:3]}...")
