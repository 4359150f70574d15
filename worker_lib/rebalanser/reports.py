"""How a member tells its handler what went wrong and what changed (``on_error``, ``on_session``,
``on_role``): what a handler raises is logged and reported, never allowed to stop the member.

Notifications are delivered one at a time and in the order they were made. Most are made on the
member's thread (:meth:`Reports.notify`); one that must be observable when it happens, not when the
member's loop gets to it (a disconnection, reported from kazoo's connection listener while the loop may
be busy in a callback), is made with :meth:`Reports.notify_soon`: queued, and delivered at once on a
short thread of its own, or by the member's next :meth:`Reports.notify` if that comes first."""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

from rebalanser import baddata
from rebalanser.errors import CorruptDataError
from rebalanser.handler import Handler
from rebalanser.metrics import Metrics

log = logging.getLogger("rebalanser.client")  # the member's log, as before this was split out


class Reports:
    def __init__(self, handler: Handler, metrics: Metrics) -> None:
        self._handler, self._metrics = handler, metrics
        self._one_at_a_time = threading.RLock()
        self._soon: deque[tuple[str, tuple[Any, ...]]] = deque()  # appended from any thread

    def error(self, error: Exception) -> None:
        """``on_error``; an exception it raises is logged, never allowed to stop the member."""
        with self._one_at_a_time:
            try:
                self._handler.on_error(error)
            except Exception:
                log.exception("on_error raised while reporting %r", error)

    def notify(self, name: str, *args: Any) -> None:
        """``on_role``/``on_session`` (the member's thread), after any queued by :meth:`notify_soon`."""
        with self._one_at_a_time:
            self._deliver_soon()
            self._call(name, args)

    def notify_soon(self, name: str, *args: Any) -> None:
        """``on_session`` from any thread (kazoo's connection listener): never waits for the handler."""
        self._soon.append((name, args))
        threading.Thread(target=self._flush, name="rebalanser-notify", daemon=True).start()

    def bad_data(self, error: CorruptDataError) -> None:
        """A record that could not be decoded: counted, and reported."""
        baddata.report(error, self._metrics)
        self.error(error)

    def _flush(self) -> None:
        with self._one_at_a_time:
            self._deliver_soon()

    def _deliver_soon(self) -> None:
        while self._soon:
            name, args = self._soon.popleft()
            self._call(name, args)

    def _call(self, name: str, args: tuple[Any, ...]) -> None:
        """What the handler raises is reported, never allowed to stop the member."""
        try:
            getattr(self._handler, name)(*args)
        except Exception as exc:
            log.exception("%s raised", name)
            self.error(exc)
