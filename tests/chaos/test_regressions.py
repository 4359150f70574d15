"""Failures the chaos campaign found in the library, each reproduced in isolation (see docs/chaos.md)."""

from __future__ import annotations

import io
import json
import random
import threading
import time
from pathlib import Path

import pytest
from rebalanser.cli import EventLog, SimulatedWork

from tests.chaos.fleet import Fleet, Settings
from tests.support.workers import wait_for
from tests.support.zk import ZkCluster


@pytest.mark.parametrize("behaviour", ["hang", "slow"])
def test_a_session_lost_while_a_stop_callback_runs_rejoins_exactly_once(
    chaos_single: ZkCluster, tmp_path: Path, behaviour: str
) -> None:
    """Bug 1: the session expired while the member thread ran a stop callback (after its lease ran
    out). kazoo fired the dead session's watches, queued ahead of the LOST event; the member handled
    them as if its old session still lived, took its own member znode for vanished and joined again,
    then joined once more on LOST + CONNECTED: one session, two member znodes. The coordinator kept
    the older one, so the worker never got work again (liveness) and a ghost member leaked."""
    settings = Settings(workers=3, resources=9, bad_stop_share=0.0)
    fleet = Fleet(chaos_single, settings, tmp_path, random.Random(0))
    try:
        assert fleet.start().ok
        assert fleet.workers["w2"].terminate(timeout=settings.bound) == 0
        worker = fleet.spawn("w2", behaviour)
        assert fleet.wait_recovered(time.monotonic_ns(), cap=settings.bound + 10).ok
        worker.pause()
        time.sleep(1.75 * settings.session_timeout)  # the fault's duration: beyond the session timeout
        worker.resume()
        recovery = fleet.wait_recovered(time.monotonic_ns(), cap=settings.bound + 5)
        assert recovery.ok, f"not recovered after the resume: {recovery.problems}"
        assert fleet.leak_problems(timeout=settings.session_timeout + 2) == []
        assert fleet.ledger.overlaps() == [] and fleet.ledger.token_regressions() == []
    finally:
        fleet.close()


def test_claims_kept_across_a_lease_expiry_are_released_when_the_resource_moves(
    chaos_single: ZkCluster, tmp_path: Path
) -> None:
    """Bug 2: when its self-fencing lease ran out (a partition, or CPU starvation as in the campaign),
    a member stopped work but kept its claims (its session still lived) to re-acquire them cheaply.
    If the next assignment moved one of those resources away, the member released only claims on
    resources it was still working on, so the moved resource's claim stayed held by its live session
    and the new owner waited for it forever (liveness).

    A one-way partition (replies held, requests delivered) expires the lease but not the session, as
    CPU starvation did in the campaign. Two workers share 8 resources, so a third that joins meanwhile
    must take one from the stalled worker."""
    settings = Settings(workers=2, resources=8, bad_stop_share=0.0)
    fleet = Fleet(chaos_single, settings, tmp_path, random.Random(0))
    try:
        assert fleet.start().ok
        victim = fleet.followers()[0]
        assert len(fleet.owned_by(victim)) == 4
        victim.proxy.stall_replies()
        wait_for(lambda: not fleet.owned_by(victim), settings.session_timeout + 2, "the victim never self-fenced")
        newcomer = fleet.spawn("w2")
        wait_for(lambda: any(e["_pid"] == newcomer.pid for e in fleet.ledger.events_of({"assigned"})),
                 settings.bound, "the newcomer got nothing while the victim was stalled")
        time.sleep(0.5)  # the fault's duration: the victim's stop (lease expiry) is processed meanwhile
        victim.proxy.restore()
        recovery = fleet.wait_recovered(time.monotonic_ns(), cap=settings.bound + 5)
        assert recovery.ok, f"not recovered after the stall: {recovery.problems}"
        assert fleet.leak_problems(timeout=3) == []
        assert fleet.ledger.overlaps() == [] and fleet.ledger.token_regressions() == []
        sessions = [e["state"] for e in fleet.ledger.events_of({"session"}) if e["_pid"] == victim.pid]
        assert "expired" not in sessions, "the session was meant to outlive the stall"
    finally:
        fleet.close()


class _Regranted:
    """A client that owns ``r`` again under a new claim (token 615) whose ``on_assigned`` has not run
    yet: the instant between the library's grant and the worker's callback."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop

    def owns(self, resource: str) -> bool:
        self.stop.set()  # one round of work is enough
        return resource == "r"

    def token(self, resource: str) -> int | None:
        self.stop.set()
        return 615 if resource == "r" else None


def test_the_example_worker_ticks_with_the_current_token_not_a_stale_one() -> None:
    """Bug 3 (the example worker, not the library): a worker whose stop callback hung kept the
    revoked resource and the token from its ``on_assigned`` in its own table. When the library granted
    the resource to it again, the tick loop saw ``owns`` pass before the new ``on_assigned`` ran and
    reported work under the superseded token: in the campaign, 4 overlaps on one worker in 8 minutes
    (work carrying token 502 after another owner's 516). A unit of work must carry the library's
    token at that instant."""
    out = io.StringIO()
    work = SimulatedWork(EventLog("w", True, out), tick=0.01, stop_behaviour="hang")
    stop = threading.Event()
    work.client = _Regranted(stop)  # type: ignore[assignment]
    work.on_assigned({"r": 502})
    threading.Thread(target=work.on_revoked, args=(["r"],), daemon=True).start()  # hangs for good
    work.run(stop)
    ticks = [json.loads(line) for line in out.getvalue().splitlines() if '"tick"' in line]
    assert ticks, "the worker owns r: it must work on it"
    assert {t["token"] for t in ticks} == {615}, f"work reported under a stale token: {ticks}"
