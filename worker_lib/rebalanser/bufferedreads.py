"""kazoo's connection, reading the socket in large chunks instead of message by message.

kazoo reads each message the server sends with two ``recv`` calls (its length, then its body), each
after a ``select`` that builds and closes a new selector, plus one more ``select`` in its loop: five
system calls and three selectors per message. A member's release of many claims makes the server send
one watch notification per claim (our own watches fire for our own deletes), and those messages are
small: the connection thread spent most of a 5,000-claim release in selectors.

:class:`BufferedConnection` receives up to :data:`CHUNK` bytes at a time and hands kazoo its messages
from that buffer, and after each message it handles every further message already complete in the
buffer before it returns to kazoo's loop (whose ``select`` sees only the socket, not the buffer).
It never reads ahead of what the socket already holds to do so: a flood of messages is still read
chunk by chunk, with kazoo's loop sending queued requests in between, as before.
"""

from __future__ import annotations

import ssl
from typing import Any

from kazoo.exceptions import ConnectionDropped
from kazoo.protocol.serialization import int_struct

from rebalanser.kazoo_private import CLOSE_RESPONSE, ConnectionHandler

CHUNK = 65536


class BufferedConnection(ConnectionHandler):  # type: ignore[misc]
    """A kazoo ``ConnectionHandler`` whose reads come from a per-socket receive buffer: ``_data``
    from offset ``_start`` on is received and not yet read."""

    _buffered_socket: Any = None
    _data: bytes = b""
    _start: int = 0

    def _read(self, length: int, timeout: float) -> bytes:
        if self._buffered_socket is not self._socket:  # a new connection starts with nothing buffered
            self._buffered_socket, self._data, self._start = self._socket, b"", 0
        start = self._start
        end = start + length
        if end > len(self._data):
            with self._socket_error_handling():
                while len(self._data) - self._start < length:
                    self._fill(length - (len(self._data) - self._start), timeout)
            start = self._start
            end = start + length
        self._start = end
        return self._data[start:end]

    def _fill(self, missing: int, timeout: float) -> None:
        """Receives what the socket holds (at least one byte), waiting up to ``timeout`` for it.
        As kazoo's own read: an SSL socket may hold decrypted data its descriptor does not show."""
        sock = self._socket
        decrypted = hasattr(sock, "pending") and sock.pending() > 0
        if not decrypted and not self.handler.select([sock], [], [], timeout)[0]:
            raise self.handler.timeout_exception("socket time-out during read")
        try:
            chunk = sock.recv(max(CHUNK, missing))
        except ssl.SSLError as exc:
            if exc.errno in (ssl.SSL_ERROR_WANT_READ, ssl.SSL_ERROR_WANT_WRITE):
                return
            raise
        if chunk == b"":
            raise ConnectionDropped("socket connection broken")
        self._data = self._data[self._start:] + chunk
        self._start = 0

    def _complete(self) -> bool:
        """Whether a whole message (length and body) of the current socket is in the buffer."""
        if self._buffered_socket is not self._socket:
            return False
        available = len(self._data) - self._start
        if available < int_struct.size:
            return False
        length: int = int_struct.unpack_from(self._data, self._start)[0]
        return bool(available >= int_struct.size + length)

    def _decrypted(self) -> None:
        """Moves into the buffer what an SSL socket has decrypted already: kazoo's loop waits on the
        descriptor, which does not show it."""
        sock = self._socket
        if self._buffered_socket is sock and hasattr(sock, "pending") and sock.pending() > 0:
            with self._socket_error_handling():
                self._fill(1, 0)

    def _read_socket(self, read_timeout: float) -> Any:
        response = super()._read_socket(read_timeout)
        while response != CLOSE_RESPONSE:
            self._decrypted()
            if not self._complete():
                break
            response = super()._read_socket(read_timeout)
        return response
