"""A disconnection is observable when it happens: a worker whose member loop is busy in a stop callback
reports ``session suspended`` as soon as its connection drops, not when the callback returns (the
conformance traces map ``suspended`` to the model's Disconnect where it happened).

Evidence: the worker's JSON event stream (``ts`` on the shared monotonic clock) and the instant the
connection was cut at the fault proxy."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from kazoo.client import KazooClient

from tests.chaos.proxy import FaultProxy
from tests.integration.conftest import add_resources
from tests.support.workers import Group, Worker, wait_for

STOP_DELAY = 6.0  # the stop callback: the member loop is busy this long
PROMPT = 1.0  # seconds: how soon after the cut ``suspended`` must be reported (generous)



def sessions(worker: Worker, state: str) -> list[int]:
    return [e["ts"] for e in worker.of("session") if e["state"] == state]


def quiet_on(worker: Worker, resource: str, seconds: float) -> bool:
    """The worker has ticked ``resource`` at least once and not in the last ``seconds``."""
    seen = [e for e in worker.of("tick") if e["resource"] == resource]
    return bool(seen) and time.monotonic_ns() - seen[-1]["ts"] > seconds * 1e9


def test_suspended_is_reported_when_the_connection_drops_even_with_the_loop_busy_in_a_callback(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path, proxy: FaultProxy
) -> None:
    group = Group(zk_hosts, group_path, tmp_path, session_timeout=10.0)
    try:
        add_resources(zk, group_path, ["a", "x"])
        b = group.spawn("b", "--simulate-stop-delay", str(STOP_DELAY), hosts=proxy.hosts)
        group.wait_settled({"a", "x"}, timeout=30)
        zk.delete(f"{group_path}/resources/x")
        wait_for(lambda: quiet_on(b, "x", 0.3), 15, "b never stopped working on x")  # its stop callback runs
        proxy.blackhole()
        cut = time.monotonic_ns()
        assert proxy.cut() > 0, "b had no connection to cut"
        with contextlib.suppress(AssertionError):  # the link comes back either way: the figures follow
            wait_for(lambda: bool(sessions(b, "suspended")), 2 * PROMPT, "")
        proxy.restore()
        wait_for(lambda: any(e["resources"] == ["x"] for e in b.of("revoked")), STOP_DELAY + 10,
                 "b's stop callback for x never returned")
        stop_ended = next(e["ts"] for e in b.of("revoked") if e["resources"] == ["x"])
        wait_for(lambda: bool(sessions(b, "reconnected")), 20, "b never reported reconnected")
        wait_for(lambda: bool(sessions(b, "suspended")), 5, "b never reported suspended")
        suspended, reconnected = sessions(b, "suspended")[0], sessions(b, "reconnected")[0]
    finally:
        for worker in group.live():
            worker.kill()  # a stop would wait out b's slow stop callback
    print(f"suspended {(suspended - cut) / 1e9:.3f} s after the cut; the stop callback returned "
          f"{(stop_ended - cut) / 1e9:.3f} s after it")
    assert stop_ended > cut, "the scene did not happen: b's stop callback ended before the cut"
    assert (suspended - cut) / 1e9 < PROMPT, (
        f"b reported suspended {(suspended - cut) / 1e9:.2f} s after the cut "
        f"(its stop callback returned {(stop_ended - cut) / 1e9:.2f} s after it)")
    assert suspended < reconnected, "reconnected was reported before suspended"
