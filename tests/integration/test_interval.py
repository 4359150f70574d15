"""The rebalance interval spaces the group's rebalances: across a change of coordinator, and without a
rebalance of its own when the operator tunes it.

Evidence is what ZooKeeper stores: the generation and the server's modification stamp of ``G/state``,
which the coordinator writes at the end of every rebalance."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kazoo.client import KazooClient

from tests.integration.conftest import add_resources
from tests.support.workers import Group, Worker, wait_for

RESOURCES = [f"r{i}" for i in range(6)]


def last_rebalance(zk: KazooClient, group: str) -> tuple[int, int]:
    """(generation, server stamp in ms) of the group's last rebalance."""
    data, stat = zk.get(f"{group}/state")
    return int(json.loads(data)["generation"]), int(stat.mtime)


def last_algorithm(zk: KazooClient, group: str) -> str:
    """The algorithm of the group's last rebalance."""
    data, _ = zk.get(f"{group}/state")
    return str(json.loads(data)["algorithm"])


def coordinator(group: Group) -> Worker:
    return next(w for w in group.live() if w.of("role") and w.of("role")[-1]["role"] == "coordinator")


def set_config(zk: KazooClient, group: str, **config: object) -> None:
    path, data = f"{group}/config", json.dumps(config).encode()
    if zk.exists(path) is None:
        zk.create(path, data, makepath=True)
    else:
        zk.set(path, data)


def test_a_successor_coordinator_keeps_the_groups_interval(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    """The coordinator leaves right after a rebalance and a member joins: its successor hands the
    departed coordinator's resources out at once (orphans never wait), but waits out the interval
    from the group's last rebalance before it moves anything to the joiner, as the departed
    coordinator would have (a rolling restart replaces the coordinator's pod too)."""
    interval = 8.0
    group = Group(zk_hosts, group_path, tmp_path, min_interval=interval)
    try:
        add_resources(zk, group_path, RESOURCES)
        first = group.spawn("a")
        group.wait_settled(set(RESOURCES), 30)
        group.spawn("b")
        wait_for(lambda: len(set(group.ownership().values())) == 2, 3 * interval, lambda: group.describe(RESOURCES))
        generation, stamp = last_rebalance(zk, group_path)
        assert coordinator(group) is first
        assert first.terminate() == 0
        wait_for(lambda: set(group.ownership()) == set(RESOURCES), interval / 2,
                 lambda: f"the departed coordinator's resources waited: {group.describe(set(RESOURCES))}")
        group.spawn("c")
        wait_for(lambda: set(group.ownership().values()) == {"b", "c"}, 3 * interval, lambda: group.describe(RESOURCES))
        later, later_stamp = last_rebalance(zk, group_path)
        gap = (later_stamp - stamp) / 1000
        assert later == generation + 2, f"{later - generation} rebalances for one hand-out and one join"
        assert gap >= interval - 0.5, f"the successor rebalanced {gap:.1f}s after the last one (interval {interval}s)"
    finally:
        group.stop_all()


def test_a_tuned_interval_makes_no_rebalance_and_a_new_algorithm_does(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    group = Group(zk_hosts, group_path, tmp_path, min_interval=0.3)
    try:
        set_config(zk, group_path, algorithm="ResourceBarrier", minIntervalSeconds=0.3, maxIntervalSeconds=5)
        add_resources(zk, group_path, RESOURCES)
        group.spawn("a")
        group.spawn("b")
        wait_for(lambda: len(set(group.ownership().values())) == 2, 30, lambda: group.describe(RESOURCES))
        generation, _ = last_rebalance(zk, group_path)
        for effective in (0.6, 0.3, 0.4):  # what the operator's tuner writes as churn rises and decays
            set_config(zk, group_path, algorithm="ResourceBarrier", minIntervalSeconds=0.3, maxIntervalSeconds=5,
                       effectiveIntervalSeconds=effective)
        time.sleep(2.0)  # a rebalance that does not happen has no event: wait five intervals for it
        assert last_rebalance(zk, group_path)[0] == generation, "tuning the interval made a rebalance"
        group.spawn("c")  # a rebalance that must come: the tuned ones before it would come first
        wait_for(lambda: len(set(group.ownership().values())) == 3, 30, lambda: group.describe(RESOURCES))
        after_join, _ = last_rebalance(zk, group_path)
        assert after_join == generation + 1, f"{after_join - generation} rebalances for one join and three tunings"
        # Global Barrier with nothing to move runs no round; a resource added after the switch is handed
        # out under it (the coordinator's session sees the config change before the new resource), so
        # the group is known to run Global Barrier before it is switched back. Two switches in a row
        # could be read as one: back to the algorithm it had, nothing to do.
        set_config(zk, group_path, algorithm="GlobalBarrier", minIntervalSeconds=0.3, maxIntervalSeconds=5,
                   effectiveIntervalSeconds=1.0)
        add_resources(zk, group_path, ["r-new"])
        wait_for(lambda: last_algorithm(zk, group_path) == "GlobalBarrier", 30,
                 lambda: f"a resource added under Global Barrier: last rebalance {last_algorithm(zk, group_path)}")
        seen, _ = last_rebalance(zk, group_path)
        set_config(zk, group_path, algorithm="ResourceBarrier", minIntervalSeconds=0.3, maxIntervalSeconds=5,
                   effectiveIntervalSeconds=1.0)
        wait_for(lambda: last_rebalance(zk, group_path)[0] > seen, 30, "switching the algorithm made no rebalance")
        assert last_algorithm(zk, group_path) == "ResourceBarrier"
    finally:
        group.stop_all()
