"""A children watch that outlives the deletion of the node it watches and connection losses.

kazoo's ``ChildrenWatch`` ends for good when its node does not exist (NoNode), so a coordinator
watching ``G/resources`` never learned of resources added after the list was deleted and created
again. kazoo also clears every watch when the connection drops (it fires each once with a ``NONE``
event) and does not set them again on the server after reconnecting; this watch re-arms itself then.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError
from kazoo.protocol.states import EventType, KazooState, WatchedEvent, ZnodeStat

log = logging.getLogger(__name__)


class ChildrenTrigger:
    """Calls ``on_change`` (from kazoo's callback thread) whenever the children of ``path`` may have
    changed, including when ``path`` itself is deleted or created, until :meth:`stop`.

    States: watching the children (``path`` exists), watching for the creation of ``path`` (it does
    not exist), or unarmed (disconnected: re-armed on reconnection, then ``on_change`` is called
    only if the children differ from the last ones seen, as nothing was watched meanwhile)."""

    def __init__(self, zk: KazooClient, path: str, on_change: Callable[[], None]) -> None:
        self._zk, self._path, self._on_change = zk, path, on_change
        self._lock = threading.Lock()
        self._stopped = False
        self._seen: list[str] | None = None
        self._read = False  # _seen holds a listing (None in it: the path did not exist)

    def start(self) -> None:
        self._zk.add_listener(self._on_state)
        self._refresh(always=True)

    @property
    def children(self) -> list[str] | None:
        """The children as of the last time the watch was set: sorted, or None while ``path`` does not
        exist. Any change since then has called (or is about to call) ``on_change``. Raises
        LookupError before the first listing."""
        with self._lock:
            if not self._read:
                raise LookupError(f"{self._path} has not been listed yet")
            return self._seen

    def stop(self) -> None:
        self._stopped = True
        self._zk.remove_listener(self._on_state)

    def _fired(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:  # NONE: the connection dropped; re-armed on reconnection
            self._refresh(always=True)

    def _on_state(self, state: str) -> None:
        # kazoo's connection thread: never block here.
        if state == KazooState.CONNECTED and not self._stopped:
            self._zk.handler.spawn(self._refresh, False)

    def _refresh(self, always: bool) -> None:
        with self._lock:
            if self._stopped:
                return
            try:
                children = self._arm()
            except (ConnectionLoss, SessionExpiredError):
                return  # re-armed when the connection is back
            changed = always or children != self._seen
            self._seen, self._read = children, True
        if changed and not self._stopped:
            self._on_change()

    def _arm(self) -> list[str] | None:
        """Sets the watch; returns the sorted children, or None while ``path`` does not exist."""
        while True:
            try:
                return sorted(self._zk.get_children(self._path, watch=self._fired))
            except NoNodeError:
                if self._zk.exists(self._path, watch=self._fired) is None:
                    return None


class DataTrigger:
    """Calls ``on_data(data, stat)`` with what ``path`` holds (``None, None`` while it does not exist):
    once at :meth:`start`, then whenever it changed, until ``on_data`` returns False.

    Unlike kazoo's ``DataWatch``, it never holds up kazoo's threads. That recipe re-reads on
    kazoo's one callback thread when the watch fires, under a lock that a re-read started at a
    reconnection may hold for a long time: it retries with no limit and a back-off that doubles up to
    60 s, so after a link that flapped for a few seconds every other watch of the process (a member's
    stop order, or the deletion of its claim) waited seconds behind it. Here every re-read runs on a
    thread of its own, one at a time, and a read cut short by a connection loss is made again on
    reconnection rather than retried."""

    def __init__(self, zk: KazooClient, path: str,
                 on_data: Callable[[bytes | None, ZnodeStat | None], bool]) -> None:
        self._zk, self._path, self._on_data = zk, path, on_data
        self._lock = threading.Lock()
        self._stopped = False
        self._seen: tuple[int | None] | None = None  # (mzxid or None if absent) of the last read

    def start(self) -> None:
        self._zk.add_listener(self._on_state)
        self._refresh()

    def stop(self) -> None:
        self._stopped = True
        self._zk.remove_listener(self._on_state)

    def _fired(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE and not self._stopped:  # NONE: the connection dropped
            self._zk.handler.spawn(self._refresh)

    def _on_state(self, state: str) -> None:
        # kazoo's connection thread: never block here.
        if state == KazooState.CONNECTED and not self._stopped:
            self._zk.handler.spawn(self._refresh)

    def _refresh(self) -> None:
        with self._lock:
            if self._stopped:
                return
            try:
                data, stat = self._arm()
            except (ConnectionLoss, SessionExpiredError):
                return  # read again when the connection is back
            seen = (stat.mzxid if stat is not None else None,)
            if seen == self._seen:
                return
            self._seen = seen
            if not self._on_data(data, stat):
                self.stop()

    def _arm(self) -> tuple[bytes | None, ZnodeStat | None]:
        """Sets the watch; returns the data and stat, or ``None, None`` while ``path`` does not exist."""
        while True:
            try:
                data, stat = self._zk.get(self._path, watch=self._fired)
                return data, stat
            except NoNodeError:
                if self._zk.exists(self._path, watch=self._fired) is None:
                    return None, None
