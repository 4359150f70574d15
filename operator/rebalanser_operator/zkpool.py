"""One shared ZooKeeper connection per connect string, TLS material and set of credentials.

    pool = ZooKeeperPool(on_state_change=lambda connect, state: ...)
    zk = pool.acquire("zk-0:2181,zk-1:2181", user="shop/orders", credentials=(digest,))
    if pool.wait_connected(zk, timeout=5): ...
    pool.release("shop/orders")          # the last user closes the connection

Guarantees: users share a :class:`KazooClient` only when they connect to the same string with the same
TLS material and the same digest credentials, so a session never holds one tenant's credentials on
behalf of another (ZooKeeper grants a session the rights of every credential added to it); users
without credentials share an anonymous session. The credentials are given to kazoo when the client
is made, and re-sent after every reconnect. Clients are started without blocking and reconnect
forever with capped exponential backoff, so an unreachable ensemble never crashes the operator and a
recovered one is used again without a restart. With ``tls``
(:class:`~rebalanser_operator.zktls.TlsMaterial`), the connection is made over TLS with that material,
and users with other material (a rotated Secret) get a connection of their own: a user whose material
changes moves to a new connection, and the old one closes with its last user; the material's files
(:class:`~rebalanser_operator.zktls.TlsFileStore`) are deleted with the last connection that uses them.
``on_state_change`` and :meth:`ZooKeeperPool.when_connected`'s callbacks run on kazoo's connection
thread: they must only hand work to another thread. Waiting for a connection never needs a thread:
:meth:`ZooKeeperPool.when_connected` calls back when the session connects.

With the operator's own ``identity`` (:class:`~rebalanser_operator.identity.OperatorIdentity`), users
share a client when they name the same ensemble and TLS material: every session authenticates as the
operator, and the credentials users pass are ignored (they only name a group's digest in its ACL), so
the number of sessions does not grow with groups or Secrets. With an x509 identity
(:attr:`~rebalanser_operator.identity.OperatorIdentity.tls`), the operator's sessions are made over TLS
with the identity's certificate, key and CA instead of a group's material, whatever the group names.
Only ``tenant=True`` asks for a session with exactly the given credentials (and the group's TLS
material) and not the operator's (kept for what a tenant's credentials alone may do: re-ACL the worker
znodes of a rotation, take over a group an older operator created).

Connect strings are keyed and connected to as :func:`~rebalanser_operator.tenancy.normalise_connect`
spells them (``ZK:2181`` and ``zk`` are one session).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kazoo.client import KazooClient, KazooState
from kazoo.retry import KazooRetry

from rebalanser_operator.identity import DigestCredentials as DigestCredentials  # re-exported
from rebalanser_operator.identity import OperatorIdentity
from rebalanser_operator.tenancy import SettingError, normalise_connect
from rebalanser_operator.zkfence import unfenced
from rebalanser_operator.zktls import TlsFileStore, TlsMaterial

log = logging.getLogger(__name__)

StateCallback = Callable[[str, KazooState], None]
#: (normalised connect string, digest of the TLS material or "" for plain TCP, the credentials, whether
#: the session authenticates as the operator's identity)
Key = tuple[str, str, frozenset["DigestCredentials"], bool]


@dataclass(frozen=True)
class Survey:
    """The pool as one user's step sees it when it plans its session (:meth:`ZooKeeperPool.survey`)."""

    key: Key  # the session the user's needs give
    held: Key | None  # the session the user holds (None: none)
    holders: frozenset[str]  # who holds ``key`` (empty: it is not open)
    neighbours: int  # open sessions held by the other users of the prefix asked about


@dataclass
class _Entry:
    client: KazooClient
    users: set[str] = field(default_factory=set)
    connected: threading.Event = field(default_factory=threading.Event)
    closing: bool = False
    waiters: list[Callable[[], None]] = field(default_factory=list)  # called once, when connected
    auths: frozenset[DigestCredentials] = frozenset()
    tls: TlsMaterial | None = None


class ZooKeeperPool:
    """A small registry of started :class:`KazooClient` objects keyed by connect string and TLS material."""

    def __init__(
        self,
        *,
        default_session_timeout: float = 10.0,
        max_reconnect_delay: float = 5.0,
        on_state_change: StateCallback | None = None,
        identity: OperatorIdentity | None = None,
        files: TlsFileStore | None = None,
    ) -> None:
        self.identity = identity
        self._default_session_timeout = default_session_timeout
        self._max_reconnect_delay = max_reconnect_delay
        self._on_state_change = on_state_change
        self._lock = threading.Lock()
        self._entries: dict[Key, _Entry] = {}
        self._user_connect: dict[str, Key] = {}
        self._files = files if files is not None else TlsFileStore()

    def acquire(
        self, connect: str, user: str, session_timeout: float | None = None, tls: TlsMaterial | None = None,
        credentials: Iterable[DigestCredentials] = (), tenant: bool = False,
    ) -> KazooClient:
        """The shared client for ``connect`` (over TLS with ``tls``, authenticated with exactly
        ``credentials``, or as the operator's identity when it has one and ``tenant`` is False), started
        if new; ``user`` is recorded until released.

        A user that switches to another connect string, other TLS material or other credentials releases
        its previous connection. ``session_timeout`` only applies when this call creates the client.
        (A group's steps plan their session first: :func:`~rebalanser_operator.controller.plan.plan_session`.)
        """
        return self.enter(self.session_key(connect, tls, credentials, tenant), user, session_timeout, tls, tenant)

    def session_key(self, connect: str, tls: TlsMaterial | None = None, credentials: Iterable[DigestCredentials] = (),
                    tenant: bool = False) -> Key:
        """The session a user with these needs is given (no I/O): see :meth:`acquire`."""
        return self._key(connect, self._session_tls(tls, tenant), credentials, tenant)

    def survey(self, connect: str, tls: TlsMaterial | None, credentials: Iterable[DigestCredentials], user: str,
               user_prefix: str) -> Survey:
        """What a step of ``user`` plans its session from (no I/O), read at one moment: the session its
        needs give (:meth:`session_key`), the one it holds, who holds the first, and how many open sessions
        other users whose names start with ``user_prefix`` hold (its namespace's other groups)."""
        key = self.session_key(connect, tls, credentials)
        with self._lock:
            entry = self._entries.get(key)
            holders = frozenset(entry.users) if entry is not None else frozenset()
            return Survey(key, self._user_connect.get(user), holders, self._sessions_of(user_prefix, user))

    def holding(self, user: str) -> Key | None:
        """The session ``user`` holds (None: none)."""
        with self._lock:
            return self._user_connect.get(user)

    def holders(self, key: Key) -> set[str]:
        """Who holds session ``key`` (empty: it is not open)."""
        with self._lock:
            entry = self._entries.get(key)
            return set(entry.users) if entry is not None else set()

    def enter(self, key: Key, user: str, session_timeout: float | None = None, tls: TlsMaterial | None = None,
              tenant: bool = False) -> KazooClient:
        """``user`` holds session ``key`` (:meth:`session_key`), started if nobody does; the one it held
        before, if another, is left (and closed with its last user)."""
        tls = self._session_tls(tls, tenant)
        auths = key[2]
        stale: _Entry | None = None
        try:
            with self._lock:
                previous = self._user_connect.get(user)
                if previous is not None and previous != key:
                    stale = self._drop_user(user)
                entry = self._entries.get(key)
                if entry is None:  # TlsStoreFull when its material does not fit: the user has no session
                    entry = self._start(key[0], session_timeout or self._default_session_timeout, tls, auths,
                                         key[3])
                    self._entries[key] = entry
                entry.users.add(user)
                self._user_connect[user] = key
        finally:
            if stale is not None:
                self._close(stale)
        return entry.client

    def release(self, user: str) -> None:
        """Forgets ``user``; closes its connection when nobody else uses it."""
        with self._lock:
            stale = self._drop_user(user)
        if stale is not None:
            self._close(stale)

    def users(self, connect: str, tls: TlsMaterial | None = None,
              credentials: Iterable[DigestCredentials] = (), tenant: bool = False) -> set[str]:
        tls = self._session_tls(tls, tenant)
        key = self._key(connect, tls, credentials, tenant)
        with self._lock:
            entry = self._entries.get(key)
            return set(entry.users) if entry else set()

    def credentials_of(self, client: KazooClient) -> frozenset[DigestCredentials]:
        """The credentials ``client``'s session was opened with (empty for an unknown client)."""
        entry = self._entry_of(client)
        return entry.auths if entry is not None else frozenset()

    def connections(self) -> int:
        with self._lock:
            return len(self._entries)

    def is_connected(self, connect: str, tls: TlsMaterial | None = None,
                     credentials: Iterable[DigestCredentials] = (), tenant: bool = False) -> bool:
        tls = self._session_tls(tls, tenant)
        key = self._key(connect, tls, credentials, tenant)
        with self._lock:
            entry = self._entries.get(key)
        return entry is not None and entry.connected.is_set()

    def wait_connected(self, client: KazooClient, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds for ``client`` to be connected; never raises."""
        entry = self._entry_of(client)
        if entry is None:
            return False
        return entry.connected.wait(timeout)

    def when_connected(self, client: KazooClient, callback: Callable[[], None]) -> Callable[[], None]:
        """Calls ``callback`` once, when ``client``'s session connects (at once if it is connected, on
        kazoo's thread otherwise; never for an unknown or closed client). Returns a function that
        withdraws the callback (a wait given up)."""
        entry = self._entry_of(client)
        if entry is None:
            return lambda: None
        with self._lock:
            ready = entry.connected.is_set()
            if not ready:
                entry.waiters.append(callback)
        if ready:
            callback()

        def withdraw() -> None:
            with self._lock:
                if callback in entry.waiters:
                    entry.waiters.remove(callback)

        return withdraw

    def sessions_of(self, user_prefix: str, *, besides: str = "") -> int:
        """How many open sessions have a user whose name starts with ``user_prefix`` (``besides``, a
        user, not counted)."""
        with self._lock:
            return self._sessions_of(user_prefix, besides)

    def _sessions_of(self, user_prefix: str, besides: str) -> int:
        return sum(1 for entry in self._entries.values()
                   if any(u.startswith(user_prefix) and u != besides for u in entry.users))

    @property
    def files(self) -> TlsFileStore:
        """Where the connections' TLS material is written."""
        return self._files

    def close(self) -> None:
        with self._lock:
            for entry in self._entries.values():
                entry.closing = True
            entries = list(self._entries.values())
            self._entries.clear()
            self._user_connect.clear()
        for entry in entries:
            _close(entry.client)
        self._files.close()

    # ----------------------------------------------------------------------------------- internals

    def _session_tls(self, tls: TlsMaterial | None, tenant: bool) -> TlsMaterial | None:
        """The material a session is opened with: an x509 identity's own for the operator's sessions."""
        if self.identity is None or tenant:
            return tls
        return self.identity.session_tls(tls)

    def _key(self, connect: str, tls: TlsMaterial | None, credentials: Iterable[DigestCredentials],
             tenant: bool) -> Key:
        own = self.identity is not None and not tenant
        try:
            spelled = normalise_connect(connect)
        except SettingError:
            spelled = connect  # refused before it gets here; never a reason to fail the pool
        return (spelled, tls.digest if tls is not None else "", frozenset() if own else frozenset(credentials), own)

    def _entry_of(self, client: KazooClient) -> _Entry | None:
        client = unfenced(client)  # a group's steps see their session through its fence
        with self._lock:
            for entry in self._entries.values():
                if entry.client is client:
                    return entry
        return None

    def _drop_user(self, user: str) -> _Entry | None:
        key = self._user_connect.pop(user, None)
        if key is None:
            return None
        entry = self._entries.get(key)
        if entry is None:
            return None
        entry.users.discard(user)
        if entry.users:
            return None
        del self._entries[key]
        entry.closing = True
        return entry

    def _close(self, entry: _Entry) -> None:
        _close(entry.client)
        if entry.tls is not None:  # counted per entry: one starting with the same material keeps them
            self._files.release(entry.tls)

    def _start(self, connect: str, session_timeout: float, tls: TlsMaterial | None,
               auths: frozenset[DigestCredentials], own: bool) -> _Entry:
        retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=self._max_reconnect_delay)
        options = self._files.acquire(tls).kazoo_arguments() if tls is not None else {}
        auth_data = [("digest", c.auth) for c in sorted(auths, key=lambda c: c.username)]
        if own and self.identity is not None:
            auth_data = [self.identity.auth] if self.identity.auth is not None else []
        client = KazooClient(hosts=connect, timeout=session_timeout, connection_retry=retry,
                             auth_data=auth_data or None, **options)
        entry = _Entry(client=client, tls=tls, auths=auths)

        def listener(state: KazooState) -> None:
            if state == KazooState.CONNECTED:
                with self._lock:
                    entry.connected.set()
                    waiters, entry.waiters = entry.waiters, []
                for waiter in waiters:
                    waiter()
            else:
                entry.connected.clear()
            log.log(logging.DEBUG if entry.closing else logging.INFO, "zookeeper %s: %s", connect, state)
            if self._on_state_change is not None:
                self._on_state_change(connect, state)

        client.add_listener(listener)  # also told about the first CONNECTED
        client.start_async()
        return entry


def _close(client: KazooClient) -> None:
    try:
        client.stop()
        client.close()
    except Exception:  # pragma: no cover - closing must never fail the caller
        log.exception("closing a ZooKeeper client failed")
