"""A create that is safe to retry after connection loss."""

from __future__ import annotations

import time

from kazoo.exceptions import ConnectionClosedError, NodeExistsError, NoNodeError

from ._session import TRANSIENT_ERRORS, session_id
from ._zk import BoundedZk


def is_own_node(zk: BoundedZk, path: str, data: bytes, ephemeral: bool) -> bool:
    """Whether ``path`` holds exactly ``data`` and, for an ephemeral node, belongs to our session."""
    try:
        current, stat = zk.get(path)
    except NoNodeError:
        return False
    if current != data:
        return False
    return not ephemeral or int(stat.ephemeralOwner) == session_id(zk.client)


def _create(zk: BoundedZk, path: str, data: bytes, ephemeral: bool, retried: bool) -> None:
    try:
        zk.create(path, data, ephemeral=ephemeral)
    except NodeExistsError:
        if not (retried and is_own_node(zk, path, data, ephemeral)):
            raise


def create_once(zk: BoundedZk, path: str, data: bytes, *, ephemeral: bool, timeout: float) -> None:
    """Creates ``path`` with ``data`` in one request, retrying through connection loss for ``timeout`` s.

    A retry that meets ``NodeExistsError`` checks whether the node is the one our lost attempt created
    (same data, and for ephemeral nodes our session) and then succeeds; otherwise ``NodeExistsError``
    propagates, as it does when the very first attempt finds the node. A first attempt that timed out
    and is only sent after the reconnect is found the same way: the session sends requests in order.
    """
    deadline = time.monotonic() + timeout
    retried = False
    delay = 0.05
    while True:
        try:
            _create(zk, path, data, ephemeral, retried)
            return
        except ConnectionClosedError:
            raise
        except TRANSIENT_ERRORS:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise
            retried = True
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.5)
