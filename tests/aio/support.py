"""Helpers for asyncio client tests: a recording handler, bounded async waits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence

from rebalanser.aio import Handler


async def until(predicate: Callable[[], bool], timeout: float, message: str | Callable[[], str]) -> None:
    """Bounded wait on the loop (the loop keeps running callbacks meanwhile)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s: {message() if callable(message) else message}")
        await asyncio.sleep(0.02)


class Ledger:
    """Who works on what, updated by the handlers of every client of one loop: since all of them
    run on that loop, a second holder shows up exactly when it happens."""

    def __init__(self) -> None:
        self.holder: dict[str, str] = {}
        self.violations: list[str] = []

    def take(self, who: str, resources: Mapping[str, int]) -> None:
        for name in resources:
            if name in self.holder:
                self.violations.append(f"{who} assigned {name} while {self.holder[name]} works on it")
            self.holder[name] = who

    def give_back(self, who: str, resources: Sequence[str]) -> None:
        for name in resources:
            if self.holder.get(name) == who:
                del self.holder[name]


class Recording(Handler):
    def __init__(self, name: str, ledger: Ledger | None = None, revoke_delay: float = 0.0) -> None:
        self.name = name
        self.ledger = ledger or Ledger()
        self.revoke_delay = revoke_delay
        self.owned: dict[str, int] = {}
        self.errors: list[Exception] = []
        self.sessions: list[str] = []
        self.roles: list[tuple[str, int]] = []
        self.revoked: list[tuple[str, ...]] = []
        self.cancelled: list[tuple[str, ...]] = []
        self.hang = False

    async def on_assigned(self, resources: Mapping[str, int]) -> None:
        self.ledger.take(self.name, resources)
        self.owned.update(resources)

    async def on_revoked(self, resources: Sequence[str]) -> None:
        try:
            if self.hang:
                await asyncio.Event().wait()
            if self.revoke_delay:
                await asyncio.sleep(self.revoke_delay)
        except asyncio.CancelledError:
            self.cancelled.append(tuple(resources))
            raise
        finally:
            for name in resources:
                self.owned.pop(name, None)
            self.ledger.give_back(self.name, resources)
        self.revoked.append(tuple(resources))

    def on_error(self, error: Exception) -> None:
        self.errors.append(error)

    def on_session(self, state: str) -> None:
        self.sessions.append(state)

    def on_role(self, role: str, epoch: int) -> None:
        self.roles.append((role, epoch))
