"""The member's self-fencing lease, and what proves it may be renewed (pure logic; no I/O).

ZooKeeper's *leader* expires a session ``T`` (the negotiated timeout) after the last time it heard of
it. A server the client talks to may be a follower that is cut off from the leader while it still
answers reads, so an answered read proves nothing about the leader. :class:`LeaderEvidence` turns
answered ``sync`` requests (which a follower can only answer through the leader) into a *proven*
instant ``p``: the leader has heard of the session at or after ``p``, so it cannot expire the session
before ``p + T``. The lease ends at ``p + fraction * T``. docs/protocol.md gives the argument, its
assumptions and the derivation of :data:`RELAY_SHARE`.

Until the lease ends the member may work; after it the member stops, without waiting for any signal.
Time is read from CLOCK_BOOTTIME, which, unlike CLOCK_MONOTONIC, keeps counting while the machine is
suspended: a member resumed after a suspension (or a SIGSTOP, or a long GC pause) sees an expired
lease before it can do a unit of work. Assumption: clocks on the client and server hosts advance at
the same rate (no assumption about their absolute values).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

# A follower relays the sessions its clients touched to the leader when it answers the leader's
# pings, sent every tickTime/2. The client does not know tickTime; ZooKeeper allows no session
# timeout below 2 x tickTime, so tickTime/2 <= T/4.
RELAY_SHARE = 0.25

_CLOCK = getattr(time, "CLOCK_BOOTTIME", None)


def now_ns() -> int:
    """The lease clock: CLOCK_BOOTTIME where the platform has it, else the monotonic clock."""
    return time.clock_gettime_ns(_CLOCK) if _CLOCK is not None else time.monotonic_ns()


@dataclass(frozen=True)
class LeaseView:
    session_id: int
    expires_ns: int

    def valid(self, session_id: int, now: int | None = None) -> bool:
        return session_id == self.session_id and (now_ns() if now is None else now) < self.expires_ns


class Lease:
    def __init__(self, fraction: float) -> None:
        self._fraction = fraction
        self._lock = threading.Lock()
        self._view = LeaseView(0, 0)

    def renew(self, session_id: int, proven_ns: int, session_timeout_s: float) -> None:
        """The leader cannot expire ``session_id`` before ``proven_ns + T``: work until a share of that."""
        expires = proven_ns + int(session_timeout_s * self._fraction * 1e9)
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
        return max(0.0, (self._view.expires_ns - now_ns()) / 1e9)


@dataclass(frozen=True)
class _Answered:
    sent_ns: int
    answered_ns: int


class LeaderEvidence:
    """Which instants are proven to be covered by the leader's view of the session, on one connection.

    - The connection's handshake is proven at once: the leader itself validates (and so touches) the
      session before the server answers it.
    - A sync sent at ``s`` and answered at ``e`` becomes proven when another sync on the same
      connection, *sent* at least ``relay`` after ``e``, is answered. Its answer shows the server was
      still passing requests to the leader then, and in the ``relay`` before it the server answered a
      ping of the leader, relaying every session touched before that, ours at ``s`` included.

    Not thread-safe: the caller serialises calls. Times are :func:`now_ns` instants.
    """

    def __init__(self) -> None:
        self._connection = -1
        self._proven_ns = 0
        self._pending: list[_Answered] = []

    @property
    def proven_ns(self) -> int:
        return self._proven_ns

    def connected(self, connection: int, handshake_sent_ns: int) -> int:
        """Connection ``connection`` (a number that grows with each new one) began with a handshake
        sent at ``handshake_sent_ns``; returns the proven instant."""
        if connection != self._connection:
            self._connection = connection
            self._pending = []
            self._proven_ns = handshake_sent_ns
        return self._proven_ns

    def answered(self, connection: int, sent_ns: int, answered_ns: int, relay_ns: int) -> int:
        """A sync sent at ``sent_ns`` on ``connection`` was answered at ``answered_ns``; returns the
        proven instant (unchanged if the connection is not the current one)."""
        if connection != self._connection or answered_ns < sent_ns:
            return self._proven_ns
        waiting = []
        for probe in self._pending:
            if probe.answered_ns + relay_ns <= sent_ns:
                self._proven_ns = max(self._proven_ns, probe.sent_ns)
            else:
                waiting.append(probe)
        waiting.append(_Answered(sent_ns, answered_ns))
        self._pending = waiting
        return self._proven_ns
