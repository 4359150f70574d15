"""A member's per-resource work: the table of phases (:mod:`resource_state`) and the I/O of its
effects: claims (through the claim book, :mod:`claims`), the start and stop callbacks (through the
callback runner, :mod:`callbacks`) and releases. What ``owns`` reads is here.

Runs on the member's thread, except what ``owns`` reads and the two notes taken on kazoo's thread (a
claim of ours seen deleted, our member node seen deleted). It never runs an effect of its own accord:
each method returns the effects that follow, which the member's loop queues (:mod:`effect_queue`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError

from rebalanser import member_events as ev
from rebalanser import resource_state as rs
from rebalanser.callbacks import CallbackOverrun, CallbackRunner, RunnerClosed
from rebalanser.claims import ClaimBook
from rebalanser.errors import RebalanserError, StopTimeoutError
from rebalanser.handler import Handler
from rebalanser.lease import Lease
from rebalanser.metrics import Metrics
from rebalanser.resource_state import After, Ownership, Resources
from rebalanser.session import LeaseProber

log = logging.getLogger("rebalanser.client")  # the member's log, as before this was split out


@dataclass(frozen=True)
class UpdateState:
    """The member's state follows what it owns (after a resource transition's effects)."""


@dataclass(frozen=True)
class StepAside:
    """We are to work on resources whose overrunning stop callback still runs (``member_state.step_aside``)."""

    stuck: frozenset[str]


Effect = rs.Effect | UpdateState | StepAside


@dataclass(frozen=True)
class Seat:
    """Where the member sits now: its member node's name (None: none) and the session it joined in."""

    node: str | None
    session: int


@dataclass(frozen=True)
class Context:
    """What per-resource work needs of its member (each read when it is needed)."""

    book: Callable[[], ClaimBook]
    prober: Callable[[], LeaseProber | None]
    session_timeout: Callable[[], float]
    seat: Callable[[], Seat]
    moved: threading.Event  # our assignment changed since it was read: a claim round stops between batches
    post: Callable[[ev.Event], None]
    report: Callable[[Exception], None]


class ResourceWork:
    def __init__(self, handler: Handler, metrics: Metrics, lease: Lease, callbacks: CallbackRunner,
                 timeouts: tuple[float, float], context: Context) -> None:
        self._handler, self._metrics, self._lease, self._callbacks = handler, metrics, lease, callbacks
        self._start_timeout, self._stop_timeout = timeouts
        self._cx = context
        self.lock = threading.RLock()
        self.table = rs.EMPTY  # replaced whole by each transition (read by owns() on any thread)
        self._deleted_node = ""  # our member znode, seen deleted by its watch (before the loop reacts)
        self._lost_claims: dict[str, int] = {}  # resource -> token of our claim seen deleted (ditto)
        # Those of them the loop has not taken yet (:meth:`claims_lost` takes them all at once).
        self._unhandled: dict[str, int] = {}
        self._unhandled_lock = threading.Lock()
        self._claim_failures = 0  # claim rounds in a row that failed with an unexpected error (back-off)

    # -- what owns() reads (any thread) ---------------------------------------------------------

    def valid(self, resource: str, held: Ownership) -> bool:
        """The claim is not known to be gone, the lease is valid, and the claim is verified on the
        current connection. The lease is read before the verification: a handshake makes every claim
        unverified before the lease can be renewed from it (:mod:`rebalanser.claimcheck`), so a lease
        read as renewed by a new connection is never paired with a verification of an older one."""
        token, session, node = held
        return (node != self._deleted_node and self._lost_claims.get(resource) != token
                and self._lease.view.valid(session) and self._cx.book().verified.valid(resource, token))

    def node_deleted(self, node: str) -> None:
        """kazoo's thread: our member node ``node`` was seen deleted; owns() is False from now on."""
        self._deleted_node = node

    def claim_deleted(self, resource: str, token: int) -> None:
        """kazoo's thread (a claim's watch): owns() is False from now on, before the loop reacts."""
        self._lost_claims[resource] = token
        with self._unhandled_lock:
            self._unhandled[resource] = token
        self._cx.post(ev.ClaimLost(resource, token))

    def _put_back(self, tokens: dict[str, int]) -> None:
        """Claims taken by :meth:`claims_lost` and not handled (a read failed): taken again by the next
        one, unless a newer loss of the same resource was reported meanwhile."""
        with self._unhandled_lock:
            for resource, token in tokens.items():
                self._unhandled.setdefault(resource, token)

    def _take_unhandled(self) -> dict[str, int]:
        """Every claim seen deleted that the loop has not taken yet (resource -> token)."""
        with self._unhandled_lock:
            taken, self._unhandled = self._unhandled, {}
        return taken

    # -- transitions ----------------------------------------------------------------------------

    def set_table(self, table: Resources) -> None:
        with self.lock:
            self.table = table
        self._metrics.owned(len(table.owned))

    def take(self, step: rs.Step) -> list[Effect]:
        """Takes a transition's new table; returns its effects, then the state's update."""
        table, effects = step
        self.set_table(table)
        return [*effects, UpdateState()]

    def held_claims(self) -> set[str]:
        """The claims this session holds, or may hold (a write whose outcome is unknown)."""
        book = self._cx.book()
        return set(book.held) | book.uncertain

    # -- effects ----------------------------------------------------------------------------------

    def execute(self, effect: rs.Effect) -> list[Effect]:
        """Carries out one effect of the resource machine; returns what follows."""
        match effect:
            case rs.Claim(names):
                return self.claim(names)
            case rs.StartCallback(tokens):
                started = self._verified_for_start(dict(tokens))
                if started:
                    self._call("on_assigned", set(started), started, self._start_timeout)
            case rs.StopCallback(names):
                try:
                    self._call("on_revoked", set(names), sorted(names), self._stop_timeout)
                finally:
                    self.set_table(rs.stopped(self.table, names))
            case rs.Release(names):
                self.release(names)
        return []

    def claim(self, names: Collection[str]) -> list[Effect]:
        seat = self._cx.seat()
        if seat.node is None or not seat.session or not self.table.wanted:
            return [UpdateState()]
        wanted = sorted(names)
        if not wanted:
            return []
        stuck = self._callbacks.blocked(wanted)
        if stuck:
            return [StepAside(frozenset(stuck))]
        if not self._lease_valid(seat.session):
            self._reclaim_later()
            return []
        book = self._cx.book()
        # A newer assignment arriving meanwhile ends the round between batches: what it still names
        # stays wanted and is claimed when it is applied, what it does not is never written.
        result = book.claim(wanted, abandon=self._cx.moved.is_set)
        if result.error is not None:
            self._claim_failed(len(result.failed), result.error)
        else:
            self._claim_failures = 0
        if result.deferred:
            self._cx.post(ev.AssignmentChanged(seat.node))  # re-read whatever set the flag: they stay wanted
        for gone in book.watch_releases(result.blocked, lambda r: self._cx.post(ev.ClaimReleased(r))):
            self._cx.post(ev.ClaimReleased(gone))
        if result.claimed:
            return self.take(rs.claimed(self.table, result.claimed, seat.session, seat.node))
        return [UpdateState()]

    def _lease_valid(self, session: int) -> bool:
        if self._lease.valid(session):
            return True
        prober = self._cx.prober()
        if prober is not None:
            prober.probe_once()
        return self._lease.valid(session)

    def retry_claim(self, released: set[str] | None) -> list[Effect]:
        return self.claim(rs.claim_targets(self.table, released).names)

    def release(self, names: Collection[str]) -> None:
        try:
            self._cx.book().release(sorted(names))
        except (ConnectionLoss, OperationTimeoutError, SessionExpiredError):
            # They stay to be released (and the claim book remembers them, held or uncertain): retried
            # at the resync after reconnecting, at the next join in this session, and every T/4 on
            # standby; the session's end releases them otherwise.
            return
        self.set_table(rs.released(self.table, names))

    def release_pending(self) -> None:
        pending = rs.pending_release(self.table)
        if pending is not None:
            self.release(pending.names)

    # -- starting only verified claims -------------------------------------------------------------

    def _claim_valid(self, resource: str, token: int) -> bool:
        return self._cx.book().verified.valid(resource, token) and self._lost_claims.get(resource) != token

    def _verified_for_start(self, tokens: dict[str, int]) -> dict[str, int]:
        """The claims of ``tokens`` that may be started: only those verified on the current connection
        (:mod:`rebalanser.claimcheck`). A reconnection between a claim round and its start (the loop
        held up in between) leaves claims verified on the old connection only, and one of them may
        have been deleted while the member was away. Each such claim is read now, on the current
        connection; one found gone, or not verified on the latest connection by that read (another
        reconnection, a lost connection), is not started: it is wanted again and claimed anew (a claim
        still ours is re-taken after reading it)."""
        unverified = {r: t for r, t in tokens.items() if not self._claim_valid(r, t)}
        if not unverified:
            return tokens
        called_off = {r for r, t in unverified.items() if not self._verify_claim(r, t)}
        if called_off:
            log.info("not starting %s: claims not verified on the current connection", sorted(called_off)[:5])
            self.set_table(rs.not_started(self.table, called_off))
            for resource in called_off:
                self._cx.post(ev.ClaimReleased(resource))
        return {r: t for r, t in tokens.items() if r not in called_off}

    def _verify_claim(self, resource: str, token: int) -> bool:
        """Reads our claim on ``resource`` of ``token`` on the current connection (arming its watch):
        True if it is ours and now verified on the latest connection. A claim found gone is forgotten."""
        book = self._cx.book()
        try:
            held = book.still_held(resource, token)
        except (ConnectionLoss, OperationTimeoutError, SessionExpiredError):
            return False  # remembered: read again when it is re-taken
        if not held:
            book.forget(resource, token)
        return held and self._claim_valid(resource, token)

    # -- claims lost, the lease, failed rounds ------------------------------------------------------

    def claims_lost(self) -> list[Effect]:
        """Someone else deleted claims of ours (their watches fired, or the re-check found them gone):
        every such claim not handled yet, in one batch. Each is read first: a watch can fire for the
        release of another session's claim at the same path (see :meth:`ClaimBook.still_held`); a
        claim still ours, of the same token, is valid again. Work on the others stops at once, with
        one stop callback for all of them: claims lost together (the deletions met by one re-check
        after a reconnection, or queued while the loop was busy) cost one callback's time, not one
        each in turn; losses reported while the reads ran join the batch. Each is then claimed again,
        with a new token, through the normal path if the assignment still names it (and when its next
        holder, if any, releases it)."""
        book = self._cx.book()
        taken: dict[str, int] = {}
        ours: set[tuple[str, int]] = set()
        while tokens := self._take_unhandled():
            taken.update(tokens)
            try:
                ours.update((r, t) for r, t in tokens.items() if book.still_held(r, t))
            except BaseException:
                # Nothing is forgotten until every claim of the batch has been read: a claim forgotten
                # but not stopped would stay owned, never claimed again. They are all handled again at
                # the next report (the re-check after reconnecting reports each one still gone).
                self._put_back(taken)
                raise
        lost: set[str] = set()
        for resource, token in taken.items():
            if (resource, token) in ours:
                with self.lock:
                    if self._lost_claims.get(resource) == token:
                        del self._lost_claims[resource]
                log.info("the deletion reported for %s was not our claim's (it is still ours)", resource)
            elif book.forget(resource, token):
                lost.add(resource)
        if not lost:
            return []
        log.error("our claims on %s were deleted by someone else: stopping work on them", sorted(lost)[:5])
        self._cx.report(RebalanserError(f"{len(lost)} claims deleted externally; stopped work on them"))
        effects = self.take(rs.claims_lost(self.table, lost))
        for resource in lost:
            self._cx.post(ev.ClaimReleased(resource))
        return effects

    def lease_expired(self) -> list[Effect]:
        self._metrics.lease_expired()
        effects: list[Effect] = []
        if self.table.owned:
            log.warning("self-fencing lease ran out: stopping work on %d resources", len(self.table.owned))
            effects = self.take(rs.stop_all(self.table, After.WANTED))
        self._reclaim_later()
        return effects

    def _claim_failed(self, count: int, error: Exception) -> None:
        """A claim transaction failed with an error no claim round expects (NoAuth, say): the resources
        stay wanted and are tried again after a pause that doubles with each failure in a row, from
        T/10 up to T."""
        self._claim_failures += 1
        timeout = self._cx.session_timeout()
        delay = min(timeout / 10 * 2 ** (self._claim_failures - 1), timeout)
        log.warning("claiming %d resources failed (%r): trying again in %.1f s", count, error, delay)
        self._cx.report(RebalanserError(
            f"claiming {count} resources failed ({error!r}); trying again in {delay:.1f} s"))
        timer = threading.Timer(delay, lambda: self._cx.post(ev.ClaimReleased(None)))
        timer.daemon = True
        timer.start()

    def _reclaim_later(self) -> None:
        threading.Timer(self._cx.session_timeout() / 10, lambda: self._cx.post(ev.ClaimReleased(None))).start()

    # -- callbacks ------------------------------------------------------------------------------------

    def _call(self, name: str, resources: set[str], arg: Any, timeout: float) -> None:
        """Runs ``on_assigned``/``on_revoked`` on the callback thread (see :mod:`callbacks`) and waits
        for it at most ``timeout``: one that overruns is reported, not waited on forever."""
        callback = getattr(self._handler, name)
        try:
            failure = self._callbacks.call(name, resources, lambda: callback(arg), timeout)
        except CallbackOverrun as exc:
            log.error("%s; no longer waiting for it", exc)
            self._cx.report(StopTimeoutError(str(exc)))
            return
        except RunnerClosed as exc:
            log.info("%s", exc)
            return
        if failure is not None:
            log.error("%s raised %r", name, failure)
            self._cx.report(failure if isinstance(failure, Exception) else RuntimeError(repr(failure)))
