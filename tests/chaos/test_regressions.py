"""Failures the chaos campaign found in the library, each reproduced in isolation (see docs/chaos.md)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tests.chaos.fleet import Fleet, Settings
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
