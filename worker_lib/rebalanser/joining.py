"""The I/O of joining and standby: carries out :mod:`member_state`'s effects that ask ZooKeeper
something (is the group there, is an earlier incarnation of our id still in it, create our member node,
standby's chores) or arm a timer or a watch for the next join step, and returns the transition their
answer makes. Runs on the member's thread only (:mod:`rebalanser.member_loop`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, KazooException, SessionExpiredError

from rebalanser import member_events as ev
from rebalanser import member_state as ms
from rebalanser import resource_state as rs
from rebalanser import standby as sb
from rebalanser.callbacks import CallbackRunner
from rebalanser.containers import check_group
from rebalanser.member_store import MemberStore
from rebalanser.membership import Roster, stale_same_id
from rebalanser.paths import GroupPaths
from rebalanser.resource_work import ResourceWork

log = logging.getLogger("rebalanser.client")  # the member's log, as before this was split out

Effect = (ms.EnsureGroup | ms.AwaitGroup | ms.CheckSameId | ms.JoinTimer | ms.CancelJoinTimer | ms.CreateNode
          | ms.StandbyChores | ms.RetryStandbyLater | ms.JoinWhenCallbacksClear)

#: The join's own steps: one that fails otherwise than by a lost connection is taken again later.
JOIN_STEPS = (ms.EnsureGroup, ms.CheckSameId, ms.CreateNode)
#: The longest wait between two attempts of a failing join step, in session timeouts.
JOIN_RETRY_CAP = 4.0


def join_retry_delay(failures: int, timeout: float) -> float:
    """How long to wait before the next join step after ``failures`` failed ones in a row (at least
    one): T/4, doubling, at most ``JOIN_RETRY_CAP`` times T."""
    return float(min(timeout / 4 * 2.0 ** (failures - 1), JOIN_RETRY_CAP * timeout))


class Joining:
    def __init__(self, paths: GroupPaths, member_id: str, zk: Callable[[], KazooClient],
                 store: Callable[[], MemberStore], roster: Callable[[], Roster], post: Callable[[ev.Event], None],
                 callbacks: CallbackRunner, work: ResourceWork, stopped_for: Callable[[], int | None],
                 timeout: Callable[[], float]) -> None:
        self.paths, self._member_id = paths, member_id
        self._zk, self._store, self._roster, self._post, self._timeout = zk, store, roster, post, timeout
        self._callbacks, self._work, self._stopped_for = callbacks, work, stopped_for
        self._join_timer: threading.Timer | None = None  # posts a join step when the wait for our id ends
        self._standby_timer: threading.Timer | None = None  # the next attempt to delete what standby keeps
        self._retry_timer: threading.Timer | None = None  # the next attempt after a failed join step
        self._failures = 0  # join steps failed in a row
        self._join_watch = lambda _event: self._post(ev.JoinStep())  # one callable: kazoo keeps watchers in a set

    def execute(self, effect: Effect, member: ms.Member) -> ms.Step | None:
        """Carries out one effect; returns the transition its answer makes, if any. A join step that
        fails otherwise than by a lost connection (which the next connection's resync or session's join
        redoes) is reported by the caller, and taken again later: the server refusing a read now (a
        rotation whose new ACL is not written yet, an administrator's mistake being mended) must not
        leave the process outside the group for good."""
        try:
            step = self._execute(effect, member)
        except (ConnectionLoss, SessionExpiredError):
            raise
        except Exception:
            if isinstance(effect, JOIN_STEPS):
                self._retry_later()
            raise
        if isinstance(effect, ms.CreateNode):
            self._failures = 0
        return step

    def _retry_later(self) -> None:
        """Arms one timer for the next join step, backing off while the steps fail; a step failing while
        one is pending (another join step queued beside it) changes nothing."""
        if self._retry_timer is not None and self._retry_timer.is_alive():
            return
        self._failures += 1
        delay = join_retry_delay(self._failures, self._timeout())
        log.warning("a join step failed (%d in a row); joining again in %.1fs", self._failures, delay)
        self._retry_timer = self._timer(delay)

    def _execute(self, effect: Effect, member: ms.Member) -> ms.Step | None:
        match effect:
            case ms.EnsureGroup(create_root, session):
                found = check_group(self._zk(), self.paths, create_root=create_root)
                return ms.group_checked(member, found, session)
            case ms.AwaitGroup():
                self._await_group()
            case ms.CheckSameId(session, watch):
                return self._check_same_id(member, session, watch)
            case ms.JoinTimer(after):
                self._join_timer = self._timer(after)
            case ms.CancelJoinTimer():
                self.cancel_timer()
            case ms.CreateNode(session):
                node = self._store().create_member_node(time.monotonic() + 4 * self._timeout())
                return ms.node_created(member, node, session)
            case ms.StandbyChores(joining):
                return self._standby_chores(member, joining)
            case ms.RetryStandbyLater():
                log.info("on standby, still to delete: member node %r, %d claims", member.standby.node,
                         len(self._work.table.releasing))
                if self._standby_timer is None or not self._standby_timer.is_alive():  # one pending is enough
                    self._standby_timer = self._timer(self._timeout() / 4)
            case ms.JoinWhenCallbacksClear():
                self._callbacks.when_clear(lambda: self._post(ev.JoinStep()))
        return None

    def cancel_timer(self) -> None:
        """The wait for an earlier incarnation is over: no join step from its timer."""
        if self._join_timer is not None:
            self._join_timer.cancel()
            self._join_timer = None

    def _timer(self, after: float) -> threading.Timer:
        timer = threading.Timer(after, lambda: self._post(ev.JoinStep()))
        timer.daemon = True
        timer.start()
        return timer

    def _await_group(self) -> None:
        """The group was deleted under us: never re-create it; join when it exists again."""
        log.warning("group %s does not exist: waiting for it to be created again", self.paths.root)
        if self._zk().exists(self.paths.root, watch=self._join_watch) is not None:
            self._post(ev.JoinStep())

    def _check_same_id(self, member: ms.Member, session: int, watch: bool) -> ms.Step:
        """Whether a node with our id of an earlier session is still in the group; ``watch``: watch
        ``G/clients`` for its going (see :func:`member_state.same_id_checked`)."""
        if not watch:
            stale = bool(stale_same_id(self._roster(), self._member_id, session))
            return ms.same_id_checked(member, stale, session, time.monotonic(), self._timeout())
        log.info("waiting for an earlier incarnation with id %r to expire", self._member_id)
        self._zk().get_children(self.paths.clients, watch=self._join_watch)
        stale = bool(stale_same_id(self._roster(), self._member_id, session))
        return ms.same_id_rechecked(member, stale, session)

    def _standby_chores(self, member: ms.Member, joining: bool) -> ms.Step:
        """On standby: carries out the chores (:mod:`standby`), then the transition of what they left.
        What a member on standby must not keep: its claims and the member node it left. While deleting
        either fails (the connection dropped, a leader election), a timer tries again every T/4: a
        claim kept would leave its resource unworked (its next owner waits for it), the node would keep
        us in the group, assigned resources we do not work on, and a Global Barrier round would wait its
        whole timeout for us. Never two member nodes in one session: no rejoin while the old one exists."""
        gone = True
        for chore in sb.chores(member.standby):
            match chore:
                case sb.Release():
                    self._work.release_pending()
                case sb.DeleteNode(name):
                    gone = self._delete_left_node(name)
        pending = rs.pending_release(self._work.table) is not None
        return ms.standby_observed(member, gone, pending, self._callbacks.blocked_any(), joining)

    def _delete_left_node(self, name: str) -> bool:
        """Deletes the member node left on standby, and all it left in the group (its assignment first:
        the coordinator then gives no grace; our stop marker of a Global Barrier round: no later round
        may come to drop it); True once the node is seen gone."""
        store = self._store()
        store.leave(name, self._stopped_for())
        try:
            return not store.check_member_node(name, None)
        except KazooException:
            return False
