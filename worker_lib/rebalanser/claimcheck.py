"""Which claims are verified on the current connection, and the re-check that verifies them again after
each reconnection, beside the member's loop (docs/protocol.md, "Ownership: claims, not the map").

kazoo drops every watch with the connection, and someone may have deleted a claim while the member
was away: its deletion then reaches nobody. So a claim counts as the member's (``owns``) only once it
has been *verified on the current connection*: read, or its watch set, by a request sent on that
connection and answered, so that its deletion from then on is reported by its watch.

- Connections are numbered by their handshakes (:class:`~rebalanser.session.Handshakes`). A claim's
  verification names the connection that was current when the request that verified it was sent; it
  holds only while that connection is the latest. A new handshake is recorded before kazoo reports
  CONNECTED and before the lease can be renewed from it, so at that instant every claim becomes
  unverified, with no step of anyone's.
- :class:`Rechecker`, a thread of its own that kazoo's connection listener wakes when it reports
  the new connection (CONNECTED, right after the handshake), then sets the watch on every
  claim held again: one ``setWatches`` request per fencing token (:mod:`rebalanser.setwatches`),
  relative to that token, all sent before the first answer is awaited. A claim still there since its
  creation gets its watch; one deleted or replaced meanwhile is reported at once (``on_lost`` of the
  claim book: ``owns`` turns false in that callback, and the member's loop is told). Once every answer
  has come, and every notification that came before them has been handed to the claim book, the claims
  are verified on that connection.
- A claim the member's loop reads on a connection that is no longer the latest when the answer comes
  is not verified: the re-check runs again for it.

The member's loop takes no part: it may be busy in a stop callback for as long as its timeout.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadArgumentsError,
    ConnectionLoss,
    OperationTimeoutError,
    SessionExpiredError,
    UnimplementedError,
)
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import Callback, KazooState, WatchedEvent, ZnodeStat

from rebalanser.setwatches import send_watch_unchanged
from rebalanser.zk import ephemeral_of, session_id

log = logging.getLogger(__name__)

RETRY_SHARE = 0.1  # a re-check that failed on a live connection is tried again after this share of T


class Verified:
    """resource -> token of each claim verified on the latest connection that verified any (older
    verifications count for nothing: they are dropped). Thread-safe: the member's loop, the re-check
    thread and ``owns`` (any thread) use it."""

    def __init__(self, connection: Callable[[], int] = lambda: 0) -> None:
        self._connection = connection
        self._lock = threading.Lock()
        # (connection, resource -> token verified on it), replaced as a whole for a newer connection
        self._on: tuple[int, dict[str, int]] = (0, {})
        # resource -> (the last token its watch reported gone or changed, that report's number): a claim
        # node never comes back, so an answer to a request sent before the report never verifies it
        # again; one sent after the report that finds it there (a change of its data) does
        self._gone: dict[str, tuple[int, int]] = {}
        self._reports = 0  # reports so far (gone), numbered from 1
        self._stale: Callable[[], None] = lambda: None

    def connection(self) -> int:
        """The latest connection's number: take it before sending a request that verifies claims."""
        return self._connection()

    def on_stale(self, callback: Callable[[], None]) -> None:
        """``callback()`` (never blocking) whenever claims were verified on a connection that is no
        longer the latest: they need the re-check of the current one."""
        self._stale = callback

    def reports(self) -> int:
        """How many claims' watches have reported them gone or changed so far: taken before sending a
        read whose answer may verify such a claim again (:meth:`mark`'s ``since``)."""
        return self._reports

    def reported(self, resource: str, token: int) -> bool:
        """Whether the watch of our claim on ``resource`` of ``token`` has reported it gone or changed."""
        with self._lock:
            return self._gone.get(resource, (0, 0))[0] == token

    def mark(self, claims: Mapping[str, int], connection: int, since: int | None = None) -> None:
        """``claims`` (resource -> token) were verified by requests sent while ``connection`` was the
        latest, and answered. A verification on a connection older than one already seen counts for
        nothing. A claim whose watch reported it gone or changed is verified again only by a read sent
        after that report, behind a ``sync`` (``since``: :meth:`reports` taken before the sync was sent),
        that found it, with its token, still ours: the report was a change of its data, since a deleted
        node never comes back, and after the sync no server answers with a view older than the report
        (a lagging server reached after a reconnection might still show a deleted node). Without
        ``since`` such a claim is never verified again."""
        if not claims:
            return
        with self._lock:
            seen, on = self._on
            if connection > seen:
                seen, on = connection, {}
                self._on = (seen, on)
            if connection == seen:
                on.update(claims)
                for resource in self._gone.keys() & claims.keys():
                    token, report = self._gone[resource]
                    if token != claims[resource]:
                        continue
                    if since is not None and report <= since:
                        del self._gone[resource]  # read after the report, and found: it lives
                    else:
                        del on[resource]  # reported while the request was out: it may be gone
        if connection != self._connection():
            self._stale()

    def revoke(self, resources: Iterable[str]) -> None:
        """``resources`` are no longer verified: their watch fired (the claim was deleted or replaced),
        or they are being released."""
        with self._lock:
            on = self._on[1]
            for resource in resources:
                on.pop(resource, None)

    def gone(self, resource: str, token: int) -> None:
        """The claim on ``resource`` of ``token`` was deleted, replaced or changed (its watch fired): no
        longer verified, and never verified again by an answer to a request sent before this report
        (sent before the deletion, answered after its notification was handled); see :meth:`mark`."""
        with self._lock:
            self._reports += 1
            self._on[1].pop(resource, None)
            self._gone[resource] = (token, self._reports)

    def valid(self, resource: str, token: int) -> bool:
        """Whether the claim on ``resource`` of ``token`` is verified on the current connection."""
        current = self._connection()
        seen, on = self._on
        return bool(current) and seen == current and on.get(resource) == token

    def current(self, claims: Mapping[str, int]) -> dict[str, int]:
        """Those of ``claims`` (resource -> token) verified on the current connection."""
        current = self._connection()
        seen, on = self._on
        if not current or seen != current:
            return {}
        with self._lock:  # a copy: the re-check thread and the watches update it meanwhile
            on = dict(on)
        if claims.items() <= on.items():  # every one (the usual case), compared without a Python loop
            return dict(claims)
        return {r: t for r, t in claims.items() if on.get(r) == t}

    def unverified(self, claims: Mapping[str, int]) -> dict[str, int]:
        """Those of ``claims`` (resource -> token) not verified on the current connection."""
        current = self._connection()
        seen, on = self._on
        if not current or seen != current:
            return dict(claims)
        return {r: t for r, t in claims.items() if on.get(r) != t}


class ClaimSource(Protocol):
    """What the re-check needs of a claim book (:class:`~rebalanser.claims.ClaimBook`)."""

    session_id: int
    verified: Verified

    def snapshot(self) -> dict[str, int]:
        """resource -> token of every claim held (safe to call from any thread)."""

    def claim_watch(self, event: WatchedEvent) -> None:
        """The one watcher of every claim path."""

    def report_lost(self, resource: str, token: int) -> None:
        """Our claim on ``resource`` of ``token`` is gone (as its watch firing would report)."""

    def owner_path(self, resource: str) -> str:
        """The claim's path."""

    @property
    def owners(self) -> str:
        """The folder of the claims (each claim's path is this folder and its resource)."""


class Rechecker:
    """The re-check thread. Woken by every new connection (:meth:`on_state`) and by
    claims verified on a connection already replaced; each round verifies, on the latest connection,
    every claim held that is not verified on it."""

    def __init__(self, zk: KazooClient, book: ClaimSource, session_timeout: Callable[[], float]) -> None:
        self._zk, self._book, self._timeout = zk, book, session_timeout
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="rebalanser-claimcheck", daemon=True)
        book.verified.on_stale(self._wake.set)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread is not threading.current_thread() and self._thread.is_alive():
            self._thread.join(timeout=10)

    def on_state(self, state: str) -> None:
        """kazoo's connection listener (its connection thread: never blocks). CONNECTED is reported
        right after the handshake was recorded, once kazoo sends requests on the new connection."""
        if state == KazooState.CONNECTED:
            self._wake.set()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait()
            self._wake.clear()
            if self._stopped:
                return
            try:
                done = self.round()
            except Exception:
                log.exception("the re-check of our claims failed")
                done = False
            if not done and not self._stopped and self._zk.connected:
                # Not for a lost connection (its handshake wakes us): the same connection, tried again.
                self._wake.wait(self._timeout() * RETRY_SHARE)
                self._wake.set()

    def round(self) -> bool:
        """One re-check on the latest connection; True when it is done (or has nothing to do, or the
        connection went and the next handshake brings another round)."""
        connection = self._book.verified.connection()
        if not connection or not self._zk.connected:
            return True
        session = self._book.session_id
        if not session or session != session_id(self._zk):
            return True  # the claims of another session: ended with it
        claims = self._book.verified.unverified(self._book.snapshot())
        if not claims:
            return True
        try:
            self._watch(claims)
        except (ConnectionLoss, OperationTimeoutError, SessionExpiredError):
            return not self._zk.connected or connection != self._book.verified.connection()
        except (UnimplementedError, BadArgumentsError) as exc:  # no server since 3.3 says so
            log.warning("setWatches refused (%r): reading each claim", exc)
            self._read(claims)
        if not self._flushed():
            return False
        self._book.verified.mark(claims, connection)
        return True

    def _watch(self, claims: Mapping[str, int]) -> None:
        """One ``setWatches`` per token, relative to it, all sent before the first answer is awaited.
        A claim (never written after its creation) is unchanged since its token exactly while it is
        still the node this session created: the watch is set on it; any other outcome (no node, a
        newer one) fires the claim book's watcher at once."""
        by_token: dict[int, list[str]] = defaultdict(list)
        for resource, token in claims.items():
            by_token[token].append(resource)
        owners = self._book.owners
        sent = [send_watch_unchanged(self._zk, token, owners, resources, self._book.claim_watch)
                for token, resources in by_token.items()]
        for result in sent:
            result.get()

    def _read(self, claims: Mapping[str, int]) -> None:
        """Each claim read (with its watch), when the server refuses ``setWatches``."""
        sent: list[tuple[str, int, IAsyncResult]] = [
            (r, t, self._zk.exists_async(self._book.owner_path(r), watch=self._book.claim_watch))
            for r, t in claims.items()]
        for resource, token, result in sent:
            stat: ZnodeStat | None = result.get()
            if not ephemeral_of(stat, self._book.session_id) or stat is None or int(stat.czxid) != token:
                self._book.report_lost(resource, token)

    def _flushed(self) -> bool:
        """Waits until kazoo's callback thread has run every watch notification received so far (the
        ones the server fired at once for our requests came before their answers): the claim book has
        then been told of each claim found gone. False if that takes longer than T."""
        done = threading.Event()
        self._zk.handler.dispatch_callback(Callback("watch", done.set, ()))
        return done.wait(self._timeout())
