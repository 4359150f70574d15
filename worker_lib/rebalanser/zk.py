"""The one ZooKeeper layer under the member and the recipes.

Both sides build on the same few helpers, so each rule lives in one place:

* **Paths.** :func:`validate_name` and :func:`validate_path` apply ZooKeeper's own rules for a znode
  name and an absolute path (the member's group paths add a narrower character set on top).
* **Sessions.** :func:`session_id` is the current session (0 while there is none; ZooKeeper never
  hands out 0); :func:`ephemeral_of` and :func:`owned_by_session` tell whether an ephemeral znode
  belongs to a given session or to the current one.
* **Retries.** :func:`retry` runs a read or an idempotent write through connection loss with kazoo's
  :class:`~kazoo.retry.KazooRetry` (exponential back-off, a deadline) and, at the deadline, raises the
  last transient error itself rather than kazoo's ``RetryFailedError``.
* **Creates that are safe to retry.** :func:`create_protected` makes one ephemeral sequential znode
  whose name carries a fresh GUID, so that after a lost reply it finds the node it made instead of
  making a second one; :func:`create_once` makes a node of a known name and, on a retry, recognises its
  own lost attempt by data and owner.
* **Bounded calls.** :class:`BoundedZk` waits at most a given time for any answer (kazoo's synchronous
  calls wait without limit while the connection is suspended).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.protocol.states import WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry, RetryFailedError
from kazoo.security import ACL

from rebalanser.errors import InvalidInputError

T = TypeVar("T")
Watch = Callable[[WatchedEvent], None]

#: Errors after which the same request may succeed once the client has (re)connected.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)
#: The same, for work that belongs to one session (a new session would not find what the old one made).
CONNECTION_ERRORS: tuple[type[Exception], ...] = (ConnectionLoss, OperationTimeoutError)

RETRY_DELAY = 0.05  # seconds before the first retry; doubled after each, up to RETRY_MAX_DELAY
RETRY_MAX_DELAY = 0.5

# -- paths ------------------------------------------------------------------------------------------


def _bad_char(ch: str) -> bool:
    code = ord(ch)
    return (
        code == 0
        or 0x01 <= code <= 0x1F
        or 0x7F <= code <= 0x9F
        or 0xD800 <= code <= 0xF8FF
        or 0xFFF0 <= code <= 0xFFFF
    )


def validate_name(name: str, what: str = "name") -> str:
    """Returns ``name`` if it is usable as one znode path segment, else raises :class:`InvalidInputError`."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"{what} must be a non-empty string, got {name!r}")
    if name in (".", "..") or "/" in name:
        raise InvalidInputError(f"{what} {name!r} must be a single znode name (no '/', not '.' or '..')")
    if any(_bad_char(ch) for ch in name):
        raise InvalidInputError(f"{what} {name!r} contains characters ZooKeeper does not allow in paths")
    return name


def validate_path(path: str, what: str = "base path") -> str:
    """Returns ``path`` if it is an absolute znode path below the root and outside ``/zookeeper``."""
    if not isinstance(path, str) or not path.startswith("/") or path == "/" or path.endswith("/"):
        raise InvalidInputError(f"{what} must look like '/a/b' (absolute, no trailing '/'), got {path!r}")
    segments = path[1:].split("/")
    for segment in segments:
        validate_name(segment, f"{what} segment")
    if segments[0] == "zookeeper":
        raise InvalidInputError(f"{what} {path!r}: paths under /zookeeper are reserved by ZooKeeper")
    return path


def join(base: str, name: str) -> str:
    """``base/name`` for a validated base and a single segment."""
    return f"{base}/{name}"


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


# -- sessions ---------------------------------------------------------------------------------------


def session_id(client: KazooClient) -> int:
    """The id of the client's current session, or 0 while it has none."""
    ids = client.client_id
    return int(ids[0]) if ids else 0


def ephemeral_of(stat: ZnodeStat | None, session: int) -> bool:
    """Whether ``stat`` is of an ephemeral znode of ``session`` (never of a persistent node, owner 0)."""
    return stat is not None and bool(stat.ephemeralOwner) and int(stat.ephemeralOwner) == session


def owned_by_session(stat: ZnodeStat | None, client: KazooClient) -> bool:
    """Whether ``stat`` is of an ephemeral znode of the client's current session."""
    return ephemeral_of(stat, session_id(client))


# -- retries ----------------------------------------------------------------------------------------


def retry(op: Callable[[], T], timeout: float, *, expire: bool = True) -> T:
    """Runs ``op`` (a read or an idempotent write), retrying through connection loss (and, with
    ``expire``, session expiry) for about ``timeout`` seconds; then raises the last transient error."""
    last: list[Exception] = []

    def attempt() -> T:
        try:
            return op()
        except TRANSIENT_ERRORS as exc:
            last[:] = [exc]
            raise

    policy = KazooRetry(
        max_tries=-1, delay=RETRY_DELAY, max_delay=RETRY_MAX_DELAY, deadline=timeout, ignore_expire=expire
    )
    try:
        return cast(T, policy(attempt))
    except RetryFailedError:
        raise last[0] from None


# -- creates that are safe to retry -------------------------------------------------------------------


def new_guid() -> str:
    return uuid.uuid4().hex


def find_child(children: Iterable[str], prefix: str) -> str | None:
    """The first child whose name starts with ``prefix`` (a protected create's GUID-bearing prefix)."""
    return next((name for name in children if name.startswith(prefix)), None)


@dataclass(frozen=True)
class Companion:
    """An ephemeral znode created in the same ``multi`` as a protected node, so that both exist or
    neither does (``acl``: None for the client's default ACL)."""

    path: str
    data: bytes
    acl: Sequence[ACL] | None = None


def create_protected(
    client: KazooClient,
    parent: str,
    prefix: str,
    data: bytes,
    *,
    deadline: float,
    on_no_parent: Callable[[], bool] | None = None,
    companions: Sequence[Companion] = (),
) -> str:
    """Creates the ephemeral sequential znode ``parent/prefix<sequence>`` exactly once and returns its
    name; with ``companions``, in one ``multi`` with them. ``prefix`` must carry a fresh GUID
    (:func:`new_guid`): after a lost reply the children of ``parent`` are searched for it, so a create
    that did happen is found rather than repeated (the ``multi`` is atomic: found, its companions exist
    too). When a parent is missing, ``on_no_parent()`` may create it (True) or give up (False: NoNode is
    raised). Raises ``TimeoutError`` once ``deadline`` (``time.monotonic()``) has passed."""
    path = join(parent, prefix)
    while True:
        try:
            return basename(_create_with(client, path, data, companions))
        except CONNECTION_ERRORS:
            found = _find_created(client, parent, prefix, deadline)
            if found is not None:
                return found
        except NoNodeError:
            if on_no_parent is None or not on_no_parent():
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"could not create {path}<sequence> before the deadline")


_ROLLED_BACK = (RolledBackError, RuntimeInconsistency)  # the other operations of a failed multi


def _create_with(client: KazooClient, path: str, data: bytes, companions: Sequence[Companion]) -> str:
    if not companions:
        return str(client.create(path, data, ephemeral=True, sequence=True))
    tx = client.transaction()
    tx.create(path, data, ephemeral=True, sequence=True)
    for companion in companions:
        tx.create(companion.path, companion.data, acl=list(companion.acl) if companion.acl is not None else None,
                  ephemeral=True)
    results = tx.commit()
    failure = next((r for r in results if isinstance(r, Exception) and not isinstance(r, _ROLLED_BACK)), None)
    if failure is not None:
        raise failure
    return str(results[0])


def _find_created(client: KazooClient, parent: str, prefix: str, deadline: float) -> str | None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    try:
        return retry(lambda: find_child(client.get_children(parent), prefix), remaining, expire=False)
    except CONNECTION_ERRORS:
        return None


def create_once(zk: BoundedZk, path: str, data: bytes, *, ephemeral: bool, timeout: float) -> None:
    """Creates ``path`` with ``data`` in one request, retrying through connection loss for ``timeout`` s.

    A retry that meets ``NodeExistsError`` checks whether the node is the one our lost attempt created
    (same data, and for ephemeral nodes our session) and then succeeds; otherwise ``NodeExistsError``
    propagates, as it does when the very first attempt finds the node. A first attempt that timed out
    and is only sent after the reconnect is found the same way: the session sends requests in order.
    """
    attempts = 0

    def attempt() -> None:
        nonlocal attempts
        attempts += 1
        try:
            zk.create(path, data, ephemeral=ephemeral)
        except NodeExistsError:
            if not (attempts > 1 and _is_own_node(zk, path, data, ephemeral)):
                raise

    retry(attempt, timeout)


def _is_own_node(zk: BoundedZk, path: str, data: bytes, ephemeral: bool) -> bool:
    """Whether ``path`` holds exactly ``data`` and, for an ephemeral node, belongs to our session."""
    try:
        current, stat = zk.get(path)
    except NoNodeError:
        return False
    return current == data and (not ephemeral or owned_by_session(stat, zk.client))


# -- bounded calls ----------------------------------------------------------------------------------


class BoundedZk:
    """The ZooKeeper operations of the recipes, each waiting at most ``timeout`` seconds.

    A request issued while the connection is suspended is queued by kazoo until it reconnects, possibly
    forever; an overdue answer becomes ``OperationTimeoutError`` (transient). A request that timed out
    may still be sent after the reconnect, so every write made through it must be safe to apply late.
    """

    def __init__(self, client: KazooClient, timeout: float) -> None:
        self.client = client
        self.timeout = timeout

    def get(self, path: str, watch: Watch | None = None) -> tuple[bytes, ZnodeStat]:
        data, stat = self._wait(self.client.get_async(path, watch))
        return bytes(data), stat

    def get_children(self, path: str, watch: Watch | None = None) -> list[str]:
        return list(self._wait(self.client.get_children_async(path, watch)))

    def exists(self, path: str, watch: Watch | None = None) -> ZnodeStat | None:
        return cast("ZnodeStat | None", self._wait(self.client.exists_async(path, watch)))

    def create(self, path: str, data: bytes, *, ephemeral: bool = False, makepath: bool = True) -> str:
        return str(self._wait(self.client.create_async(path, data, ephemeral=ephemeral, makepath=makepath)))

    def create_sequential(self, prefix: str, data: bytes) -> tuple[str, ZnodeStat]:
        """An ephemeral sequential znode; returns its path and stat (whose ``ephemeralOwner`` is ours)."""
        path, stat = self._wait(
            self.client.create_async(
                prefix, data, ephemeral=True, sequence=True, makepath=True, include_data=True
            )
        )
        return str(path), stat

    def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        return self._wait(self.client.set_async(path, data, version))

    def delete(self, path: str, version: int = -1) -> None:
        self._wait(self.client.delete_async(path, version))

    def ensure_path(self, path: str) -> None:
        self._wait(self.client.ensure_path_async(path))

    def _wait(self, result: Any) -> Any:
        try:
            return result.get(timeout=self.timeout)
        except self.client.handler.timeout_exception:
            raise OperationTimeoutError(f"no answer from ZooKeeper within {self.timeout}s") from None
