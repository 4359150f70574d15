"""A claim deleted while its owner was disconnected, with the owner's loop busy in a stop callback when
it reconnects: the owner's ``owns()`` turns false at the reconnection (the re-check of its claims runs
beside the member loop, not behind it), so it never works on the resource alongside its next owner.

Evidence: the workers' JSON event streams (each tick is taken only after ``owns`` passed, and carries
its token) and the instant the proxy passed each connect reply to the owner (its handshake)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from rebalanser.paths import GroupPaths

from tests.chaos.proxy import FaultProxy
from tests.integration.conftest import add_resources
from tests.support.invariants import Event, overlaps
from tests.support.workers import Group, Worker, wait_for

STOP_DELAY = 10.0  # b's stop callback: its member loop is busy this long
#: Seconds: how soon after its reconnection b must stop working on the lost resource. Its last tick comes
#: before the reconnection (-0.04 s measured); a re-check behind the busy loop kept it working until the
#: stop callback returned (+6.6 s). The bound leaves a loaded machine time to process the handshake, and
#: the scene must leave b's loop busy longer than it after the reconnection, so that it can still fail.
PROMPT = 2.0


@dataclass(frozen=True)
class Window:
    """What one run of the scene showed (times in ns of the shared monotonic clock)."""

    reconnected: int  # the proxy passed b its new connection's handshake reply
    last_tick: int  # b's last tick on r under the deleted claim's token
    stop_ended: int  # b's stop callback (of the resource taken away before) returned
    events: list[Event]

    def ticks(self, worker: str, resource: str) -> list[int]:
        return [e["ts"] for e in self.events
                if e["event"] == "tick" and e["id"] == worker and e["resource"] == resource]

    def report(self) -> str:
        """The figures of one run: the window, the overlap with d, and how long b's claim on a (never
        touched) stopped counting around the reconnection (until its re-check was answered)."""
        d_first = min(self.ticks("d", "r"))
        after = [t for t in self.ticks("b", "a") if t > self.reconnected]
        before = [t for t in self.ticks("b", "a") if t <= self.reconnected]
        pause = (min(after) - max(before)) / 1e9 if after and before else float("nan")
        return (f"reconnection to b's last tick on r: {self.seconds:.3f} s; b's last tick on r to d's first: "
                f"{(d_first - self.last_tick) / 1e9:.3f} s; longest pause of b's ticks on a around the "
                f"reconnection: {pause:.3f} s")

    @property
    def seconds(self) -> float:
        """From b's reconnection to its last unit of work on r (<= 0: none after it)."""
        return (self.last_tick - self.reconnected) / 1e9


@pytest.fixture
def proxies(zk_hosts: str) -> Iterator[tuple[FaultProxy, FaultProxy]]:
    b, d = FaultProxy(zk_hosts.split(",")), FaultProxy(zk_hosts.split(","))
    try:
        yield b, d
    finally:
        b.close()
        d.close()


def ticks(worker: Worker, resource: str) -> list[Event]:
    return [e for e in worker.of("tick") if e["resource"] == resource]


def quiet_on(worker: Worker, resource: str, seconds: float) -> bool:
    """The worker has ticked ``resource`` at least once and not in the last ``seconds``."""
    seen = ticks(worker, resource)
    return bool(seen) and time.monotonic_ns() - seen[-1]["ts"] > seconds * 1e9


def run_scene(zk: KazooClient, group: Group, proxies: tuple[FaultProxy, FaultProxy]) -> Window:
    """b holds a, r and x. x is deleted from the group: b's loop runs its 10 s stop callback. d joins
    (behind its own proxy) and is assigned r, held by b's claim. Both connections are reset and go
    silent; b's claim on r is deleted from outside; b's link comes back; once b has its new handshake,
    d's does too, and d claims r."""
    pb, pd = proxies
    paths = GroupPaths.of(group.path)
    add_resources(zk, group.path, ["a", "r", "x"])
    b = group.spawn("b", "--simulate-stop-delay", str(STOP_DELAY), hosts=pb.hosts)
    group.wait_settled({"a", "r", "x"}, timeout=30)
    zk.delete(f"{group.path}/resources/x")
    wait_for(lambda: quiet_on(b, "x", 0.5), 15, "b never stopped working on x")  # its stop callback runs
    d = group.spawn("d", hosts=pd.hosts)
    wait_for(lambda: len(zk.get_children(paths.clients)) == 2, 20, "d never joined")
    token = zk.exists(paths.owner("r")).czxid
    before = len(pb.handshakes_ns)
    for proxy in (pb, pd):
        proxy.blackhole()
        proxy.cut()
    zk.delete(paths.owner("r"))
    pb.restore()
    wait_for(lambda: len(pb.handshakes_ns) > before, 20, "b never reconnected")
    reconnected = pb.handshakes_ns[before]
    pd.restore()
    wait_for(lambda: bool(ticks(d, "r")), 30, "d never worked on r")
    wait_for(lambda: any(e["resources"] == ["x"] for e in b.of("revoked")), STOP_DELAY + 20,
             "b's stop callback for x never returned")
    stop_ended = next(e["ts"] for e in b.of("revoked") if e["resources"] == ["x"])
    last_tick = max(e["ts"] for e in ticks(b, "r") if e["token"] == token)
    return Window(reconnected, last_tick, stop_ended, group.events())


def test_a_claim_deleted_while_its_owner_was_away_stops_at_the_reconnection_even_with_its_loop_busy(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path, proxies: tuple[FaultProxy, FaultProxy]
) -> None:
    group = Group(zk_hosts, group_path, tmp_path, session_timeout=10.0)
    try:
        window = run_scene(zk, group, proxies)
    finally:
        for worker in group.live():
            worker.kill()  # a stop would wait out b's slow stop callbacks again
    print(window.report())
    assert window.stop_ended - window.reconnected > PROMPT * 1e9, (
        f"the scene did not happen: b's stop callback ended less than {PROMPT} s after b reconnected")
    assert overlaps([e for e in window.events if e.get("resource") == "r"]) == []
    assert window.seconds < PROMPT, f"b worked on r for {window.seconds:.2f} s after reconnecting"
