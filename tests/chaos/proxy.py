"""A fault-injecting TCP proxy between one worker and the ZooKeeper server(s). Loopback only.

One :class:`FaultProxy` per worker: it listens on one 127.0.0.1 port per ZooKeeper server and forwards
each connection to that server, so the worker's connect string is the proxy's :attr:`FaultProxy.hosts`.

Faults:

- :meth:`FaultProxy.blackhole` — a silent partition: bytes stop flowing in both directions but no
  connection is closed (like a network that drops packets: TCP keeps the data until the partition
  heals). New connections are accepted and then hang. The client notices only through its own read
  timeout; the server expires the session after the session timeout. :meth:`FaultProxy.restore` heals.
- :meth:`FaultProxy.stall_replies` — a one-way partition: the server still hears the client (its
  session stays alive) but nothing comes back until :meth:`FaultProxy.restore`; the client notices
  nothing but silence (kazoo does not time out a connection while it has requests in flight).
- :meth:`FaultProxy.cut` — every open connection is reset at once (``ConnectionLoss`` in the client,
  which reconnects to the same session).
- :meth:`FaultProxy.arm_write_trap` — the next write request (create, delete, setData, multi, ...) is
  either delivered to the server with its reply lost, or dropped, and the connection is reset: a
  ``ConnectionLoss`` in the middle of a write whose outcome the client cannot know.
  :meth:`FaultProxy.arm_trap` does the same to the next request of any of the given opcodes (e.g. a
  read, :data:`READ_OPS`): a ``ConnectionLoss`` at a chosen step of a client's protocol.
- :meth:`FaultProxy.tap` — counts the client's requests (all but :data:`BACKGROUND_OPS`) from now on,
  by name, and optionally sabotages the one with a given index: dropped before it is sent, delivered
  with its reply lost, or held while the link goes silent until the server expires the session by its
  own clock (see :class:`RequestTap`; the every-request explorer, ``tests/chaos/explore.py``, is built
  on it).

It parses only ZooKeeper's framing (a 4-byte length, then xid and opcode) in the client-to-server
direction, to recognise write requests. Nothing here fakes ZooKeeper.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

WRITE_OPS = {
    1: "create", 2: "delete", 5: "setData", 7: "setACL", 14: "multi", 15: "create2",
    16: "reconfig", 19: "createContainer", 20: "deleteContainer", 21: "createTTL",
}
READ_OPS = {3: "exists", 4: "getData", 8: "getChildren", 12: "getChildren2"}
OTHER_OPS = {-11: "closeSession", 6: "getACL", 13: "check", 17: "checkWatches", 18: "removeWatches",
             22: "multiRead", 103: "getEphemerals", 104: "getAllChildrenNumber", 106: "addWatch", 107: "whoAmI"}
#: Requests a tap does not count: the connection's keep-alive, the lease prober's periodic ``sync`` (how
#: many of them fall into a scenario depends on timing alone), and what kazoo sends inside a reconnect.
BACKGROUND_OPS = {11: "ping", 9: "sync", 100: "auth", 101: "setWatches", 105: "setWatches2"}
FAULTS = ("drop", "lose-reply", "expire", "flap")
#: Faults a scenario may ask for besides :data:`FAULTS`: ``gate`` holds the request until the tap's ``gate()``
#: has returned (something else happens meanwhile, e.g. another session's expiry), then sends it on.
GATED = "gate"
#: The pseudo operation a tap with ``connects`` counts for a connection's handshake (its connect request).
CONNECT = -1000
_LINGER_RESET = struct.pack("ii", 1, 0)


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
    if length < 0 or length > 64 * 1024 * 1024:
        raise EOFError(f"implausible frame length {length}")
    return header + _read_exact(sock, length)


def _reset(sock: socket.socket) -> None:
    """Closes with a TCP reset (SO_LINGER 0), waking any thread blocked in recv first."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


def _finish(sock: socket.socket) -> None:
    """Closes politely: what was sent is still delivered, then FIN."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


@dataclass
class WriteTrap:
    """One-shot: the next request of the proxied client with one of ``opcodes`` is sabotaged.

    ``deliver``: the server receives and applies the request but the reply is lost; otherwise the
    request itself is lost. Either way the client's connection is reset right after.
    """

    deliver: bool
    hold: float = 0.01  # seconds the server gets to apply a delivered write before the reset
    opcodes: frozenset[int] = frozenset(WRITE_OPS)
    fired: threading.Event = field(default_factory=threading.Event)
    opcode: int = 0
    at_ns: int = 0

    @property
    def operation(self) -> str:
        return WRITE_OPS.get(self.opcode) or READ_OPS.get(self.opcode) or str(self.opcode)


def op_name(opcode: int) -> str:
    if opcode == CONNECT:
        return "connect"
    return (WRITE_OPS.get(opcode) or READ_OPS.get(opcode) or OTHER_OPS.get(opcode)
            or BACKGROUND_OPS.get(opcode) or str(opcode))


def parse_connect_reply(frame: bytes) -> tuple[int, bytes] | None:
    """(session id, password) from a ConnectResponse frame (length, protocol version, timeout, session
    id, password), or None if the frame is too short to be one."""
    if len(frame) < 24:
        return None
    session = struct.unpack(">q", frame[12:20])[0]
    (size,) = struct.unpack(">i", frame[20:24])
    return session, frame[24:24 + max(size, 0)]


@dataclass
class RequestTap:
    """Counts the requests of a proxied client (not :data:`BACKGROUND_OPS`), by name, in order.

    With ``fault`` (one of :data:`FAULTS`), the request with index ``index`` is sabotaged and the
    connection is reset right after:

    - ``drop``: the request never reaches the server;
    - ``lose-reply``: the server receives and applies it, but its reply is lost;
    - ``expire``: the session expires there, as it does in production: the request is held and the
      client's link goes silent (nothing passes either way, new connections hang: the proxy's
      :meth:`FaultProxy.blackhole`) until ``expire(session id, password)`` returns, which waits until
      the server has expired the session by its own clock (T after it last heard of it); then the
      request is dropped, the connection reset and the link restored. The client learns of the expiry
      when it reconnects. (Ending the session at once from outside, e.g. a second client closing it
      with the same id and password, is no fault a member can meet: its lease, counted from instants
      the server heard of it, would still be valid while its claims are already gone.)
    - ``flap``: like ``drop``, and every request sent in the next ``flap`` seconds is dropped the same
      way (the client reconnects each time, in the same session): a link that keeps failing for a
      while, as during a leader election, so that a step's retry fails as well as its first attempt.
    - ``gate`` (:data:`GATED`): the request is held (and everything the client sends behind it) until
      ``gate()`` returns, then sent on; nothing is reset. Something else happens at that point, e.g.
      another session expires between two requests of this client.

    ``also``: opcodes of :data:`BACKGROUND_OPS` counted all the same (e.g. ``setWatches``, where a
    scenario's reconnection is its subject); ``connects``: each connection's handshake counts as a
    ``connect`` request (its index a point before it).
    """

    fault: str | None = None
    index: int = -1
    expire: Callable[[int, bytes], None] | None = None
    hold: float = 0.05  # seconds the server gets to apply a delivered request before the reset
    flap: float = 0.0  # seconds after the first ``flap`` fault during which every request is dropped
    gate: Callable[[], None] | None = None
    also: frozenset[int] = frozenset()
    connects: bool = False
    seen: list[str] = field(default_factory=list)
    fired: threading.Event = field(default_factory=threading.Event)
    fired_ns: int = 0
    ended_ns: int = 0  # when the sabotage of the first request ended (the link restored, for ``expire``)
    sabotaged: int = 0  # requests sabotaged (more than one only with ``flap``)
    error: str = ""

    def count(self, opcode: int) -> bool:
        """Records one request; True if it is the one to sabotage."""
        if opcode in BACKGROUND_OPS and opcode not in self.also:
            return False
        self.seen.append(op_name(opcode))
        if self.fault is None:
            return False
        if self.fired.is_set():
            return self.fault == "flap" and time.monotonic_ns() - self.fired_ns < self.flap * 1e9
        return len(self.seen) - 1 == self.index

    @property
    def healed_ns(self) -> int:
        """When the fault was over (0 if it never fired; now while it lasts): a flap lasts ``flap``
        seconds from the first request it dropped; the other faults end with their one sabotage."""
        if not self.fired_ns:
            return 0
        if self.fault == "flap":
            return self.fired_ns + int(self.flap * 1e9)
        return self.ended_ns or time.monotonic_ns()


class _Pipe:
    """One client connection and its upstream connection, pumped by two threads."""

    def __init__(self, proxy: FaultProxy, client: socket.socket, upstream_addr: tuple[str, int]) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream_addr = upstream_addr
        self.upstream: socket.socket | None = None
        self.closed = threading.Event()
        self.mute_replies = False
        self.session: tuple[int, bytes] | None = None  # from the server's connect reply

    def start(self) -> None:
        threading.Thread(target=self._connect_and_pump, daemon=True, name="proxy-pipe").start()

    def _connect_and_pump(self) -> None:
        # While partitioned, a new connection is accepted but gets nowhere (as if SYNs were dropped
        # beyond the first hop): wait for the partition to heal before dialling the server.
        while not self.proxy.flowing.wait(0.2):
            if self.closed.is_set():
                return
        if self.closed.is_set():
            return
        try:
            self.upstream = socket.create_connection(self.upstream_addr, timeout=5)
            self.upstream.settimeout(None)
        except OSError:
            self.close(abrupt=True)
            return
        threading.Thread(target=self._guard, args=(self._server_to_client,), daemon=True).start()
        self._guard(self._client_to_server)

    def close(self, abrupt: bool) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        _reset(self.client)
        if self.upstream is not None:
            (_reset if abrupt else _finish)(self.upstream)
        self.proxy._forget(self)

    def _guard(self, pump: Callable[[], None]) -> None:
        try:
            pump()
        except (OSError, EOFError):
            pass
        finally:
            self.close(abrupt=False)

    def _send(self, sock: socket.socket, data: bytes, down: bool = False) -> None:
        # A partition holds the bytes (TCP would retransmit them once the network heals).
        gate = self.proxy.flowing_down if down else self.proxy.flowing
        while not (self.proxy.flowing.wait(0.2) and gate.wait(0.2)):
            if self.closed.is_set():
                raise EOFError
        if self.closed.is_set():
            raise EOFError
        sock.sendall(data)

    def _client_to_server(self) -> None:
        assert self.upstream is not None
        frame = read_frame(self.client)  # connect request: no xid/opcode
        tap = self.proxy._tap
        if tap is not None and tap.connects and tap.count(CONNECT):
            if tap.fault != GATED:
                self._sabotage(tap, frame)
                return
            self._gate(tap)
        self._send(self.upstream, frame)
        while True:
            frame = read_frame(self.client)
            opcode = struct.unpack(">i", frame[8:12])[0] if len(frame) >= 12 else 0
            tap = self.proxy._tap
            if tap is not None and tap.count(opcode):
                if tap.fault == GATED:
                    self._gate(tap)
                    self._send(self.upstream, frame)
                    continue
                self._sabotage(tap, frame)
                return
            trap = self.proxy._take_trap(opcode)
            if trap is None:
                self._send(self.upstream, frame)
                continue
            trap.opcode, trap.at_ns = opcode, time.monotonic_ns()
            if trap.deliver:
                self.mute_replies = True
                self._send(self.upstream, frame)
                time.sleep(trap.hold)
            trap.fired.set()
            self.close(abrupt=not trap.deliver)
            return

    def _sabotage(self, tap: RequestTap, frame: bytes) -> None:
        assert self.upstream is not None
        if not tap.fired.is_set():
            tap.fired_ns = time.monotonic_ns()
        tap.sabotaged += 1
        if tap.fault == "lose-reply":
            self.mute_replies = True
            self._send(self.upstream, frame)
            time.sleep(tap.hold)
        elif tap.fault == "expire":
            self._expire(tap)
        if not tap.ended_ns:
            tap.ended_ns = time.monotonic_ns()
        tap.fired.set()
        self.close(abrupt=True)

    def _gate(self, tap: RequestTap) -> None:
        """Holds the request until ``tap.gate()`` returns (it is sent on after)."""
        tap.fired_ns = time.monotonic_ns()
        tap.sabotaged += 1
        try:
            if tap.gate is not None:
                tap.gate()
        except Exception as exc:  # reported by the explorer as a harness error
            tap.error = f"the gate failed: {exc!r}"
        tap.ended_ns = time.monotonic_ns()
        tap.fired.set()

    def _expire(self, tap: RequestTap) -> None:
        """The link goes silent until the server has expired the session; the request is never sent."""
        if self.session is None or tap.expire is None:
            tap.error = "no session to expire"
            return
        self.proxy.blackhole()
        try:
            tap.expire(*self.session)
        except Exception as exc:  # reported by the explorer as a harness error
            tap.error = f"the session did not expire: {exc!r}"
        finally:
            self.close(abrupt=True)  # first: nothing held back on this connection reaches the client
            self.proxy.cut()  # the client's reconnects made while silent start afresh
            self.proxy.restore()
            tap.ended_ns = time.monotonic_ns()

    def _server_to_client(self) -> None:
        assert self.upstream is not None
        first = read_frame(self.upstream)  # the connect reply: remember the session it names
        self.session = parse_connect_reply(first)
        if self.session is not None:
            self.proxy.session = self.session
        if not self.mute_replies:
            self._send(self.client, first, down=True)
            with self.proxy._lock:
                self.proxy.handshakes_ns.append(time.monotonic_ns())
        while True:
            data = self.upstream.recv(65536)
            if not data:
                return
            if self.mute_replies:
                continue
            self._send(self.client, data, down=True)


class FaultProxy:
    """Listens on one loopback port per upstream ``host:port`` and forwards to it."""

    def __init__(self, upstreams: list[str]) -> None:
        self.flowing = threading.Event()  # both directions
        self.flowing.set()
        self.flowing_down = threading.Event()  # server to client
        self.flowing_down.set()
        self._lock = threading.Lock()
        self._pipes: set[_Pipe] = set()
        self._trap: WriteTrap | None = None
        self._tap: RequestTap | None = None
        self.session: tuple[int, bytes] | None = None  # (id, password) of the latest connect reply
        # When each connect reply was passed on to the client (its handshake answered), oldest first
        self.handshakes_ns: list[int] = []
        self._closed = False
        self._listeners: list[socket.socket] = []
        addresses = []
        for upstream in upstreams:
            host, port = upstream.rsplit(":", 1)
            listener = socket.create_server(("127.0.0.1", 0))
            self._listeners.append(listener)
            addresses.append(f"127.0.0.1:{listener.getsockname()[1]}")
            threading.Thread(target=self._accept_loop, args=(listener, (host, int(port))), daemon=True,
                             name="proxy-accept").start()
        self.hosts = ",".join(addresses)

    # -- faults --------------------------------------------------------------------------------

    def blackhole(self) -> None:
        self.flowing.clear()

    def stall_replies(self) -> None:
        self.flowing_down.clear()

    def restore(self) -> None:
        self.flowing.set()
        self.flowing_down.set()

    @property
    def partitioned(self) -> bool:
        return not (self.flowing.is_set() and self.flowing_down.is_set())

    def cut(self) -> int:
        """Resets every open connection; returns how many were cut."""
        with self._lock:
            pipes = list(self._pipes)
        for pipe in pipes:
            pipe.close(abrupt=True)
        return len(pipes)

    def arm_write_trap(self, deliver: bool, hold: float = 0.01) -> WriteTrap:
        return self.arm_trap(WRITE_OPS, deliver, hold)

    def arm_trap(self, opcodes: Iterable[int], deliver: bool, hold: float = 0.01) -> WriteTrap:
        trap = WriteTrap(deliver, hold, frozenset(opcodes))
        with self._lock:
            self._trap = trap
        return trap

    def tap(self, tap: RequestTap | None) -> RequestTap | None:
        """Counts (and maybe sabotages) every request from now on; None stops counting."""
        self._tap = tap
        return tap

    def disarm(self) -> None:
        with self._lock:
            self._trap = None

    def connections(self) -> int:
        with self._lock:
            return len(self._pipes)

    def upstreams(self) -> set[str]:
        """``host:port`` of every server this proxy has an open connection to (which server of an
        ensemble the client is talking to)."""
        with self._lock:
            return {f"{p.upstream_addr[0]}:{p.upstream_addr[1]}" for p in self._pipes if not p.closed.is_set()}

    def close(self) -> None:
        self._closed = True
        self.restore()
        for listener in self._listeners:
            with contextlib.suppress(OSError):
                listener.close()
        self.cut()

    # -- plumbing ------------------------------------------------------------------------------

    def _take_trap(self, opcode: int) -> WriteTrap | None:
        with self._lock:
            trap = self._trap
            if trap is None or opcode not in trap.opcodes:
                return None
            self._trap = None
            return trap

    def _forget(self, pipe: _Pipe) -> None:
        with self._lock:
            self._pipes.discard(pipe)

    def _accept_loop(self, listener: socket.socket, upstream: tuple[str, int]) -> None:
        while not self._closed:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pipe = _Pipe(self, conn, upstream)
            with self._lock:
                if self._closed:
                    _reset(conn)
                    continue
                self._pipes.add(pipe)
            pipe.start()
