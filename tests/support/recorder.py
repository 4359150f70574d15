"""A Handler that records everything a Client reports, for in-process library tests."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from rebalanser.handler import Handler


class Recorder(Handler):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owned: set[str] = set()
        self.sessions: list[str] = []
        self.roles: list[tuple[str, int]] = []
        self.errors: list[Exception] = []

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        with self.lock:
            self.owned |= set(resources)

    def on_revoked(self, resources: Sequence[str]) -> None:
        with self.lock:
            self.owned -= set(resources)

    def on_session(self, state: str) -> None:
        self.sessions.append(state)

    def on_role(self, role: str, epoch: int) -> None:
        self.roles.append((role, epoch))

    def on_error(self, error: Exception) -> None:
        self.errors.append(error)
