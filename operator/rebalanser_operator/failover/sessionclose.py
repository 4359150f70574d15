"""Confirmed-death failover, the session's end: attaches to a dead member's session and closes it.

    closer = SessionCloser.like(zk)           # the group's hosts, TLS material and credentials
    outcome = closer.close(session_id, password)   # Closed.DONE / Closed.EXPIRED; Unreachable: retry later

Closing a session is what its expiry does, brought forward: ZooKeeper deletes every ephemeral node of
that session and nothing else, in one transaction, and refuses every later request of it. The session is
named by its id and password (``KazooClient(client_id=(id, password))``); ZooKeeper's session ids are
never handed out twice, so the close can end no other session.

Guarantees: a session that has already expired (or a wrong password: the server answers both the same
way) is reported as :attr:`Closed.EXPIRED`, and no session is opened in its place: each attempt talks to
one server with one handshake (kazoo, left to itself, would open a fresh session on the next server after
an expired answer). :attr:`Closed.DONE` only once the server has answered the close, which it does after
applying it. Anything else (no server reachable, the connection dropped before the answer) raises
:class:`Unreachable`: the session may or may not be closed, and its expiry ends it otherwise.

The attach asks for a short session timeout (:data:`ATTACH_TIMEOUT`): ZooKeeper renews the session with
the timeout of whoever is attached, so an operator that dies between the attach and the close leaves the
session to expire within that time of its connection dropping, not the member's ``T``.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.protocol.states import KeeperState
from kazoo.retry import KazooRetry
from rebalanser.kazoo_private import StateObservingClient

log = logging.getLogger(__name__)
#: The attaching clients' own kazoo logger. Errors only: an expired answer is an expected outcome here (kazoo
#: warns of it), and kazoo writes the session's password at its lowest (BLATHER) level.
_kazoo_log = logging.getLogger(f"{__name__}.kazoo")
_kazoo_log.setLevel(logging.ERROR)

#: The session timeout asked for while attached (seconds; the server raises it to its minimum if lower).
ATTACH_TIMEOUT = 4.0
_ANSWERS = (KeeperState.CONNECTED, KeeperState.CONNECTED_RO, KeeperState.EXPIRED_SESSION,
            KeeperState.AUTH_FAILED, KeeperState.CLOSED)


class Closed(enum.Enum):
    DONE = "closed"  # the server applied our close: the session's ephemeral nodes are gone
    EXPIRED = "expired"  # the session had already ended (or the password is not its own): nothing to do


class Unreachable(KazooException):  # type: ignore[misc]
    """No server answered the attach and the close; the session's fate is unknown (its expiry ends it)."""


class _Attachment(StateObservingClient):
    """A client that keeps the session states its connection went through, so the handshake's answer
    (connected, expired, refused) and the close's (closed, or a drop first) are known for certain."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.states: list[KeeperState] = []
        self.answered = threading.Event()

    def on_state(self, state: KeeperState) -> None:
        self.states.append(state)
        if state in _ANSWERS:
            self.answered.set()


@dataclass(frozen=True)
class SessionCloser:
    """Closes sessions of one ensemble, connecting as the group's own client does (``hosts``: host and
    port pairs; ``options``: kazoo's TLS arguments; ``auth``: the credentials, sent after the handshake)."""

    hosts: tuple[tuple[str, int], ...]
    options: dict[str, Any] = field(default_factory=dict, repr=False)
    auth: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    wait: float = 10.0

    @staticmethod
    def like(zk: KazooClient, wait: float = 10.0) -> SessionCloser:
        """Connects to what ``zk`` connects to, with its TLS material and credentials."""
        tls = {name: getattr(zk, name) for name in ("use_ssl", "certfile", "keyfile", "keyfile_password", "ca",
                                                    "verify_certs", "check_hostname")}
        return SessionCloser(tuple(zk.hosts), tls, tuple(sorted(zk.auth_data)), wait)

    def close(self, session_id: int, password: bytes) -> Closed:
        """Ends session ``session_id``: tries the servers in random order until one answers."""
        hosts = list(self.hosts)
        random.shuffle(hosts)
        for host, port in hosts:
            outcome = self._close_on(_address(host, port), session_id, password)
            if outcome is not None:
                return outcome
        raise Unreachable(f"no server of {_addresses(self.hosts)} answered the close of session 0x{session_id:x}")

    def _close_on(self, address: str, session_id: int, password: bytes) -> Closed | None:
        """One server, one handshake (no retry: an expired answer ends the attempt), then the close."""
        client = _Attachment(hosts=address, timeout=ATTACH_TIMEOUT, client_id=(session_id, password),
                             auth_data=list(self.auth) or None, connection_retry=KazooRetry(max_tries=0),
                             logger=_kazoo_log, **self.options)
        try:
            client.start_async()
            if not client.answered.wait(self.wait):
                return None
            answer = next(state for state in client.states if state in _ANSWERS)
            if answer is KeeperState.EXPIRED_SESSION:
                return Closed.EXPIRED
            if answer is not KeeperState.CONNECTED or _session(client) != session_id:
                log.info("attaching to session 0x%x at %s: %s", session_id, address, answer)
                return None
            client.stop()  # sends the close and waits for the server's answer (or the connection's drop)
            after = client.states[client.states.index(KeeperState.CONNECTED) + 1:]
            return Closed.DONE if after[:1] == [KeeperState.CLOSED] else None
        finally:
            client.stop()
            client.close()


def _session(client: KazooClient) -> int:
    ids = client.client_id
    return int(ids[0]) if ids else 0


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _addresses(hosts: Sequence[tuple[str, int]]) -> str:
    return ",".join(_address(host, port) for host, port in hosts)
