"""The coordinator: proposes who owns what. It never grants ownership itself (claims do that).

Guarantees: every write it makes is fenced by the epoch it won and by its own member node (see
:mod:`writer` and :mod:`epoch`), so after another member has taken a later epoch, or once its member
node is gone, none of its writes lands; on any fencing failure, when ``G/epoch`` changes under it or
disappears, or after :data:`MAX_FAILED_REBALANCES` failed rebalances in a row (retried with growing
back-off), it stops at once and its member re-runs the election. Triggers (membership, resources,
config) arriving within the rebalance interval coalesce into one rebalance.

Parts: taking office (the epoch, :mod:`epoch`), the rebalance loop here, and two pure policies it
applies: which writes a rebalance makes (:mod:`write_plan`) and how long a departed member's
resources stay reserved (:mod:`departure`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import WatchedEvent, ZnodeStat

from rebalanser import baddata, departure, orphans, startup, wire, write_plan
from rebalanser.assignment import assign
from rebalanser.barrier import moves_nothing, takes_nothing_away
from rebalanser.config import Algorithm, GroupConfig
from rebalanser.containers import ensure_container
from rebalanser.epoch import take_epoch
from rebalanser.errors import CorruptDataError, NotCoordinatorError
from rebalanser.membership import Roster
from rebalanser.options import Options
from rebalanser.paths import GroupPaths, MemberNode, is_valid_resource_name
from rebalanser.storage import decode_assignment
from rebalanser.watches import ChildrenTrigger, DataTrigger
from rebalanser.wire import BarrierRecord, Phase, RebalanceRecord
from rebalanser.writer import FencedWriteError, FencedWriter

log = logging.getLogger(__name__)

MAX_FAILED_REBALANCES = 5  # in a row; then the coordinator resigns and the next term starts afresh
DROP_ATTEMPTS = 3  # fenced deletes of stale chunks, those already gone left out in between
ROUND_WRITE_ATTEMPTS = 3  # writes of one Global Barrier round's assignments, re-planned in between


def retry_delay(failures: int, first: float = 0.2, cap: float = 5.0) -> float:
    """Back-off before the next attempt after ``failures`` failed rebalances in a row."""
    return min(cap, first * 2.0 ** max(0, failures - 1))


def needs_rebalance(previous: GroupConfig | None, config: GroupConfig | None) -> bool:
    """Whether a change of ``G/config`` calls for a rebalance: the first settings read, or another
    algorithm. The interval (which the operator tunes, often) and the departure grace only change
    how long the coordinator waits; a rebalance for each would bump the generation for nothing."""
    if previous is None or config is None:
        return True
    return previous.algorithm is not config.algorithm


def last_rebalance_at(now: float, taken_ms: int, last_ms: int) -> float:
    """The monotonic instant (on the clock that read ``now``, right after the epoch was taken) of a
    rebalance ZooKeeper stamped ``last_ms``, given the stamp of our epoch ``taken_ms``. A stamp
    after our epoch's (another server's clock ahead) means unknown: 0.0, as if long ago."""
    ago = (taken_ms - last_ms) / 1000
    return now - ago if ago >= 0 else 0.0


@dataclass
class Layout:
    """What the coordinator believes is stored: member node -> resources written for it."""

    written: dict[str, tuple[str, ...]] = field(default_factory=dict)
    parts: dict[str, list[str]] = field(default_factory=dict)  # member node -> part children
    owners: dict[str, str] = field(default_factory=dict)  # resource -> member id (intent)
    generation: int = 0
    epoch: int = 0  # the highest epoch an assignment record carries


@dataclass(frozen=True)
class Proposal:
    """One plan of a rebalance: the live members and resources it saw, and who gets what."""

    members: list[MemberNode]
    resources: list[str]
    live: frozenset[str]  # every member node listed, duplicates of an id included
    owners: dict[str, str]  # resource -> member id
    desired: dict[str, tuple[str, ...]]  # member node -> resources


class Coordinator:
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
        self._zk, self._paths, self._options, self._me = zk, paths, options, me
        self._on_epoch, self._on_deposed = on_epoch, on_deposed
        self._on_bad_data = on_bad_data or (lambda error: baddata.report(error, options.metrics))
        self._wake = threading.Condition()
        self._dirty = True
        self._active = True
        self._epoch = 0
        self._epoch_floor = epoch_floor  # the highest epoch our member has seen
        self._fenced_off = ""  # why G/epoch no longer carries our epoch, once it does not
        self._failures = 0  # failed rebalances in a row
        self._not_before = 0.0  # back-off: no rebalance before this instant
        self._own_stop: tuple[int, int] | None = None  # (generation, epoch) of our stop order standing
        self._config: GroupConfig | None = None
        self._layout = Layout()
        self._departed: dict[str, float] = {}  # member id -> when first seen gone
        self._last_rebalance = 0.0
        self._barrier_unreadable = False  # G/barrier held bad data at the last rebalance's start
        self._in_office_since = 0.0  # monotonic; opens the start-up window (see startup)
        self._last_join = 0.0  # monotonic: the last change of G/clients seen
        self._triggers: list[ChildrenTrigger] = []
        self._resource_list: ChildrenTrigger | None = None  # the watch on G/resources: its last listing
        self._member_list: ChildrenTrigger | None = None  # the watch on G/clients: its last listing
        self._unplaceable: frozenset[str] = frozenset()  # orphans the last hand-out could not place
        self._roster = Roster(zk, paths, known=known_members)
        self._thread = threading.Thread(target=self._run, name="rebalanser-coordinator", daemon=True)

    @property
    def epoch(self) -> int:
        return self._epoch

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        with self._wake:
            self._active = False
            self._wake.notify_all()
        self._stop_triggers()
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
            log.info("took office with epoch %d in %.0f ms", self._epoch, (time.monotonic() - started) * 1000)
            while self._active:
                self._wait_for_work()
                if self._fenced_off:
                    raise NotCoordinatorError(self._fenced_off)
                if self._active:
                    self._rebalance_safely()
        except NotCoordinatorError as exc:
            self._resign(str(exc))
        except Exception as exc:
            log.exception("coordinator failed")
            with self._wake:  # not at once: the member takes office again right after
                self._wake.wait_for(lambda: not self._active, timeout=1.0)
            self._resign(f"coordinator failed: {exc}")

    def _resign(self, reason: str) -> None:
        was_active = self._active
        self._active = False
        self._stop_triggers()
        if was_active:
            self._on_deposed(reason)

    def _take_office(self) -> None:
        self._epoch = self._take_epoch(max(self._epoch_floor, self._recorded_epoch()))
        self._zk.sync(self._paths.root)
        self._load_layout()
        if self._layout.epoch >= self._epoch:
            # Assignments written under a later epoch than G/epoch shows: it was deleted and
            # re-created. Take one above them too, then read again what the fence now protects.
            self._epoch = self._take_epoch(self._layout.epoch)
            self._zk.sync(self._paths.root)
            self._load_layout()
        self._on_epoch(self._epoch)
        self._in_office_since = self._last_join = time.monotonic()
        self._last_rebalance = self._inherited_last_rebalance()
        self._watch_data(self._paths.epoch, self._on_epoch_node)
        for path, on_change in ((self._paths.clients, self._members_changed), (self._paths.resources, self.trigger)):
            trigger = ChildrenTrigger(self._zk, path, on_change)
            self._triggers.append(trigger)
            if path == self._paths.resources:
                self._resource_list = trigger
            else:
                self._member_list = trigger
            trigger.start()
        if not self._active:  # stopped meanwhile: stop() may have run before the triggers existed
            self._stop_triggers()
        self._watch_data(self._paths.config, self._on_config)
        self._watch_data(self._paths.barrier, self._on_barrier)

    def _watch_data(self, path: str, on_data: Callable[[bytes | None, ZnodeStat | None], bool]) -> None:
        """Never kazoo's ``DataWatch``: it can hold up every watch of the process (see :class:`DataTrigger`)."""
        DataTrigger(self._zk, path, on_data).start()

    def _stop_triggers(self) -> None:
        for trigger in list(self._triggers):
            trigger.stop()

    def _take_epoch(self, floor: int) -> int:
        return take_epoch(self._zk, self._paths.epoch, self._member_path, floor, lambda: self._active, self._reject)

    @property
    def _member_path(self) -> str:
        return self._paths.client(self._me.name)

    def _writer(self) -> FencedWriter:
        """A write fenced by our epoch and our member node."""
        return FencedWriter(self._zk, self._paths.epoch, self._epoch, member_path=self._member_path)

    def _inherited_last_rebalance(self) -> float:
        """When the group's last rebalance ended, on our monotonic clock (0.0: long ago, or unknown).
        The interval spaces the group's rebalances, not one coordinator's: during a rolling restart
        the coordinator's pod is replaced too, and a successor that rebalanced at once would undo
        the batching the interval is for. ZooKeeper stamps both the last ``G/state`` write and our
        epoch, so their difference needs no agreement between the members' clocks."""
        try:
            state, epoch = self._zk.exists(self._paths.state), self._zk.exists(self._paths.epoch)
        except KazooException:
            return 0.0
        if state is None or epoch is None:
            return 0.0
        return last_rebalance_at(time.monotonic(), epoch.mtime, state.mtime)

    def _recorded_epoch(self) -> int:
        """The highest epoch in ``G/state`` and ``G/barrier`` (bad data there is reported, not used)."""
        highest = 0
        records = ((self._paths.state, wire.decode_rebalance), (self._paths.barrier, wire.decode_barrier))
        for path, decode in records:
            try:
                highest = max(highest, decode(self._zk.get(path)[0], path=path).epoch or 0)
            except NoNodeError:
                continue
            except CorruptDataError as exc:
                self._reject(exc)
        return highest

    def _members_changed(self) -> None:
        self._last_join = time.monotonic()
        self.trigger()

    def _on_epoch_node(self, data: bytes | None, stat: ZnodeStat | None, event: WatchedEvent | None = None) -> bool:
        """G/epoch changed: once it no longer carries our epoch (another coordinator took a later one,
        or it was deleted), we resign without waiting for our next write to fail."""
        if self._active and (stat is None or stat.version != self._epoch):
            self._fenced_off = (f"{self._paths.epoch} is gone" if stat is None
                                else f"{self._paths.epoch} moved on to {stat.version}") + f" (ours: {self._epoch})"
            self.trigger()
        return self._active and not self._fenced_off

    def _load_layout(self) -> None:
        layout = Layout()
        try:
            children = self._zk.get_children(self._paths.assignment)
        except NoNodeError:
            ensure_container(self._zk, self._paths.assignment)
            children = []
        # Pipelined: every member's assignment and part list are requested at once, one round trip in
        # all rather than two per member (a successor coordinator of 200 members waited ~0.3 s here).
        pending = [
            (node, self._zk.get_async(path), self._zk.get_children_async(path))
            for node, path in ((n, self._paths.member_assignment(n)) for n in children)
        ]
        for node, data_reply, parts_reply in pending:
            self._load_member(node, data_reply, parts_reply, layout)
        layout.generation = max(layout.generation, self._highest_generation_seen())
        self._layout = layout

    def _highest_generation_seen(self) -> int:
        """Generations must never repeat, even after a rebalance that failed half-way."""
        highest = 0
        try:
            names = self._zk.get_children(self._paths.stopped)
        except NoNodeError:
            names = []
        for name in names:
            path = f"{self._paths.stopped}/{name}"
            try:
                generation = wire.decode_generation_dir(name, path=path)
                highest = max(highest, wire.continuable(generation, path=path, kind="stopped"))
            except CorruptDataError as exc:
                self._reject(exc)
        records = (
            (self._paths.barrier, "barrier", wire.decode_barrier), (self._paths.state, "state", wire.decode_rebalance)
        )
        for path, kind, decode in records:
            try:
                generation = decode(self._zk.get(path)[0], path=path).generation
                highest = max(highest, wire.continuable(generation, path=path, kind=kind))
            except NoNodeError:
                continue
            except CorruptDataError as exc:  # overwritten by the next rebalance
                self._reject(exc)
        return highest

    def _reject(self, error: CorruptDataError) -> None:
        self._on_bad_data(error)  # the member reports it

    def _load_member(self, node: str, data_reply: IAsyncResult, parts_reply: IAsyncResult, layout: Layout) -> None:
        member = MemberNode.parse(node)
        try:
            data, _ = data_reply.get()
            layout.parts[node] = list(parts_reply.get())
        except NoNodeError:
            return
        if not data:
            layout.written[node] = ()
            return
        try:
            value = decode_assignment(self._zk, self._paths, node, data)
            generation = wire.continuable(value.generation, path=self._paths.member_assignment(node), kind="assignment")
        except CorruptDataError as exc:  # rewritten (or deleted) by the next rebalance
            self._reject(exc)
            layout.written[node] = ("\0corrupt",)
            return
        layout.written[node] = value.resources
        layout.generation = max(layout.generation, generation)
        layout.epoch = max(layout.epoch, value.epoch)
        if member is not None:
            for resource in value.resources:
                layout.owners[resource] = member.member_id

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
            if record.phase is Phase.STOP and (record.generation, record.epoch) != self._own_stop:
                self.trigger()
        return self._active

    def _interval(self) -> float:
        return self._config.interval if self._config else self._options.min_interval

    def _algorithm(self) -> Algorithm:
        return self._config.algorithm if self._config else self._options.algorithm

    def _grace(self) -> float:
        return self._config.departure_grace_seconds if self._config else self._options.departure_grace

    def _wait_for_work(self) -> None:
        with self._wake:
            while self._active and not self._dirty:
                self._wake.wait(timeout=self._next_grace_deadline())
                if self._grace_expired():
                    self._dirty = True
            # Coalesce: whatever arrives before the interval has passed joins this rebalance; the
            # first assignment of a group with none also waits for membership to go quiet.
            # Orphans (resources no live member owns) do not wait for the interval: see orphans.
            while self._active and not self._fenced_off:
                unpaced = max(self._not_before, self._startup_window())
                start = max(self._last_rebalance + self._interval(), unpaced)
                now = time.monotonic()
                if start <= now or (unpaced <= now and self._orphans_waiting()):
                    break
                self._wake.wait(timeout=start - now)
            self._dirty = False

    def _orphans_waiting(self) -> bool:
        """Whether some resource has no live owner, from the watches' last listings (no I/O): a member
        whose node is gone and whose resources are not reserved for it, a member back under a new node
        (nothing is written for that node yet), or a resource nobody owns. Orphans the last hand-out
        could not place (no live member took them) do not count again."""
        if self._member_list is None or self._resource_list is None or not self._layout.owners:
            return False
        try:
            listed, resources = set(self._member_list.children or []), self._resource_list.children or []
        except LookupError:
            return False
        if not listed:
            return False
        listed_ids = {m.member_id for m in map(MemberNode.parse, listed) if m is not None}
        holding = {m.member_id for m in map(MemberNode.parse, self._layout.written.keys() & listed) if m is not None}
        now, grace = time.monotonic(), self._grace()
        reserved = {mid for mid, since in self._departed.items() if now < since + grace and mid not in listed_ids}
        valid = (r for r in resources if is_valid_resource_name(r))
        return orphans.any_orphaned(valid, self._layout.owners, holding | reserved, self._unplaceable)

    def _startup_window(self) -> float:
        """While nothing is assigned in the group: the end of the start-up window (see startup)."""
        if self._layout.owners:
            return 0.0
        options = self._options
        return startup.window_end(self._in_office_since, self._last_join, options.initial_quiet,
                                  options.initial_max_wait)

    def _next_grace_deadline(self) -> float | None:
        return departure.next_deadline(self._departed, self._grace(), time.monotonic())

    def _grace_expired(self) -> bool:
        return departure.expired(self._departed, self._grace(), time.monotonic())

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
                self._zk.sync(self._paths.root)
                self._load_layout()
                break
            except KazooException as exc:
                log.info("re-reading state failed (%r); retrying", exc)
                time.sleep(0.2)
        self.trigger()

    def _await_connection(self) -> None:
        while self._active and not self._zk.connected:
            time.sleep(0.05)

    def _rebalance(self) -> None:
        started_wall, started = time.time(), time.monotonic()
        standing = self._standing_stop()
        repair = self._barrier_unreadable  # rewritten in this rebalance, whatever else it does
        early = started < self._last_rebalance + self._interval()  # woken by orphans inside the interval
        proposal, complete = self._propose_early() if early else (self._propose(), True)
        planned = time.monotonic()
        algorithm = self._algorithm()
        idle = not standing and not repair and moves_nothing(self._layout.written, proposal.desired)
        if early and not complete:
            self._defer_balance()  # the moves between live members wait for the interval
        if early and idle:
            return  # nothing to hand out (reserved for a departed member, or no live member took it)
        if algorithm is Algorithm.GLOBAL_BARRIER and idle:
            return  # nothing moves: no reason to stop the world (e.g. a member left during the last round)
        self._layout.generation += 1
        generation = self._layout.generation
        if algorithm is Algorithm.GLOBAL_BARRIER and not standing and takes_nothing_away(
            self._layout.written, proposal.desired, proposal.live
        ):
            # Nothing changes hands between live members (only a departed member's or unheld resources
            # are handed out): nobody stops. The changed assignments say so, and members apply them at
            # once; G/barrier is left alone (it still ends the last round that stopped), unless unreadable.
            log.info("global barrier %d: nothing moves between live members; assigning without a stop", generation)
            closing = BarrierRecord(Phase.ASSIGNED, generation, self._epoch) if repair else None
            self._write_assignments(generation, proposal.desired, force=False, algorithm=algorithm, stop=False,
                                    barrier=closing)
        elif algorithm is Algorithm.GLOBAL_BARRIER:
            proposal = self._global_barrier(generation, proposal)
        else:
            # A stop order still standing (its coordinator died, or the group was switched from Global
            # Barrier meanwhile): every member's assignment is written again and the order ended, in one
            # go, or members that stopped for it and whose assignment does not change stay idle.
            closing = BarrierRecord(Phase.ASSIGNED, generation, self._epoch) if standing or repair else None
            self._write_assignments(generation, proposal.desired, force=standing, algorithm=algorithm, barrier=closing)
            if standing:
                self._drop_old_generations(generation)
        previous = self._layout.owners
        changed = sum(1 for r, m in proposal.owners.items() if r in previous and previous[r] != m)
        self._layout.owners = dict(proposal.owners)
        if not early:  # a hand-out moved nothing between live members: the interval still runs
            self._last_rebalance = time.monotonic()
        log.info("rebalance %d: %d moved among %d members; planned in %.0f ms, written in %.0f ms", generation, changed,
                 len(proposal.members), (planned - started) * 1000, (self._last_rebalance - planned) * 1000)
        self._write_state(started_wall, started, generation, changed, len(proposal.members), len(proposal.resources))
        self._options.metrics.rebalanced(changed, time.monotonic() - started)

    def _propose(self) -> Proposal:
        listed = self._roster()
        members = self._live_members(listed)
        resources = self._resources()
        by_id = {m.member_id: m for m in members}
        plan = assign(by_id, resources, self._layout.owners, self._reserved(set(by_id)))
        desired = {by_id[mid].name: tuple(rs) for mid, rs in plan.by_member(by_id).items() if mid in by_id}
        return Proposal(members, resources, frozenset(m.name for m in listed), dict(plan.owners), desired)

    def _propose_early(self) -> tuple[Proposal, bool]:
        """Inside the interval, woken by orphans: the full plan when it takes nothing from a live member
        (it is complete), else the hand-out of the orphans alone (not complete: the rest waits)."""
        full = self._propose()
        if takes_nothing_away(self._layout.written, full.desired, full.live):
            self._unplaceable = frozenset(r for r in full.resources if r not in full.owners)
            return full, True
        by_id = {m.member_id: m for m in full.members}
        reserved = [mid for mid, since in self._departed.items() if time.monotonic() < since + self._grace()]
        plan = orphans.hand_out(by_id, full.resources, self._layout.owners, reserved)
        self._unplaceable = frozenset(r for r in full.resources if r not in plan.owners)
        desired = {by_id[mid].name: tuple(rs) for mid, rs in plan.by_member(by_id).items() if mid in by_id}
        log.info("%d orphans handed out at once; moves between live members wait for the interval",
                 sum(1 for r, m in plan.owners.items() if self._layout.owners.get(r) != m))
        return Proposal(full.members, full.resources, full.live, dict(plan.owners), desired), False

    def _defer_balance(self) -> None:
        """The full rebalance still owed: the next wait ends once the interval allows it."""
        with self._wake:
            self._dirty = True

    def _standing_stop(self) -> bool:
        """Whether ``G/barrier`` holds a stop order (ours never stands between rebalances); the next
        generation is made to go above its generation. Sets ``_barrier_unreadable`` when it holds bad
        data: members ignore it, and this rebalance overwrites it with a record ending its generation."""
        self._barrier_unreadable = False
        try:
            record = wire.decode_barrier(self._zk.get(self._paths.barrier)[0], path=self._paths.barrier)
        except NoNodeError:
            return False
        except CorruptDataError as exc:
            self._reject(exc)
            self._barrier_unreadable = True
            return False
        if record.phase is not Phase.STOP:
            return False
        try:
            generation = wire.continuable(record.generation, path=self._paths.barrier, kind="barrier")
            self._layout.generation = max(self._layout.generation, generation)
        except CorruptDataError as exc:  # ended under our own next generation
            self._reject(exc)
        log.warning("a stop order of generation %d (epoch %d) is standing in %s: ending it",
                    record.generation, record.epoch, self._paths.barrier)
        return True

    def _live_members(self, listed: list[MemberNode] | None = None) -> list[MemberNode]:
        seen: dict[str, MemberNode] = {}
        for member in self._roster() if listed is None else listed:
            seen.setdefault(member.member_id, member)  # a duplicate id: only the oldest works
        return list(seen.values())

    def _resources(self) -> list[str]:
        """The resources as the watch on ``G/resources`` last listed them (a change since has triggered
        another rebalance), so a rebalance does not list thousands of names twice."""
        try:
            names = self._listed_resources()
        except NoNodeError:
            return []  # deleted: created again by the operator or an administrator (the trigger sees it)
        if names is None:
            return []
        valid = [n for n in names if is_valid_resource_name(n)]
        if len(valid) != len(names):
            log.error("ignoring %d resource znodes with invalid names", len(names) - len(valid))
        return valid

    def _listed_resources(self) -> list[str] | None:
        if self._resource_list is not None:
            try:
                return self._resource_list.children
            except LookupError:
                pass
        return list(self._zk.get_children(self._paths.resources))

    def _reserved(self, live: set[str]) -> list[str]:
        grace = self._grace()
        now = time.monotonic()
        known = set(self._layout.owners.values())
        graceful = self._graceful_leavers(known - live) if grace > 0 else set()
        self._departed, reserved = departure.reserve(self._departed, known, live, graceful, now, grace)
        return reserved

    def _graceful_leavers(self, gone: set[str]) -> set[str]:
        """A member that left gracefully deleted its own assignment node: no grace for it."""
        still_there: set[str] = set()
        for node in self._layout.written:
            member = MemberNode.parse(node)
            if member is None or member.member_id not in gone:
                continue
            if self._zk.exists(self._paths.member_assignment(node)) is not None:
                still_there.add(member.member_id)
        return gone - still_there

    def _write_assignments(
        self, generation: int, desired: dict[str, tuple[str, ...]], force: bool, algorithm: Algorithm,
        barrier: BarrierRecord | None = None, stop: bool = True,
    ) -> None:
        # A member that left gracefully deleted its own assignment: deleting it again would fail the
        # whole batch (NoNode) and cost a full re-read of the layout and a second rebalance.
        gone = write_plan.departed(self._layout.written, desired)
        checks = [(n, self._zk.exists_async(self._paths.member_assignment(n))) for n in gone]
        still_stored = {n for n, check in checks if check.get() is not None}
        plan = write_plan.plan(self._paths, self._layout.written, self._layout.parts, desired, generation,
                               self._epoch, algorithm, force, still_stored, stop)
        writer = self._writer()
        writer.ops.extend(plan.ops)
        self._layout.written, self._layout.parts = plan.written, plan.parts
        if barrier is not None:
            self._stage_barrier(writer, barrier.phase, barrier.generation)
        writer.commit()
        for node in plan.departed:
            self._layout.written.pop(node, None)
            self._layout.parts.pop(node, None)
        self._drop_parts(plan.stale_parts)

    def _drop_parts(self, stale: list[str]) -> None:
        """Deletes the chunks no header names any more, fenced like every other write (one ``multi``
        per batch of deletes): a deposed coordinator deletes nothing. Chunk names follow their
        content, so a successor may already have written a header that names one of them again. A
        batch that fails because a chunk is gone already is tried again with those still there."""
        paths = [f"{self._paths.assignment}/{rel}" for rel in stale]
        for _ in range(DROP_ATTEMPTS):
            if not paths:
                return
            writer = self._writer()
            for path in paths:
                writer.delete(path)
            try:
                writer.commit()
                return
            except FencedWriteError:
                checks = [(path, self._zk.exists_async(path)) for path in paths]
                paths = [path for path, check in checks if check.get() is not None]
        log.warning("%d stale assignment chunks could not be deleted: left behind", len(paths))

    def _global_barrier(self, generation: int, proposal: Proposal) -> Proposal:
        self._own_stop = (generation, self._epoch)
        writer = self._writer()
        writer.create(self._paths.stopped_generation(generation))
        self._stage_barrier(writer, Phase.STOP, generation)
        writer.commit()
        self._await_stop_markers(generation)
        proposal = self._write_round(generation, proposal)
        writer = self._writer()
        self._stage_barrier(writer, Phase.ASSIGNED, generation)
        writer.commit()
        self._own_stop = None
        self._drop_old_generations(generation)
        return proposal

    def _write_round(self, generation: int, proposal: Proposal) -> Proposal:
        """Writes the round's assignments while every member is stopped. A member that left meanwhile
        (or joined) is planned for in this same round: it is not written for, its resources go to the
        others now, and it costs no further round. A write that fails (a member deleted its own
        assignment as it left) is re-planned and tried again."""
        for attempt in range(1, ROUND_WRITE_ATTEMPTS + 1):
            if {m.name for m in self._live_members()} != {m.name for m in proposal.members}:
                proposal = self._propose()
            try:
                self._write_assignments(generation, proposal.desired, force=True, algorithm=Algorithm.GLOBAL_BARRIER)
                return proposal
            except FencedWriteError as exc:
                if attempt == ROUND_WRITE_ATTEMPTS:
                    raise
                log.info("global barrier %d: writing the assignments failed (%s); planning again", generation, exc)
                self._zk.sync(self._paths.root)
                self._load_layout()
                proposal = self._propose()
        raise AssertionError("unreachable")

    def _stage_barrier(self, writer: FencedWriter, phase: Phase, generation: int) -> None:
        data = wire.encode_barrier(BarrierRecord(phase, generation, self._epoch))
        if self._zk.exists(self._paths.barrier) is None:
            writer.create(self._paths.barrier, data)
        else:
            writer.set(self._paths.barrier, data)

    def _await_stop_markers(self, generation: int) -> None:
        """Waits until every live member has stopped; a member that never answers is bounded by its
        session (it leaves the group) or by the barrier timeout (its claims still protect the
        resources it may be working on)."""
        deadline = time.monotonic() + self._options.barrier_timeout
        changed = threading.Event()
        marker_dir = self._paths.stopped_generation(generation)
        while self._active and time.monotonic() < deadline:
            changed.clear()
            markers = set(self._zk.get_children(marker_dir, watch=lambda e: changed.set()))
            live = {m.name for m in self._roster()}
            if not (live - markers):
                return
            self._zk.get_children(self._paths.clients, watch=lambda e: changed.set())
            changed.wait(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
        if not self._active:
            # Stopped in the middle of the round: it is abandoned, never finished without the stop
            # markers. The stop order stands until the next coordinator ends it (a standing stop).
            raise NotCoordinatorError(f"stopped in the middle of global barrier round {generation}")
        log.warning("global barrier %d: not every member stopped within %.1fs; going on",
                    generation, self._options.barrier_timeout)

    def _drop_old_generations(self, generation: int) -> None:
        try:
            dirs = self._zk.get_children(self._paths.stopped)
        except NoNodeError:
            return
        for name in dirs:
            if name < f"g{generation:012d}":
                self._delete_tree(f"{self._paths.stopped}/{name}")

    def _delete_tree(self, path: str) -> None:
        try:
            for child in self._zk.get_children(path):
                self._zk.delete(f"{path}/{child}")
            self._zk.delete(path)
        except (NoNodeError, KazooException):
            pass

    def _write_state(
        self, wall: float, started: float, generation: int, moved: int, members: int, resources: int
    ) -> None:
        finished = time.time()
        state = RebalanceRecord(
            generation=generation, epoch=self._epoch, coordinator=self._me.member_id,
            algorithm=self._algorithm().value, started_at=wire.iso_time(wall), completed_at=wire.iso_time(finished),
            duration_ms=int((time.monotonic() - started) * 1000), moved=moved, members=members, resources=resources,
        )
        writer = self._writer()
        data = wire.encode_rebalance(state)
        if self._zk.exists(self._paths.state) is None:
            writer.create(self._paths.state, data)
        else:
            writer.set(self._paths.state, data)
        writer.commit()
