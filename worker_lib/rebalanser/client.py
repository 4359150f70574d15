"""A member of a Rebalanser group.

Guarantees, under the stated assumptions:

1. Exclusive ownership. :meth:`Client.owns` returns True for a resource only while this member's
   ZooKeeper session holds the resource's claim and the self-fencing lease is valid. Claims are
   exclusive in ZooKeeper; the lease is renewed through the ZooKeeper leader and ends before the
   leader can have expired the session (assuming a session timeout of at least 2 x tickTime and
   client and server clocks that advance at the same rate; docs/protocol.md). Every claim held is
   watched: one deleted by someone else (an administrator, the operator's failover) makes ``owns``
   False as soon as its notification arrives. kazoo drops the watches with a connection: a claim
   counts only once verified on the current connection, so from a reconnection's handshake until the
   claims are re-checked on it (:mod:`rebalanser.claimcheck`, beside the member loop), ``owns`` is
   False. So, if user code checks ``owns`` before each unit of work, no two members work on one
   resource at the same time, except while a member cannot hear of its claim's deletion (disconnected,
   within its lease).
2. Liveness. Given a stable group and a reachable ZooKeeper quorum, every resource is claimed by a
   live member within the session timeout plus the rebalance interval plus the time the previous
   owner's stop callback takes (bounded by ``stop_timeout``), plus ``departure_grace`` if configured.
3. Fencing. Each claim carries a token (its creation zxid) that is larger than every earlier claim's
   token for the same resource; downstream systems may reject work carrying an older token.

Not promised: work that user code does without checking ``owns`` is not fenced; a stop callback
still running after ``stop_timeout`` is reported but no longer waited for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kazoo.client import KazooClient

from rebalanser import member_events as ev
from rebalanser.coordinator import Coordinator
from rebalanser.errors import StopTimeoutError as StopTimeoutError  # re-exported: rebalanser.StopTimeoutError
from rebalanser.handler import Handler
from rebalanser.member_loop import MemberLoop
from rebalanser.member_state import State as State  # re-exported: rebalanser.State
from rebalanser.options import Options
from rebalanser.paths import GroupPaths


class Client:
    """Joins the group on :meth:`start`, leaves it on :meth:`stop` (both idempotent, thread-safe). The
    public face of one member, and the owner of its thread; what the member does is
    :class:`~rebalanser.member_loop.MemberLoop`'s."""

    def __init__(self, options: Options, handler: Handler | None = None) -> None:
        self.options = options
        self.handler = handler or Handler()
        self.paths = GroupPaths.of(options.group)
        self._loop = MemberLoop(options, self.handler, self.paths)
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None

    @property
    def state(self) -> State:
        return self._loop.state

    def watch_state(self, listener: Callable[[State], object]) -> None:
        """Calls ``listener(state)`` after every change of :attr:`state`, on the thread that made it (the
        member's, or the caller's of :meth:`start`): keep it short and non-blocking."""
        self._loop.watch_state(listener)

    @property
    def role(self) -> str:
        return self._loop.role

    @property
    def epoch(self) -> int:
        return self._loop.epoch

    @property
    def member_node(self) -> str | None:
        return self._loop.member_node

    @property
    def has_joined(self) -> bool:
        """True once this member has joined its group (its member node was created), also after it left:
        from then on, stopping it is a leave, which :meth:`start` may still be finishing."""
        return self._loop.has_joined

    def owns(self, resource: str) -> bool:
        """True only if this member may do a unit of work on ``resource`` at this instant."""
        return self._loop.owns(resource)

    def token(self, resource: str) -> int | None:
        """The fencing token of a resource this member owns, else None."""
        return self._loop.token(resource)

    def owned(self) -> dict[str, int]:
        """Every resource :meth:`owns` is True for at this instant, with its fencing token."""
        return self._loop.owned()

    @property
    def zk(self) -> KazooClient:
        """The member's ZooKeeper client (once started)."""
        return self._loop.zk

    @property
    def _coordinator(self) -> Coordinator | None:
        return self._loop.coordinator

    def start(self, timeout: float | None = None, *, connect_timeout: float | None = None) -> None:
        """Connects and joins the group; returns once this member's znode exists and it has read the
        group's state. ``connect_timeout`` bounds the wait for a first connection (default: ``timeout``,
        else the larger of 15 s and the session timeout), ``timeout`` the whole join. Raises kazoo's
        timeout error when no server answered in time (the client is then stopped),
        :class:`GroupNotFoundError` when the group does not exist (and ``Options.create_group`` is off),
        :class:`GroupDeletedError` when it is being deleted, and :class:`DuplicateMemberError` when
        another live member uses our id."""
        loop = self._loop
        with self._lock:
            if self._thread is not None:
                return
            loop.open()
            self._thread = threading.Thread(target=loop.run, name="rebalanser-member", daemon=True)
        try:
            loop.connect(connect_timeout or timeout or max(15.0, self.options.session_timeout))
        except BaseException:  # no server answered, stop() was called, or the caller was interrupted
            loop.end_unstarted()
            raise
        loop.begin()
        self._thread.start()
        if not loop.settled.wait(timeout or max(60.0, 3 * self.options.session_timeout + 10)):
            raise TimeoutError("did not join the group in time")
        if loop.failure is not None:
            raise loop.failure

    def stop(self, timeout: float | None = None) -> None:
        """Stops all resources (stop callbacks run to completion), then leaves the group."""
        with self._lock:
            if self._thread is None or self._loop.done.is_set():
                return
            if not self._thread.is_alive() and self._thread.ident is None:  # start() has not got that far
                self._loop.end_unstarted()  # a start() still connecting sees it and gives up
                return
        self._loop.post(ev.StopRequested())
        if self._thread is not threading.current_thread():
            self._loop.done.wait(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        return self._loop.done.wait(timeout)
