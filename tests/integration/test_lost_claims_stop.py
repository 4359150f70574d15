"""Claims deleted from outside while their owner was away cost one stop callback's time, not one each.

A member w holds K claims behind a proxy, with a stop callback of S seconds. Its connection goes
silent and is reset, all K claims are deleted from outside, and w reconnects: it finds them gone (the
re-check of its claims). It must stop work on each (its stop callback) before it claims and starts it
again, but the K stops are one call: w works on all K again about S after it could first react, where
one stop callback after another took K x S (the explorer's `reconnect-stop`, docs/chaos.md).

Two scenes: w's loop idle at the reconnection, and w's loop busy in another resource's stop callback
(the explorer's case: the losses wait for it, then all K are stopped together).

Evidence: w's JSON event stream (each tick is taken only after ``owns`` passed and carries its token,
``revoked`` is emitted when the stop callback returns) and the instant the proxy passed w its new
connection's handshake reply."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from rebalanser.paths import GroupPaths

from tests.chaos.proxy import FaultProxy
from tests.integration.conftest import add_resources
from tests.support.invariants import Event, overlaps
from tests.support.workers import Group, Worker, wait_for

S = 2.0  # seconds: w's stop callback
K = 4  # claims lost together
LOST = [f"r{i}" for i in range(1, K + 1)]
BOUND = 2.5 * S  # from the instant w can react to every lost resource worked on again (K x S before)


@dataclass(frozen=True)
class Scene:
    """What one run showed (times in ns of the shared monotonic clock)."""

    old: dict[str, int]  # each lost resource's token before the deletion
    reconnected: int  # the proxy passed w its new connection's handshake reply
    free: int  # w's loop could react: the reconnection, or the end of the busy stop callback after it
    events: list[Event]

    def back(self) -> dict[str, int]:
        """Each lost resource's first tick under a newer token (absent: not worked on again)."""
        firsts: dict[str, int] = {}
        for e in self.events:
            r = e.get("resource")
            if e["event"] == "tick" and r in self.old and e["token"] > self.old[r] and r not in firsts:
                firsts[r] = e["ts"]
        return firsts

    def stopped(self, resource: str) -> int | None:
        """When w's stop callback for ``resource`` returned after the reconnection (None: never)."""
        return next((e["ts"] for e in self.events if e["event"] == "revoked" and resource in e["resources"]
                     and e["ts"] > self.reconnected), None)

    @property
    def seconds(self) -> float:
        """From the instant w could react to the last lost resource worked on again."""
        return (max(self.back().values()) - self.free) / 1e9

    def report(self) -> str:
        stops = sorted({e["ts"] for e in self.events if e["event"] == "revoked" and e["ts"] > self.reconnected})
        return (f"{K} lost claims, S = {S} s: all worked on again {self.seconds:.3f} s after w could react; "
                f"stop callbacks returned at {[round((t - self.free) / 1e9, 3) for t in stops]} s")


def ticks(worker: Worker, resource: str) -> list[Event]:
    return [e for e in worker.of("tick") if e["resource"] == resource]


def quiet_on(worker: Worker, resource: str, seconds: float) -> bool:
    """The worker has ticked ``resource`` and not in the last ``seconds``."""
    seen = ticks(worker, resource)
    return bool(seen) and time.monotonic_ns() - seen[-1]["ts"] > seconds * 1e9


def run_scene(zk: KazooClient, group: Group, proxy: FaultProxy, busy: bool) -> Scene:
    """w holds the K resources (and x when ``busy``). With ``busy``, x is deleted from the group first
    and the rest happens while w's loop runs x's stop callback. w's connection goes silent and is reset,
    its K claims are deleted from outside, its link comes back and w reconnects."""
    paths = GroupPaths.of(group.path)
    resources = [*LOST, "x"] if busy else LOST
    add_resources(zk, group.path, resources)
    w = group.spawn("w", "--simulate-stop-delay", str(S), hosts=proxy.hosts)
    group.wait_settled(set(resources), timeout=30)
    old = {r: zk.exists(paths.owner(r)).czxid for r in LOST}
    wait_for(lambda: all(ticks(w, r) for r in LOST), 10, "w never worked on every resource")
    if busy:
        zk.delete(f"{group.path}/resources/x")
        # owns(x) turns false as its stop begins: w stops ticking x while its loop is in the callback
        wait_for(lambda: quiet_on(w, "x", 0.2), 5, "w never began to stop x")
    before = len(proxy.handshakes_ns)
    proxy.blackhole()
    proxy.cut()
    for r in LOST:
        zk.delete(paths.owner(r))
    proxy.restore()
    wait_for(lambda: len(proxy.handshakes_ns) > before, 20, "w never reconnected")
    reconnected = proxy.handshakes_ns[before]
    free = reconnected
    if busy:
        wait_for(lambda: any(e["resources"] == ["x"] for e in w.of("revoked")), S + 20,
                 "w's stop callback for x never returned")
        x_stopped = next(e["ts"] for e in w.of("revoked") if e["resources"] == ["x"])
        assert x_stopped > reconnected, "the scene did not happen: w's stop of x ended before it reconnected"
        free = x_stopped
    wait_for(lambda: all(any(e["token"] > old[r] for e in ticks(w, r)) for r in LOST), K * S + 20,
             lambda: f"not every lost resource was worked on again: {sorted(w.owned())}")
    return Scene(old, reconnected, free, group.events())


@pytest.mark.parametrize("busy", [False, True], ids=["loop-idle", "loop-busy"])
def test_claims_lost_together_are_stopped_together_and_worked_on_again_within_one_stop(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path, proxy: FaultProxy, busy: bool
) -> None:
    group = Group(zk_hosts, group_path, tmp_path, session_timeout=10.0)
    try:
        scene = run_scene(zk, group, proxy, busy)
    finally:
        for worker in group.live():
            worker.kill()  # a stop would wait out w's slow stop callbacks again
    print(scene.report())
    back = scene.back()
    for r in LOST:  # each stopped (its callback returned) before it was worked on again
        stopped = scene.stopped(r)
        assert stopped is not None and stopped < back[r], f"{r} worked on again before its stop returned"
    assert overlaps(scene.events) == []
    assert scene.seconds < BOUND, (
        f"{K} lost claims took {scene.seconds:.2f} s to be worked on again (bound {BOUND} s): {scene.report()}")
