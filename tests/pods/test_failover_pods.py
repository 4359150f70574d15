"""Kubelet-confirmed failover on the real cluster, small: three worker pods, six resources, T = 10 s.

A SIGKILLed worker's container is reported terminated by the kubelet; the operator ends its member at
once and its resources are worked on again long before its session could expire. A SIGSTOPped worker
(paused for 3 T) is still running as far as the kubelet knows: the operator leaves it alone and its
resources move only when its session expires. Evidence: the worker pods' JSON logs (no overlap, no
fencing-token regression) and the operator's log. The side-by-side comparison with session-expiry
failover, with many kills, is ``python -m bench.failover`` (``make bench``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.support.failoverscene import FailoverScene
from tests.support.kubectl import Kube, wait_until
from tests.support.podcluster import REPO

pytestmark = [pytest.mark.pods, pytest.mark.timeout(900)]

GROUP = "confirmed"
T = 10.0
WORKERS = 3
RESOURCES = 6
OUT = REPO / ".pod-failover"
NAMESPACE = os.environ.get("REBALANSER_FAILOVER_NS", "rb-failover")  # its own on a shared cluster


@pytest.fixture(scope="module")
def scene(kube: Kube) -> Iterator[FailoverScene]:
    shutil.rmtree(OUT, ignore_errors=True)
    s = FailoverScene(kube, OUT, ns=NAMESPACE).setup()
    try:
        s.deploy(GROUP, "KubeletConfirmed", replicas=WORKERS, resources=RESOURCES, session_timeout=T)
        yield s
    finally:
        s.close()


def owned_by(owners: dict[str, str], pod: str) -> set[str]:
    return {r for r, m in owners.items() if m == pod}


def test_sigkill_is_failed_over_before_the_session_could_expire(scene: FailoverScene) -> None:
    owners = scene.stable(GROUP, WORKERS)
    victim = sorted(set(owners.values()))[0]
    instance = scene.instance(victim)
    kill = scene.signal(victim, "KILL")
    seconds = scene.reworked(GROUP, victim, instance, owned_by(owners, victim), kill.ts)
    print(f"\nkubelet-confirmed failover after SIGKILL: resources worked again {seconds:.2f}s after the kill")
    container = scene.wait_restarted(victim, instance)
    assert container["lastState"]["terminated"]["exitCode"] == 137, container["lastState"]
    assert container["lastState"]["terminated"].get("message", "").startswith("rebalanser-instance=")
    # The operator's line reaches its file through a `kubectl logs -f` follower, behind the operator's write.
    wait_until(lambda: any(victim in line for line in scene.operator_lines("failover: pod")), 30,
               "the operator did not act")
    # Session expiry alone cannot free them before T; the confirmed path must.
    assert seconds < T, f"resources worked again only {seconds:.1f}s after the kill (T = {T:g}s)"
    assert scene.violations(GROUP) == ([], [])
    scene.stable(GROUP, WORKERS)


def test_sigstop_for_three_session_timeouts_falls_back_to_expiry(scene: FailoverScene) -> None:
    owners = scene.stable(GROUP, WORKERS)
    victim = sorted(set(owners.values()))[-1]
    instance = scene.instance(victim)
    stop = scene.signal(victim, "STOP")
    try:
        seconds = scene.reworked(GROUP, victim, instance, owned_by(owners, victim), stop.ts, timeout=3 * T)
        scene.settle(max(0.0, 3 * T - seconds))  # the pause lasts 3 T in all
    finally:
        scene.signal(victim, "CONT")
    print(f"\nSIGSTOP: resources worked again {seconds:.2f}s after the pause began (session expiry)")
    assert scene.instance(victim) == instance, "a paused container must not be restarted"
    assert not any(victim in line for line in scene.operator_lines("failover: pod")), (
        "the operator ended a paused member")
    scene.stable(GROUP, WORKERS)
    assert scene.violations(GROUP) == ([], [])


def test_sigkill_right_after_the_group_formed_does_not_wait_for_the_interval(scene: FailoverScene) -> None:
    """A second group as a user starts it (minIntervalSeconds 1, adaptive, ``workload`` naming its
    Deployment, which counts as rolling out until its pods are available): the start-up raises the
    interval to its ceiling (30 s). A worker SIGKILLed as soon as the group is Stable has its resources
    worked on again within T, well before that interval would allow the next full rebalance."""
    group = "formed"
    scene.deploy(group, "KubeletConfirmed", replicas=WORKERS, resources=RESOURCES, session_timeout=T,
                 min_interval=1, adaptive=True, workload=True)
    owners = scene.stable(group, WORKERS)
    interval = scene.effective_interval(group)
    victim = sorted(set(owners.values()))[0]
    instance = scene.instance(victim)
    kill = scene.kill_from_host(victim)
    # The case this test is about: the interval the start-up left would hold a full rebalance back past T.
    assert interval is not None and interval > T, f"the start-up left the interval at {interval} s, not above T"
    seconds = scene.reworked(group, victim, instance, owned_by(owners, victim), kill.ts, timeout=3 * interval)
    print(f"\nSIGKILL right after the group formed (interval {interval:g}s): worked again {seconds:.2f}s later")
    assert seconds < T, f"resources worked again only {seconds:.1f}s after the kill (interval {interval:g}s, T {T:g}s)"
    assert scene.violations(group) == ([], [])
