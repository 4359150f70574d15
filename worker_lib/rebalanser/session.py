"""The ZooKeeper connection of a member: a KazooClient that remembers the negotiated session timeout,
and a prober that renews the self-fencing :class:`~rebalanser.lease.Lease`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.protocol.connection import ConnectionHandler
from kazoo.retry import KazooRetry
from kazoo.security import make_digest_acl

from rebalanser.lease import Lease
from rebalanser.options import Options

log = logging.getLogger(__name__)


class _NegotiatingConnection(ConnectionHandler):  # type: ignore[misc]
    """kazoo keeps the negotiated timeout to itself; the lease must not assume the requested one."""

    def _connect(self, host: str, hostip: str, port: int) -> tuple[float, float]:
        read_timeout, connect_timeout = super()._connect(host, hostip, port)
        self.client.negotiated_timeout = read_timeout * 1.5 / 1000.0
        return read_timeout, connect_timeout


def make_client(options: Options) -> KazooClient:
    auth = None
    acl = None
    if options.credentials is not None:
        user, password = options.credentials
        auth = [("digest", f"{user}:{password}")]
        acl = [make_digest_acl(user, password, all=True)]
    zk = KazooClient(
        hosts=options.hosts,
        timeout=options.session_timeout,
        auth_data=auth,
        default_acl=acl,
        connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
        command_retry=KazooRetry(max_tries=5, delay=0.05, max_delay=1.0),
    )
    zk._connection.__class__ = _NegotiatingConnection
    zk.negotiated_timeout = options.session_timeout
    return zk


def session_timeout(zk: KazooClient) -> float:
    return float(getattr(zk, "negotiated_timeout", zk._session_timeout / 1000.0))


def session_id(zk: KazooClient) -> int:
    client_id = zk.client_id
    return int(client_id[0]) if client_id else 0


class LeaseProber:
    """Sends a cheap read every T/6 and renews the lease from the moment each acknowledged read was
    sent. Calls ``on_expired`` (from its own thread) when the lease runs out while work is owned."""

    def __init__(self, zk: KazooClient, path: str, lease: Lease, on_expired: Callable[[], None]) -> None:
        self._zk, self._path, self._lease, self._on_expired = zk, path, lease, on_expired
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rebalanser-lease", daemon=True)
        self._reported_expiry = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def probe_once(self) -> bool:
        timeout = session_timeout(self._zk)
        sid = session_id(self._zk)
        if not sid or not self._zk.connected:
            return False
        sent = time.monotonic_ns()
        try:
            self._zk.exists_async(self._path).get(timeout=timeout / 3)
        except Exception:
            return False
        if session_id(self._zk) != sid:
            return False
        self._lease.renew(sid, sent, timeout)
        return True

    def _run(self) -> None:
        while not self._stopped.is_set():
            self.probe_once()
            self._check_expiry()
            period = session_timeout(self._zk) / 6
            wait = min(period, max(0.01, self._lease.remaining() + 0.001))
            self._stopped.wait(wait)

    def _check_expiry(self) -> None:
        view = self._lease.view
        if view.expires_ns and time.monotonic_ns() >= view.expires_ns and view.expires_ns != self._reported_expiry:
            self._reported_expiry = view.expires_ns
            self._on_expired()
