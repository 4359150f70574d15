"""rebalanser.aio against real ZooKeeper: several clients on one loop, callbacks awaited on the loop,
cancellation, the loop closed without stop()."""

from __future__ import annotations

import asyncio
import threading

import pytest
from kazoo.client import KazooClient
from rebalanser import Options, State, StopTimeoutError
from rebalanser.aio import AssignmentChange, Client

from tests.aio.support import Ledger, Recording, until
from tests.integration.conftest import add_resources
from tests.support.workers import wait_for

pytestmark = pytest.mark.zk


def options(hosts: str, group: str, member: str, **kw: float) -> Options:
    return Options(hosts, group, member_id=member, create_group=True, session_timeout=2, min_interval=0.1, **kw)  # type: ignore[arg-type]


def test_clients_on_one_loop_share_the_resources_and_hand_them_over(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    names = [f"r{i}" for i in range(12)]
    add_resources(zk, group_path, names)
    ledger = Ledger()

    async def scenario() -> None:
        handlers = [Recording(f"m{i}", ledger, revoke_delay=0.05) for i in range(3)]
        clients = [Client(options(zk_hosts, group_path, h.name), h) for h in handlers]
        changes = clients[0].assignments()
        async with clients[0], clients[1], clients[2]:
            def balanced() -> bool:
                sizes = [len(h.owned) for h in handlers]
                return set(ledger.holder) == set(names) and max(sizes) - min(sizes) <= 1
            await until(balanced, 30, lambda: f"holders {ledger.holder}")
            for c, h in zip(clients, handlers, strict=True):
                assert all(c.owns(n) and c.token(n) == t for n, t in h.owned.items())
                assert not any(c.owns(n) for n in set(names) - set(h.owned))
            seen: dict[str, int] = {}
            while seen != handlers[0].owned:  # the change stream tells the same story as the callbacks
                change = await asyncio.wait_for(changes.__anext__(), 10)
                assert isinstance(change, AssignmentChange)
                seen = dict(change.owned)
            await clients[2].stop()
            assert not handlers[2].owned and handlers[2].revoked, "stop() returned before on_revoked ran"
            await until(lambda: set(ledger.holder) == set(names) and "m2" not in ledger.holder.values(), 30,
                        lambda: f"holders after m2 left {ledger.holder}")
        await changes.aclose()

    asyncio.run(scenario())
    assert ledger.violations == []
    assert zk.get_children(f"{group_path}/clients") == []
    assert zk.get_children(f"{group_path}/owners") == []


def test_on_revoked_is_awaited_before_the_release_and_cancelled_at_the_stop_timeout(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a", "b"])
    handler = Recording("m")

    async def scenario() -> None:
        # The claim is asserted held while the hung callback runs: stop_timeout leaves that check (a poll and
        # a round trip on a loaded machine) seconds, not one.
        client = Client(options(zk_hosts, group_path, "m", stop_timeout=3.0), handler, cancel_grace=2.0)
        async with client:
            await until(lambda: set(handler.owned) == {"a", "b"}, 20, "never assigned")
            handler.hang = True
            removed = asyncio.create_task(asyncio.to_thread(zk.delete, f"{group_path}/resources/a"))
            await until(lambda: not client.owns("a"), 10, "still owns a removed resource")
            # The callback runs and the claim stays until it is cancelled at the stop timeout.
            assert await asyncio.to_thread(zk.exists, f"{group_path}/owners/a") is not None
            await until(lambda: handler.cancelled == [("a",)], 10, lambda: f"cancelled {handler.cancelled}")
            await until(lambda: zk.exists(f"{group_path}/owners/a") is None, 10, "claim kept after the cancel")
            await removed
            assert client.owns("b")
            await until(lambda: any(isinstance(e, StopTimeoutError) for e in handler.errors), 10,
                        lambda: f"errors {handler.errors}")

    asyncio.run(scenario())
    assert handler.cancelled[-1] == ("b",), "the stop at exit hangs too and is cancelled the same way"


def test_states_stream_from_joining_to_stopped(zk_hosts: str, zk: KazooClient, group_path: str) -> None:
    add_resources(zk, group_path, ["a"])

    async def scenario() -> list[State]:
        client = Client(options(zk_hosts, group_path, "m"))
        states = client.states()
        seen: list[State] = []

        async def read() -> None:
            async for state in states:
                seen.append(state)

        reader = asyncio.create_task(read())
        async with client:
            await until(lambda: client.owns("a"), 20, "never assigned")
        await asyncio.wait_for(reader, 10)  # the stream ends after Stopped
        return seen

    seen = asyncio.run(scenario())
    assert seen[0] is State.NOT_STARTED and seen[-1] is State.STOPPED
    assert State.ASSIGNED in seen and seen.index(State.ASSIGNED) < seen.index(State.STOPPING)


def test_cancelling_the_task_inside_async_with_leaves_gracefully(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a", "b"])
    handler = Recording("m")

    async def scenario() -> None:
        entered = asyncio.Event()

        async def worker() -> None:
            async with Client(options(zk_hosts, group_path, "m"), handler):
                entered.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(worker())
        await asyncio.wait_for(entered.wait(), 30)
        await until(lambda: len(handler.owned) == 2, 20, "never assigned")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert handler.revoked and not handler.owned, "on_revoked was not awaited on the way out"
    assert zk.get_children(f"{group_path}/clients") == []
    assert zk.get_children(f"{group_path}/owners") == []


def test_a_cancelled_start_leaves_no_member_behind(zk_hosts: str, zk: KazooClient, group_path: str) -> None:
    add_resources(zk, group_path, ["a"])

    async def scenario() -> None:
        client = Client(options(zk_hosts, group_path, "m"))
        task = asyncio.create_task(client.start())
        await asyncio.sleep(0)  # the start thread is under way
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert client.state in (State.STOPPED, State.ABORTED), client.state

    asyncio.run(scenario())
    assert zk.get_children(f"{group_path}/clients") == []
    assert zk.get_children(f"{group_path}/owners") == []


def test_a_loop_closed_without_stop_releases_everything_to_the_others(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    names = ["a", "b", "c", "d"]
    add_resources(zk, group_path, names)
    first = Recording("first")
    loop = asyncio.new_event_loop()
    client = Client(options(zk_hosts, group_path, "first"), first)
    loop.run_until_complete(client.start())
    loop.run_until_complete(until(lambda: len(first.owned) == 4, 20, "never assigned"))
    loop.close()  # no stop(): the program dropped its loop
    wait_for(lambda: not zk.get_children(f"{group_path}/clients"), 20, "the member stayed in the group")
    assert not any(client.owns(n) for n in names)

    second = Recording("second")

    async def takeover() -> None:
        async with Client(options(zk_hosts, group_path, "second"), second) as c:
            await until(lambda: all(c.owns(n) for n in names), 20, lambda: f"second owns {second.owned}")

    asyncio.run(takeover())
    # The threads the clients started end too (a start or stop thread ends just after handing its result over).
    wait_for(lambda: not [t for t in threading.enumerate() if t.name.startswith("rebalanser-aio")], 10,
             lambda: f"threads left: {[t.name for t in threading.enumerate()]}")
