"""The member's thread: events in, transitions of the member's three machines, effects out.

Everything a member reacts to arrives as one typed event (:mod:`member_events`) on one queue, handled
in order by one thread (:meth:`MemberLoop.run`). Each event is taken to a transition of one of three
pure machines: joining, the session and standby (:mod:`member_state`); which assignment applies now
(:mod:`follow`, read by :mod:`follower`); per-resource work (:mod:`resource_state`). Their effects go
into one queue (:mod:`effect_queue`) that this loop drains, carrying out each effect's I/O (through the
member's storage, :mod:`member_store`, the claim book, :mod:`claims`, and the callback runner,
:mod:`callbacks`). :class:`rebalanser.client.Client` is the public face: it owns the thread.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionLoss,
    KazooException,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, KazooState, WatchedEvent

from rebalanser import follow as fl
from rebalanser import follower as fw
from rebalanser import member_events as ev
from rebalanser import member_state as ms
from rebalanser import resource_state as rs
from rebalanser import resource_work as rw
from rebalanser import wire
from rebalanser.callbacks import CallbackRunner
from rebalanser.claims import ClaimBook
from rebalanser.coordinator import Coordinator
from rebalanser.effect_queue import EffectQueue
from rebalanser.errors import (
    CorruptDataError,
    DuplicateMemberError,
    GroupDeletedError,
    GroupNotFoundError,
    RebalanserError,
    StopTimeoutError,
)
from rebalanser.errors import SessionExpiredError as ExpiredError
from rebalanser.follower import Follower
from rebalanser.handler import Handler
from rebalanser.inbox import Inbox
from rebalanser.instance import begin_instance
from rebalanser.joining import Joining
from rebalanser.lease import Lease
from rebalanser.member_connection import MemberConnection, Opened
from rebalanser.member_state import ENDING
from rebalanser.member_state import State as State  # re-exported: rebalanser.State
from rebalanser.member_store import KazooMemberStore
from rebalanser.membership import Roster, predecessor
from rebalanser.options import ExpiryPolicy, Options
from rebalanser.paths import GroupPaths, MemberNode
from rebalanser.reports import Reports
from rebalanser.resource_state import After
from rebalanser.seat import Seat
from rebalanser.session import handshakes, session_id, session_timeout

log = logging.getLogger("rebalanser.client")  # the member's log, as before the split


@dataclass(frozen=True)
class SyncRead:
    """One read of :class:`member_state.SyncWithGroup` for member node ``node`` (skipped once it is no
    longer ours): ``what`` is ``own node``, ``group root``, ``election``, ``barrier`` or ``assignment``."""

    what: str
    node: MemberNode


@dataclass(frozen=True)
class Synced:
    """:class:`member_state.SyncWithGroup` for ``node`` is done: the join is complete."""

    node: MemberNode


SYNC_READS = ("own node", "group root", "election", "barrier", "assignment")

Effect = ms.Effect | rw.Effect | fw.Effect | SyncRead | Synced
"""The union of the member's, the follower's and the resource machine's effects: one queue."""


class MemberLoop:
    """One member's state and its thread's work (the thread is the :class:`~rebalanser.client.Client`'s)."""

    def __init__(self, options: Options, handler: Handler, paths: GroupPaths) -> None:
        self.options, self.handler, self.paths = options, handler, paths
        self._inbox = Inbox()  # the member's events, handled in order by its thread
        self._reports = Reports(handler, options.metrics)
        self._report, self._notify, self._bad_data = self._reports.error, self._reports.notify, self._reports.bad_data
        self._began = False  # the session reported to the loop (suspensions are reported from then on)
        self._suspension_told: deque[int] = deque()  # suspended reported by the listener, not yet by the loop
        self._state_listeners: list[Callable[[State], object]] = []
        self._state_now = State.NOT_STARTED
        self._lease = Lease(options.lease_fraction)
        self._state = State.NOT_STARTED
        self._member = ms.start(options.create_group)  # joining, session, standby (replaced whole by each step)
        self._effects: EffectQueue[Effect] = EffectQueue()  # every machine's effects still to run (see _drive)
        self._failure: Exception | None = None
        self._root_watch = lambda _event: self._post(ev.RootChanged())
        self._follower = Follower(lambda: self.store, self._post, lambda: self._me)  # which assignment applies now
        self._seat = Seat(self.paths, options, lambda: self.zk, self._post,
                          lambda role, epoch: self._notify("on_role", role, epoch))
        self._conn = MemberConnection(options, paths, self._lease)  # the client and what hangs off it
        self._callbacks = CallbackRunner("rebalanser-callbacks")  # on_assigned / on_revoked, one at a time
        self._closed = False
        self._closed_quietly = False
        self._done = threading.Event()
        self._settled = threading.Event()  # start() may return: joined, or ended
        self._work = rw.ResourceWork(  # the per-resource table and its effects' I/O
            self.handler, options.metrics, self._lease, self._callbacks, (options.start_timeout, options.stop_timeout),
            rw.Context(book=lambda: self._book, prober=lambda: self._conn.prober,
                       session_timeout=lambda: session_timeout(self.zk), seat=self._seat_now,
                       moved=self._follower.moved, post=self._post, report=self._report))
        self._joining = Joining(self.paths, options.member_id, lambda: self.zk, lambda: self.store,
                                lambda: self._members, self._post, self._callbacks, self._work,
                                lambda: self._follower.state.stopped_for,
                                lambda: session_timeout(self.zk))  # the I/O of joining and standby

    # -- what the client reads (any thread) ---------------------------------------------------

    @property
    def state(self) -> State:
        return self._state

    def watch_state(self, listener: Callable[[State], object]) -> None:
        """Calls ``listener(state)`` after every change of :attr:`state`, on the thread that made it (the
        member's, or the caller's of :meth:`start`): keep it short and non-blocking."""
        self._state_listeners.append(listener)

    @property
    def _state(self) -> State:
        return self._state_now

    @_state.setter
    def _state(self, state: State) -> None:
        if state is self._state_now:
            return
        self._state_now = state
        for listener in self._state_listeners:
            try:
                listener(state)
            except Exception:
                log.exception("state listener raised")

    @property
    def role(self) -> str:
        return self._seat.role

    @property
    def epoch(self) -> int:
        return self._seat.epoch

    @property
    def member_node(self) -> str | None:
        return self._me.name if self._me else None

    @property
    def has_joined(self) -> bool:
        """Whether this member's node was ever created (it stays True after the member left)."""
        return self._member.ever_joined

    def owns(self, resource: str) -> bool:
        """True only if this member may do a unit of work on ``resource`` at this instant."""
        with self._work.lock:
            held = self._work.table.owned.get(resource)
            if held is None or self._state in ENDING:
                return False
        return self._work.valid(resource, held)

    def token(self, resource: str) -> int | None:
        """The fencing token of a resource this member owns, else None."""
        with self._work.lock:
            held = self._work.table.owned.get(resource)
        return held[0] if held is not None and self.owns(resource) else None

    def owned(self) -> dict[str, int]:
        """Every resource :meth:`owns` is True for at this instant, with its fencing token."""
        with self._work.lock:
            if self._state in ENDING:
                return {}
            items = list(self._work.table.owned.items())
        return {r: o[0] for r, o in items if self._work.valid(r, o)}

    @property
    def done(self) -> threading.Event:
        """Set once the member has ended (stopped, aborted, or never started)."""
        return self._done

    @property
    def settled(self) -> threading.Event:
        """Set once :meth:`Client.start` may return: joined, or ended."""
        return self._settled

    @property
    def failure(self) -> Exception | None:
        """Why the member ended, if it did on an error."""
        return self._failure

    def open(self) -> None:
        """Creates the ZooKeeper client and what hangs off it (not connected yet)."""
        self._state = State.JOINING
        digest = begin_instance(self.options.termination_log)  # this start's instance nonce, before any member node
        self._conn.open(digest, self._on_state, self._work.claim_deleted, self._report_fake)
        self._callbacks.start()

    def connect(self, timeout: float) -> None:
        """kazoo's ``start``, also ended by :meth:`Client.stop` from another thread (an asyncio caller
        interrupted while connecting): kazoo's own waits for the whole timeout."""
        self._conn.connect(timeout, self._done.is_set)

    def begin(self) -> None:
        """Connected: the lease prober, the password watcher and the claims' re-check start, and the
        loop is told of the session (call just before the member's thread starts)."""
        self._conn.begin(lambda: self._post(ev.LeaseExpired()))
        self._post(ev.SessionChanged(ev.Connection.CONNECTED, session_id(self.zk)))
        self._began = True  # after CONNECTED is queued: no suspension reported before the session

    def end_unstarted(self) -> None:
        """Ends a member whose thread never started (its connection failed, or it was stopped while
        connecting): no session was reported, so none is reported closed. kazoo's own stop waits for a
        connection attempt in progress to time out (up to the session timeout): that runs on a thread
        of its own, since no session exists to be closed."""
        if self._done.is_set():
            return
        self._closed_quietly = True
        threading.Thread(target=self._close, name="rebalanser-close", daemon=True).start()
        self._state = State.STOPPED
        self._done.set()
        self._settled.set()

    # -- plumbing ------------------------------------------------------------------------------

    @property
    def _opened(self) -> Opened:
        assert self._conn.opened is not None
        return self._conn.opened

    @property
    def zk(self) -> KazooClient:
        return self._opened.zk

    @property
    def store(self) -> KazooMemberStore:
        return self._opened.store

    @property
    def _book(self) -> ClaimBook:
        return self._opened.book

    @property
    def coordinator(self) -> Coordinator | None:
        return self._seat.coordinator

    @property
    def _me(self) -> MemberNode | None:
        return self._member.node

    @property
    def _joined_session(self) -> int:
        return self._member.joined

    @property
    def _members(self) -> Roster:
        return self._opened.roster

    def _report_fake(self, path: str) -> None:
        """A persistent znode where only ephemeral ones belong (a fake member or claim)."""
        kind = "owner" if path.startswith(self.paths.owners + "/") else "member"
        self._bad_data(CorruptDataError("a persistent znode is not a live member's: ignored or removed",
                                        path=path, kind=kind))

    def post(self, event: ev.Event) -> None:
        """Puts ``event`` on the member's event queue (any thread)."""
        self._inbox.post(event)

    _post = post

    def _on_state(self, state: str) -> None:
        # kazoo's connection thread: never block here, never call ZooKeeper.
        connection = {KazooState.SUSPENDED: ev.Connection.SUSPENDED, KazooState.LOST: ev.Connection.LOST}
        # The latest handshake is recorded before kazoo reports CONNECTED; a handshake that finds the
        # session expired is not recorded, so LOST names the session that ended.
        latest = handshakes(self.zk).latest
        session = latest.session_id if latest is not None else 0
        if state == KazooState.SUSPENDED and self._began:
            # Observable when it happens, not when the loop (maybe busy in a callback) gets to it.
            self._suspension_told.append(session)
            self._reports.notify_soon("on_session", "suspended")
        self._post(ev.SessionChanged(connection.get(state, ev.Connection.CONNECTED), session))

    def run(self) -> None:
        """The member's thread: handles each event in order until the member stops or aborts."""
        try:
            while True:
                event = self._inbox.next()
                if isinstance(event, ev.StopRequested):
                    self._leave()
                    return
                if self._aborted():
                    return
                self._dispatch(event)
                if self._aborted():  # nothing may come after an abort to wake the loop
                    return
        except Exception as exc:
            log.exception("member loop failed")
            self._abort(exc)
        finally:
            self._done.set()
            self._settled.set()

    def _aborted(self) -> bool:
        return self._state is State.ABORTED

    def _handle(self, event: ev.Event) -> None:
        match event:
            case ev.SessionChanged(state, session):
                self._on_session(state, session)
            case ev.ElectionChanged():
                self._elect()
            case ev.AssignmentChanged(node):
                self._queue(self._follower.read_assignment(node))
            case ev.BarrierChanged():
                self._queue(self._follower.read_barrier())
            case ev.ClaimReleased(resource):
                self._queue(self._work.retry_claim(self._inbox.releases(resource)))
            case ev.ClaimLost():
                self._queue(self._work.claims_lost())  # every loss noted so far: one stop for all
            case ev.LeaseExpired():
                self._queue(self._work.lease_expired())
            case ev.Deposed(seq, reason):
                if self._seat.deposed(seq, reason):
                    self._elect()
            case ev.CoordinatorEpoch(seq, epoch):
                self._seat.in_office(seq, epoch)
            case ev.OwnNodeChanged(node):
                self._check_own_node(node)
            case ev.RootChanged():
                self._watch_root()
            case ev.BadData(error):
                self._bad_data(error)
            case ev.JoinStep():
                self._join()
            case ev.StopRequested():
                pass  # the loop itself handles it

    def _dispatch(self, event: ev.Event) -> None:
        kind = type(event).__name__
        if isinstance(event, ev.SESSION_BOUND) and not self._in_session():
            # A watch of a session that is gone (kazoo fires them all on expiry, queued ahead of LOST)
            # or of a connection that is down: the session events behind it rejoin or resync.
            if isinstance(event, ev.ClaimReleased):
                self._inbox.releases(event.resource)
            log.info("%s dropped: not in the session that joined; state is re-read on (re)join", kind)
            return
        try:
            self._handle(event)
        except (ConnectionLoss, SessionExpiredError) as exc:
            log.info("%s interrupted by %s; will redo after reconnect", kind, type(exc).__name__)
        except CorruptDataError as exc:
            self._bad_data(exc)
        except KazooException as exc:
            log.warning("%s failed: %r", kind, exc)
            self._report(exc)

    # -- session -------------------------------------------------------------------------------

    def _on_session(self, state: ev.Connection, session: int) -> None:
        self.options.metrics.session_event(state)
        shutdown = self.options.expiry_policy is ExpiryPolicy.SHUTDOWN
        self._member_step(ms.connection(self._member, state, session,
                                        session_id(self.zk), shutdown))

    def _abort(self, error: Exception) -> None:
        self._failure = error
        self._settled.set()
        self._set_state(State.ABORTED)
        try:
            self._seat.stop()
            self._work.set_table(rs.EMPTY)
            self._report(error)
        finally:
            self._close()

    # -- joining and election ------------------------------------------------------------------

    def _join(self) -> None:
        """One step of joining in the current session (:func:`member_state.join_step`)."""
        self._member_step(ms.join_step(self._member, session_id(self.zk), self._state in ENDING))

    def _member_step(self, step: ms.Step) -> None:
        """Takes a member transition's new state and queues its effects (:meth:`_queue`)."""
        self._member, effects = step
        self._queue(effects)

    def _queue(self, effects: Sequence[Effect]) -> None:
        """Puts effects at the front of the one effect queue, in order (they follow the effect that
        produced them, before what was queued earlier), and runs the queue unless it runs already:
        a transition made while effects run only queues more (:mod:`rebalanser.effect_queue`)."""
        self._effects.push(effects)
        self._drive()

    def _drive(self) -> None:
        """Runs the queued effects in order. A lost connection or session ends the run: what is left
        is redone by the resync after reconnecting (or the join of the next session). Any other
        failure of one effect is reported and the rest still runs: a resync that could not read the
        barrier still reads the assignment and claims again, a join step that failed is still followed
        by the ones queued behind it."""
        self._effects.drain(self._run_effect, lambda: self._state is not State.ABORTED)

    def _run_effect(self, effect: Effect) -> None:
        """The one place an effect runs (the drain's; never from inside another effect)."""
        try:
            self._execute(effect)
        except (ConnectionLoss, SessionExpiredError):
            raise
        except Exception as exc:
            self._failed(type(effect).__name__, exc)

    def _failed(self, kind: str, exc: Exception) -> None:
        """A step failed otherwise than by a lost connection: reported, and the member goes on."""
        if isinstance(exc, CorruptDataError):
            self._bad_data(exc)
        elif isinstance(exc, KazooException):
            log.warning("%s failed: %r; going on with the rest", kind, exc)
            self._report(exc)
        else:
            log.exception("%s failed; going on with the rest", kind)
            self._report(exc)

    def _execute(self, effect: Effect) -> None:
        match effect:
            case rs.Claim() | rs.StartCallback() | rs.StopCallback() | rs.Release():
                self._queue(self._work.execute(effect))
            case rw.StepAside(stuck):
                # We are to work on resources whose ``on_revoked`` overran its timeout and is still
                # running: the member leaves the group until every overrunning callback has returned.
                self._member_step(ms.step_aside(self._member, stuck))
            case fl.Apply() | fl.StopForBarrier() | fl.ReadAssignment() | fl.Ignored() | fw.Post() \
                    | fw.ReportBadData() | fw.StopWork() | fw.MarkStopped():
                self._execute_follow(effect)
            case SyncRead(what, node):
                self._sync_read(what, node)
            case Synced(node):
                if self._me is node:
                    self._settled.set()
            case rw.UpdateState():
                self._update_state()
            case ms.EnsureGroup() | ms.AwaitGroup() | ms.CheckSameId() | ms.JoinTimer() | ms.CancelJoinTimer() \
                    | ms.CreateNode() | ms.StandbyChores() | ms.RetryStandbyLater() | ms.JoinWhenCallbacksClear():
                step = self._joining.execute(effect, self._member)
                if step is not None:
                    self._member_step(step)
            case _:
                self._execute_member(effect)

    def _execute_follow(self, effect: fl.Effect | fw.Effect) -> None:
        """Carries out one effect of following (:mod:`follow`, :mod:`follower`)."""
        match effect:
            case fl.Apply(resources):
                self._apply(set(resources))
            case fl.StopForBarrier(record):
                self._queue(self._follower.barrier_stop(record))
            case fl.ReadAssignment():
                self._queue(self._follower.read_assignment(None))
            case fl.Ignored(reason):
                log.warning("ignoring %s", reason)
            case fw.Post(event):
                self._post(event)
            case fw.ReportBadData(error):
                self._bad_data(error)
            case fw.StopWork():
                self._step(rs.stop_all(self._work.table, After.NOTHING))
            case fw.MarkStopped(generation):
                self._follower.mark_stopped(generation)

    def _execute_member(self, effect: ms.Effect) -> None:
        """Carries out one effect of the member machine (the I/O of joining, the session and standby)."""
        match effect:
            case ms.Notify("suspended") if self._suspension_told:
                self._suspension_told.popleft()  # reported by the listener when kazoo reported it
            case ms.Notify(state):
                self._notify("on_session", state)
            case ms.Enter(state):
                self._set_state(state)
            case ms.Note(message, warning):
                log.log(logging.WARNING if warning else logging.INFO, "member id %r: %s", self.options.member_id,
                        message)
            case ms.StopCoordinating():
                self._seat.stop()
            case ms.Evicted() | ms.Stuck():
                self._report_setback(effect)
            case ms.EndSessionWork() | ms.StopAllWork() | ms.DropAssignment():
                self._step(self._stop_for(effect))
            case ms.Expired() | ms.GroupMissing() | ms.DuplicateId():
                self._abort(self._ending(effect))
            case ms.GroupDeleted():
                self._group_deleted()
            case _:
                self._execute_join(effect)

    def _execute_join(self, effect: ms.Effect) -> None:
        """The effects of joining that the loop carries out itself (the others are :mod:`joining`'s)."""
        match effect:
            case ms.Join():
                self._join()
            case ms.Joined(node, session):
                self._joining.cancel_timer()
                self._follower.new_node()
                self._book.reset(session, self.paths.client(node.name))
            case ms.ReleasePending():
                self._work.release_pending()
            case ms.SyncWithGroup(node):
                self._queue([*(SyncRead(what, node) for what in SYNC_READS), Synced(node)])
            case ms.Reclaim():
                if self._me is not None and self._joined_session:
                    self._queue(self._work.retry_claim(None))

    def _stop_for(self, effect: ms.EndSessionWork | ms.StopAllWork | ms.DropAssignment) -> rs.Step:
        """The resource transition that stops work: the session ended (nothing left to release), our
        member node was deleted (every claim released), or standby (nothing wanted: all released)."""
        table = self._work.table
        match effect:
            case ms.EndSessionWork():
                return rs.session_ended(table)
            case ms.StopAllWork():
                return rs.stop_all(table, After.RELEASING)
        return rs.assign(table, (), self._work.held_claims())

    def _report_setback(self, effect: ms.Evicted | ms.Stuck) -> None:
        if isinstance(effect, ms.Stuck):
            stuck = effect.resources
            log.error("on_revoked for %s has not returned: leaving the group until it does", sorted(stuck)[:5])
            self._report(StopTimeoutError(f"on_revoked for {len(stuck)} resources still running; on standby"))
            return
        log.error("our member znode was deleted by someone else: stopping all work and rejoining")
        self._report(RebalanserError("member znode deleted externally; stopped all work, rejoining"))

    def _ending(self, effect: ms.Expired | ms.GroupMissing | ms.DuplicateId) -> Exception:
        """Why the member aborts."""
        match effect:
            case ms.Expired():
                return ExpiredError("ZooKeeper session expired and the policy is 'shutdown'")
            case ms.GroupMissing():
                return GroupNotFoundError(
                    f"group {self.paths.root} does not exist: create it with 'rebalanser group create' or a "
                    "ResourceGroup (or let this member create it: Options.create_group)")
        return DuplicateMemberError(f"another live member uses id {self.options.member_id!r} in group "
                                    f"{self.paths.root}; member ids must be unique")

    def _sync_read(self, what: str, me: MemberNode) -> None:
        """One of the reads of everything a member follows, arming its watch (the join is complete
        after the last: :class:`Synced`). Skipped once ``me`` is no longer our node: an eviction seen on
        the way queued a rejoin that reads everything (or waits for the group). A read that fails
        otherwise than by a lost connection is reported and the others still run (each arms a watch
        of its own); a lost connection is finished by the resync after reconnecting."""
        if self._me is not me:
            return
        match what:
            case "own node":
                self._check_own_node(me.name)
            case "group root":
                self._watch_root()
            case "election":
                self._elect()
            case "barrier":
                self._queue(self._follower.read_barrier())
            case "assignment":
                self._queue(self._follower.read_assignment(None))

    def _watch_root(self) -> None:
        """Reads the group root's data, watching it: a deletion mark ends the member (see
        :meth:`_group_deleted`); a root deleted outright is noticed through our member node's watch."""
        try:
            data, _ = self.zk.get(self.paths.root, watch=self._root_watch)
        except NoNodeError:
            return
        if wire.marks_deletion(data):
            self._member_step(ms.deletion_marked(self._member))

    def _group_deleted(self) -> None:
        """The group is being deleted (``rebalanser group delete``): leave it as on :meth:`stop` and end,
        without re-creating anything in it. Reported through ``on_error`` first, so that the code waiting
        on the member learns why it ends; :meth:`start`, if still waiting, raises it."""
        if self._failure is not None or self._state in ENDING:
            return
        error = GroupDeletedError(f"group {self.paths.root} is being deleted: left it")
        self._failure = error
        log.info("%s", error)  # the caller reports it (on_error, and start() raises it while joining)
        self._report(error)
        self._post(ev.StopRequested())

    def _in_session(self) -> bool:
        """Connected in the session this member joined with (not an earlier or a newer one)."""
        return self._member.in_session(session_id(self.zk))

    def _elect(self) -> None:
        if self._me is None or not self._in_session():
            return
        members = self._members()
        if self._me not in members:
            self._evicted()
            return
        before = predecessor(members, self._me)
        if before is None:
            self._seat.lead(self._me, self._members)
        else:
            self._seat.follow(before)

    def _watch_own_node(self) -> bool:
        assert self._me is not None
        node = self._me.name

        def fired(event: WatchedEvent) -> None:
            if event.type == EventType.DELETED:
                self._work.node_deleted(node)  # owns() is False from now on, before the loop reacts
            self._post(ev.OwnNodeChanged(node))

        return self.store.check_member_node(node, fired)

    def _check_own_node(self, node: str) -> None:
        if self._me is not None and node == self._me.name and not self._watch_own_node():
            self._evicted()

    def _evicted(self) -> None:
        """Someone deleted our member znode (e.g. the whole group) while our session lives: our claims
        may be gone too, so stop all work at once, then rejoin (:func:`member_state.evicted`). The session
        record of that node goes too (the rejoin makes another)."""
        left = self._me
        if left is not None:
            self.store.delete_session_record(left.name)
        self._member_step(ms.evicted(self._member))

    def _set_state(self, state: State) -> None:
        if self._state not in (State.STOPPING, State.STOPPED, State.ABORTED):
            self._state = state

    # -- assignments ---------------------------------------------------------------------------

    def _apply(self, desired: set[str]) -> None:
        self._step(rs.assign(self._work.table, desired, self._work.held_claims()))

    def _seat_now(self) -> rw.Seat:
        return rw.Seat(self._me.name if self._me is not None else None, self._joined_session)

    # -- executing the state machine's effects (the I/O of per-resource state) ------------------

    def _step(self, step: rs.Step) -> None:
        """Takes a resource transition's new table and queues its effects, then the state's update."""
        self._queue(self._work.take(step))

    # -- standby: a stop callback that has not returned -----------------------------------------

    def _update_state(self) -> None:
        if self._state in (State.SUSPENDED, State.JOINING) and not self.zk.connected:
            return
        self._set_state(State.ASSIGNED if self._work.table.owned else State.PENDING_ASSIGNMENT)

    # -- leaving -------------------------------------------------------------------------------

    def _leave(self) -> None:
        """A graceful leave. Joined and connected in that session: every stop callback runs to
        completion, then the assignment node is deleted (the coordinator then gives no grace), then
        the session is closed, which deletes every ephemeral node of it at once: its claims, its
        member node and any stop marker. Nothing can start a resource of ours before that, since our
        claims guard them; and the coordinator hears of the leave only with the claims already gone,
        so whoever gains them claims them at the first attempt. Otherwise each claim is released
        (those the session may still hold) before the session ends."""
        self._state = State.STOPPING
        self._seat.stop()
        if self.zk.connected and self._me is not None and self._joined_session == session_id(self.zk):
            self._stop_everything_for_exit()
            self.store.delete_assignment(self._me.name)
        else:
            self._revoke_everything_for_exit()
        self._close()
        self._state = State.STOPPED

    def _stop_everything_for_exit(self) -> None:
        """Stops work on every owned resource; its claims are left to the session's close."""
        table, effects = rs.stop_all(self._work.table, After.RELEASING)
        self._step((table, [e for e in effects if not isinstance(e, rs.Release)]))

    def _revoke_everything_for_exit(self) -> None:
        try:
            self._step(rs.stop_all(self._work.table, After.RELEASING))
        except KazooException as exc:
            log.warning("could not release every claim (%r); the session's end releases them", exc)

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._callbacks.close()
        self._conn.close()
        if not self._closed_quietly:
            self._notify("on_session", "closed")
