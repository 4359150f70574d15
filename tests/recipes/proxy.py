"""A TCP proxy in front of a real ZooKeeper server, to cut, black-hole or sabotage client connections.

It understands just enough of ZooKeeper's framing (4-byte length prefix; after the connect handshake each
request starts with xid and opcode, each reply with xid) to lose the reply to one chosen create: the
server applies the create, the client only sees its connection drop (``ConnectionLoss``) and then
reconnects to the same session through the proxy. Nothing here fakes ZooKeeper.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

CREATE_OPS = {1, 15, 19, 21}  # create, create2, createContainer, createTTL
PING = 11


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise EOFError
        chunks += chunk
    return bytes(chunks)


def read_frame(sock: socket.socket) -> bytes:
    header = _read_exact(sock, 4)
    (length,) = struct.unpack(">i", header)
    return header + _read_exact(sock, length)


def request_path(frame: bytes) -> str | None:
    """The path of a request frame (length, xid, opcode, then the path as a length-prefixed string)."""
    if len(frame) < 16:
        return None
    (size,) = struct.unpack(">i", frame[12:16])
    return frame[16 : 16 + size].decode(errors="replace") if size >= 0 else None


@dataclass
class ReplyLoss:
    """Armed: the next create under ``prefix`` is applied but its reply is lost with the connection."""

    prefix: str
    fired: threading.Event = field(default_factory=threading.Event)


class _Pipe:
    """One client connection and its upstream connection, pumped by two threads."""

    def __init__(self, proxy: ZkProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.doomed_xid: int | None = None
        self.trigger: ReplyLoss | None = None

    def start(self) -> None:
        threading.Thread(target=self._guard, args=(self._client_to_server,), daemon=True).start()
        threading.Thread(target=self._guard, args=(self._server_to_client,), daemon=True).start()

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _guard(self, pump: Callable[[], None]) -> None:
        try:
            pump()
        except (OSError, EOFError):
            pass
        finally:
            self.close()
            self.proxy.forget(self)

    def _client_to_server(self) -> None:
        self._forward(read_frame(self.client), self.upstream)  # connect request: no xid/opcode
        while True:
            frame = read_frame(self.client)
            xid, opcode = struct.unpack(">ii", frame[4:12])
            self.proxy.note_request(opcode)
            if opcode in CREATE_OPS and self.doomed_xid is None:
                self.trigger = self.proxy.claim_trigger(request_path(frame))
                if self.trigger is not None:
                    self.doomed_xid = xid
            self._forward(frame, self.upstream)

    def _server_to_client(self) -> None:
        self._forward(read_frame(self.upstream), self.client)  # connect response
        while True:
            frame = read_frame(self.upstream)
            (xid,) = struct.unpack(">i", frame[4:8])
            if self.doomed_xid is not None and xid == self.doomed_xid and self.trigger is not None:
                self.trigger.fired.set()
                return  # the reply is dropped and the connection closed (see _guard)
            self._forward(frame, self.client)

    def _forward(self, frame: bytes, to: socket.socket) -> None:
        if not self.proxy.blackholed:
            to.sendall(frame)


class ZkProxy:
    """Listens on a free loopback port and forwards to ``upstream`` (``host:port``)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.hosts = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._pipes: set[_Pipe] = set()
        self._refusing = False
        self.blackholed = False
        self._trigger: ReplyLoss | None = None
        self._closed = False
        self._requests: list[int] = []
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def cut(self) -> None:
        """Closes every connection and refuses new ones (the client sees the loss at once)."""
        with self._lock:
            self._refusing = True
            pipes = list(self._pipes)
        for pipe in pipes:
            pipe.close()

    def blackhole(self) -> None:
        """Silently drops all traffic (a partition: the client notices only by its read timeout)."""
        self.blackholed = True

    def restore(self) -> None:
        with self._lock:
            self._refusing = False
        self.blackholed = False

    def lose_reply_to_next_create(self, prefix: str) -> threading.Event:
        """Arms a one-shot :class:`ReplyLoss`; the returned event is set when it has happened."""
        trigger = ReplyLoss(prefix)
        with self._lock:
            self._trigger = trigger
        return trigger.fired

    def claim_trigger(self, path: str | None) -> ReplyLoss | None:
        with self._lock:
            trigger = self._trigger
            if trigger is None or path is None or not path.startswith(trigger.prefix):
                return None
            self._trigger = None
            return trigger

    def note_request(self, opcode: int) -> None:
        if opcode != PING:
            with self._lock:
                self._requests.append(opcode)

    def request_count(self) -> int:
        """How many requests (pings aside) clients have sent through the proxy so far."""
        with self._lock:
            return len(self._requests)

    def forget(self, pipe: _Pipe) -> None:
        with self._lock:
            self._pipes.discard(pipe)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.cut()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._open_pipe(conn)

    def _open_pipe(self, conn: socket.socket) -> None:
        with self._lock:
            refusing = self._refusing
        if refusing:
            conn.close()
            return
        try:
            upstream = socket.create_connection(self._upstream, timeout=5)
        except OSError:
            conn.close()
            return
        upstream.settimeout(None)
        pipe = _Pipe(self, conn, upstream)
        with self._lock:
            self._pipes.add(pipe)
        pipe.start()
