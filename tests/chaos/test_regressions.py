"""Failures the chaos campaign found in the library, each reproduced in isolation (see docs/chaos.md)."""

from __future__ import annotations

import io
import json
import random
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from rebalanser import wire
from rebalanser.cli import EventLog, SimulatedWork
from rebalanser.client import Client
from rebalanser.config import GroupConfig
from rebalanser.handler import Handler
from rebalanser.options import Options
from rebalanser.paths import GroupPaths

from tests.chaos.fleet import Fleet, Settings
from tests.chaos.proxy import FaultProxy, RequestTap
from tests.support.workers import wait_for
from tests.support.zk import ZkCluster, purge


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


class _Revocations(Handler):
    """A handler that notes when each resource was stopped (the library's callback, timed by the test)."""

    def __init__(self) -> None:
        self.revoked: dict[str, float] = {}

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        pass

    def on_revoked(self, resources: Sequence[str]) -> None:
        for resource in resources:
            self.revoked.setdefault(resource, time.monotonic())


def test_a_flapping_link_never_holds_up_the_members_watches(chaos_single: ZkCluster) -> None:
    """The explorer's ``global-barrier`` #2/#3 ``flap``: after the coordinator's link flapped for a
    while, its own member obeyed the round's stop order seconds late, so the followers that had
    stopped kept their claims unworked past T + interval.

    The coordinator watches G/epoch, G/config and G/barrier with kazoo's ``DataWatch``. Each reconnect
    starts a thread that re-reads the node under the recipe's lock, retrying with no limit and a
    back-off that doubles (up to 60 s); a flap of a few seconds leaves one of them asleep in a
    back-off of seconds, holding the lock, after the link is back. When the node then changes, the
    recipe's watch callback waits for that lock on kazoo's one callback thread, and every other watch
    of the process waits behind it: here the member's watch on its own claim, deleted by an
    administrator right after a change of G/config. The member must still stop the resource at once
    (docs/protocol.md: an owner whose claim is deleted stops before its next unit of work)."""
    zk_admin = KazooClient(hosts=chaos_single.hosts, timeout=10)
    zk_admin.start(timeout=10)
    group = f"/chaos/flap-watch-{uuid.uuid4().hex[:8]}"
    paths = GroupPaths.of(group)
    zk_admin.create(f"{group}/resources/a", makepath=True)
    proxy = FaultProxy([s.address for s in chaos_single.servers])
    handler = _Revocations()
    client = Client(Options(proxy.hosts, group, member_id="m", create_group=True,
                            session_timeout=2, min_interval=0.1), handler)
    try:
        client.start()
        wait_for(lambda: client.owns("a") and client.role == "coordinator", 20, "never owned a, in office")
        tap = proxy.tap(RequestTap("flap", 0, flap=6.5))
        assert tap is not None
        proxy.cut()  # the reconnect's re-reads are the first requests: the link flaps from there on
        wait_for(tap.fired.is_set, 10, "the flap never began")
        wait_for(lambda: time.monotonic_ns() > tap.healed_ns, 15, "the flap never ended")
        proxy.tap(None)
        wait_for(lambda: client.owns("a"), 20, "a not owned again after the flap")
        zk_admin.create(paths.config, wire.encode_config(GroupConfig(min_interval_seconds=0.2)))
        deleted = time.monotonic()
        zk_admin.delete(paths.owner("a"))
        wait_for(lambda: "a" in handler.revoked, 30, "a never stopped after its claim was deleted")
        late = handler.revoked["a"] - deleted
        assert late < 3.5, f"a was stopped {late:.1f} s after its claim was deleted (its watch was held up)"
    finally:
        client.stop()
        proxy.close()
        purge(zk_admin, group)
        zk_admin.stop()
        zk_admin.close()
