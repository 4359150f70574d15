"""rebalanser.aio's plumbing without ZooKeeper: coroutine calls handed from a thread to a loop (awaited,
cancelled at their timeout, abandoned when the loop closes) and the change streams."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from rebalanser import StopTimeoutError
from rebalanser.aio.bridge import LoopBridge, LoopClosed
from rebalanser.aio.feeds import Fanout


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    if not loop.is_closed():
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_a_call_runs_on_the_loop_and_its_exception_reaches_the_waiting_thread(
    loop: asyncio.AbstractEventLoop,
) -> None:
    ran_on: list[threading.Thread] = []

    async def ok() -> None:
        ran_on.append(threading.current_thread())

    async def bad() -> None:
        raise ValueError("boom")

    bridge = LoopBridge(loop)
    bridge.run("ok", ok, 5, 1)
    assert ran_on and ran_on[0] is not threading.current_thread()
    with pytest.raises(ValueError, match="boom"):
        bridge.run("bad", bad, 5, 1)


def test_a_call_that_overruns_is_cancelled_and_has_ended_when_run_returns(loop: asyncio.AbstractEventLoop) -> None:
    ended = threading.Event()

    async def hang() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.05)  # cleanup after the cancel
            ended.set()

    started = time.monotonic()
    with pytest.raises(StopTimeoutError, match=r"cancelled$"):
        LoopBridge(loop).run("on_revoked", hang, 0.2, 5)
    assert ended.is_set(), "run returned before the cancelled call had ended"
    assert time.monotonic() - started < 4, "waited out the whole grace although the call had ended"


def test_a_call_that_ignores_its_cancellation_is_given_up_after_the_grace(loop: asyncio.AbstractEventLoop) -> None:
    async def stubborn() -> None:
        for _ in range(100):
            try:
                await asyncio.sleep(0.1)
            except asyncio.CancelledError:
                pass

    started = time.monotonic()
    with pytest.raises(StopTimeoutError, match="had not ended"):
        LoopBridge(loop).run("on_revoked", stubborn, 0.2, 0.3)
    assert time.monotonic() - started < 3


def test_a_closed_loop_is_reported_at_once_and_while_waiting(loop: asyncio.AbstractEventLoop) -> None:
    bridge = LoopBridge(loop)

    async def forever() -> None:
        await asyncio.Event().wait()

    def close_soon() -> None:
        time.sleep(0.2)
        loop.call_soon_threadsafe(loop.stop)
        while loop.is_running():
            time.sleep(0.01)
        loop.close()

    closer = threading.Thread(target=close_soon)
    closer.start()
    with pytest.raises(LoopClosed):
        bridge.run("on_revoked", forever, 30, 1)
    closer.join(5)
    with pytest.raises(LoopClosed):
        bridge.run("on_assigned", forever, 30, 1)
    assert not bridge.post(print)


def test_fanout_feeds_buffer_from_subscription_and_end_with_the_source() -> None:
    async def scenario() -> tuple[list[int], list[int]]:
        fanout: Fanout[int] = Fanout()
        early = fanout.subscribe(0)
        fanout.publish(1)
        late = fanout.subscribe()
        fanout.publish(2)
        fanout.end()
        assert [x async for x in fanout.subscribe(9)] == [9], "a feed made after the end ends at once"
        return [x async for x in early], [x async for x in late]

    assert asyncio.run(scenario()) == ([0, 1, 2], [2])


def test_a_closed_feed_gets_nothing_more() -> None:
    async def scenario() -> list[int]:
        fanout: Fanout[int] = Fanout()
        feed = fanout.subscribe()
        fanout.publish(1)
        await feed.aclose()
        fanout.publish(2)
        return [x async for x in feed]

    assert asyncio.run(scenario()) == [1]
