"""A TCP server that records every connection made to it and what was sent, and never answers: a
stand-in for a server nobody should talk to (a ZooKeeper outside the operator's allowed list)."""

from __future__ import annotations

import socket
import threading


class Listener:
    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.accepted = 0
        self.received = b""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            conn.settimeout(0.5)
            try:
                self.received += conn.recv(65536)
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
