"""A distributed bag: an unordered collection of items under one znode, with change listeners.

Usage::

    bag = DistributedBag(client, "/myapp/jobs")        # client: a started KazooClient
    bag.add_listener(on_added=lambda item: print("+", item.id, item.data),
                     on_removed=lambda item: print("-", item.id))
    bag.start()
    job = bag.add(b'{"shard": 7}')                     # generated id, persistent
    bag.add(b"me", item_id="worker-3", ephemeral=True) # caller's id, gone with our session
    bag.get(job), bag.items(), bag.remove(job)
    bag.stop()

Each item is one znode ``<path>/<id>`` whose data is the item, created by a single ``create`` that carries
the data, so an item is either fully there or not there at all: there is no window in which a crash
leaves an item that others never see or see half-written.

What it guarantees:

* ``add`` is one create. If the connection is lost mid-request it is retried, and a retry that finds a
  node with the same id, the same data and (for ephemeral items) our session reports success instead of
  a duplicate; with generated ids an item is never added twice by one ``add`` call.
* Listeners see each delta of the bag's state, as this client observes it, exactly once and in order:
  an item is reported added once, and removed once after that. A listener registered late first gets the
  current items as additions. After a reconnect (kazoo forgets all watches on every disconnect, and a
  new session starts with none) the bag re-reads the children once and reports the difference against
  what it last reported, so deltas that happened meanwhile are delivered once, neither lost nor doubled.
* Cost: one ``get_children`` per children-watch event plus one ``get`` per added item; removals cost
  nothing extra. A reconnect costs one read per item.
* Listener callbacks run on one dedicated thread per bag, never on kazoo's threads.

What it does not promise:

* Intermediate states are coalesced: an item added and removed while this client was not watching
  (between two reads, or during a disconnect) is never reported. Listeners see a sequence of states
  that converges on ZooKeeper's, not every write.
* An item whose id is re-used (removed and re-added with the same id) is reported as removed and added.
* Ephemeral items disappear when the session that added them ends and are not re-added: they mean
  "exists while the adder lives".
* ``get``/``items`` read ZooKeeper at call time; ``known_items`` is the listeners' view, which may lag.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from rebalanser.lifecycle import Lifecycled
from rebalanser.zk import BoundedZk, create_once, join, retry, validate_name, validate_path

from ._executor import SerialExecutor
from ._mirror import Change, ChildMirror

log = logging.getLogger(__name__)

_ids = itertools.count(1)


class ItemExistsError(KeyError):
    """An item with this id is already in the bag (and is not the one this call created)."""


@dataclass(frozen=True)
class BagItem:
    id: str
    data: bytes


ItemCallback = Callable[[BagItem], None]


@dataclass(eq=False)
class BagListener:
    """A registered pair of callbacks; pass it to ``remove_listener`` to stop deliveries."""

    on_added: ItemCallback | None = None
    on_removed: ItemCallback | None = None
    active: bool = field(default=True, init=False)

    def deliver(self, change: Change) -> None:
        if not self.active:
            return
        callback = self.on_added if change.kind == "added" else self.on_removed
        if callback is not None:
            try:
                callback(BagItem(change.name, change.data))
            except Exception:
                log.exception("bag listener failed on %s %s", change.kind, change.name)


def _listener_changes(changes: Sequence[Change]) -> list[Change]:
    """Maps a data change (someone ``set`` an item) onto removal of the old and addition of the new."""
    mapped: list[Change] = []
    for change in changes:
        if change.kind == "changed":
            mapped.append(Change("removed", change.name, change.previous or b""))
            mapped.append(Change("added", change.name, change.data))
        else:
            mapped.append(change)
    return mapped


class DistributedBag(Lifecycled):
    """Items under ``path``; see the module documentation for the guarantees."""

    def __init__(self, client: KazooClient, path: str, *, op_timeout: float = 10.0) -> None:
        self._zk = BoundedZk(client, op_timeout)
        self._path = validate_path(path)
        self._op_timeout = op_timeout
        self._listeners: list[BagListener] = []
        number = next(_ids)
        self._callbacks = SerialExecutor(f"rebalanser-bag-{number}-callbacks")
        self._mirror = ChildMirror(
            client,
            self._path,
            self._on_changes,
            watch_data=False,
            thread_name=f"rebalanser-bag-{number}",
            op_timeout=op_timeout,
        )

    @property
    def path(self) -> str:
        return self._path

    def start(self) -> None:
        """Creates the base znode if needed and starts listening for changes."""
        retry(partial(self._zk.ensure_path, self._path), self._op_timeout)
        self._callbacks.start()
        self._mirror.start()
        self._started = True

    def stop(self) -> None:
        """Stops listening; callbacks already queued are still delivered before this returns."""
        self._mirror.stop()
        self._callbacks.stop()
        self._closed = True

    # -- writes and reads ---------------------------------------------------------------------------

    def add(self, data: bytes = b"", *, item_id: str | None = None, ephemeral: bool = False) -> str:
        """Adds an item and returns its id (a fresh UUID unless ``item_id`` is given).

        Raises ``ItemExistsError`` if ``item_id`` is already taken.
        """
        name = uuid.uuid4().hex if item_id is None else validate_name(item_id, "item id")
        try:
            path = join(self._path, name)
            create_once(self._zk, path, bytes(data), ephemeral=ephemeral, timeout=self._op_timeout)
        except NodeExistsError:
            raise ItemExistsError(f"bag {self._path} already has an item {name!r}") from None
        return name

    def remove(self, item_id: str) -> bool:
        """Removes an item; ``False`` if no such item was there."""
        path = join(self._path, validate_name(item_id, "item id"))
        attempts = 0

        def delete() -> bool:
            nonlocal attempts
            attempts += 1
            try:
                self._zk.delete(path)
            except NoNodeError:
                return attempts > 1  # a retry may find the node our lost first attempt deleted
            return True

        return retry(delete, self._op_timeout)

    def get(self, item_id: str) -> bytes | None:
        """The item's data as stored in ZooKeeper now, or ``None``."""
        path = join(self._path, validate_name(item_id, "item id"))
        try:
            data, _ = retry(partial(self._zk.get, path), self._op_timeout)
        except NoNodeError:
            return None
        return data

    def items(self) -> dict[str, bytes]:
        """All items as stored in ZooKeeper now (one read per item)."""
        try:
            names = retry(partial(self._zk.get_children, self._path), self._op_timeout)
        except NoNodeError:
            return {}
        found: dict[str, bytes] = {}
        for name in sorted(names):
            data = self.get(name)
            if data is not None:
                found[name] = data
        return found

    def known_items(self) -> dict[str, bytes]:
        """The items as last reported to listeners (no ZooKeeper request)."""
        return self._mirror.snapshot()

    # -- listeners ----------------------------------------------------------------------------------

    def add_listener(
        self, on_added: ItemCallback | None = None, on_removed: ItemCallback | None = None
    ) -> BagListener:
        """Registers callbacks; the current items are first replayed to ``on_added``."""
        listener = BagListener(on_added, on_removed)
        self._mirror.run_in_order(partial(self._register, listener))
        return listener

    def remove_listener(self, listener: BagListener) -> None:
        """No callback reaches ``listener`` once this returns (except one already running)."""
        listener.active = False
        self._mirror.run_in_order(partial(self._unregister, listener))

    def _register(self, listener: BagListener) -> None:
        self._listeners.append(listener)
        replay = [Change("added", name, data) for name, data in sorted(self._mirror.snapshot().items())]
        self._callbacks.spawn(partial(self._deliver, (listener,), replay))

    def _unregister(self, listener: BagListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _on_changes(self, changes: Sequence[Change], snapshot: Mapping[str, bytes]) -> None:
        # Runs on the mirror thread: the listener set is captured here, in order with (un)registration.
        if changes:
            self._callbacks.spawn(partial(self._deliver, tuple(self._listeners), _listener_changes(changes)))

    @staticmethod
    def _deliver(listeners: Sequence[BagListener], changes: Sequence[Change]) -> None:
        for change in changes:
            for listener in listeners:
                listener.deliver(change)
