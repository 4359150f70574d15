"""A process started during a step and slow to start (a loaded host) is the host's time, like a stall."""

from __future__ import annotations

import random
from pathlib import Path

from tests.chaos.fleet import ChaosWorker, Fleet, Settings
from tests.support.zk import ZkCluster


def _started(fleet: Fleet, spawned_s: float, first_event_s: float | None) -> None:
    worker = ChaosWorker("w", None, "normal", fleet.log_dir)  # type: ignore[arg-type]  # never run
    worker.spawned_ns = int(spawned_s * 1e9)
    worker.first_event_ns = int(first_event_s * 1e9) if first_event_s is not None else 0
    fleet.started.append(worker)


def test_only_starts_within_the_step_and_beyond_the_usual_count(chaos_single: ZkCluster, tmp_path: Path) -> None:
    fleet = Fleet(chaos_single, Settings(workers=1, resources=1), tmp_path, random.Random(0))
    try:
        _started(fleet, 5.0, 5.5)  # a usual start
        assert fleet.late_start(0, int(100e9)) == 0.0
        _started(fleet, 10.0, 20.0)  # 10 s from exec to its first event: 9 s beyond the usual 1 s
        _started(fleet, 200.0, 250.0)  # after the step
        assert fleet.late_start(0, int(100e9)) == 9.0
        _started(fleet, 30.0, None)  # not started yet at the end of the window
        assert fleet.late_start(0, int(100e9)) == 69.0
    finally:
        fleet.close()
