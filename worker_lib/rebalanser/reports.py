"""How a member tells its handler what went wrong and what changed (``on_error``, ``on_session``,
``on_role``): what a handler raises is logged and reported, never allowed to stop the member."""

from __future__ import annotations

import logging
from typing import Any

from rebalanser import baddata
from rebalanser.errors import CorruptDataError
from rebalanser.handler import Handler
from rebalanser.metrics import Metrics

log = logging.getLogger("rebalanser.client")  # the member's log, as before this was split out


class Reports:
    def __init__(self, handler: Handler, metrics: Metrics) -> None:
        self._handler, self._metrics = handler, metrics

    def error(self, error: Exception) -> None:
        """``on_error``; an exception it raises is logged, never allowed to stop the member."""
        try:
            self._handler.on_error(error)
        except Exception:
            log.exception("on_error raised while reporting %r", error)

    def notify(self, name: str, *args: Any) -> None:
        """``on_role``/``on_session``: what they raise is reported, never allowed to stop the member."""
        try:
            getattr(self._handler, name)(*args)
        except Exception as exc:
            log.exception("%s raised", name)
            self.error(exc)

    def bad_data(self, error: CorruptDataError) -> None:
        """A record that could not be decoded: counted, and reported."""
        baddata.report(error, self._metrics)
        self.error(error)
