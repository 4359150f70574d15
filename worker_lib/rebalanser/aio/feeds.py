"""Async iterators fed from the member's threads through the loop (one queue per subscriber)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Feed(Generic[T]):
    """An async iterator of items published on the loop; it ends when its source ends or on
    :meth:`aclose`. Items are buffered from the moment it was created (read them, or close it)."""

    def __init__(self, detach: Callable[[Feed[T]], None]) -> None:
        self._queue: asyncio.Queue[tuple[T] | None] = asyncio.Queue()
        self._detach = detach
        self._ended = False

    def put(self, item: T) -> None:
        if not self._ended:
            self._queue.put_nowait((item,))

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._queue.put_nowait(None)

    def __aiter__(self) -> Feed[T]:
        return self

    async def __anext__(self) -> T:
        entry = await self._queue.get()
        if entry is None:
            self._queue.put_nowait(None)  # stays ended for every later call
            raise StopAsyncIteration
        return entry[0]

    async def aclose(self) -> None:
        self._detach(self)
        self.end()


class Fanout(Generic[T]):
    """Publishes each item to every open feed (call on the loop only)."""

    def __init__(self) -> None:
        self._feeds: list[Feed[T]] = []
        self._ended = False

    def subscribe(self, *first: T) -> Feed[T]:
        feed = Feed(self._drop)
        for item in first:
            feed.put(item)
        if self._ended:
            feed.end()
        else:
            self._feeds.append(feed)
        return feed

    def _drop(self, feed: Feed[T]) -> None:
        if feed in self._feeds:
            self._feeds.remove(feed)

    def publish(self, item: T) -> None:
        for feed in self._feeds:
            feed.put(item)

    def end(self) -> None:
        self._ended = True
        for feed in self._feeds:
            feed.end()
        self._feeds.clear()
