"""The live status mirror against real ZooKeeper (and real worker processes)."""

from __future__ import annotations

import copy
import itertools
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from rebalanser.paths import GroupPaths
from rebalanser.wire import decode_config
from rebalanser_operator.apply.actions import RetryLater, apply_spec
from rebalanser_operator.runtime import GroupRuntime, LoopOptions, OperatorContext
from rebalanser_operator.statusloop import StatusLoop

from tests.operator.support import TEST_TENANCY, RecordingKube, conditions, status_loop
from tests.support.zk import free_port, make_cluster

pytestmark = pytest.mark.zk

BODY = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": "orders"}}
REBALANSER = Path(sys.executable).with_name("rebalanser")


@pytest.fixture
def kube() -> RecordingKube:
    return RecordingKube()


@pytest.fixture
def ctx(kube: RecordingKube) -> Iterator[OperatorContext]:
    context = OperatorContext(
        tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=2.0, period=2.0, drift_repair_interval=0.5))
    yield context
    context.close()



def setup_group(ctx: OperatorContext, hosts: str, path: str, **fields: Any) -> GroupRuntime:
    rt = ctx.group("shop", "orders", uuid.uuid4().hex)
    spec = {"zookeeper": {"connect": hosts, "path": path}, **fields}
    apply_spec(ctx, rt, spec, generation=1, body=BODY)
    return rt


def add_member(zk: KazooClient, path: str, member_id: str) -> str:
    prefix = f"{GroupPaths.of(path).clients}/{uuid.uuid4().hex}-{member_id}-"
    created: str = zk.create(prefix, ephemeral=True, sequence=True)
    return created


def test_status_follows_membership_within_two_seconds(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    rt = setup_group(ctx, zk_hosts, group_path, resources=["a", "b"])
    with status_loop(ctx, rt):
        first = kube.wait_status(lambda s: s["members"] == 0 and s["resources"] == 2, 10, "the first status")
        assert first["phase"] == "Pending" and conditions(first)["Ready"]["reason"] == "NoMembers"
        lags = []
        for round_ in range(3):
            time.sleep(1.2)  # let the patch rate limit pass: measure the worst case, not a warm wait
            started = time.monotonic()
            node = add_member(zk, group_path, f"m{round_}")
            kube.wait_status(lambda s: s["members"] == 1, 5, "one member")
            lags.append(time.monotonic() - started)
            zk.delete(node)
            kube.wait_status(lambda s: s["members"] == 0, 5, "no member")
        print(f"\nstatus lag after a membership change: {', '.join(f'{lag:.2f}s' for lag in lags)}")
        assert max(lags) < 2.0


def test_a_churn_storm_is_coalesced(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    rt = setup_group(ctx, zk_hosts, group_path, resources=["a"])
    with status_loop(ctx, rt):
        kube.wait_status(lambda s: s["members"] == 0, 10, "the first status")
        before = len(kube.patches)
        started = time.monotonic()
        nodes: list[str] = []
        growing = True
        changes = 0
        while time.monotonic() - started < 3.0:  # membership swings between 1 and 8 members
            if growing:
                nodes.append(add_member(zk, group_path, f"m{changes}"))
            else:
                zk.delete(nodes.pop())
            changes += 1
            growing = len(nodes) < 8 if growing else len(nodes) <= 1
            time.sleep(0.01)
        storm = time.monotonic() - started
        kube.wait_status(lambda s: s["members"] == len(nodes), 5, "the final membership")
        patches = len(kube.patches) - before
        times = [t for t, _ in kube.patches[before:]]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        print(f"\nchurn storm: {changes} membership changes in {storm:.1f}s -> {patches} status patches, "
              f"smallest gap {min(gaps, default=0):.2f}s")
        assert 2 <= patches <= storm + 2
        assert all(gap >= 0.95 for gap in gaps)


def test_real_workers_reach_stable_and_status_follows_a_departure(
    ctx: OperatorContext, kube: RecordingKube, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    rt = setup_group(ctx, zk_hosts, group_path, resourceSets=[{"prefix": "r", "count": 12}],
                     rebalance={"minIntervalSeconds": 1, "maxIntervalSeconds": 2})
    workers = {}
    with status_loop(ctx, rt):
        try:
            for i in range(3):
                log = open(tmp_path / f"w{i}.log", "w")  # noqa: SIM115 - closed with the process
                workers[f"w{i}"] = subprocess.Popen(
                    [str(REBALANSER), "worker", "--zk", zk_hosts, "--group", group_path, "--id", f"w{i}", "--json"],
                    stdout=log, stderr=subprocess.STDOUT,
                )
            stable = kube.wait_status(
                lambda s: s["phase"] == "Stable" and s["members"] == 3 and s["assigned"] == 12, 60, "Stable with 3"
            )
            assert conditions(stable)["Ready"]["status"] == "True"
            assert sorted(r for rs in stable["assignments"].values() for r in rs) == sorted(f"r{i}" for i in range(12))
            assert stable["coordinator"] in workers and "lastRebalance" in stable
            assert "Rebalanced" in kube.reasons()
            workers["w1"].send_signal(signal.SIGTERM)
            assert workers["w1"].wait(30) == 0
            after = kube.wait_status(
                lambda s: s["phase"] == "Stable" and s["members"] == 2 and s["assigned"] == 12, 60, "Stable with 2"
            )
            assert "w1" not in after["assignments"]
        finally:
            for proc in workers.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in workers.values():
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def test_zookeeper_outage_and_recovery_without_restart(
    tmp_path: Path, kube: RecordingKube, ctx: OperatorContext
) -> None:
    cluster = make_cluster(tmp_path / "zk", size=1)
    cluster.start()
    try:
        rt = setup_group(ctx, cluster.hosts, "/rebalanser-test/outage-g", resources=["a"])
        with status_loop(ctx, rt):
            kube.wait_status(lambda s: conditions(s)["ZooKeeperConnected"]["status"] == "True", 10, "connected")
            cluster.stop()
            down = kube.wait_status(
                lambda s: conditions(s)["ZooKeeperConnected"]["status"] == "False", 20, "ZooKeeperConnected=False"
            )
            assert down["phase"] == "Degraded" and conditions(down)["ZooKeeperConnected"]["reason"] == "ConnectionLost"
            assert "ZooKeeperDisconnected" in kube.reasons()
            cluster.start()
            up = kube.wait_status(
                lambda s: conditions(s)["ZooKeeperConnected"]["status"] == "True", 40, "ZooKeeperConnected=True"
            )
            assert up["resources"] == 1
            assert "ZooKeeperReconnected" in kube.reasons()
    finally:
        cluster.stop()


def test_drift_is_repaired(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    rt = setup_group(ctx, zk_hosts, group_path, resources=["a", "b"])
    paths = GroupPaths.of(group_path)
    with status_loop(ctx, rt):
        kube.wait_status(lambda s: s["resources"] == 2, 10, "two resources")
        zk.delete(paths.resource("a"))
        zk.create(paths.resource("stray"))
        zk.set(paths.config, b'{"algorithm": "GlobalBarrier"}')
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            config = decode_config(zk.get(paths.config)[0])
            if sorted(zk.get_children(paths.resources)) == ["a", "b"] and config.algorithm.value == "ResourceBarrier":
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"drift not repaired: {zk.get_children(paths.resources)}")
        assert "DriftRepaired" in kube.reasons()


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize("poison", [b"{not json", b'{"minIntervalSeconds": 1e999}', DEEP],
                         ids=["garbage", "1e999", "deep"])
def test_a_poisoned_config_is_written_again(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str, poison: bytes
) -> None:
    rt = setup_group(ctx, zk_hosts, group_path, resources=["a"])
    paths = GroupPaths.of(group_path)
    with status_loop(ctx, rt):
        kube.wait_status(lambda s: s["resources"] == 1, 10, "first status")
        wanted = zk.get(paths.config)[0]
        zk.set(paths.config, poison)
        deadline = time.monotonic() + 10
        while zk.get(paths.config)[0] != wanted:
            assert time.monotonic() < deadline, f"G/config still holds {zk.get(paths.config)[0][:40]!r}"
            time.sleep(0.05)


@pytest.mark.parametrize("poison", [DEEP, b'{"generation": 1, "completedAt": 1e999}',
                                    b'{"generation": 1, "completedAt": 1e300}'], ids=["deep", "1e999", "1e300"])
def test_a_poisoned_state_record_is_reported_and_the_status_goes_on(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str, poison: bytes
) -> None:
    rt = setup_group(ctx, zk_hosts, group_path, resources=["a", "b"])
    with status_loop(ctx, rt):
        kube.wait_status(lambda s: s["resources"] == 2, 10, "first status")
        zk.create(GroupPaths.of(group_path).state, poison)
        add_member(zk, group_path, "m1")
        status = kube.wait_status(lambda s: s["members"] == 1, 10, "a status after the poison")
        ready = conditions(status)["Ready"]
        assert status["phase"] == "Degraded" and ready["reason"] == "CorruptData" and "G/state" in ready["message"]
        assert "lastRebalance" not in status


def test_rollout_raises_the_effective_interval_to_the_maximum(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    kube.rolling_out = True
    rt = setup_group(ctx, zk_hosts, group_path, resources=["a"], workload={"kind": "Deployment", "name": "workers"},
                     rebalance={"minIntervalSeconds": 1, "maxIntervalSeconds": 12})
    with status_loop(ctx, rt):
        kube.wait_status(lambda s: s["effectiveIntervalSeconds"] == 12, 10, "effective interval 12")
        config = decode_config(zk.get(GroupPaths.of(group_path).config)[0])
        assert config.effective_interval_seconds == 12


def test_a_watched_rollout_needs_no_polling_and_raises_the_interval_at_once(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """The workload watch's word replaces the polling: a read of the workload would say "not rolling out"
    here, the watch says it is, and the loop acts on the watch."""
    kube.rolling_out = False
    rt = setup_group(ctx, zk_hosts, group_path, resources=["a"], workload={"kind": "Deployment", "name": "workers"},
                     rebalance={"minIntervalSeconds": 1, "maxIntervalSeconds": 12})
    with status_loop(ctx, rt) as loop:
        kube.wait_status(lambda s: s["effectiveIntervalSeconds"] == 1, 10, "effective interval 1")
        assert loop.needs_polling(), "an unwatched workload is polled"
        ctx.workload_seen("shop", "Deployment", "other", True)  # not this group's workload
        ctx.workload_seen("shop", "Deployment", "workers", True)
        kube.wait_status(lambda s: s["effectiveIntervalSeconds"] == 12, 10, "effective interval 12")
        ctx.workload_seen("shop", "Deployment", "workers", False)
        # a message to the group's controller: a step queued after it sees its effect
        assert ctx.controller_of(rt).run(lambda: rt.rollout) == ("Deployment", "workers", False)


def test_the_loop_stops_when_the_object_is_gone(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    rt = setup_group(ctx, zk_hosts, group_path, resources=["a"])
    with status_loop(ctx, rt) as loop:
        kube.wait_status(lambda s: s["resources"] == 1, 10, "first status")
        kube.gone = True
        add_member(zk, group_path, "m")
        deadline = time.monotonic() + 10
        while not loop.gone and time.monotonic() < deadline:
            time.sleep(0.05)
        assert loop.gone



def test_restart_resumes_without_duplicate_work(
    kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    spec = {"zookeeper": {"connect": zk_hosts, "path": group_path}, "resources": ["a", "b"]}
    paths = GroupPaths.of(group_path)
    first = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(period=1.0))
    try:
        rt = first.group("shop", "orders", "uid-1")
        apply_spec(first, rt, spec, generation=1, body=BODY)
        add_member(zk, group_path, "m1")
        zk.create(paths.state, b'{"generation": 1, "completedAt": 1700000000000, "moved": 2, "durationMs": 5}')
        with status_loop(first, rt):
            kube.wait_status(lambda s: s["lastRebalance"]["generation"] == 1, 10, "lastRebalance generation 1")
    finally:
        first.close()
    assert kube.reasons().count("Rebalanced") == 1 and kube.reasons().count("ResourcesSynced") == 1
    published = dict(kube.status)

    restarted = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(period=1.0))
    try:
        rt = restarted.group("shop", "orders", "uid-1")
        result = apply_spec(restarted, rt, spec, generation=1, body=BODY,
                            seed_interval=published["effectiveIntervalSeconds"],
                            recorded_path=published["zookeeperPath"])
        assert (result.created, result.deleted, result.config_written) == (0, 0, False)
        patches_before = len(kube.patches)
        loop = StatusLoop(restarted, rt, initial_status=published)
        loop.refresh()
        loop.refresh()
        assert len(kube.patches) == patches_before, "an unchanged group must not be re-patched after a restart"
        assert kube.reasons().count("Rebalanced") == 1 and kube.reasons().count("ResourcesSynced") == 1
        zk.set(paths.state, b'{"generation": 2, "completedAt": 1700000001000, "moved": 0, "durationMs": 3}')
        loop.refresh()
        assert kube.reasons().count("Rebalanced") == 2
    finally:
        restarted.close()


def test_a_forgotten_group_stops_its_loop_without_reconnecting(
    ctx: OperatorContext, kube: RecordingKube, zk_hosts: str, group_path: str
) -> None:
    rt = setup_group(ctx, zk_hosts, group_path, resources=["a"])
    ctx.forget(rt.namespace, rt.name)
    assert ctx.pool.connections() == 0
    loop = StatusLoop(ctx, rt, initial_status={})
    loop.refresh()
    assert loop.gone and ctx.pool.connections() == 0 and kube.patches == []


def test_a_restarted_operator_keeps_the_published_status_until_it_has_reconciled(
    ctx: OperatorContext, kube: RecordingKube, zk_hosts: str, group_path: str
) -> None:
    published = {"phase": "Stable", "members": 3, "resources": 2, "conditions": [
        {"type": "Ready", "status": "True", "reason": "Stable", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    rt = ctx.group("shop", "orders", uuid.uuid4().hex)
    loop = StatusLoop(ctx, rt, initial_status=published)
    loop.refresh()  # the daemon started before the resume handler ran
    assert kube.patches == [], "a restarted operator must not publish 'not reconciled yet' over a live status"
    apply_spec(ctx, rt, {"zookeeper": {"connect": zk_hosts, "path": group_path}, "resources": ["a", "b"]},
               generation=1, body=BODY)
    loop.refresh()
    assert kube.patches and kube.status["members"] == 0 and kube.status["phase"] == "Pending"


def test_a_reconcile_finishing_during_the_first_observation_does_not_publish_it(
    ctx: OperatorContext, kube: RecordingKube, zk_hosts: str, group_path: str
) -> None:
    """The race seen on a real cluster: the observation was taken before the resume handler's
    reconcile, the publish after it; the stale 'not reconciled yet' must not go out."""
    published = {"phase": "Stable", "members": 3, "resources": 2, "conditions": [
        {"type": "Ready", "status": "True", "reason": "Stable", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    rt = ctx.group("shop", "orders", uuid.uuid4().hex)
    loop = StatusLoop(ctx, rt, initial_status=published)
    observation = loop._observe(time.monotonic())
    apply_spec(ctx, rt, {"zookeeper": {"connect": zk_hosts, "path": group_path}, "resources": ["a", "b"]},
               generation=1, body=BODY)
    loop._publish(observation)
    assert kube.patches == [], kube.patches


def test_a_restarted_operator_that_cannot_reach_zookeeper_keeps_the_view_then_says_so(
    ctx: OperatorContext, kube: RecordingKube
) -> None:
    """No empty view goes out: until this loop has read the group once, the published members,
    coordinator and assignments stand; once ``restart_hold`` has passed it reports the lost connection
    (Degraded) over that view, as a running loop does when it loses ZooKeeper."""
    ready_since = "2026-01-01T00:00:00Z"
    published = {
        "phase": "Stable", "members": 2, "resources": 2, "assigned": 2, "coordinator": "w-1", "epoch": 4,
        "assignments": {"w-1": ["a"], "w-2": ["b"]}, "lastRebalance": {"generation": 3, "moved": 1},
        "conditions": [{"type": "Ready", "status": "True", "reason": "Stable", "lastTransitionTime": ready_since}],
    }
    kube.status = copy.deepcopy(published)
    rt = ctx.group("shop", "orders", uuid.uuid4().hex)
    loop = StatusLoop(ctx, rt, initial_status=published)
    with pytest.raises(RetryLater):
        apply_spec(ctx, rt, {"zookeeper": {"connect": f"127.0.0.1:{free_port()}", "path": "/rebalanser-test/g"},
                             "resources": ["a", "b"]}, generation=1, body=BODY)
    loop.refresh()
    assert kube.patches == [], "a restarted operator published a view it had not read"
    loop._born -= ctx.options.restart_hold
    loop.refresh()
    assert kube.patches, "ZooKeeper out of reach past the hold must be reported"
    st = kube.status
    assert st["phase"] == "Degraded", st
    assert {c["type"]: c["reason"] for c in st["conditions"]}["ZooKeeperConnected"] == "ConnectionLost"
    for key in ("members", "coordinator", "assignments", "lastRebalance", "epoch"):
        assert st[key] == published[key], f"{key} was dropped or changed: {st.get(key)}"


def test_an_idle_group_is_not_re_read_every_period_but_still_follows_changes(
    kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """Nothing polls an idle group: its refreshes come from watches (a join shows at once) and the
    namespace check (shared, every period) still notices a namespace being deleted."""
    ctx = OperatorContext(
        tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=2.0, period=0.3, idle_period=300.0))
    try:
        rt = setup_group(ctx, zk_hosts, group_path, resources=["a", "b"])
        with status_loop(ctx, rt) as loop:
            kube.wait_status(lambda s: s.get("phase") == "Pending" and s.get("resources") == 2, 10, "first status")
            def count() -> float:
                samples = ctx.metrics.status_refresh_seconds.collect()[0].samples
                return sum(s.value for s in samples if s.name.endswith("_count"))

            assert not loop.needs_polling(), "a reconciled, connected, quiet group with no members is idle"
            before = count()
            time.sleep(3.0)  # ten periods
            assert count() - before <= 1, f"an idle group was refreshed {count() - before} times in 3 s"
            add_member(zk, group_path, "w1")
            kube.wait_status(lambda s: s.get("members") == 1, 5, "the join in the status (a watch, not a poll)")
            kube.terminating.add("shop")
            kube.groups["shop"] = []
            deadline = time.monotonic() + 10
            while not loop.gone and time.monotonic() < deadline:
                time.sleep(0.1)
            assert loop.gone, "the namespace check stopped with the polling"
    finally:
        ctx.close()


def test_a_new_objects_first_status_waits_for_its_first_reconcile(
    ctx: OperatorContext, kube: RecordingKube, zk_hosts: str, group_path: str
) -> None:
    """One patch, not a Pending one and another at once: with a thousand groups applied together, the
    API server's patches are what the first sync waits for."""
    rt = ctx.group("shop", "orders", uuid.uuid4().hex)
    with status_loop(ctx, rt):
        deadline = time.monotonic() + 10
        while refreshes(ctx) == 0:  # the loop has looked once
            assert time.monotonic() < deadline, "the status loop never refreshed"
            time.sleep(0.05)
        assert kube.patches == []
        apply_spec(ctx, rt, {"zookeeper": {"connect": zk_hosts, "path": group_path}, "resources": ["a", "b"]},
                   generation=1, body=BODY)
        kube.wait_status(lambda s: s.get("resources") == 2, 10, "the first status")
    first = kube.patches[0][1]
    assert first["resources"] == 2 and conditions(first)["ResourcesSynced"]["status"] == "True", first


def test_a_new_object_not_reconciled_in_time_says_pending(
    kube: RecordingKube, zk_hosts: str, group_path: str
) -> None:
    ctx = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(first_publish_hold=0.5, period=0.5))
    try:
        rt = ctx.group("shop", "orders", uuid.uuid4().hex)
        with status_loop(ctx, rt):
            first = kube.wait_status(lambda s: bool(s.get("phase")), 10, "a first status without a reconcile")
        assert first["phase"] == "Pending", first
    finally:
        ctx.close()


def refreshes(ctx: OperatorContext) -> float:
    return next(sample.value for metric in ctx.metrics.status_refresh_seconds.collect() for sample in metric.samples
                if sample.name.endswith("_count"))


def add_recorded_member(zk: KazooClient, path: str, member_id: str, **record: str) -> str:
    """A member node with its record (as a worker writes it: pod UID and instance digest when started
    with --termination-log and the downward API's environment)."""
    from rebalanser.wire import MemberRecord, encode_member

    prefix = f"{GroupPaths.of(path).clients}/{uuid.uuid4().hex}-{member_id}-"
    data = encode_member(MemberRecord(member_id=member_id, joined=time.time(), **record))
    created: str = zk.create(prefix, data, ephemeral=True, sequence=True)
    return created


def test_kubelet_confirmed_without_a_pod_watch_says_so(
    ctx: OperatorContext, kube: RecordingKube, zk_hosts: str, group_path: str
) -> None:
    """The operator installed without failover.enabled: the group falls back to session expiry, and
    the status and an Event say why and what to change (it used to say nothing)."""
    ctx.watch_pods = False
    rt = setup_group(ctx, zk_hosts, group_path, resources=["a"], failover="KubeletConfirmed")
    with status_loop(ctx, rt):
        status = kube.wait_status(lambda s: "FailoverReady" in conditions(s), 10, "FailoverReady")
        failover = conditions(status)["FailoverReady"]
        assert (failover["status"], failover["reason"]) == ("False", "PodsNotWatched")
        assert "failover.enabled=true" in failover["message"]
        assert kube.reasons().count("PodsNotWatched") == 1


def test_kubelet_confirmed_names_the_members_it_cannot_confirm(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    rt = setup_group(ctx, zk_hosts, group_path, resources=["a", "b"], failover="KubeletConfirmed")
    add_recorded_member(zk, group_path, "confirmable", pod="w-0", pod_uid="uid-0", instance_digest="0" * 64)
    add_recorded_member(zk, group_path, "bare", pod="w-1")  # no --termination-log, no POD_UID
    with status_loop(ctx, rt):
        status = kube.wait_status(lambda s: s.get("members") == 2 and "FailoverReady" in conditions(s), 10,
                                  "two members and FailoverReady")
        failover = conditions(status)["FailoverReady"]
        assert (failover["status"], failover["reason"]) == ("False", "MembersUnconfirmable")
        assert "1 of 2 members" in failover["message"] and "(bare)" in failover["message"]
        assert "--termination-log" in failover["message"] and "MembersUnconfirmable" in kube.reasons()


def test_a_spec_in_the_older_forms_is_read_and_named(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    rt = setup_group(ctx, zk_hosts, group_path, resources=["a"], workload={"kind": "Deployment", "name": "w"},
                     rebalance={"minIntervalSeconds": 1.5, "maxIntervalSeconds": 5})
    with status_loop(ctx, rt):
        status = kube.wait_status(lambda s: "SpecCurrent" in conditions(s), 10, "SpecCurrent")
        current = conditions(status)["SpecCurrent"]
        assert (current["status"], current["reason"]) == ("False", "DeprecatedFields")
        assert "write spec.workloadRef" in current["message"] and "read as 2 (rounded up)" in current["message"]
        assert "DeprecatedFields" in kube.reasons()
        config = decode_config(zk.get(GroupPaths.of(group_path).config)[0])
        assert config.min_interval_seconds == 2
