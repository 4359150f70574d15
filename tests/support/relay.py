"""A plain TCP relay on loopback whose traffic can be held, like a silent network partition.

:class:`Relay` listens on one 127.0.0.1 port and forwards every connection it accepts to one target
address, byte for byte. :meth:`Relay.hold` stops all forwarding without closing anything: bytes and
closes wait in the relay (as TCP would keep retransmitting them), and a connection accepted meanwhile
is not dialled through. Neither end can tell a held relay from a network that drops packets: each
notices only through its own timeouts. :meth:`Relay.release` lets everything flow again.

An optional ``first`` function reads the opening bytes of each connection from the connecting side
and returns what to send on in their place (ZooKeeper's election handshake carries an address that
has to be rewritten so that replies also go through relays).

An optional ``hold_on`` predicate is a trip-wire on what the connecting side sends: the first chunk it
matches holds the relay before that chunk is forwarded, and sets :attr:`Relay.tripped`. A test holds
a client at a request of its choosing that way (say, the first that names a node the client created).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

_LINGER_RESET = b"\x01\x00\x00\x00\x00\x00\x00\x00"
_POLL = 0.2  # seconds between checks of a held link for closure


def read_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise EOFError
        chunks += chunk
    return bytes(chunks)


def _close(sock: socket.socket | None) -> None:
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class _Link:
    """One accepted connection and its upstream connection, pumped by two threads."""

    def __init__(self, relay: Relay, client: socket.socket) -> None:
        self.relay = relay
        self.client = client
        self.upstream: socket.socket | None = None
        self.closed = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, name=f"relay-{self.relay.name}", daemon=True).start()

    def _gate(self) -> None:
        """Blocks while the relay is held; EOFError once the link was closed meanwhile."""
        while not self.relay.flowing.wait(_POLL):
            if self.closed.is_set():
                raise EOFError
        if self.closed.is_set():
            raise EOFError

    def _run(self) -> None:
        try:
            self._gate()
            self.upstream = socket.create_connection(self.relay.target, timeout=5)
            self.upstream.settimeout(None)
            self.upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except (OSError, EOFError):
            self.close()
            return
        threading.Thread(target=self._pump, args=(self.upstream, self.client, None), daemon=True,
                         name=f"relay-{self.relay.name}").start()
        self._pump(self.client, self.upstream, self.relay.first, self.relay.trip)

    def _pump(self, src: socket.socket, dst: socket.socket, first: Callable[[socket.socket], bytes] | None,
              trip: Callable[[bytes], object] = lambda _: None) -> None:
        try:
            if first is not None:
                opening = first(src)
                self._gate()
                dst.sendall(opening)
            while True:
                data = src.recv(65536)
                trip(data)
                self._gate()  # a close waits too: a partitioned peer does not see it
                if not data:
                    return
                dst.sendall(data)
        except (OSError, EOFError, ValueError):
            pass
        finally:
            self.close()

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        _close(self.client)
        _close(self.upstream)
        self.relay._forget(self)


class Relay:
    """Forwards connections from ``127.0.0.1:port`` to ``target``; see the module docstring."""

    def __init__(self, target: tuple[str, int], name: str = "",
                 first: Callable[[socket.socket], bytes] | None = None,
                 hold_on: Callable[[bytes], bool] | None = None) -> None:
        self.target = target
        self.name = name or f"{target[0]}:{target[1]}"
        self.first = first
        self.hold_on = hold_on
        self.tripped = threading.Event()
        self.flowing = threading.Event()
        self.flowing.set()
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self._closed = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept_loop, name=f"relay-accept-{self.name}", daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def held(self) -> bool:
        return not self.flowing.is_set()

    def hold(self) -> None:
        self.flowing.clear()

    def release(self) -> None:
        self.flowing.set()

    def trip(self, data: bytes) -> None:
        """Holds the relay at the first chunk from a connecting side that ``hold_on`` matches."""
        if self.hold_on is not None and not self.tripped.is_set() and self.hold_on(data):
            self.hold()
            self.tripped.set()

    def connections(self) -> int:
        with self._lock:
            return len(self._links)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()
        self.flowing.set()

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self, conn)
            with self._lock:
                if self._closed:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                    _close(conn)
                    continue
                self._links.add(link)
            link.start()
