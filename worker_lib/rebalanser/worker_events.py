"""What the example worker prints, whichever API it runs on: ``rebalanser worker`` on the threaded
client (:mod:`rebalanser.cli`) and on the asyncio one (:mod:`rebalanser.aio.worker`) emit the same
JSON events, from here."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from rebalanser.errors import CorruptDataError, GroupDeletedError, GroupNotFoundError, SessionExpiredError


class EventSink(Protocol):
    """What the worker prints through (the CLI's event log)."""

    def emit(self, event: str, ts: int | None = None, **fields: Any) -> None: ...


def emit_assigned(log: EventSink, resources: Mapping[str, int]) -> None:
    """One ``assigned`` event per fencing token, naming the resources granted with it."""
    by_token: dict[int, list[str]] = {}
    for resource, token in resources.items():
        by_token.setdefault(token, []).append(resource)
    for token, names in sorted(by_token.items()):
        log.emit("assigned", resources=sorted(names), token=token)


class Notifications:
    """``on_role``, ``on_session`` and ``on_error`` as events. A session expiry reported as an error
    (under the ``shutdown`` policy) sets ``expired`` and calls :meth:`halt_work`; so does a group deleted
    under the member, kept in ``ended`` (the worker says it in one line as it exits). A missing group is
    not logged: :meth:`Client.start` raises it."""

    log: EventSink
    expired: bool
    ended: Exception | None

    def halt_work(self) -> None:
        raise NotImplementedError

    def on_role(self, role: str, epoch: int) -> None:
        self.log.emit("role", role=role, epoch=epoch)

    def on_session(self, state: str) -> None:
        self.log.emit("session", state=state)

    def on_error(self, error: Exception) -> None:
        if isinstance(error, GroupNotFoundError):
            return
        if isinstance(error, GroupDeletedError):
            self.ended = error
            self.halt_work()
            return
        logging.getLogger("rebalanser.worker").error("%s: %s", type(error).__name__, error)
        if isinstance(error, CorruptDataError):
            self.log.emit("error", path=error.path, reason=error.reason)
        if isinstance(error, SessionExpiredError):
            self.expired = True
            self.halt_work()
