"""A local copy of one znode's children (with their data), kept fresh by one-shot watches.

All ZooKeeper reads happen on the mirror's own thread. Watch callbacks and the state listener only queue
work there. Each change costs a constant number of reads: a children event costs one ``get_children``
plus one ``get`` per new child, a data event one ``get``. After a reconnect (kazoo drops all watches on
every disconnect) the mirror re-reads everything once and reports the difference against what it last
knew, so every change is reported exactly once. Changes that come and go while the mirror is not
watching (for example an item added and removed during a disconnect) are not seen at all.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent

from rebalanser.zk import TRANSIENT_ERRORS, BoundedZk, basename, join

from ._executor import SerialExecutor
from ._session import StateRelay

log = logging.getLogger(__name__)

ChangeKind = Literal["added", "removed", "changed"]
RETRY_DELAY = 0.2


@dataclass(frozen=True)
class Entry:
    """What the mirror knows about one child: its data and the zxid that created it."""

    data: bytes
    czxid: int


@dataclass(frozen=True)
class Change:
    kind: ChangeKind
    name: str
    data: bytes
    previous: bytes | None = None


Sink = Callable[[Sequence[Change], Mapping[str, bytes]], None]


def diff_entry(name: str, old: Entry | None, new: Entry | None) -> list[Change]:
    """The changes that turn ``old`` into ``new`` (a re-created child is a removal plus an addition)."""
    if old is None:
        return [] if new is None else [Change("added", name, new.data)]
    if new is None:
        return [Change("removed", name, old.data)]
    if new.czxid != old.czxid:
        return [Change("removed", name, old.data), Change("added", name, new.data)]
    if new.data != old.data:
        return [Change("changed", name, new.data, old.data)]
    return []


class ChildMirror:
    """Mirrors the children of ``path`` and calls ``sink(changes, snapshot)`` on its thread per change."""

    def __init__(
        self,
        client: KazooClient,
        path: str,
        sink: Sink,
        *,
        watch_data: bool,
        thread_name: str,
        op_timeout: float = 10.0,
    ) -> None:
        self._client = client
        self._zk = BoundedZk(client, op_timeout)
        self._path = path
        self._sink = sink
        self._watch_data = watch_data
        self._known: dict[str, Entry] = {}
        self._lock = threading.Lock()
        self._executor = SerialExecutor(thread_name)
        self._relay = StateRelay(client, self._executor, self._on_state)
        self._stopped = False
        self.synced = threading.Event()

    def start(self) -> None:
        self._executor.start()
        self._relay.start()
        self._executor.spawn(self._guarded(self._resync))

    def stop(self) -> None:
        self._stopped = True
        self._relay.stop()
        self._executor.stop()

    def run_in_order(self, fn: Callable[[], object]) -> None:
        """Runs ``fn`` on the mirror thread, between two sink calls (never during one)."""
        self._executor.spawn(fn)

    def snapshot(self) -> dict[str, bytes]:
        with self._lock:
            return {name: entry.data for name, entry in self._known.items()}

    # -- hand-offs from kazoo threads (never block here) ------------------------------------------------

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._guarded(self._resync)()

    def _children_fired(self, event: WatchedEvent) -> None:
        if event.type != EventType.NONE:
            self._executor.spawn(self._guarded(self._refresh_children))

    def _data_fired(self, event: WatchedEvent) -> None:
        if event.type == EventType.CHANGED:
            self._executor.spawn(self._guarded(partial(self._refresh_data, basename(event.path))))

    # -- work on the mirror thread ----------------------------------------------------------------------

    def _guarded(self, step: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            if self._stopped:
                return
            try:
                step()
            except NoNodeError:
                self._executor.spawn(self._guarded(self._recreate_base))
            except TRANSIENT_ERRORS:
                self._retry_later()

        return run

    def _retry_later(self) -> None:
        # When disconnected, the CONNECTED relay schedules the resync; if already back, do it ourselves.
        if self._client.connected:
            self._executor.call_later(RETRY_DELAY, self._guarded(self._resync))

    def _recreate_base(self) -> None:
        self._zk.ensure_path(self._path)
        self._resync()

    def _list_children(self) -> set[str]:
        return set(self._zk.get_children(self._path, watch=self._children_fired))

    def _fetch(self, name: str) -> Entry | None:
        watch = self._data_fired if self._watch_data else None
        try:
            data, stat = self._zk.get(join(self._path, name), watch=watch)
        except NoNodeError:
            return None  # deleted meanwhile; the children watch reports it
        return Entry(data, int(stat.czxid))

    def _resync(self) -> None:
        names = self._list_children()
        fresh = {name: entry for name in sorted(names) if (entry := self._fetch(name)) is not None}
        changes: list[Change] = []
        for name in sorted(set(self._known) | set(fresh)):
            changes += diff_entry(name, self._known.get(name), fresh.get(name))
        self._commit(fresh, changes, always=not self.synced.is_set())
        self.synced.set()

    def _refresh_children(self) -> None:
        names = self._list_children()
        updated = {name: entry for name, entry in self._known.items() if name in names}
        gone = sorted(set(self._known) - names)
        changes = [Change("removed", name, self._known[name].data) for name in gone]
        for name in sorted(names - set(self._known)):
            entry = self._fetch(name)
            if entry is not None:
                updated[name] = entry
                changes += diff_entry(name, None, entry)
        self._commit(updated, changes)

    def _refresh_data(self, name: str) -> None:
        old = self._known.get(name)
        new = self._fetch(name) if old is not None else None
        if old is not None and new is not None:
            self._commit({**self._known, name: new}, diff_entry(name, old, new))

    def _commit(self, known: dict[str, Entry], changes: Sequence[Change], always: bool = False) -> None:
        """Replaces the known children (only this thread writes them) and reports the changes."""
        with self._lock:
            self._known = known
        if changes or always:
            try:
                self._sink(changes, self.snapshot())
            except Exception:
                log.exception("change handler for %s failed", self._path)
