"""One operator, 100 ResourceGroups: synced after a bulk apply, idle at rest, within its memory, and a
membership change in one group in its status while the others stay idle.

The same code as ``make bench``'s 1,000-group cell (bench/operator_idle.py), at a tenth of the size:
a real kube-apiserver, one real ZooKeeper server, the operator as a host process, real worker processes
for the membership changes. The bounds on time are liveness bounds for a loaded machine (the targets
themselves, 60 s and 2 s at 1,000 groups, are measured by ``make bench``); the idle CPU and memory
bounds are the targets (CPU time is not stretched by load the way wall time is).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from bench.operator_idle import Scene, load, measure, scene
from tests.support.cluster import UP_TIMEOUT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(UP_TIMEOUT)]

GROUPS = 100
#: Liveness bounds (the bench's targets are 60 s to sync 1,000 groups and 2 s per membership change).
SYNC_BOUND_S = 600.0
MEMBERSHIP_BOUND_S = 10.0
IDLE_CORES = 0.05
RSS_MB = 300.0


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    with scene(tmp_path_factory.mktemp("scale")) as s:
        yield s


def test_a_hundred_groups_sync_idle_cheaply_and_follow_membership(running: Scene) -> None:
    row = measure(running, GROUPS, resources=20, idle=10.0, probes=1, settle=5.0)
    report = json.dumps(row.to_dict())
    print(f"\n{report}")
    assert row.synced_s <= SYNC_BOUND_S, f"{GROUPS} groups synced in {row.synced_s:.0f} s (load {load()}): {report}"
    assert row.idle_cores < IDLE_CORES, f"idle CPU {row.idle_cores:.3f} core with {GROUPS} groups: {report}"
    assert row.rss_mb <= RSS_MB, f"RSS {row.rss_mb:.0f} MB with {GROUPS} groups: {report}"
    changes = row.join_s + row.leave_s
    assert len(changes) == 2 and max(changes) <= MEMBERSHIP_BOUND_S, \
        f"membership → status: {changes} s (load {load()}): {report}"
    failed = [line for line in running.operator_log().splitlines() if "status refresh of" in line]
    assert not failed, failed[:5]
