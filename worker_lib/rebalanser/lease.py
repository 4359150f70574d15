"""The member's self-fencing lease, measured on the monotonic clock.

ZooKeeper expires a session no earlier than ``T`` after it last heard from the client. A request
sent at monotonic time ``s`` and acknowledged proves the server heard from the session at or after
``s``, so the session is alive on the server until at least ``s + T``. The lease ends earlier, at
``s + fraction * T``: until then the member may work; after it the member stops, without waiting for
any signal. A process that was paused (SIGSTOP, a long GC) sees an expired lease the moment it runs
again, before it can do a unit of work. Assumption: clocks on the client and server hosts advance at
the same rate (no assumption about their absolute values).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class LeaseView:
    session_id: int
    expires_ns: int

    def valid(self, session_id: int, now_ns: int | None = None) -> bool:
        now = time.monotonic_ns() if now_ns is None else now_ns
        return session_id == self.session_id and now < self.expires_ns


class Lease:
    def __init__(self, fraction: float) -> None:
        self._fraction = fraction
        self._lock = threading.Lock()
        self._view = LeaseView(0, 0)

    def renew(self, session_id: int, sent_ns: int, session_timeout_s: float) -> None:
        expires = sent_ns + int(session_timeout_s * self._fraction * 1e9)
        with self._lock:
            if session_id != self._view.session_id or expires > self._view.expires_ns:
                self._view = LeaseView(session_id, expires)

    def revoke(self) -> None:
        with self._lock:
            self._view = LeaseView(self._view.session_id, 0)

    @property
    def view(self) -> LeaseView:
        return self._view

    def valid(self, session_id: int) -> bool:
        return self._view.valid(session_id)

    def remaining(self) -> float:
        return max(0.0, (self._view.expires_ns - time.monotonic_ns()) / 1e9)
