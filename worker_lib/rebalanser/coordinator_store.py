"""The coordinator's store: every read and write of the group's layout the coordinator makes.

It keeps :attr:`CoordinatorStore.layout`, what the coordinator believes is stored (read when it takes
office and after a failed write, updated by its own writes). Every write is fenced by the epoch the
coordinator took and by its own member node (:class:`~rebalanser.writer.FencedWriter`): the
assignments, ``G/barrier``, ``G/state``, a round's stop-marker directory and the deletes of stale
assignment chunks. After another member has taken a later epoch, or once our member node is gone,
none of them lands (NotCoordinatorError). The one exception is dropping the stop markers of
generations older than the one just ended: they are unfenced deletes of finished rounds' markers.

Bad data read here is passed to ``reject`` (the member reports it) and otherwise ignored or
overwritten by the next rebalance. Deciding what to write is :mod:`coordinator_plan`'s part.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.interfaces import IAsyncResult
from kazoo.protocol.states import ZnodeStat

from rebalanser import wire, write_plan
from rebalanser.config import Algorithm
from rebalanser.containers import ensure_container
from rebalanser.coordinator_plan import Assign, Layout
from rebalanser.epoch import take_epoch
from rebalanser.errors import CorruptDataError
from rebalanser.membership import Roster
from rebalanser.paths import GroupPaths, MemberNode
from rebalanser.storage import decode_assignment
from rebalanser.watches import ChildrenTrigger, DataTrigger
from rebalanser.wire import BarrierRecord, Blob, MemberAssignment, Phase, RebalanceRecord
from rebalanser.writer import FencedWriteError, FencedWriter

log = logging.getLogger(__name__)

DROP_ATTEMPTS = 3  # fenced deletes of stale chunks, those already gone left out in between

DataCallback = Callable[[bytes | None, ZnodeStat | None], bool]


@dataclass(frozen=True)
class BarrierRead:
    """``G/barrier`` as a rebalance finds it: a stop order standing (``standing``; the layout's
    generation was raised to its generation) or bad data (``unreadable``)."""

    standing: bool = False
    unreadable: bool = False


class CoordinatorStore:
    def __init__(
        self, zk: KazooClient, paths: GroupPaths, member: MemberNode, reject: Callable[[CorruptDataError], None],
        known_members: Mapping[str, int] | None = None,
    ) -> None:
        self._zk, self._paths, self._reject = zk, paths, reject
        self._member_path = paths.client(member.name)
        self.epoch = 0
        self.layout = Layout()
        self._roster = Roster(zk, paths, known=known_members)
        self._resource_list: ChildrenTrigger | None = None
        self._member_list: ChildrenTrigger | None = None
        # Every trigger of this term (stopped with it); none starts once the term has ended (unwatched)
        self._triggers: list[ChildrenTrigger | DataTrigger] = []
        self._triggers_lock = threading.Lock()
        self._unwatched = False
        # member node -> an exists request for its assignment node, sent ahead of the write that needs it
        self._departed_checks: dict[str, IAsyncResult] = {}

    # -- taking office ---------------------------------------------------------------------------

    def take_epoch(self, floor: int, active: Callable[[], bool]) -> int:
        """Takes an epoch above ``floor`` (see :mod:`epoch`); every later write is fenced by it."""
        self.epoch = take_epoch(self._zk, self._paths.epoch, self._member_path, floor, active, self._reject)
        return self.epoch

    def recorded_epoch(self) -> int:
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

    def stamps(self) -> tuple[int, int] | None:
        """ZooKeeper's stamps (ms) of our epoch and of the last ``G/state`` write; None if unknown."""
        try:
            state, epoch = self._zk.exists(self._paths.state), self._zk.exists(self._paths.epoch)
        except KazooException:
            return None
        if state is None or epoch is None:
            return None
        return int(epoch.mtime), int(state.mtime)

    def watch(
        self, on_epoch: DataCallback, on_members: Callable[[], None], on_resources: Callable[[], None]
    ) -> None:
        """Watches ``G/epoch``, then ``G/clients`` and ``G/resources`` (their listings are kept)."""
        self._start(DataTrigger(self._zk, self._paths.epoch, on_epoch))
        self._member_list = ChildrenTrigger(self._zk, self._paths.clients, on_members)
        self._resource_list = ChildrenTrigger(self._zk, self._paths.resources, on_resources)
        self._start(self._member_list)
        self._start(self._resource_list)

    def watch_settings(self, on_config: DataCallback, on_barrier: DataCallback) -> None:
        """Watches ``G/config`` and ``G/barrier`` (never with kazoo's ``DataWatch``, which can hold up every
        watch of the process: see :class:`~rebalanser.watches.DataTrigger`)."""
        self._start(DataTrigger(self._zk, self._paths.config, on_config))
        self._start(DataTrigger(self._zk, self._paths.barrier, on_barrier))

    def _start(self, trigger: ChildrenTrigger | DataTrigger) -> None:
        """Starts ``trigger`` for this term, unless the term has ended (then it never starts)."""
        with self._triggers_lock:
            if self._unwatched:
                return
            self._triggers.append(trigger)
        trigger.start()

    def unwatch(self) -> None:
        """Ends the term's watching: every trigger it started stops (the data triggers too: each one
        left running kept a connection listener and re-read its node at every reconnection, one set
        more per term), and none starts after this."""
        with self._triggers_lock:
            self._unwatched = True
            triggers, self._triggers = self._triggers, []
        for trigger in triggers:
            trigger.stop()

    @property
    def connected(self) -> bool:
        return bool(self._zk.connected)

    # -- reading the layout -----------------------------------------------------------------------

    def reload(self) -> Layout:
        """Reads what the leader has committed (``sync``), then the whole layout."""
        self._zk.sync(self._paths.root)
        return self.load()

    def load(self) -> Layout:
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
        self.layout = layout
        return layout

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

    def read_barrier(self) -> BarrierRead:
        """``G/barrier`` at a rebalance's start. A stop order standing raises the layout's generation
        to its own, so the next generation goes above it."""
        try:
            record = wire.decode_barrier(self._zk.get(self._paths.barrier)[0], path=self._paths.barrier)
        except NoNodeError:
            return BarrierRead()
        except CorruptDataError as exc:
            self._reject(exc)
            return BarrierRead(unreadable=True)
        if record.phase is not Phase.STOP:
            return BarrierRead()
        try:
            generation = wire.continuable(record.generation, path=self._paths.barrier, kind="barrier")
            self.layout.generation = max(self.layout.generation, generation)
        except CorruptDataError as exc:  # ended under our own next generation
            self._reject(exc)
        log.warning("a stop order of generation %d (epoch %d) is standing in %s: ending it",
                    record.generation, record.epoch, self._paths.barrier)
        return BarrierRead(standing=True)

    # -- reading the group ------------------------------------------------------------------------

    def members(self) -> list[MemberNode]:
        """The member nodes listed now, in election order (duplicates of an id included)."""
        return self._roster()

    def watched_members(self) -> list[MemberNode]:
        """:meth:`members` as the watch on ``G/clients`` last listed them (a change since has triggered
        another rebalance), so a rebalance woken by that watch does not list them again; listed now
        before the watch's first listing."""
        try:
            names = self._listed(self._member_list, self._paths.clients)
        except NoNodeError:
            return []
        return self._roster(names) if names is not None else []

    def resources(self) -> list[str]:
        """The resources as the watch on ``G/resources`` last listed them (a change since has triggered
        another rebalance), so a rebalance does not list thousands of names twice."""
        try:
            names = self._listed(self._resource_list, self._paths.resources)
        except NoNodeError:
            return []  # deleted: created again by the operator or an administrator (the trigger sees it)
        return names or []

    @staticmethod
    def _cached(trigger: ChildrenTrigger | None) -> list[str] | None:
        if trigger is None:
            raise LookupError("not watched")
        return trigger.children

    def _listed(self, trigger: ChildrenTrigger | None, path: str) -> list[str] | None:
        try:
            return self._cached(trigger)
        except LookupError:
            return list(self._zk.get_children(path))

    def listings(self) -> tuple[list[str], list[str]] | None:
        """The watches' last listings of ``G/clients`` and ``G/resources`` (no I/O); None if unknown."""
        try:
            return list(self._cached(self._member_list) or []), list(self._cached(self._resource_list) or [])
        except LookupError:
            return None

    def check_departed(self, live: Collection[str]) -> None:
        """Asks, without waiting, whether the assignment node of each member with one written that is not in
        ``live`` (member node names) is still there: a member that left gracefully deleted its own. The
        answers come back while the plan is made; :meth:`write_assignments` uses them instead of asking
        then (one round trip fewer after a leave). Every call replaces the checks of the one before."""
        self._departed_checks = {n: self._zk.exists_async(self._paths.member_assignment(n))
                                 for n in self.layout.written if n not in live}

    def assignment_exists(self, node: str) -> bool:
        """Whether member node ``node``'s assignment node is there (the answer to :meth:`check_departed`'s
        request when it sent one)."""
        return self._assignment_check(node).get() is not None

    def _assignment_check(self, node: str) -> IAsyncResult:
        """The exists request for ``node``'s assignment node: :meth:`check_departed`'s, else one sent now."""
        check = self._departed_checks.get(node)
        return check if check is not None else self._zk.exists_async(self._paths.member_assignment(node))

    def stop_markers(self, generation: int, changed: threading.Event) -> set[str]:
        """The round's stop markers, with a watch that sets ``changed``."""
        return set(self._zk.get_children(self._paths.stopped_generation(generation), watch=lambda e: changed.set()))

    def watch_members_once(self, changed: threading.Event) -> None:
        """A one-time watch on ``G/clients`` that sets ``changed``."""
        self._zk.get_children(self._paths.clients, watch=lambda e: changed.set())

    # -- fenced writes ----------------------------------------------------------------------------

    def _writer(self) -> FencedWriter:
        """A write fenced by our epoch and our member node."""
        return FencedWriter(self._zk, self._paths.epoch, self.epoch, member_path=self._member_path)

    def write_assignments(self, step: Assign, algorithm: Algorithm,
                          encoded: Mapping[MemberAssignment, Blob] | None = None) -> None:
        """The assignments of ``step`` (and its closing ``G/barrier`` record) in one fenced write, then
        the chunks no header names any more; then, if the step says so, older stop markers.
        ``encoded``: assignments encoded beforehand (see :func:`write_plan.plan`)."""
        layout = self.layout
        # A member that left gracefully deleted its own assignment: deleting it again would fail the
        # whole batch (NoNode) and cost a full re-read of the layout and a second rebalance.
        gone = write_plan.departed(layout.written, step.desired)
        checks = [(n, self._assignment_check(n)) for n in gone]
        self._departed_checks = {}  # used once: the next rebalance asks again
        still_stored = {n for n, check in checks if check.get() is not None}
        plan = write_plan.plan(self._paths, layout.written, layout.parts, step.desired, step.generation,
                               self.epoch, algorithm, step.force, still_stored, step.stop, encoded)
        writer = self._writer()
        writer.ops.extend(plan.ops)
        layout.written, layout.parts = plan.written, plan.parts
        if step.closing is not None:
            self._stage_barrier(writer, step.closing.phase, step.closing.generation)
        writer.commit()
        for node in plan.departed:
            layout.written.pop(node, None)
            layout.parts.pop(node, None)
        self.drop_chunks(plan.stale_parts)
        if step.drop_old:
            self.drop_old_generations(step.generation)

    def drop_chunks(self, stale: list[str]) -> None:
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

    def give_stop(self, generation: int) -> None:
        """A round's stop order: its stop-marker directory and ``G/barrier`` STOP, in one fenced write."""
        writer = self._writer()
        writer.create(self._paths.stopped_generation(generation))
        self._stage_barrier(writer, Phase.STOP, generation)
        writer.commit()

    def close_round(self, generation: int) -> None:
        """``G/barrier`` ASSIGNED (fenced), then the stop markers of older generations go."""
        writer = self._writer()
        self._stage_barrier(writer, Phase.ASSIGNED, generation)
        writer.commit()
        self.drop_old_generations(generation)

    def _stage_barrier(self, writer: FencedWriter, phase: Phase, generation: int) -> None:
        data = wire.encode_barrier(BarrierRecord(phase, generation, self.epoch))
        if self._zk.exists(self._paths.barrier) is None:
            writer.create(self._paths.barrier, data)
        else:
            writer.set(self._paths.barrier, data)

    def drop_old_generations(self, generation: int) -> None:
        """The stop markers of the rounds before ``generation`` (unfenced: finished rounds' markers)."""
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

    def write_state(self, state: RebalanceRecord) -> None:
        """``G/state``: the last rebalance's record (fenced)."""
        writer = self._writer()
        data = wire.encode_rebalance(state)
        if self._zk.exists(self._paths.state) is None:
            writer.create(self._paths.state, data)
        else:
            writer.set(self._paths.state, data)
        writer.commit()
