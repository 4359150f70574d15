"""The fence of an operator replica's ZooKeeper writes (docs/operator-replicas.md, "Fenced writes").

A replica that serves a ResourceGroup holds the group's claim in the operator group, with a fencing
token. Its status patches carry that token; its ZooKeeper writes carry a check that only the current
owner passes:

* **Taking the fence.** The owner writes its token into the group root's data (the owner marker's
  ``fence`` entry: replica and token, and under a release's claim the claim's number) with the root's
  version as the write's condition, and keeps the root's new version. It refuses to take it from a later
  owner (:class:`FenceLost`): a later release's claim, or the same claim with a larger token. Tokens are
  numbered by each release's own operator group; claims order the releases.
* **Every write is a ``multi``** whose first operation is ``check(root, version)``: a create, a set, a
  delete and every transaction the apply code builds. Once a later owner has taken the fence the
  root's version has moved on, the check fails and the write is refused as a whole; the root's own
  writes (the owner marker) keep the fence entry and move the kept version with them.
* An ACL change cannot be part of a ``multi`` in ZooKeeper: it is sent right after a ``multi`` that
  only checks the fence (a later owner taking the fence between the two is the window left).
* A group whose root does not exist yet is written unfenced until its root exists (the first write
  after that takes the fence): nothing in it can be overwritten.

:class:`FencedClient` wraps the group's session (a :class:`~kazoo.client.KazooClient` shared by every
group of the ensemble) for one group's steps; every other call goes to the session as it is.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError
from kazoo.protocol.states import ZnodeStat
from kazoo.security import ACL

log = logging.getLogger(__name__)

#: The key of the owner marker's JSON object that holds the fence.
FENCE_KEY = "fence"
#: Seconds an ACL change may rely on the fence's last check (each check is a round trip).
ACL_CHECK_EVERY = 0.1


class FenceLost(RuntimeError):
    """A later owner of the group took its fence: this replica's write was refused, nothing was written."""


def _fence_entry(data: bytes) -> dict[str, Any] | None:
    """The ``fence`` object of a group root's data; None when there is none (or foreign data)."""
    try:
        body = json.loads(data) if data else None
    except ValueError:
        return None
    fence = body.get(FENCE_KEY) if isinstance(body, dict) else None
    return fence if isinstance(fence, dict) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def stored_fence(data: bytes) -> tuple[str, int] | None:
    """The (replica, token) in a group root's data; None when there is none (or foreign data)."""
    fence = _fence_entry(data)
    if fence is None:
        return None
    replica, token = fence.get("replica"), _int(fence.get("token"))
    return (replica, token) if isinstance(replica, str) and token is not None else None


def stored_claim(data: bytes) -> int:
    """The release claim's number of the fence in a group root's data (0: none, or written without claims)."""
    fence = _fence_entry(data)
    return (_int(fence.get("claim")) or 0) if fence is not None else 0


def with_fence(data: bytes, replica: str, token: int, claim: int = 0) -> bytes:
    """``data`` (the owner marker, a JSON object) with this owner's fence entry; data that is not a JSON
    object is returned as it is (a root the operator does not manage: nothing to fence with)."""
    try:
        body = json.loads(data) if data else {}
    except ValueError:
        return data
    if not isinstance(body, dict):
        return data
    body[FENCE_KEY] = {"replica": replica, "token": token, **({"claim": claim} if claim else {})}
    return json.dumps(body, sort_keys=True).encode()


@dataclass
class Fence:
    """One owner's fence of one group: its replica name and token (under a release's claim, the claim's
    number too), and the root's version after it took the fence (None: not taken yet)."""

    replica: str
    token: int
    #: Whether a root's data is this object's owner marker: no other root is ever given this fence.
    ours: Callable[[bytes], bool] = field(default=lambda _data: True, repr=False)
    version: int | None = None
    root: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    claim: int = 0

    def take(self, zk: KazooClient, root: str) -> int | None:
        """Takes the fence at ``root`` (once per root; again when the root changed); returns the version
        to check, or None when the root does not exist yet or does not carry this object's marker.
        Raises :class:`FenceLost` when a later owner holds it."""
        with self.lock:
            if self.root == root and self.version is not None:
                return self.version
            try:
                data, stat = zk.get(root)
            except NoNodeError:
                return None
            if not self.ours(data):  # another object's root, or released: the apply refuses or claims it first
                return None
            found = stored_fence(data)
            if not self.holds(data):
                raise self.lost(root, found)
            if found == (self.replica, self.token) and stored_claim(data) == self.claim:
                self.root, self.version = root, int(stat.version)
                return self.version
            try:
                written = zk.set(root, with_fence(data, self.replica, self.token, self.claim), version=stat.version)
            except BadVersionError:  # written meanwhile: read it again at the next write
                raise FenceLost(f"{root} changed while replica {self.replica} took its fence") from None
            self.root, self.version = root, int(written.version)
            log.info("replica-fence-zk member=%s root=%s token=%d version=%d at=%.3f", self.replica, root, self.token,
                     written.version, time.time())
            return self.version

    def holds(self, data: bytes) -> bool:
        """Whether a group root's ``data`` (read fresh) leaves this owner's fence standing: no later release's
        claim, and under the same claim no larger token."""
        found = stored_fence(data)
        if found is None:
            return True
        claim = stored_claim(data)
        return claim < self.claim or (claim == self.claim and found[1] <= self.token)

    def moved(self, root: str, version: int) -> None:
        """This owner's own write of the root moved its version to ``version``."""
        with self.lock:
            if self.root == root:
                self.version = version

    def lost(self, root: str, found: tuple[str, int] | None = None) -> FenceLost:
        by = f" by replica {found[0]} (token {found[1]})" if found is not None else ""
        log.warning("replica-fenced member=%s root=%s token=%d at=%.3f%s", self.replica, root, self.token, time.time(),
                    by)
        return FenceLost(f"the fence of {root} was taken{by}: replica {self.replica}'s write (token {self.token}) "
                         "was refused")


class FencedTransaction:
    """A ``multi`` whose first operation checks the fence; :meth:`commit` returns the results of the
    caller's own operations, or raises :class:`FenceLost` when the check failed."""

    def __init__(self, zk: KazooClient, fence: Fence, root: str, version: int | None) -> None:
        self._fence, self._root, self._checked = fence, root, version is not None
        self._request = zk.transaction()
        if version is not None:
            self._request.check(root, version)
        self._ops = 0
        self._root_set: int | None = None  # the index of this owner's write of the root, among the caller's

    def create(self, path: str, value: bytes = b"", acl: Sequence[ACL] | None = None, ephemeral: bool = False,
               sequence: bool = False) -> None:
        self._request.create(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence)
        self._ops += 1

    def delete(self, path: str, version: int = -1) -> None:
        self._request.delete(path, version)
        self._ops += 1

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        if path == self._root and self._checked:  # the fence stays in the root's data, and moves with it
            value = with_fence(value, self._fence.replica, self._fence.token, self._fence.claim)
            self._root_set = self._ops
        self._request.set_data(path, value, version)
        self._ops += 1

    def check(self, path: str, version: int) -> None:
        self._request.check(path, version)
        self._ops += 1

    def commit(self) -> list[Any]:
        return self._results(list(self._request.commit()))

    def commit_async(self) -> _Pending:
        """Sent now; the results (as :meth:`commit` gives them) at ``get()``."""
        return _Pending(self._request.commit_async(), self._results)

    def _results(self, results: list[Any]) -> list[Any]:
        if not self._checked:
            return results
        first, rest = results[0], results[1:]
        if isinstance(first, Exception) and not isinstance(first, RolledBackError):
            raise self._fence.lost(self._root)
        if self._root_set is not None and isinstance(rest[self._root_set], ZnodeStat):
            self._fence.moved(self._root, rest[self._root_set].version)
        return rest


class _Pending:
    """A fenced transaction sent: ``get()`` waits for its results, the fence's check left out."""

    def __init__(self, pending: Any, results: Callable[[list[Any]], list[Any]]) -> None:
        self._pending, self._results = pending, results

    def get(self, block: bool = True, timeout: float | None = None) -> list[Any]:
        return self._results(list(self._pending.get(block, timeout)))


class FencedClient:
    """A group's session as one owner's steps use it: its writes fenced (see the module docstring)."""

    def __init__(self, zk: KazooClient, fence: Fence, root: str) -> None:
        self._zk, self._fence, self._root = zk, fence, root
        self._last_check = -ACL_CHECK_EVERY

    @property
    def unfenced(self) -> KazooClient:
        return self._zk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._zk, name)

    def _transaction(self) -> FencedTransaction:
        return FencedTransaction(self._zk, self._fence, self._root, self._fence.take(self._zk, self._root))

    def transaction(self) -> FencedTransaction:
        return self._transaction()

    def _one(self, transaction: FencedTransaction) -> Any:
        result = transaction.commit()[0]
        if isinstance(result, Exception):
            raise result
        return result

    def create(self, path: str, value: bytes = b"", acl: Sequence[ACL] | None = None, ephemeral: bool = False,
               sequence: bool = False, makepath: bool = False) -> str:
        if makepath:
            parent = path.rsplit("/", 1)[0]
            if parent:
                self._zk.ensure_path(parent)
        transaction = self._transaction()
        transaction.create(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence)
        return str(self._one(transaction))

    def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        transaction = self._transaction()
        transaction.set_data(path, value, version)
        stat: ZnodeStat = self._one(transaction)
        return stat

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> bool:
        if recursive:
            raise ValueError("a fenced client deletes one node at a time (reconcile.delete_tree batches them)")
        transaction = self._transaction()
        transaction.delete(path, version)
        self._one(transaction)
        return True

    def _checked(self) -> None:
        """The fence checked on its own, at most once per :data:`ACL_CHECK_EVERY` (an ACL walk sends
        thousands of pipelined ACL changes)."""
        version = self._fence.take(self._zk, self._root)
        if version is None or time.monotonic() - self._last_check < ACL_CHECK_EVERY:
            return
        result = self._zk.transaction()
        result.check(self._root, version)
        if isinstance(result.commit()[0], Exception):
            raise self._fence.lost(self._root)
        self._last_check = time.monotonic()

    def set_acls(self, path: str, acls: Sequence[ACL], version: int = -1) -> ZnodeStat:
        self._checked()
        return self._zk.set_acls(path, list(acls), version)

    def set_acls_async(self, path: str, acls: Sequence[ACL], version: int = -1) -> Any:
        self._checked()
        return self._zk.set_acls_async(path, list(acls), version)


def fenced_client(zk: KazooClient, fence: Fence | None, root: str | None) -> KazooClient:
    """``zk`` for a group's steps: fenced when the group is served under a fence and its path is known."""
    if fence is None or root is None:
        return zk
    return FencedClient(zk, fence, root)


def unfenced(zk: Any) -> KazooClient:
    """The session itself behind a fenced client (for the pool, which knows sessions by identity)."""
    return cast(KazooClient, zk.unfenced if isinstance(zk, FencedClient) else zk)
