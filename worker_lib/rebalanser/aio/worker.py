"""``rebalanser worker --api asyncio``: the example worker on :class:`rebalanser.aio.Client`.

It prints the same events as the threaded worker (:mod:`rebalanser.cli`), from callbacks and a tick
loop that run on one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rebalanser.aio.client import Client
from rebalanser.aio.handler import Handler
from rebalanser.options import Options
from rebalanser.worker_events import EventSink, Notifications, emit_assigned

worker_log = logging.getLogger("rebalanser.worker")


class AsyncSimulatedWork(Notifications, Handler):
    """Ticks once per owned resource every ``tick`` seconds, each only after ``token`` passes. A tick
    round never awaits, so it never interleaves with a callback (they share the loop)."""

    def __init__(self, log: EventSink, tick: float, stop_behaviour: str = "normal", stop_delay: float = 0.0,
                 start_delay: float = 0.0) -> None:
        self.log, self.tick = log, tick
        self.stop_behaviour, self.stop_delay, self.start_delay = stop_behaviour, stop_delay, start_delay
        self.client: Client | None = None
        self._resources: dict[str, int] = {}
        self.halt = asyncio.Event()
        self.expired = False
        self.ended: Exception | None = None

    async def on_assigned(self, resources: Mapping[str, int]) -> None:
        if self.start_delay:  # fault simulation: a slow start callback; its work begins once it returns
            emit_assigned(self.log, resources)
            await asyncio.sleep(self.start_delay)
            self._resources.update(resources)
            return
        self._resources.update(resources)
        emit_assigned(self.log, resources)

    async def on_revoked(self, resources: Sequence[str]) -> None:
        # Fault simulation for tests and chaos runs: slow, failing or hanging stop callbacks (a hanging
        # one is cancelled at the stop timeout).
        if self.stop_delay:
            await asyncio.sleep(self.stop_delay)
        if self.stop_behaviour == "hang":
            await self.halt.wait()
        for resource in resources:
            self._resources.pop(resource, None)
        if self.stop_behaviour == "fail":
            raise RuntimeError("simulated stop failure")
        self.log.emit("revoked", resources=list(resources))

    def halt_work(self) -> None:
        self.halt.set()

    async def run(self, stop: asyncio.Event) -> None:
        assert self.client is not None
        while not stop.is_set() and not self.halt.is_set():
            for resource in list(self._resources):
                ts = time.monotonic_ns()
                token = self.client.token(resource)  # checked after ts: the lease held at ts
                if token is not None:
                    self.log.emit("tick", ts=ts, resource=resource, token=token)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_either(stop, self.halt), self.tick)


async def _start(client: Client, stop: asyncio.Event, signals: list[int], connect_timeout: float | None) -> None:
    """``client.start``, unless a signal comes first: then the member is stopped (also while it is still
    connecting). Before it had joined, :class:`Interrupted` is raised; once joined (the start was still
    reading the group's state or running the first start callbacks) it returns, as a stop after the start
    does: the worker writes ``stopped`` and exits 0."""
    starting = asyncio.ensure_future(client.start(connect_timeout=connect_timeout))
    await _either_done(starting, stop)
    if not starting.done() or signals:
        await client.stop()
        with contextlib.suppress(BaseException):
            await starting
        if not client.has_joined:
            raise Interrupted(signals[0] if signals else signal.SIGTERM)
        return
    starting.result()


async def _either_done(task: asyncio.Future[None], event: asyncio.Event) -> None:
    waiting = asyncio.ensure_future(event.wait())
    both: list[asyncio.Future[Any]] = [task, waiting]
    try:
        await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()


async def _either(a: asyncio.Event, b: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(a.wait()), asyncio.ensure_future(b.wait())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


class Interrupted(Exception):
    """A signal arrived before the member had joined: it was ended without joining."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum}")
        self.signum = signum


async def run(options: Options, work: AsyncSimulatedWork, log: EventSink,
              connect_timeout: float | None = None) -> bool:
    """Joins, works until SIGTERM/SIGINT (or the session expired under ``shutdown``, or the group was
    deleted), leaves; True when it ended on an expired session. A signal before the member joined
    ends it at once (:class:`Interrupted`)."""
    client = Client(options, work)
    work.client = client
    stop = asyncio.Event()
    signals: list[int] = []
    loop = asyncio.get_running_loop()
    def interrupted(signum: int) -> None:
        worker_log.info("%s: stopping the resources and leaving the group", signal.Signals(signum).name)
        signals.append(signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, interrupted, sig)
    try:
        await _start(client, stop, signals, connect_timeout)
    except Exception:
        if client.has_joined:  # e.g. its group deleted under its start: it ran, and its stream says so
            log.emit("stopped")
        raise
    await work.run(stop)
    await client.stop()
    log.emit("stopped")
    return work.expired
