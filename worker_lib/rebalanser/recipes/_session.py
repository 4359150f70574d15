"""A state-listener relay: kazoo's state changes handed to a recipe's own thread."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from kazoo.client import KazooClient

from ._executor import SerialExecutor

log = logging.getLogger(__name__)


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
