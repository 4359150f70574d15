"""The asyncio client: the threaded member (one protocol implementation) driven from an event loop.

The member runs on its own threads exactly as :class:`rebalanser.Client` does; this class starts and
stops it from threads of its own, runs the handler's coroutines on the loop through
:class:`~rebalanser.aio.bridge.LoopBridge`, and publishes assignment and state changes to async
iterators. Ownership checks read the member's state directly: synchronous and cheap.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType, TracebackType
from typing import TypeVar

from rebalanser import handler as threaded
from rebalanser.aio.bridge import LoopBridge
from rebalanser.aio.feeds import Fanout, Feed
from rebalanser.aio.handler import Handler
from rebalanser.client import Client as Member
from rebalanser.client import State
from rebalanser.options import Options

log = logging.getLogger(__name__)

T = TypeVar("T")
_ENDED = (State.STOPPED, State.ABORTED)
_MAX_TIMEOUT = 3600.0  # Options' own upper bound


@dataclass(frozen=True)
class AssignmentChange:
    """One change of what this member works on: resources granted (name -> fencing token) or revoked,
    and everything it holds after the change. :meth:`Client.owns` stays the authority at any instant."""

    assigned: Mapping[str, int]
    revoked: tuple[str, ...]
    owned: Mapping[str, int]


class _MemberHandler(threaded.Handler):
    """The member's handler: every call is handed to the loop; the callbacks are awaited there."""

    def __init__(self, client: Client, bridge: LoopBridge) -> None:
        self._client, self._bridge, self._user = client, bridge, client.handler

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        granted = dict(resources)
        self._bridge.post(self._client._changed, granted, ())
        self._bridge.run("on_assigned", lambda: self._user.on_assigned(granted),
                         self._client.options.start_timeout, self._client.cancel_grace)

    def on_revoked(self, resources: Sequence[str]) -> None:
        names = tuple(resources)
        self._bridge.post(self._client._changed, {}, names)
        self._bridge.run("on_revoked", lambda: self._user.on_revoked(names),
                         self._client.options.stop_timeout, self._client.cancel_grace)

    def on_error(self, error: Exception) -> None:
        self._bridge.post(self._user.on_error, error)

    def on_role(self, role: str, epoch: int) -> None:
        self._bridge.post(self._user.on_role, role, epoch)

    def on_session(self, state: str) -> None:
        self._bridge.post(self._user.on_session, state)


class Client:
    """A member of a group, for asyncio programs: ``async with Client(options, handler) as client:``
    joins on entry and leaves gracefully on exit (every ``on_revoked`` awaited first).

    The guarantees are the threaded client's (:mod:`rebalanser.client`): check :meth:`owns` (or
    :meth:`token`) before each unit of work. ``cancel_grace`` is how long a callback cancelled at its
    timeout may take to end before the member goes on without it.
    """

    def __init__(self, options: Options, handler: Handler | None = None, *, cancel_grace: float = 1.0) -> None:
        self.options = options
        self.handler = handler or Handler()
        self.cancel_grace = cancel_grace
        self._member: Member | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._owned: dict[str, int] = {}  # as the change stream tells it, kept on the loop
        self._changes: Fanout[AssignmentChange] = Fanout()
        self._states: Fanout[State] = Fanout()
        self._state = State.NOT_STARTED
        self._ended = asyncio.Event()
        self._starter: threading.Thread | None = None

    # -- ownership: synchronous, cheap, never blocking the loop --------------------------------

    def owns(self, resource: str) -> bool:
        """True only if this member may do a unit of work on ``resource`` at this instant."""
        return self._member is not None and self._member.owns(resource)

    def token(self, resource: str) -> int | None:
        """The fencing token of a resource this member owns, else None."""
        return self._member.token(resource) if self._member is not None else None

    def owned(self) -> dict[str, int]:
        """Every resource this member may work on now, with its token."""
        return self._member.owned() if self._member is not None else {}

    @property
    def state(self) -> State:
        return self._state

    @property
    def role(self) -> str:
        return self._member.role if self._member is not None else "none"

    @property
    def epoch(self) -> int:
        return self._member.epoch if self._member is not None else 0

    @property
    def member_node(self) -> str | None:
        return self._member.member_node if self._member is not None else None

    @property
    def has_joined(self) -> bool:
        """True once this member has joined its group, also after it left (:attr:`rebalanser.Client.has_joined`)."""
        return self._member is not None and self._member.has_joined

    # -- change streams ------------------------------------------------------------------------

    def assignments(self) -> Feed[AssignmentChange]:
        """An async iterator of assignment changes from now on (it ends when the client stops)."""
        return self._changes.subscribe()

    def states(self) -> Feed[State]:
        """An async iterator of the client's state: the current one first, then every change; it ends
        after ``Stopped`` or ``Aborted``."""
        return self._states.subscribe(self._state)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self, timeout: float | None = None, *, connect_timeout: float | None = None) -> None:
        """Connects and joins the group (in a thread of its own: the loop goes on meanwhile); the
        timeouts and errors are those of :meth:`rebalanser.Client.start`."""
        if self._member is not None:
            return
        loop = asyncio.get_running_loop()
        self._loop = loop
        bridge = LoopBridge(loop)
        # The member waits for a callback a little longer than the callback may run: it is cancelled
        # at its own timeout and may end within ``cancel_grace``, before the member goes on.
        member = Member(dataclasses.replace(
            self.options,
            stop_timeout=min(_MAX_TIMEOUT, self.options.stop_timeout + self.cancel_grace),
            start_timeout=min(_MAX_TIMEOUT, self.options.start_timeout + self.cancel_grace),
        ), _MemberHandler(self, bridge))
        member.watch_state(lambda state: bridge.post(self._state_changed, state))
        self._member = member
        starting, self._starter = _in_thread(loop, lambda: member.start(timeout, connect_timeout=connect_timeout),
                                          "rebalanser-aio-start")
        try:
            await starting
        except BaseException:  # failed, or cancelled: leave (shielded, so a second cancel cannot stop it)
            await asyncio.shield(self._leave_after_start())
            raise
        threading.Thread(target=self._watch_loop, args=(member, loop), name="rebalanser-aio-watch",
                         daemon=True).start()

    async def stop(self, timeout: float | None = None) -> None:
        """Stops every resource (``on_revoked`` awaited), then leaves the group. Cancelling the wait
        does not cancel the leaving: it goes on in the member's threads."""
        member = self._member
        if member is None:
            return
        waiting, _ = _in_thread(asyncio.get_running_loop(), lambda: member.stop(timeout), "rebalanser-aio-stop")
        await waiting

    async def wait(self) -> None:
        """Returns once the client has stopped or aborted (e.g. its session expired under the
        ``shutdown`` policy)."""
        await self._ended.wait()

    async def __aenter__(self) -> Client:
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    # -- plumbing ------------------------------------------------------------------------------

    async def _leave_after_start(self) -> None:
        """Start was interrupted or failed: leave once the start thread is done (it may hold claims)."""
        member, starter = self._member, self._starter
        assert member is not None

        def leave() -> None:
            if starter is not None:
                starter.join()
            member.stop(self.options.stop_timeout + 10)

        waiting, _ = _in_thread(asyncio.get_running_loop(), leave, "rebalanser-aio-abandon")
        await waiting

    def _changed(self, assigned: dict[str, int], revoked: tuple[str, ...]) -> None:  # on the loop
        self._owned.update(assigned)
        for name in revoked:
            self._owned.pop(name, None)
        self._changes.publish(AssignmentChange(MappingProxyType(assigned), revoked,
                                               MappingProxyType(dict(self._owned))))

    def _state_changed(self, state: State) -> None:  # on the loop
        self._state = state
        self._states.publish(state)
        if state in _ENDED:
            self._states.end()
            self._changes.end()
            self._ended.set()

    @staticmethod
    def _watch_loop(member: Member, loop: asyncio.AbstractEventLoop) -> None:
        """The loop was closed without :meth:`stop`: nothing can run on it any more, so the member
        leaves (its on_revoked calls cannot run; its resources are released for other members)."""
        while not member.wait(0.25):
            if loop.is_closed():
                log.warning("the event loop was closed without stop(): leaving the group")
                member.stop()
                return


def _in_thread(loop: asyncio.AbstractEventLoop, fn: Callable[[], T],
               name: str) -> tuple[asyncio.Future[T], threading.Thread]:
    """Runs ``fn`` on a new daemon thread; the future (on ``loop``) gets its result."""
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def run() -> None:
        try:
            result = fn()
        except BaseException as exc:
            error = exc
            posted = _post(loop, settle, lambda: future.set_exception(error))
        else:
            posted = _post(loop, settle, lambda: future.set_result(result))
        if not posted:
            log.debug("%s finished after the event loop was closed", name)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return future, thread


def _post(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: object) -> bool:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        return False
    return True
