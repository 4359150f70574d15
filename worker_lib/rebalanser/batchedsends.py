"""kazoo's connection, sending every request already queued in one turn of its loop.

kazoo's connection thread sends one queued request per turn of its loop: a wait in ``select``, maybe
a message read, then one request written. A member that pipelines queues several requests at once:
the chunks of an assignment, a claim round's transactions with their reads and ``setWatches``, a
release's transactions. In a process of many members every turn of the loop also waits for the
interpreter lock, so those requests left one turn apart: 2-15 ms each, in a cold start of 50 members
in processes of 5, and a member's fifteen chunk reads took 300 ms to leave before the first claim.

:class:`BatchedSends` sends, after the request of kazoo's turn, each further request whose wake-up
byte is already in the pipe, up to :data:`MAX_BATCH` of them, in queue order (the order kazoo
expects the replies in, and the order ZooKeeper applies a session's requests in). A request whose
byte is not there yet (its caller has queued it and not yet woken the loop) waits for the next
turn, as before: kazoo's receive of that byte never blocks. A ``close`` ends the batch: nothing is
sent after it (kazoo's next turn reads the reply that ends the connection).
"""

from __future__ import annotations

import socket
from typing import Any

from kazoo.protocol.serialization import Close

from rebalanser.kazoo_private import ConnectionHandler

MAX_BATCH = 64  # requests sent in one turn at most: the replies already in are read in between


class BatchedSends(ConnectionHandler):  # type: ignore[misc]
    """A kazoo ``ConnectionHandler`` that sends the queued requests of one turn together."""

    def _send_request(self, read_timeout: float, connect_timeout: float) -> None:
        super()._send_request(read_timeout, connect_timeout)
        for _ in range(MAX_BATCH - 1):
            if self._closing() or not self._next_is_ready():
                return
            super()._send_request(read_timeout, connect_timeout)

    def _closing(self) -> bool:
        """Whether the request sent last is a ``close``."""
        pending = self.client._pending
        return bool(pending) and getattr(pending[-1][0], "type", None) == Close.type

    def _next_is_ready(self) -> bool:
        """Whether a request is queued whose wake-up byte is in the pipe."""
        if not self.client._queue:
            return False
        pipe: Any = self._read_sock
        if pipe is None:
            return False
        try:
            return bool(pipe.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except OSError:  # nothing there yet (BlockingIOError), or the pipe closed: kazoo's next turn decides
            return False
