"""Service discovery: instances register their configuration; readers list, pick or watch them.

Usage::

    discovery = Discovery(client, "/myapp/services", cache_file="/var/cache/myapp/discovery.json")
    discovery.register("search", "pod-7", {"host": "10.0.0.7", "port": 9200})
    discovery.register("search", "pod-8", load_config(open("instance.yaml").read()))  # JSON or YAML text
    discovery.instances("search")          # every instance, as ServiceInstance(service, instance_id, config)
    discovery.pick("search")               # one at random on each call (None if there is none)
    handle = discovery.watch("search", lambda instances: print(instances))
    discovery.stop()                       # unregisters our instances, stops watching (or: with Discovery(...))

An instance is an ephemeral znode ``<path>/<service>/<instance id>`` whose data is its configuration as
JSON, so it is listed exactly while the registering session lives.

What it guarantees:

* Registration never deletes and re-creates a znode. If the instance's znode already exists and belongs
  to our session, its data is updated in place (a versioned ``set``); if it belongs to another session
  (say a previous incarnation of the same pod whose session has not expired yet), ``register`` raises
  ``InstanceConflictError`` — or, with ``wait=<seconds>``, waits that long for the other session's znode
  to go. Another writer's instance is never removed by us.
* After a session expiry every instance registered through this object is registered again, by the
  discovery's own thread, as soon as the new session is established (the state listener only hands the
  event over; it never talks to ZooKeeper itself). ``close``/``unregister`` stop that.
* ``instances`` returns every instance: from the watch mirror when the service is watched, else from a
  fresh read of ZooKeeper. ``pick`` chooses uniformly at random among them, anew on every call.
* Watch callbacks get the full list of instances, first when registered and then after each change,
  in order, on one callback thread per ``Discovery`` (never on kazoo's threads). They are driven by a
  children watch on the service and a data watch on each instance.
* With ``cache_file``, the instances of every service read or watched are written to that JSON file on
  every change (atomically), and when ZooKeeper cannot be reached ``instances``/``pick`` answer from the
  last known list — the watch mirror, else the file — instead of failing.
* Configuration is JSON; YAML is accepted only through ``yaml.safe_load`` (``load_config``, and when
  reading a znode that is not JSON), which builds plain data and never arbitrary Python objects. YAML
  needs the ``rebalanser[recipes]`` extra (PyYAML); without it, text that is not JSON is rejected.

What it does not promise:

* Freshness. An instance whose process died stays listed until its session times out; a cached or
  mirrored answer given while ZooKeeper is unreachable can be arbitrarily old. Watch callbacks can skip
  intermediate states (several changes between two reads are reported as one).
* Re-registration after expiry can find the instance id taken by another session; that is logged and
  retried at the next reconnect, not waited for.
* Instances whose data is neither JSON nor YAML mapping are skipped (and logged).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError

from rebalanser.lifecycle import Lifecycled, deprecated_alias
from rebalanser.zk import (
    TRANSIENT_ERRORS,
    BoundedZk,
    join,
    owned_by_session,
    retry,
    session_id,
    validate_name,
    validate_path,
)

from ._executor import SerialExecutor
from ._json_cache import Instances, JsonFileCache
from ._mirror import Change, ChildMirror
from ._session import StateRelay

log = logging.getLogger(__name__)

_ids = itertools.count(1)
REPUBLISH_RETRY = 0.5


class InstanceConflictError(RuntimeError):
    """The instance id is registered by another ZooKeeper session (or is a persistent znode)."""


class DiscoveryUnavailableError(RuntimeError):
    """ZooKeeper cannot be reached and nothing is known (no watch, no cache entry) for the service."""


@dataclass(frozen=True)
class ServiceInstance:
    service: str
    instance_id: str
    config: Mapping[str, Any]


WatchCallback = Callable[[list[ServiceInstance]], None]


@dataclass(eq=False)
class DiscoveryWatch:
    """A registered watch callback; pass it to ``unwatch`` to stop it."""

    service: str
    callback: WatchCallback
    active: bool = field(default=True, init=False)

    def deliver(self, instances: list[ServiceInstance]) -> None:
        if self.active:
            try:
                self.callback(list(instances))
            except Exception:
                log.exception("discovery watch callback for %s failed", self.service)


def load_config(text: str | bytes) -> dict[str, Any]:
    """Parses JSON, or YAML with ``yaml.safe_load`` (plain data only), into a mapping.

    YAML needs the ``rebalanser[recipes]`` extra; without it only JSON is read.
    """
    try:
        value = json.loads(text)
    except ValueError:
        try:
            import yaml
        except ImportError:
            raise ValueError("configuration is not JSON (YAML needs the extra: rebalanser[recipes])") from None
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"configuration is neither JSON nor safe YAML: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"configuration must be a mapping, got {type(value).__name__}")
    return value


def encode_config(config: Mapping[str, Any]) -> bytes:
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":")).encode()


def decode_instances(service: str, data_by_id: Mapping[str, bytes]) -> list[ServiceInstance]:
    found = []
    for instance_id, data in sorted(data_by_id.items()):
        try:
            found.append(ServiceInstance(service, instance_id, load_config(data)))
        except ValueError:
            log.warning("skipping instance %s/%s: undecodable configuration", service, instance_id)
    return found


def _conflict(path: str, owner: int) -> InstanceConflictError:
    if owner == 0:
        return InstanceConflictError(f"{path} exists as a persistent znode; remove it to register there")
    return InstanceConflictError(
        f"{path} is registered by another session (0x{owner:x}); it goes when that session ends "
        "(pass wait=<seconds> to wait for that)"
    )


class Discovery(Lifecycled):
    """Registers and finds service instances under ``path``; see the module documentation."""

    def __init__(
        self,
        client: KazooClient,
        path: str,
        *,
        cache_file: str | os.PathLike[str] | None = None,
        op_timeout: float = 10.0,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._zk = BoundedZk(client, op_timeout)
        self._path = validate_path(path)
        self._cache = JsonFileCache(cache_file) if cache_file is not None else None
        self._op_timeout = op_timeout
        self._rng = rng or random.Random()
        self._number = next(_ids)
        self._loop = SerialExecutor(f"rebalanser-discovery-{self._number}")
        self._callbacks = SerialExecutor(f"rebalanser-discovery-{self._number}-callbacks")
        self._relay = StateRelay(client, self._loop, self._on_state)
        self._lock = threading.Lock()  # guards the dictionaries below and the start/stop flags
        self._publish_lock = threading.Lock()  # serialises writes of our instance znodes
        self._registrations: dict[tuple[str, str], bytes] = {}
        self._mirrors: dict[str, ChildMirror] = {}
        self._watches: dict[str, list[DiscoveryWatch]] = {}
        self._started = False
        self._closed = False


    # -- registration ---------------------------------------------------------------------------------

    def register(self, service: str, instance_id: str, config: Mapping[str, Any], *, wait: float = 0.0) -> None:
        """Registers (or updates in place) our instance; see the module documentation for conflicts."""
        path = self._instance_path(service, instance_id)
        data = encode_config(config)
        self.start()
        deadline = time.monotonic() + wait
        while True:
            with self._publish_lock:
                owner = retry(partial(self._try_publish, path, data), self._op_timeout)
                if owner is None:
                    self._registrations[(service, instance_id)] = data
                    return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _conflict(path, owner)
            retry(partial(self._await_deletion, path, remaining), self._op_timeout)

    def unregister(self, service: str, instance_id: str) -> None:
        """Stops re-registering the instance and deletes its znode if it is ours."""
        path = self._instance_path(service, instance_id)
        with self._publish_lock:
            self._registrations.pop((service, instance_id), None)
            retry(partial(self._delete_own, path), self._op_timeout)

    def _try_publish(self, path: str, data: bytes) -> int | None:
        """Creates or updates our ephemeral znode; returns the other owner's session if it is not ours."""
        while True:
            try:
                self._zk.create(path, data, ephemeral=True)
                return None
            except NodeExistsError:
                pass
            try:
                current, stat = self._zk.get(path)
            except NoNodeError:
                continue  # gone meanwhile: create it
            mine = session_id(self._client)
            if not mine:
                raise ConnectionLoss("disconnected while registering")
            if int(stat.ephemeralOwner) != mine:
                return int(stat.ephemeralOwner)
            if current == data:
                return None
            try:
                self._zk.set(path, data, version=stat.version)
                return None
            except (BadVersionError, NoNodeError):
                continue  # changed under us (by our own earlier attempt): look again

    def _await_deletion(self, path: str, timeout: float) -> None:
        gone = threading.Event()
        if self._zk.exists(path, watch=lambda event: gone.set()) is not None:
            gone.wait(timeout)

    def _delete_own(self, path: str) -> None:
        try:
            _, stat = self._zk.get(path)
            if owned_by_session(stat, self._client):
                self._zk.delete(path, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._republish_all()

    def _republish_all(self) -> None:
        """After a (re)connect: make sure each of our instances is registered in the current session."""
        for service, instance_id in list(self._registrations):
            try:
                self._republish(service, instance_id)
            except TRANSIENT_ERRORS:
                if self._client.connected:
                    self._loop.call_later(REPUBLISH_RETRY, self._republish_all)
                return

    def _republish(self, service: str, instance_id: str) -> None:
        path = self._instance_path(service, instance_id)
        with self._publish_lock:
            data = self._registrations.get((service, instance_id))
            owner = None if data is None else self._try_publish(path, data)
        if owner is not None:
            log.error("cannot re-register %s: %s", path, _conflict(path, owner))

    # -- reading ----------------------------------------------------------------------------------------

    def instances(self, service: str) -> list[ServiceInstance]:
        """Every instance of ``service`` (see the module documentation for where the answer comes from)."""
        validate_name(service, "service")
        mirror = self._mirrors.get(service)
        if mirror is not None and mirror.synced.is_set():
            return decode_instances(service, mirror.snapshot())
        try:
            if not self._client.connected:  # a request now would wait for the reconnect
                raise ConnectionLoss("not connected to ZooKeeper")
            found = self._read(service)
        except TRANSIENT_ERRORS as exc:
            return self._from_cache(service, exc)
        self._remember(service, found)
        return found

    def pick(self, service: str) -> ServiceInstance | None:
        """One instance chosen at random (anew on each call), or ``None`` if there are none."""
        found = self.instances(service)
        return self._rng.choice(found) if found else None

    def watch(self, service: str, callback: WatchCallback) -> DiscoveryWatch:
        """Calls ``callback(instances)`` now and after every change, on the discovery's callback thread."""
        validate_name(service, "service")
        self.start()
        handle = DiscoveryWatch(service, callback)
        mirror = self._mirror_for(service)
        mirror.run_in_order(partial(self._add_watch, handle, mirror))
        return handle

    def unwatch(self, handle: DiscoveryWatch) -> None:
        handle.active = False
        with self._lock:
            handles = self._watches.get(handle.service, [])
            if handle in handles:
                handles.remove(handle)

    def _read(self, service: str) -> list[ServiceInstance]:
        base = join(self._path, service)
        try:
            names = self._zk.get_children(base)
        except NoNodeError:
            return []
        data_by_id: dict[str, bytes] = {}
        for name in names:
            try:
                data, _ = self._zk.get(join(base, name))
            except NoNodeError:
                continue
            data_by_id[name] = data
        return decode_instances(service, data_by_id)

    def _from_cache(self, service: str, error: Exception) -> list[ServiceInstance]:
        mirror = self._mirrors.get(service)
        if mirror is not None and mirror.synced.is_set():
            return decode_instances(service, mirror.snapshot())
        cached = self._cache.load(service) if self._cache is not None else None
        if cached is None:
            raise DiscoveryUnavailableError(
                f"ZooKeeper is unreachable and nothing is cached for service {service!r}"
            ) from error
        return [ServiceInstance(service, i, config) for i, config in sorted(cached.items())]

    def _remember(self, service: str, instances: Sequence[ServiceInstance]) -> None:
        if self._cache is not None:
            found: Instances = {i.instance_id: dict(i.config) for i in instances}
            self._cache.store(service, found)

    def _mirror_for(self, service: str) -> ChildMirror:
        with self._lock:
            mirror = self._mirrors.get(service)
            if mirror is None:
                mirror = ChildMirror(
                    self._client,
                    join(self._path, service),
                    partial(self._on_mirror_change, service),
                    watch_data=True,
                    thread_name=f"rebalanser-discovery-{self._number}-{service}",
                    op_timeout=self._op_timeout,
                )
                self._mirrors[service] = mirror
                mirror.start()
        return mirror

    def _add_watch(self, handle: DiscoveryWatch, mirror: ChildMirror) -> None:
        # On the mirror's thread, so the handle sees the current list then every later change, once.
        with self._lock:
            self._watches.setdefault(handle.service, []).append(handle)
        if mirror.synced.is_set():
            current = decode_instances(handle.service, mirror.snapshot())
            self._callbacks.spawn(partial(handle.deliver, current))

    def _on_mirror_change(self, service: str, changes: Sequence[Change], snapshot: Mapping[str, bytes]) -> None:
        instances = decode_instances(service, snapshot)
        self._remember(service, instances)
        with self._lock:
            handles = tuple(self._watches.get(service, ()))
        for handle in handles:
            self._callbacks.spawn(partial(handle.deliver, instances))

    # -- lifecycle --------------------------------------------------------------------------------------

    def _instance_path(self, service: str, instance_id: str) -> str:
        return join(join(self._path, validate_name(service, "service")), validate_name(instance_id, "instance id"))

    def start(self) -> None:
        """Starts the discovery's threads (idempotent; ``register`` and ``watch`` call it too)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this Discovery is stopped")
            if not self._started:
                self._started = True
                self._loop.start()
                self._callbacks.start()
                self._relay.start()

    def close(self) -> None:
        """Deprecated name of :meth:`stop`."""
        deprecated_alias("Discovery.close", "stop")
        self.stop()

    def stop(self) -> None:
        """Unregisters our instances (best effort), stops watching and stops the threads."""
        with self._lock:
            self._closed = True
            mirrors = list(self._mirrors.values())
        for service, instance_id in list(self._registrations):
            try:
                self.unregister(service, instance_id)
            except Exception:
                log.warning("could not unregister %s/%s; it goes with the session", service, instance_id)
        self._relay.stop()
        for mirror in mirrors:
            mirror.stop()
        self._loop.stop()
        self._callbacks.stop()
