"""The ZooKeeper connection of a member: a KazooClient that records each handshake (with the negotiated
session timeout) before it reports CONNECTED, and a prober that renews the self-fencing
:class:`~rebalanser.lease.Lease` through the leader."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import Connect
from kazoo.retry import KazooRetry
from kazoo.security import make_digest_acl

from rebalanser.batchedsends import BatchedSends
from rebalanser.bufferedreads import BufferedConnection
from rebalanser.credentials import (
    PasswordFile,
    PasswordFileError,
    PasswordWatcher,
    operator_acl,
    read_password,
)
from rebalanser.errors import InvalidInputError
from rebalanser.kazoo_private import requested_timeout, use_connection_class
from rebalanser.lease import RELAY_SHARE, LeaderEvidence, Lease, now_ns
from rebalanser.options import Options
from rebalanser.pollselect import PollingHandler
from rebalanser.zk import session_id

__all__ = [
    "Handshake", "Handshakes", "LeaseProber", "handshakes", "make_client", "password_watcher", "session_id",
    "session_timeout",
]

log = logging.getLogger(__name__)

PROBE_SHARE = 0.1  # probe period as a share of T: it bounds how far back the proven instant lies
_IDLE_WAIT = 0.5  # seconds: the longest the prober sleeps while disconnected
_HANDSHAKES = "rebalanser_handshakes"
_PASSWORD = "rebalanser_password"


@dataclass(frozen=True)
class Handshake:
    """One connection kazoo established: its number, session, negotiated timeout (seconds) and the
    lease-clock instant just before the connect request was sent."""

    connection: int
    session_id: int
    timeout: float
    sent_ns: int


class Handshakes:
    """The handshakes of one client, newest last (written by kazoo's connection thread)."""

    def __init__(self, requested_timeout: float) -> None:
        self.requested_timeout = requested_timeout
        self._changed = threading.Condition()
        self._latest: Handshake | None = None

    @property
    def connection(self) -> int:
        """The number of the latest connection (0 before the first): a claim verified on an earlier
        one is no longer verified (:mod:`rebalanser.claimcheck`)."""
        latest = self._latest
        return latest.connection if latest is not None else 0

    @property
    def latest(self) -> Handshake | None:
        return self._latest

    def record(self, session_id: int, timeout: float, sent_ns: int) -> None:
        with self._changed:
            number = self._latest.connection + 1 if self._latest is not None else 1
            self._latest = Handshake(number, session_id, timeout, sent_ns)
            self._changed.notify_all()

    def wait_newer(self, connection: int, timeout: float) -> Handshake | None:
        """Waits up to ``timeout`` for a handshake after connection number ``connection``."""
        with self._changed:
            self._changed.wait_for(lambda: self._latest is not None and self._latest.connection > connection, timeout)
            return self._latest


class _RecordingConnection(BatchedSends, BufferedConnection):
    """kazoo keeps the negotiated timeout to itself and reports CONNECTED before returning from the
    handshake: record it here, inside the handshake, so nothing can see CONNECTED with a stale T.
    Its reads are buffered (:mod:`rebalanser.bufferedreads`), and the requests queued at one turn of
    its loop are sent together (:mod:`rebalanser.batchedsends`)."""

    def _invoke(self, timeout: float, request: Any, xid: int | None = None) -> Any:
        if not isinstance(request, Connect):
            return super()._invoke(timeout, request, xid)
        sent = now_ns()
        result = super()._invoke(timeout, request, xid)
        answer = result[0]
        if answer.time_out > 0:
            handshakes(self.client).record(int(answer.session_id), answer.time_out / 1000.0, sent)
        return result


def make_client(options: Options) -> KazooClient:
    auth = None
    acl = None
    source = options.credentials
    extra = [operator_acl(options.operator_id)] if options.operator_id is not None else []
    if isinstance(source, PasswordFile):
        try:
            password = read_password(source.path)
        except PasswordFileError as exc:
            raise InvalidInputError(str(exc)) from exc
        auth = [("digest", f"{source.username}:{password}")]
    elif source is not None:
        user, password = source
        auth = [("digest", f"{user}:{password}")]
        acl = [make_digest_acl(user, password, all=True), *extra]
    elif options.certificate_id is not None:
        acl = [operator_acl(options.certificate_id)]  # x509:<subject>, every permission
    zk = KazooClient(
        **(options.tls.kazoo_arguments() if options.tls is not None else {}),
        hosts=options.hosts,
        timeout=options.session_timeout,
        handler=PollingHandler(),
        auth_data=auth,
        default_acl=acl,
        connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
        command_retry=KazooRetry(max_tries=5, delay=0.05, max_delay=1.0),
    )
    use_connection_class(zk, _RecordingConnection)
    setattr(zk, _HANDSHAKES, Handshakes(options.session_timeout))
    if isinstance(source, PasswordFile):
        setattr(zk, _PASSWORD, PasswordWatcher(zk, source, password, extra_acl=extra))  # sets default_acl
    return zk


def password_watcher(zk: KazooClient) -> PasswordWatcher | None:
    """The watcher of the client's password file (None: fixed credentials or none); its owner starts
    and stops it."""
    found = getattr(zk, _PASSWORD, None)
    assert found is None or isinstance(found, PasswordWatcher)
    return found


def handshakes(zk: KazooClient) -> Handshakes:
    found = getattr(zk, _HANDSHAKES, None)
    if found is None:
        found = Handshakes(requested_timeout(zk))
        setattr(zk, _HANDSHAKES, found)
    assert isinstance(found, Handshakes)
    return found


def session_timeout(zk: KazooClient) -> float:
    """The negotiated session timeout of the latest handshake (the requested one before any)."""
    log_ = handshakes(zk)
    latest = log_.latest
    return latest.timeout if latest is not None else log_.requested_timeout


class LeaseProber:
    """Sends a ``sync`` every ``PROBE_SHARE * T`` and renews the lease from the instant the answers
    prove (:class:`~rebalanser.lease.LeaderEvidence`). Calls ``on_expired`` (from its own thread) when
    the lease runs out. While disconnected it waits for the next handshake instead of probing."""

    def __init__(self, zk: KazooClient, path: str, lease: Lease, on_expired: Callable[[], None]) -> None:
        self._zk, self._path, self._lease, self._on_expired = zk, path, lease, on_expired
        self._handshakes = handshakes(zk)
        self._evidence = LeaderEvidence()
        self._lock = threading.Lock()  # evidence and expiry reports: probe_once also runs on the member thread
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
        """One sync, waited for up to T/3; True if it was answered (the lease renewed from it)."""
        shake = self._current()
        if shake is None:
            return False
        sent = now_ns()
        try:
            pending = self._zk.sync_async(self._path)
        except Exception as exc:
            log.debug("lease probe not sent: %r", exc)
            return False
        deadline = time.monotonic() + shake.timeout / 3
        while True:
            # Waited for in slices that end at the lease's expiry, so that it is reported on time.
            try:
                pending.get(timeout=max(0.001, min(deadline - time.monotonic(), self._until_expiry())))
                break
            except KazooTimeoutError:
                self._check_expiry()
                if time.monotonic() >= deadline:
                    return False
            except Exception as exc:
                log.debug("lease probe failed: %r", exc)
                return False
        answered = now_ns()
        if self._handshakes.latest is not shake:
            return False  # another connection meanwhile: the answer may not belong to this one's evidence
        with self._lock:
            proven = self._evidence.answered(shake.connection, sent, answered, int(shake.timeout * RELAY_SHARE * 1e9))
        self._lease.renew(shake.session_id, proven, shake.timeout)
        return True

    # -- internals -----------------------------------------------------------------------------

    def _current(self) -> Handshake | None:
        shake = self._handshakes.latest
        if shake is None or not self._zk.connected or session_id(self._zk) != shake.session_id:
            return None
        with self._lock:
            proven = self._evidence.connected(shake.connection, shake.sent_ns)
        self._lease.renew(shake.session_id, proven, shake.timeout)
        return shake

    def _until_expiry(self) -> float:
        """Seconds until the lease expiry still to be reported (a long time if there is none)."""
        expires = self._lease.view.expires_ns
        if not expires or expires == self._reported_expiry:
            return 3600.0
        return max(0.0, (expires - now_ns()) / 1e9)

    def _run(self) -> None:
        while not self._stopped.is_set():
            shake = self._handshakes.latest
            period = (shake.timeout if shake is not None else self._handshakes.requested_timeout) * PROBE_SHARE
            started = time.monotonic()
            if shake is None or not self._zk.connected:
                # No spinning while disconnected: wake at the next handshake, at the lease's end (to
                # report it), or after one period (at most _IDLE_WAIT, to notice stop()).
                connection = shake.connection if shake is not None else 0
                self._handshakes.wait_newer(connection, min(period, _IDLE_WAIT, self._until_expiry() + 0.001))
                self._check_expiry()
                continue
            self.probe_once()
            self._check_expiry()
            while not self._stopped.is_set():
                left = started + period - time.monotonic()
                if left <= 0:
                    break
                self._stopped.wait(min(left, self._until_expiry() + 0.001))
                self._check_expiry()

    def _check_expiry(self) -> None:
        with self._lock:
            view = self._lease.view
            if not view.expires_ns or view.expires_ns == self._reported_expiry or now_ns() < view.expires_ns:
                return
            self._reported_expiry = view.expires_ns
        self._on_expired()
