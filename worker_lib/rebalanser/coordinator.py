"""The coordinator: proposes who owns what. It never grants ownership itself (claims do that).

Guarantees: every write it makes is fenced by the epoch it won and by its own member node (see
:mod:`writer` and :mod:`epoch`), so after another member has taken a later epoch, or once its member
node is gone, none of its writes lands; on any fencing failure, when ``G/epoch`` changes under it or
disappears, or after :data:`MAX_FAILED_REBALANCES` failed rebalances in a row (retried with growing
back-off), it stops at once and its member re-runs the election. Triggers (membership, resources,
config) arriving within the rebalance interval coalesce into one rebalance.

Parts: this module is the driver (the thread, the watches' callbacks, the waits). It reads and
writes the layout only through its store (:mod:`coordinator_store`: the epoch, :mod:`epoch`, and
every fenced write, :mod:`writer`) and decides through pure policies: what a rebalance does and the
Global Barrier round's state machine (:mod:`coordinator_plan`), which writes it makes
(:mod:`write_plan`) and how long a departed member's resources stay reserved (:mod:`departure`).
One rebalance: read through the store, plan, have the store carry out the steps in a loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.protocol.states import WatchedEvent, ZnodeStat

from rebalanser import baddata, departure, startup, wire
from rebalanser import coordinator_plan as plan
from rebalanser.assignment import SortedNames
from rebalanser.config import Algorithm, GroupConfig
from rebalanser.coordinator_plan import (
    MAX_FAILED_REBALANCES,
    Assign,
    BarrierRound,
    Idle,
    Proposal,
    Round,
    Stored,
    Waited,
    last_rebalance_at,
    needs_rebalance,
    retry_delay,
)
from rebalanser.coordinator_store import CoordinatorStore
from rebalanser.errors import CorruptDataError, NotCoordinatorError
from rebalanser.options import Options
from rebalanser.paths import GroupPaths, MemberNode
from rebalanser.wire import Blob, MemberAssignment, RebalanceRecord
from rebalanser.writer import FencedWriteError

log = logging.getLogger(__name__)

class Coordinator:
    """The driver: waits for work, reads through its store, asks the plan what to do, and has the
    store carry out the steps (one loop; a Global Barrier round is a :class:`~coordinator_plan.Round`)."""

    def __init__(
        self,
        zk: KazooClient,
        paths: GroupPaths,
        options: Options,
        me: MemberNode,
        on_epoch: Callable[[int], None],
        on_deposed: Callable[[str], None],
        on_bad_data: Callable[[CorruptDataError], None] | None = None,
        epoch_floor: int = 0,
        known_members: Mapping[str, int] | None = None,
    ) -> None:
        self._paths, self._options, self._me = paths, options, me
        self._on_epoch, self._on_deposed = on_epoch, on_deposed
        self._on_bad_data = on_bad_data or (lambda error: baddata.report(error, options.metrics))
        self._store = CoordinatorStore(zk, paths, me, self._reject, known_members=known_members)
        self._wake = threading.Condition()
        self._dirty = True
        self._active = True
        self._epoch_floor = epoch_floor  # the highest epoch our member has seen
        self._fenced_off = ""  # why G/epoch no longer carries our epoch, once it does not
        self._failures = 0  # failed rebalances in a row
        self._not_before = 0.0  # back-off: no rebalance before this instant
        self._own_stop: tuple[int, int] | None = None  # (generation, epoch) of our stop order standing
        self._config: GroupConfig | None = None
        self._departed: dict[str, float] = {}  # member id -> when first seen gone
        self._last_rebalance = 0.0
        self._in_office_since = 0.0  # monotonic; opens the start-up window (see startup)
        self._last_join = 0.0  # monotonic: the last change of G/clients seen
        self._unplaceable: frozenset[str] = frozenset()  # orphans the last hand-out could not place
        self._ahead: plan.Ahead | None = None  # the first plan, made while the start-up window runs
        self._encoded: dict[MemberAssignment, Blob] = {}  # its assignments, encoded, for the write
        self._ahead_for: list[str] = []  # the membership (G/clients, sorted) last planned ahead for
        self._listed_resources: list[str] | None = None  # G/resources as last listed (see _resources)
        self._valid_resources: list[str] = SortedNames()  # its valid names, sorted (not compared again)
        self._thread = threading.Thread(target=self._run, name="rebalanser-coordinator", daemon=True)

    @property
    def epoch(self) -> int:
        return self._store.epoch

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        with self._wake:
            self._active = False
            self._wake.notify_all()
        self._store.unwatch()
        if wait and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    @property
    def active(self) -> bool:
        return self._active

    def trigger(self, *_: Any) -> None:
        with self._wake:
            self._dirty = True
            self._wake.notify_all()

    # -- lifecycle -----------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            started = time.monotonic()
            self._take_office()
            log.info("took office with epoch %d in %.0f ms", self.epoch, (time.monotonic() - started) * 1000)
            while self._active:
                self._wait_for_work()
                if self._fenced_off:
                    raise NotCoordinatorError(self._fenced_off)
                if self._active:
                    self._rebalance_safely()
        except NotCoordinatorError as exc:
            self._resign(str(exc))
        except Exception as exc:
            if not self._active:  # stopped meanwhile: the member left and closed the session under a request
                log.debug("coordinator stopped: %r", exc)
                return
            log.exception("coordinator failed")
            with self._wake:  # not at once: the member takes office again right after
                self._wake.wait_for(lambda: not self._active, timeout=1.0)
            self._resign(f"coordinator failed: {exc}")

    def _resign(self, reason: str) -> None:
        was_active = self._active
        self._active = False
        self._store.unwatch()
        if was_active:
            self._on_deposed(reason)

    def _take_office(self) -> None:
        store = self._store
        store.take_epoch(max(self._epoch_floor, store.recorded_epoch()), lambda: self._active)
        layout = store.reload()
        if layout.epoch >= store.epoch:
            # Assignments written under a later epoch than G/epoch shows: it was deleted and
            # re-created. Take one above them too, then read again what the fence now protects.
            store.take_epoch(layout.epoch, lambda: self._active)
            store.reload()
        self._on_epoch(store.epoch)
        self._in_office_since = self._last_join = time.monotonic()
        self._last_rebalance = self._inherited_last_rebalance()
        store.watch(self._on_epoch_node, self._members_changed, self.trigger)
        if not self._active:  # stopped meanwhile: stop() may have run before the watches existed
            store.unwatch()
        store.watch_settings(self._on_config, self._on_barrier)

    def _inherited_last_rebalance(self) -> float:
        """When the group's last rebalance ended, on our monotonic clock (0.0: long ago, or unknown).
        The interval spaces the group's rebalances, not one coordinator's: during a rolling restart
        the coordinator's pod is replaced too, and a successor that rebalanced at once would undo
        the batching the interval is for. ZooKeeper stamps both the last ``G/state`` write and our
        epoch, so their difference needs no agreement between the members' clocks."""
        stamps = self._store.stamps()
        return 0.0 if stamps is None else last_rebalance_at(time.monotonic(), *stamps)

    def _reject(self, error: CorruptDataError) -> None:
        self._on_bad_data(error)  # the member reports it

    # -- watches -------------------------------------------------------------------------------

    def _members_changed(self) -> None:
        self._last_join = time.monotonic()
        self.trigger()

    def _on_epoch_node(self, data: bytes | None, stat: ZnodeStat | None, event: WatchedEvent | None = None) -> bool:
        """G/epoch changed: once it no longer carries our epoch (another coordinator took a later one,
        or it was deleted), we resign without waiting for our next write to fail."""
        epoch = self.epoch
        if self._active and (stat is None or stat.version != epoch):
            self._fenced_off = (f"{self._paths.epoch} is gone" if stat is None
                                else f"{self._paths.epoch} moved on to {stat.version}") + f" (ours: {epoch})"
            self.trigger()
        return self._active and not self._fenced_off

    def _on_config(self, data: bytes | None, stat: ZnodeStat | None, event: WatchedEvent | None = None) -> bool:
        config: GroupConfig | None = None
        if data:
            try:
                config = wire.decode_config(data, path=self._paths.config)
            except CorruptDataError as exc:  # the previous settings stay
                self._reject(exc)
                config = self._config
        previous, self._config = self._config, config
        if needs_rebalance(previous, config):
            self.trigger()
        else:  # a new interval or grace: the waits re-read it, nothing to assign afresh
            with self._wake:
                self._wake.notify_all()
        return self._active

    def _on_barrier(self, data: bytes | None, stat: ZnodeStat | None, event: WatchedEvent | None = None) -> bool:
        """A stop order we did not give (written by hand, or left by an earlier coordinator): the next
        rebalance ends it."""
        if data and self._active:
            try:
                record = wire.decode_barrier(data, path=self._paths.barrier)
            except CorruptDataError:
                return self._active  # members ignore it as well; reported when a rebalance reads it
            if plan.foreign_stop(record, self._own_stop):
                self.trigger()
        return self._active

    # -- settings ------------------------------------------------------------------------------

    def _interval(self) -> float:
        return self._config.interval if self._config else self._options.min_interval

    def _algorithm(self) -> Algorithm:
        return self._config.algorithm if self._config else self._options.algorithm

    def _grace(self) -> float:
        return self._config.departure_grace_seconds if self._config else self._options.departure_grace

    # -- when ----------------------------------------------------------------------------------

    def _wait_for_work(self) -> None:
        with self._wake:
            while self._active and not self._dirty:
                self._wake.wait(timeout=departure.next_deadline(self._departed, self._grace(), time.monotonic()))
                if departure.expired(self._departed, self._grace(), time.monotonic()):
                    self._dirty = True
            # Coalesce: whatever arrives before the interval has passed joins this rebalance; the
            # first assignment of a group with none also waits for membership to go quiet.
            # Orphans (resources no live member owns) do not wait for the interval: see orphans.
            while self._active and not self._fenced_off:
                now = time.monotonic()
                until = plan.wait_until(self._pace(), now, self._orphans_waiting)
                if until is None:
                    break
                ahead = self._plan_ahead_at(until)
                if ahead is not None and ahead <= now:
                    self._wake.release()  # the watches' callbacks must not wait for the plan
                    try:
                        self._plan_ahead()
                    finally:
                        self._wake.acquire()
                    continue
                self._wake.wait(timeout=min(until, ahead or until) - now)
            self._dirty = False

    def _pace(self) -> plan.Pace:
        return plan.Pace(self._last_rebalance, self._interval(), self._not_before, self._startup_window())

    def _orphans_waiting(self) -> bool:
        """Whether some resource has no live owner, from the watches' last listings (no I/O)."""
        listings = self._store.listings()
        if listings is None:
            return False
        return plan.orphans_waiting(*listings, self._store.layout, self._reserved_now(), self._unplaceable)

    def _plan_ahead_at(self, until: float) -> float | None:
        """When the first plan may be made ahead (None: not in this wait). Inside the start-up window
        (the wait ends with it), once no member has joined for half of it: the plan is made while the
        rest of the window runs out, unless it was made for this membership already."""
        if self._store.layout.owners or self._startup_window() != until:
            return None
        listings = self._store.listings()
        if listings is None or sorted(listings[0]) == self._ahead_for:
            return None
        return self._last_join + self._options.initial_quiet / 2

    def _plan_ahead(self) -> None:
        """The first plan and its encoded assignments, made ahead (see :class:`coordinator_plan.Ahead`);
        the rebalance that ends the window uses them if nothing changed meanwhile."""
        store, started = self._store, time.monotonic()
        listings = store.listings()
        self._ahead_for = sorted(listings[0]) if listings is not None else []  # tried once per membership
        seen = self._last_join

        def abandon() -> bool:  # a membership change makes the plan useless (the rest would be work lost)
            return seen != self._last_join or not self._active

        try:
            self._ahead = plan.plan_ahead(store.watched_members(), self._resources(), store.epoch,
                                          store.layout.generation + 1, self._algorithm(), abandon)
            log.info("first plan %s ahead in %.0f ms, inside the start-up window",
                     "made" if self._ahead else "abandoned", (time.monotonic() - started) * 1000)
        except KazooException as exc:  # the rebalance plans again and reports what fails
            log.info("planning ahead failed (%r)", exc)
            self._ahead = None

    def _reserved_now(self) -> list[str]:
        """The departed members whose grace still runs (as last computed; no I/O)."""
        now, grace = time.monotonic(), self._grace()
        return [mid for mid, since in self._departed.items() if now < since + grace]

    def _startup_window(self) -> float:
        """While nothing is assigned in the group: the end of the start-up window (see startup)."""
        if self._store.layout.owners:
            return 0.0
        options = self._options
        return startup.window_end(self._in_office_since, self._last_join, options.initial_quiet,
                                  options.initial_max_wait)

    # -- rebalancing ---------------------------------------------------------------------------

    def _rebalance_safely(self) -> None:
        try:
            self._rebalance()
            self._failures = 0
        except NotCoordinatorError:
            raise
        except KazooException as exc:
            self._failures += 1
            if self._failures >= MAX_FAILED_REBALANCES:
                raise NotCoordinatorError(
                    f"{self._failures} rebalances in a row failed (last: {exc!r}); resigning") from exc
            delay = retry_delay(self._failures)
            log.warning("rebalance interrupted (%r); re-reading state and retrying in %.1fs", exc, delay)
            self._recover()
            self._not_before = time.monotonic() + delay

    def _recover(self) -> None:
        """A batch may or may not have landed: re-read what is stored before trying again."""
        while self._active:
            self._await_connection()
            try:
                self._store.reload()
                break
            except KazooException as exc:
                log.info("re-reading state failed (%r); retrying", exc)
                time.sleep(0.2)
        self.trigger()

    def _await_connection(self) -> None:
        while self._active and not self._store.connected:
            time.sleep(0.05)

    def _rebalance(self) -> None:
        started_wall, started = time.time(), time.monotonic()
        store = self._store
        barrier = store.read_barrier()
        layout = store.layout
        self._encoded = {}  # assignments encoded ahead, for this rebalance's write only
        early = started < self._last_rebalance + self._interval()  # woken by orphans inside the interval
        proposal, complete = self._propose_early() if early else (self._propose(watched=True), True)
        planned = time.monotonic()
        algorithm = self._algorithm()
        if early and not complete:
            with self._wake:  # the moves between live members wait for the interval
                self._dirty = True
        stored = Stored(layout.written, layout.generation, barrier.standing, barrier.unreadable)
        decision = plan.decide(proposal, stored, algorithm, store.epoch, early)
        if isinstance(decision, Idle):
            return
        layout.generation = decision.generation
        if isinstance(decision, Assign):
            if algorithm is Algorithm.GLOBAL_BARRIER:
                log.info("global barrier %d: nothing moves between live members; assigning without a stop",
                         decision.generation)
            store.write_assignments(decision, algorithm, self._encoded)
        else:
            proposal = self._run_round(decision, proposal)
        layout = store.layout  # a round that failed a write read the layout again
        changed = plan.moved(layout.owners, proposal.owners)
        layout.owners = dict(proposal.owners)
        if not early:  # a hand-out moved nothing between live members: the interval still runs
            self._last_rebalance = time.monotonic()
        log.info("rebalance %d: %d moved among %d members; planned in %.0f ms, written in %.0f ms",
                 decision.generation, changed, len(proposal.members), (planned - started) * 1000,
                 (time.monotonic() - planned) * 1000)
        store.write_state(RebalanceRecord(
            generation=decision.generation, epoch=store.epoch, coordinator=self._me.member_id,
            algorithm=self._algorithm().value, started_at=wire.iso_time(started_wall),
            completed_at=wire.iso_time(time.time()), duration_ms=int((time.monotonic() - started) * 1000),
            moved=changed, members=len(proposal.members),
            resources=len(proposal.resources),
        ))
        self._options.metrics.rebalanced(changed, time.monotonic() - started)

    def _propose(self, watched: bool = False) -> Proposal:
        """The plan for the members listed now, or (``watched``: a rebalance's start, woken by that watch or
        after it) as the watch on ``G/clients`` last listed them, without listing them again."""
        listed = self._store.watched_members() if watched else self._store.members()
        members = plan.live_members(listed)
        self._store.check_departed({m.name for m in members})  # answered while the plan is made
        live = {m.member_id for m in members}
        reserved, resources = self._reserved(live), self._resources()
        ahead, self._ahead = self._ahead, None
        if ahead is not None and not self._store.layout.owners and ahead.fits(listed, resources, reserved):
            self._encoded = ahead.encoded
            return ahead.proposal
        return plan.propose(listed, resources, self._store.layout.owners, reserved)

    def _propose_early(self) -> tuple[Proposal, bool]:
        """Inside the interval, woken by orphans: the full plan when it takes nothing from a live member
        (it is complete), else the hand-out of the orphans alone (not complete: the rest waits)."""
        full = self._propose(watched=True)
        layout = self._store.layout
        early = plan.propose_early(full, layout.written, layout.owners, self._reserved_now())
        self._unplaceable = early.unplaceable
        if not early.complete:
            log.info("%d orphans handed out at once; moves between live members wait for the interval",
                     early.handed_out)
        return early.proposal, early.complete

    def _resources(self) -> list[str]:
        """The group's valid resource names, sorted (the plan takes them as they are). Checked and
        sorted once per listing of ``G/resources``: a rebalance of an unchanged listing reuses them."""
        listed = self._store.resources()
        if listed != self._listed_resources:  # the same names: one pointer comparison each
            valid, invalid = plan.valid_resources(listed)
            if invalid:
                log.error("ignoring %d resource znodes with invalid names", invalid)
            self._listed_resources, self._valid_resources = list(listed), SortedNames(sorted(set(valid)))
        return self._valid_resources

    def _reserved(self, live: set[str]) -> list[str]:
        grace = self._grace()
        known = set(self._store.layout.owners.values())
        graceful = self._graceful_leavers(known - live) if grace > 0 else set()
        self._departed, reserved = departure.reserve(self._departed, known, live, graceful, time.monotonic(), grace)
        return reserved

    def _graceful_leavers(self, gone: set[str]) -> set[str]:
        """A member that left gracefully deleted its own assignment node: no grace for it."""
        still_there: set[str] = set()
        for node in self._store.layout.written:
            member = MemberNode.parse(node)
            if member is None or member.member_id not in gone:
                continue
            if self._store.assignment_exists(node):
                still_there.add(member.member_id)
        return gone - still_there

    # -- the Global Barrier round --------------------------------------------------------------

    def _run_round(self, decision: BarrierRound, proposal: Proposal) -> Proposal:
        """Carries out a Global Barrier round step by step; returns the proposal it wrote."""
        store, generation = self._store, decision.generation
        round_ = Round(generation)
        while (step := round_.step()) is not None:
            match step:
                case plan.GiveStop():
                    self._own_stop = (generation, store.epoch)
                    store.give_stop(generation)
                    round_.stopped()
                case plan.AwaitStops():
                    round_.waited(self._await_stop_markers(generation))
                case plan.WriteRound(reload=reload):
                    proposal = self._write_round(round_, proposal, reload)
                case plan.CloseRound():
                    store.close_round(generation)
                    self._own_stop = None
                    round_.closed()
        return proposal

    def _write_round(self, round_: Round, proposal: Proposal, reload: bool) -> Proposal:
        """One attempt at the round's assignments, written while every member is stopped. A member
        that left meanwhile (or joined) is planned for in this same round: it is not written for, its
        resources go to the others now, and it costs no further round. A write that fails (a member
        deleted its own assignment as it left) is re-planned and tried again."""
        if reload:
            self._store.reload()
            proposal = self._propose()
        elif plan.members_changed(proposal, plan.live_members(self._store.members())):
            proposal = self._propose()
        step = Assign(round_.generation, proposal.desired, force=True)
        try:
            self._store.write_assignments(step, Algorithm.GLOBAL_BARRIER)
        except FencedWriteError as exc:
            if not round_.write_failed():
                raise
            log.info("global barrier %d: writing the assignments failed (%s); planning again", round_.generation, exc)
            return proposal
        round_.written()
        return proposal

    def _await_stop_markers(self, generation: int) -> Waited:
        """Waits until every live member has stopped; a member that never answers is bounded by its
        session (it leaves the group) or by the barrier timeout (its claims still protect the
        resources it may be working on)."""
        deadline = time.monotonic() + self._options.barrier_timeout
        changed = threading.Event()
        while self._active and time.monotonic() < deadline:
            changed.clear()
            markers = self._store.stop_markers(generation, changed)
            if not ({m.name for m in self._store.members()} - markers):
                return Waited.ALL_STOPPED
            self._store.watch_members_once(changed)
            changed.wait(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
        if not self._active:
            return Waited.DEPOSED
        log.warning("global barrier %d: not every member stopped within %.1fs; going on",
                    generation, self._options.barrier_timeout)
        return Waited.TIMED_OUT
