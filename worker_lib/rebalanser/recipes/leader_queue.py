"""A leader queue: candidates wait in line; the first in line leads until it leaves or its session ends.

Usage::

    queue = LeaderQueue(client, "/myapp/leader", identity="pod-7",
                        on_elected=start_leading, on_lost=stop_leading)
    queue.join()                       # blocks until our candidate znode exists
    queue.position(), queue.size(), queue.spare_capacity()   # 0 = leading; spare = candidates - 1
    queue.leave()                      # or stop(), which also stops the queue's threads

Each candidate is an ephemeral sequential znode ``<path>/c-<guid>-<sequence>`` holding the identity.
The candidate with the lowest sequence number leads. Every other candidate watches only the candidate just
before it (no herd effect: one departure wakes one candidate); the leader watches its own znode.

What it guarantees:

* One candidate znode per ``join``, even across connection loss: the create is "protected" — its name
  carries a fresh GUID, and if the connection drops before the reply arrives the queue searches for that
  GUID after reconnecting instead of blindly creating again, so no ghost candidate is left behind.
* ``on_elected`` fires when this candidate becomes first in line, ``on_lost`` when it stops being so:
  when it leaves, when its session expires, when its znode is deleted, and — unless
  ``lost_on_suspend=False`` — as soon as the connection is suspended, because from then on the session
  may expire without us hearing about it. If the connection comes back within the same session and
  the candidate is still first, ``on_elected`` fires again.
* Callbacks run in order on one dedicated thread per queue, never on kazoo's threads; a slow callback
  delays later callbacks but not the queue's reaction to ZooKeeper.
* After a session expiry the candidate re-queues (at the back) once a new session is established,
  unless ``requeue_on_session_loss=False``, in which case it stays out until ``join`` is called again.

What it rests on, and does not promise:

* "At most one leader" holds for ZooKeeper's view (one lowest znode). That at most one *process acts*
  as leader additionally needs ``on_lost`` to stop the work before the session can expire on the
  server: kazoo reports a suspended connection after 2/3 of the session timeout without a reply, the
  server expires the session after the full timeout, so the margin is about 1/3 of the session timeout,
  assuming roughly equal clock rates and no process pause longer than that. A process paused longer
  (GC, SIGSTOP) can still believe it leads; use the candidate's sequence number (``node``) as a fencing
  token where that matters.
* An administrator deleting a candidate's znode makes that candidate re-queue at the back.
* ``join`` gives up waiting after ``timeout`` (raising ``TimeoutError``) but the candidate keeps trying
  to queue until ``leave``.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from rebalanser.lifecycle import Lifecycled, deprecated_alias
from rebalanser.zk import (
    TRANSIENT_ERRORS,
    BoundedZk,
    basename,
    find_child,
    join,
    new_guid,
    retry,
    session_id,
    validate_path,
)

from ._executor import SerialExecutor
from ._session import StateRelay

log = logging.getLogger(__name__)

_ids = itertools.count(1)
_CANDIDATE = re.compile(r"^c-([0-9a-f]{32})-(\d{10})$")
RETRY_DELAY = 0.2

Callback = Callable[[], None]


@dataclass(frozen=True, order=True)
class Candidate:
    """One queued candidate as seen in ZooKeeper (ordered by sequence number)."""

    sequence: int
    guid: str
    name: str


@dataclass(frozen=True)
class _Owned:
    """A candidate znode of ours (``guid``) and the session it was (or may have been) created in."""

    guid: str
    session: int
    path: str | None = None


def parse_candidates(names: list[str]) -> list[Candidate]:
    """The candidate znodes among ``names`` in queue order; other names are ignored."""
    found = []
    for name in names:
        match = _CANDIDATE.match(name)
        if match:
            found.append(Candidate(int(match.group(2)), match.group(1), name))
    return sorted(found)


class LeaderQueue(Lifecycled):
    """A candidate in the queue under ``path``; see the module documentation for the guarantees."""

    def __init__(
        self,
        client: KazooClient,
        path: str,
        *,
        identity: str = "",
        on_elected: Callback | None = None,
        on_lost: Callback | None = None,
        requeue_on_session_loss: bool = True,
        lost_on_suspend: bool = True,
        op_timeout: float = 10.0,
    ) -> None:
        self._client = client
        self._path = validate_path(path)
        self._identity = identity
        self._on_elected = on_elected
        self._on_lost = on_lost
        self._requeue = requeue_on_session_loss
        self._lost_on_suspend = lost_on_suspend
        self._op_timeout = op_timeout
        number = next(_ids)
        self._loop = SerialExecutor(f"rebalanser-leader-queue-{number}")
        self._callbacks = SerialExecutor(f"rebalanser-leader-queue-{number}-callbacks")
        self._relay = StateRelay(client, self._loop, self._on_state, immediate=self._on_state_now)
        self._zk = BoundedZk(client, op_timeout)
        self._start_lock = threading.Lock()
        self._leader_lock = threading.Lock()  # orders leadership flips and their callbacks
        self._started = False
        self._closed = False
        # Written only on the loop thread (_leader also by the state listener, under _leader_lock):
        self._joined = False
        self._node: _Owned | None = None  # our live candidate (path known)
        self._pending: _Owned | None = None  # a create whose reply we never saw
        self._stale: set[_Owned] = set()  # our candidates to delete when we can
        self._leader = False
        self._queued = threading.Event()

    # -- public API ---------------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def is_leader(self) -> bool:
        return self._leader

    @property
    def node(self) -> str | None:
        """Our candidate znode's path (its sequence suffix is a usable fencing token), if queued."""
        node = self._node
        return node.path if node else None

    def start(self, timeout: float | None = 10.0) -> None:
        """Starts the queue's threads and queues this candidate (:meth:`join`)."""
        self.join(timeout)

    def join(self, timeout: float | None = 10.0) -> None:
        """Queues this candidate (no-op if already queued); waits up to ``timeout`` for its znode."""
        self._start_threads()
        self._loop.spawn(self._join)
        if timeout is not None and not self._queued.wait(timeout):
            raise TimeoutError(f"not queued in {self._path} within {timeout}s (still trying; leave() stops)")

    def leave(self, timeout: float = 10.0) -> None:
        """Leaves the queue (``on_lost`` fires if leading) and deletes our znode, best effort; the
        candidate may :meth:`join` again (unlike after :meth:`stop`)."""
        if self._started and not self._closed:
            self._loop.submit(self._leave).result(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Deprecated name of :meth:`stop`."""
        deprecated_alias("LeaderQueue.close", "stop")
        self.stop(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Leaves, then stops the queue's threads (queued callbacks are delivered first)."""
        try:
            self.leave(timeout)
        except Exception:
            log.warning("leaving %s on stop failed; the znode goes with the session", self._path, exc_info=True)
        self._closed = True
        self._relay.stop()
        self._loop.stop(timeout)
        self._callbacks.stop(timeout)

    def candidates(self) -> list[Candidate]:
        """The queue as stored in ZooKeeper now, leader first."""
        try:
            names = retry(partial(self._zk.get_children, self._path), self._op_timeout)
        except NoNodeError:
            return []
        return parse_candidates(list(names))

    def identities(self) -> list[str]:
        """The identities of the queued candidates, leader first (one read per candidate)."""
        found = []
        for candidate in self.candidates():
            try:
                data, _ = retry(partial(self._zk.get, join(self._path, candidate.name)), self._op_timeout)
            except NoNodeError:
                continue
            found.append(data.decode())
        return found

    def position(self) -> int | None:
        """0 if leading, n if n candidates are ahead of us, ``None`` if not queued."""
        path = self.node
        if path is None:
            return None
        names = [c.name for c in self.candidates()]
        mine = basename(path)
        return names.index(mine) if mine in names else None

    def size(self) -> int:
        return len(self.candidates())

    def spare_capacity(self) -> int:
        """Candidates waiting beyond the leader (ready to take over)."""
        return max(0, self.size() - 1)

    # -- hand-offs from kazoo threads ---------------------------------------------------------------

    def _start_threads(self) -> None:
        with self._start_lock:
            if self._closed:
                raise RuntimeError("this LeaderQueue is stopped")
            if not self._started:
                self._started = True
                self._loop.start()
                self._callbacks.start()
                self._relay.start()

    def _on_state_now(self, state: str) -> None:
        # On kazoo's connection thread: stop leading at once rather than after queued ZooKeeper work.
        if state == KazooState.LOST or (state == KazooState.SUSPENDED and self._lost_on_suspend):
            self._set_leader(False)

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._step()

    def _fired(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:  # NONE: kazoo dropped its watches; CONNECTED re-runs _step
            self._loop.spawn(self._step)

    # -- the state machine (loop thread only) -------------------------------------------------------

    def _join(self) -> None:
        self._joined = True
        self._step()

    def _leave(self) -> None:
        self._joined = False
        self._retire()
        self._step()

    def _retire(self) -> None:
        """Forgets our candidate (to be deleted by _delete_stale) and stops leading."""
        for owned in (self._node, self._pending):
            if owned is not None:
                self._stale.add(owned)
        self._node = self._pending = None
        self._queued.clear()
        self._set_leader(False)

    def _step(self) -> None:
        """One idempotent pass bringing ZooKeeper and our state in line; safe to run at any time."""
        if self._closed or not self._client.connected:
            return  # the CONNECTED relay runs us again
        try:
            self._adopt_session()
            self._delete_stale()
            if self._joined:
                self._ensure_node()
                self._watch_position()
        except TRANSIENT_ERRORS:
            if self._client.connected:
                self._loop.call_later(RETRY_DELAY, self._step)

    def _adopt_session(self) -> None:
        current = session_id(self._client)
        self._stale = {o for o in self._stale if o.session == current}
        if self._pending is not None and self._pending.session != current:
            self._pending = None  # whatever that create did, it died with its session
        if self._node is None or self._node.session == current:
            return
        # Our candidate's session ended; its ephemeral znode is gone with it.
        self._node = None
        self._queued.clear()
        self._set_leader(False)
        if not self._requeue:
            self._joined = False

    def _delete_stale(self) -> None:
        if not self._stale:
            return
        guids = {o.guid for o in self._stale}
        for candidate in self._list():
            if candidate.guid in guids:
                self._delete(join(self._path, candidate.name))
        self._stale.clear()

    def _ensure_node(self) -> None:
        if self._node is not None:
            return
        current = session_id(self._client)
        if not current:
            return  # disconnected meanwhile; the CONNECTED relay runs us again
        if self._pending is not None:
            found = self._find(self._pending.guid)
            if found is not None:  # the create whose reply we lost did happen
                self._adopt(_Owned(self._pending.guid, current, found))
                return
        guid = self._pending.guid if self._pending is not None else new_guid()
        self._pending = _Owned(guid, current)
        path, stat = self._zk.create_sequential(join(self._path, f"c-{guid}-"), self._identity.encode())
        self._adopt(_Owned(guid, int(stat.ephemeralOwner), path))

    def _adopt(self, owned: _Owned) -> None:
        self._pending = None
        self._node = owned
        self._queued.set()

    def _watch_position(self) -> None:
        node = self._node
        if node is None or node.path is None:
            return
        names = [c.name for c in self._list()]
        mine = basename(node.path)
        if mine not in names:
            self._vanished()
            return
        index = names.index(mine)
        target = node.path if index == 0 else join(self._path, names[index - 1])
        if self._zk.exists(target, watch=self._fired) is not None:
            self._set_leader(index == 0)
        elif index == 0:
            self._vanished()
        else:
            self._loop.spawn(self._step)  # the predecessor left between our two reads

    def _vanished(self) -> None:
        """Our znode was deleted behind our back (session alive): queue again at the back."""
        self._node = None
        self._queued.clear()
        self._set_leader(False)
        self._loop.spawn(self._step)

    def _list(self) -> list[Candidate]:
        try:
            return parse_candidates(self._zk.get_children(self._path))
        except NoNodeError:
            return []

    def _find(self, guid: str) -> str | None:
        found = find_child((c.name for c in self._list()), f"c-{guid}-")
        return join(self._path, found) if found is not None else None

    def _delete(self, path: str) -> None:
        try:
            self._zk.delete(path)
        except NoNodeError:
            pass

    def _set_leader(self, leading: bool) -> None:
        with self._leader_lock:
            if leading == self._leader or (leading and not self._client.connected):
                return  # never (re)gain leadership from a read that raced with a disconnect
            self._leader = leading
            callback = self._on_elected if leading else self._on_lost
            if callback is not None:
                self._callbacks.spawn(callback)
