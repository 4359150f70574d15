"""The I/O of following an assignment: reads the member's assignment node and ``G/barrier`` through the
member's storage (:mod:`rebalanser.member_store`), arming their watches, and returns what
:mod:`follow`'s transitions ask for as effects, which the member's one effect queue runs
(:mod:`rebalanser.effect_queue`): the follower never calls back into its member. Runs on the member's
thread only; its watches post events to the member's event queue.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.protocol.states import EventType, WatchedEvent

from rebalanser import follow as fl
from rebalanser import member_events as ev
from rebalanser.barrier import stop_binds
from rebalanser.errors import CorruptDataError
from rebalanser.member_store import MemberStore
from rebalanser.paths import MemberNode
from rebalanser.wire import BarrierRecord

log = logging.getLogger("rebalanser.client")  # the member's log, as before this was split out


# -- the follower's own effects (beside follow's) ------------------------------------------------


@dataclass(frozen=True)
class Post:
    """Post ``event`` to the member's event queue (a node appeared between its read and its watch)."""

    event: ev.Event


@dataclass(frozen=True)
class ReportBadData:
    """Report a record that could not be decoded (the member's ``on_error``; ignored otherwise)."""

    error: CorruptDataError


@dataclass(frozen=True)
class StopWork:
    """Stop all work for a barrier; the claims stay (``resource_state.stop_all``, nothing after)."""


@dataclass(frozen=True)
class MarkStopped:
    """After :class:`StopWork`: create our stop marker of ``generation`` (:meth:`Follower.mark_stopped`)."""

    generation: int


Effect = fl.Effect | Post | ReportBadData | StopWork | MarkStopped


class Follower:
    """Follows the assignment of the member node ``me()`` names; ``post`` is the member's event queue."""

    def __init__(self, store: Callable[[], MemberStore], post: Callable[[ev.Event], None],
                 me: Callable[[], MemberNode | None]) -> None:
        self._store, self._post, self._me = store, post, me
        self.state = fl.NEW  # replaced whole by each transition
        self.moved = threading.Event()  # our assignment changed since we last read it (set by its watch)
        self._watchers: dict[ev.Event, Callable[[WatchedEvent], None]] = {}  # see watch

    def new_node(self) -> None:
        """A new member node: no stop answered yet (generations may even restart)."""
        self.state = fl.NEW

    def watch(self, event: ev.Event) -> Callable[[WatchedEvent], None]:
        """The one watcher that posts ``event``. kazoo keeps a node's watchers in a set until the watch
        fires: a fresh callable per read would add one more each time the node is read unchanged (say
        an assignment re-read at every barrier round), and one change would then post them all."""
        watcher = self._watchers.get(event)
        if watcher is None:
            watcher = self._watchers[event] = lambda _watched: self._post(event)
        return watcher

    def _assignment_watch(self, node: str) -> Callable[[WatchedEvent], None]:
        """Like :meth:`watch`, and it also flags a change at once, so a claim round for the assignment
        it replaces stops between batches (the member's claim round checks :attr:`moved`)."""
        event = ev.AssignmentChanged(node)
        watcher = self._watchers.get(event)
        if watcher is None:
            def fired(watched: WatchedEvent) -> None:
                # NONE: the connection dropped (resync re-reads); another node: an earlier member node's
                me = self._me()
                if watched.type != EventType.NONE and me is not None and me.name == node:
                    self.moved.set()
                self._post(event)

            watcher = self._watchers[event] = fired
        return watcher

    def read_assignment(self, node: str | None) -> list[Effect]:
        """Reads our assignment node (``node``: only if it is ours): what following it takes."""
        me = self._me()
        if me is None or (node is not None and node != me.name):
            return []
        self.moved.clear()
        try:
            read = self._store().read_assignment(me.name, self._assignment_watch(me.name))
        except CorruptDataError as exc:  # our previous assignment stays
            return [ReportBadData(exc)]
        if read.value is None:
            return [Post(ev.AssignmentChanged(me.name))] if read.appeared else []
        return self._step(fl.assignment_read(self.state, read.value, me.name))

    def read_barrier(self) -> list[Effect]:
        """Reads ``G/barrier``: what following it takes. A barrier created between the read and its
        watch is read again (the watch fires only at the *next* change: a member would miss the first
        stop and stall the barrier until its timeout)."""
        try:
            read = self._store().read_barrier(self.watch(ev.BarrierChanged()))
        except CorruptDataError as exc:  # ignored; a Global Barrier coordinator overwrites it
            return [ReportBadData(exc)]
        if read.value is None:
            return [Post(ev.BarrierChanged())] if read.appeared else []
        return self._step(fl.barrier_read(self.state, read.value))

    def _step(self, step: fl.Step) -> list[Effect]:
        self.state, effects = step
        return list(effects)

    def barrier_stop(self, record: BarrierRecord) -> list[Effect]:
        """A stop order: stop all work, then mark it, if the order binds (see :func:`stop_binds`). One
        left by a coordinator that has since been replaced, or written by hand, is ignored (the
        coordinator in office ends it)."""
        current = self._store().read_epoch()
        if not stop_binds(record, current):
            log.warning("ignoring the stop order of barrier generation %d: given under epoch %d, the "
                        "current epoch is %d", record.generation, record.epoch, current)
            return []
        # Work stops everywhere; the claims stay until the new assignment says which ones moved, so a
        # rebalance writes in proportion to the moved resources (and a kept resource keeps its token).
        return [StopWork(), MarkStopped(record.generation)]

    def mark_stopped(self, generation: int) -> None:
        """Our stop marker of ``generation`` (the round may be over already)."""
        me = self._me()
        if me is None:
            return
        if not self._store().create_stop_marker(generation, me.name):
            log.info("barrier generation %d already finished", generation)
        self.state = fl.barrier_stopped(self.state, generation)
