"""Session helpers: which errors are worth retrying, the current session id, and a state-listener relay."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    OperationTimeoutError,
    SessionExpiredError,
)

from ._executor import SerialExecutor

T = TypeVar("T")
log = logging.getLogger(__name__)

#: Errors after which the same request may succeed once the client has (re)connected.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)


def session_id(client: KazooClient) -> int | None:
    """The id of the client's current session, or ``None`` while it is not connected."""
    ids = client.client_id
    return int(ids[0]) if ids else None


def retrying(op: Callable[[], T], timeout: float) -> T:
    """Runs ``op`` (a read or an idempotent write), retrying through connection loss for ``timeout`` s."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            return op()
        except ConnectionClosedError:
            raise
        except TRANSIENT_ERRORS:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.5)


class StateRelay:
    """A kazoo state listener that only hands the new state to an executor.

    Kazoo calls state listeners on its connection thread, where nothing may block or talk to ZooKeeper;
    this listener just queues ``handler(state)`` on the recipe's own thread. ``immediate(state)``, if
    given, runs first on the connection thread itself: it must only flip flags under a short lock and
    queue callbacks (used to stop leading or holding at once, not after queued ZooKeeper work).
    """

    def __init__(
        self,
        client: KazooClient,
        executor: SerialExecutor,
        handler: Callable[[str], None],
        immediate: Callable[[str], None] | None = None,
    ) -> None:
        self._client = client
        self._executor = executor
        self._handler = handler
        self._immediate = immediate

    def start(self) -> None:
        self._client.add_listener(self._listener)

    def stop(self) -> None:
        self._client.remove_listener(self._listener)

    def _listener(self, state: str) -> None:
        if self._immediate is not None:
            try:
                self._immediate(state)
            except Exception:
                log.exception("immediate state handler failed")
        self._executor.spawn(partial(self._handler, state))
