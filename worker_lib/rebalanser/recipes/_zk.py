"""Typed ZooKeeper calls with a time limit.

Kazoo's synchronous calls wait without limit, and a request issued while the connection is suspended is
queued until the client reconnects — possibly forever when the servers stay unreachable. The recipes
therefore use the asynchronous API and wait at most ``timeout`` seconds, turning an overdue answer into
``OperationTimeoutError`` (a retryable error). A request that timed out may still be sent after the
reconnect; every write the recipes make is safe to see applied late (see the callers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from kazoo.client import KazooClient
from kazoo.exceptions import OperationTimeoutError
from kazoo.protocol.states import WatchedEvent, ZnodeStat

Watch = Callable[[WatchedEvent], None]


class BoundedZk:
    """The handful of ZooKeeper operations the recipes use, each waiting at most ``timeout`` seconds."""

    def __init__(self, client: KazooClient, timeout: float) -> None:
        self.client = client
        self.timeout = timeout

    def get(self, path: str, watch: Watch | None = None) -> tuple[bytes, ZnodeStat]:
        data, stat = self._wait(self.client.get_async(path, watch))
        return bytes(data), stat

    def get_children(self, path: str, watch: Watch | None = None) -> list[str]:
        return list(self._wait(self.client.get_children_async(path, watch)))

    def exists(self, path: str, watch: Watch | None = None) -> ZnodeStat | None:
        return cast("ZnodeStat | None", self._wait(self.client.exists_async(path, watch)))

    def create(self, path: str, data: bytes, *, ephemeral: bool = False, makepath: bool = True) -> str:
        return str(self._wait(self.client.create_async(path, data, ephemeral=ephemeral, makepath=makepath)))

    def create_sequential(self, prefix: str, data: bytes) -> tuple[str, ZnodeStat]:
        """An ephemeral sequential znode; returns its path and stat (whose ``ephemeralOwner`` is ours)."""
        path, stat = self._wait(
            self.client.create_async(
                prefix, data, ephemeral=True, sequence=True, makepath=True, include_data=True
            )
        )
        return str(path), stat

    def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        return self._wait(self.client.set_async(path, data, version))

    def delete(self, path: str, version: int = -1) -> None:
        self._wait(self.client.delete_async(path, version))

    def ensure_path(self, path: str) -> None:
        self._wait(self.client.ensure_path_async(path))

    def _wait(self, result: Any) -> Any:
        try:
            return result.get(timeout=self.timeout)
        except self.client.handler.timeout_exception:
            raise OperationTimeoutError(f"no answer from ZooKeeper within {self.timeout}s") from None
