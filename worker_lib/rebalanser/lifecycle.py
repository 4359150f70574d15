"""The one lifecycle vocabulary of the library's long-lived objects.

:class:`rebalanser.Client` and every recipe are driven the same way: ``start()`` begins (idempotent)
and ``stop()`` ends for good (idempotent; a stopped object is not started again); a recipe in a
``with`` block is started on entry and stopped on exit. ``state`` names where the object is; the
recipes use the three states below, and the client's richer :class:`rebalanser.State` uses the same
names for the same ends (``NotStarted``, ``Stopped``).
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from enum import StrEnum
from types import TracebackType
from typing import Self


class Lifecycle(StrEnum):
    NOT_STARTED = "NotStarted"
    STARTED = "Started"
    STOPPED = "Stopped"


def lifecycle_of(started: bool, stopped: bool) -> Lifecycle:
    """The state of an object that records whether it was started and whether it was stopped."""
    if stopped:
        return Lifecycle.STOPPED
    return Lifecycle.STARTED if started else Lifecycle.NOT_STARTED


def deprecated_alias(old: str, new: str) -> None:
    """Warns that ``old`` is a deprecated name of ``new`` (called by the alias itself)."""
    warnings.warn(f"{old}() is deprecated; use {new}()", DeprecationWarning, stacklevel=3)


class Lifecycled(ABC):
    """The lifecycle every recipe shares: subclasses implement ``start`` and ``stop`` and keep the two
    flags below; ``state`` and the ``with`` block come from here."""

    _started = False
    _closed = False

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    @property
    def state(self) -> Lifecycle:
        return lifecycle_of(self._started, self._closed)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
