"""Bounded waits, event recorders and client helpers for the recipe tests (real ZooKeeper only)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState

T = TypeVar("T")

SESSION_TIMEOUT = 2.0
FAST_RECONNECT = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.3, "max_jitter": 0.1}


def wait_for(predicate: Callable[[], Any], timeout: float, message: str | Callable[[], str]) -> None:
    """Polls ``predicate`` until it is truthy; fails with ``message`` after ``timeout`` seconds.

    ``message`` may be a callable, evaluated only on failure (to describe the state at that moment).
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout}s: {text}")
        time.sleep(0.01)


def make_client(hosts: str, timeout: float = SESSION_TIMEOUT) -> KazooClient:
    """A started client with a short session and quick reconnects (so fault tests stay fast)."""
    client = KazooClient(hosts=hosts, timeout=timeout, connection_retry=dict(FAST_RECONNECT))
    client.start(timeout=15)
    return client


def close_client(client: KazooClient) -> None:
    client.stop()
    client.close()


def expire_session(client: KazooClient, server_hosts: str) -> int:
    """Makes the server expire ``client``'s session; returns the expired session id.

    A second client attaches to the same session (id and password) and closes it, which ends the session
    on the server: its ephemeral nodes go, and ``client`` learns of the expiry when it reconnects.
    """
    # client_id is None while disconnected; the session's id and password are still known to the client.
    session_id, password = client._session_id, client._session_passwd
    twin = KazooClient(hosts=server_hosts, client_id=(session_id, password), timeout=client._session_timeout / 1000)
    twin.start(timeout=15)
    twin.stop()
    twin.close()
    return int(session_id)


def wait_new_session(client: KazooClient, old_session: int, timeout: float = 10.0) -> None:
    wait_for(
        lambda: client.connected and client.client_id is not None and client.client_id[0] != old_session,
        timeout,
        "client never re-connected with a new session after expiry",
    )


class StateLog:
    """Records kazoo state changes (the listener only appends: it runs on kazoo's connection thread)."""

    def __init__(self, client: KazooClient) -> None:
        self.states: list[str] = []
        client.add_listener(self.states.append)

    def wait(self, state: str, timeout: float = 10.0) -> None:
        wait_for(lambda: state in self.states, timeout, lambda: f"client never reached {state}; saw {self.states}")


class Recorder:
    """Thread-safe list of events (usually appended by recipe callbacks) with bounded waits on it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[Any] = []
        self.threads: list[str] = []

    def __call__(self, event: Any = None) -> None:
        with self._lock:
            self._events.append(event)
            self.threads.append(threading.current_thread().name)

    def bind(self, tag: str) -> Callable[..., None]:
        """A callback recording ``(tag, *args)``."""
        return lambda *args: self((tag, *args))

    @property
    def events(self) -> list[Any]:
        with self._lock:
            return list(self._events)

    def wait_for(self, predicate: Callable[[list[Any]], Any], timeout: float, message: str) -> list[Any]:
        wait_for(lambda: predicate(self.events), timeout, lambda: f"{message}; recorded {self.events}")
        return self.events

    def wait_count(self, count: int, timeout: float = 10.0) -> list[Any]:
        return self.wait_for(lambda evs: len(evs) >= count, timeout, f"expected {count} events")


LOST = KazooState.LOST
SUSPENDED = KazooState.SUSPENDED
CONNECTED = KazooState.CONNECTED
