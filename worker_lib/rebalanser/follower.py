"""The I/O of following an assignment: reads the member's assignment node and ``G/barrier`` (arming
their watches) and carries out the effects of :mod:`follow`'s transitions, queued (never by
recursion). Runs on the member's thread only; the member supplies what it owns (``apply``, stopping
work for a barrier, the current epoch).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from rebalanser import follow as fl
from rebalanser import member_events as ev
from rebalanser import wire
from rebalanser.barrier import stop_binds
from rebalanser.errors import CorruptDataError
from rebalanser.paths import GroupPaths, MemberNode
from rebalanser.storage import ChunkCache, decode_assignment
from rebalanser.wire import BarrierRecord

log = logging.getLogger("rebalanser.client")  # the member's log, as before this was split out


@dataclass(frozen=True)
class Hooks:
    """What the follower asks of its member (all called on the member's thread)."""

    zk: Callable[[], KazooClient]
    me: Callable[[], MemberNode | None]
    post: Callable[[ev.Event], None]
    apply: Callable[[set[str]], None]  # own exactly these resources now
    stop_work: Callable[[], None]  # stop all work for a barrier (the claims stay)
    read_epoch: Callable[[], int]
    bad_data: Callable[[CorruptDataError], None]


class Follower:
    def __init__(self, paths: GroupPaths, hooks: Hooks) -> None:
        self.paths = paths
        self._hooks = hooks
        self.state = fl.NEW  # replaced whole by each transition
        self.moved = threading.Event()  # our assignment changed since we last read it (set by its watch)
        self._chunks: ChunkCache = {}  # our assignment's chunks read so far (storage.decode_assignment)
        self._watchers: dict[ev.Event, Callable[[WatchedEvent], None]] = {}  # see watch
        self._todo: deque[fl.Effect] = deque()
        self._driving = False

    def new_node(self) -> None:
        """A new member node: no stop answered yet (generations may even restart)."""
        self.state = fl.NEW

    def watch(self, event: ev.Event) -> Callable[[WatchedEvent], None]:
        """The one watcher that posts ``event``. kazoo keeps a node's watchers in a set until the watch
        fires: a fresh callable per read would add one more each time the node is read unchanged (say
        an assignment re-read at every barrier round), and one change would then post them all."""
        watcher = self._watchers.get(event)
        if watcher is None:
            watcher = self._watchers[event] = lambda _watched: self._hooks.post(event)
        return watcher

    def _assignment_watch(self, node: str) -> Callable[[WatchedEvent], None]:
        """Like :meth:`watch`, and it also flags a change at once, so a claim round for the assignment
        it replaces stops between batches (the member's claim round checks :attr:`moved`)."""
        event = ev.AssignmentChanged(node)
        watcher = self._watchers.get(event)
        if watcher is None:
            def fired(watched: WatchedEvent) -> None:
                # NONE: the connection dropped (resync re-reads); another node: an earlier member node's
                me = self._hooks.me()
                if watched.type != EventType.NONE and me is not None and me.name == node:
                    self.moved.set()
                self._hooks.post(event)

            watcher = self._watchers[event] = fired
        return watcher

    def read_assignment(self, node: str | None) -> None:
        """Reads our assignment node (``node``: only if it is ours) and follows it."""
        me, zk = self._hooks.me(), self._hooks.zk()
        if me is None or (node is not None and node != me.name):
            return
        path = self.paths.member_assignment(me.name)
        self.moved.clear()
        try:
            data, _ = zk.get(path, watch=self._assignment_watch(me.name))
        except NoNodeError:
            if zk.exists(path, watch=self._assignment_watch(me.name)) is not None:
                self._hooks.post(ev.AssignmentChanged(me.name))
            return
        if not data:
            return
        try:
            assignment = decode_assignment(zk, self.paths, me.name, data, self._chunks)
        except CorruptDataError as exc:  # our previous assignment stays
            self._hooks.bad_data(exc)
            return
        self._step(fl.assignment_read(self.state, assignment, me.name))

    def read_barrier(self) -> None:
        """Reads ``G/barrier`` and follows it."""
        zk = self._hooks.zk()
        try:
            data, _ = zk.get(self.paths.barrier, watch=self.watch(ev.BarrierChanged()))
        except NoNodeError:
            # Created between the two reads: the exists watch only fires on the *next* change, so
            # read again now, or a member misses the first stop and stalls the barrier until its timeout.
            if zk.exists(self.paths.barrier, watch=self.watch(ev.BarrierChanged())) is not None:
                self._hooks.post(ev.BarrierChanged())
            return
        try:
            record = wire.decode_barrier(data, path=self.paths.barrier)
        except CorruptDataError as exc:  # ignored; a Global Barrier coordinator overwrites it
            self._hooks.bad_data(exc)
            return
        self._step(fl.barrier_read(self.state, record))

    def _step(self, step: fl.Step) -> None:
        """Takes a transition's new state; its effects are queued (ahead of older ones) and run in order."""
        self.state, effects = step
        self._todo.extendleft(reversed(effects))
        if self._driving:
            return
        self._driving = True
        try:
            while self._todo:
                self._execute(self._todo.popleft())
        finally:
            self._driving = False
            self._todo.clear()

    def _execute(self, effect: fl.Effect) -> None:
        match effect:
            case fl.Apply(resources):
                self._hooks.apply(set(resources))
            case fl.StopForBarrier(record):
                if self._binding(record):
                    self._stop_for_barrier(record.generation)
            case fl.ReadAssignment():
                self.read_assignment(None)
            case fl.Ignored(reason):
                log.warning("ignoring %s", reason)

    def _binding(self, record: BarrierRecord) -> bool:
        """A stop order binds only when the current coordinator gave it (see :func:`stop_binds`). One
        left by a coordinator that has since been replaced, or written by hand, is ignored (the
        coordinator in office ends it)."""
        current = self._hooks.read_epoch()
        if not stop_binds(record, current):
            log.warning("ignoring the stop order of barrier generation %d: given under epoch %d, the "
                        "current epoch is %d", record.generation, record.epoch, current)
            return False
        return True

    def _stop_for_barrier(self, generation: int) -> None:
        me = self._hooks.me()
        assert me is not None
        # Work stops everywhere; the claims stay until the new assignment says which ones moved, so a
        # rebalance writes in proportion to the moved resources (and a kept resource keeps its token).
        self._hooks.stop_work()
        try:
            self._hooks.zk().create(self.paths.stop_marker(generation, me.name), b"", ephemeral=True)
        except NodeExistsError:
            pass
        except NoNodeError:
            log.info("barrier generation %d already finished", generation)
        self.state = fl.barrier_stopped(self.state, generation)
