"""Confirmed-death failover against a real ZooKeeper and real worker processes (no kubelet here: the
pod's status is built from the dead worker's own termination-message file, as the kubelet would)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from rebalanser.instance import instance_digest, parse_termination_message
from rebalanser.paths import GroupPaths
from rebalanser.wire import decode_session
from rebalanser_operator.apply.actions import apply_spec
from rebalanser_operator.failover.choice import EndedInstance, PodRef
from rebalanser_operator.failover.endmember import Outcome, end_instances
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.podwatch import Failover, index_entry
from rebalanser_operator.runtime import LoopOptions, OperatorContext

from tests.operator.support import TEST_TENANCY, RecordingKube
from tests.support.invariants import overlaps, token_regressions
from tests.support.workers import Group, Worker, wait_for

pytestmark = pytest.mark.zk

RESOURCES = {f"r{i}" for i in range(6)}
T = 20.0  # session timeout: far longer than any step below may take


@pytest.fixture
def kube() -> RecordingKube:
    return RecordingKube()


@pytest.fixture
def ctx(kube: RecordingKube) -> Iterator[OperatorContext]:
    context = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=5.0))
    yield context
    context.close()


def pod_env(member_id: str) -> dict[str, str]:
    """The downward API's environment of the worker's pod (workers.yaml)."""
    return {"POD_NAMESPACE": "shop", "POD_NAME": f"pod-{member_id}", "POD_UID": f"uid-{member_id}",
            "REBALANSER_CONTAINER": "worker"}


def spawn(group: Group, tmp_path: Path, member_id: str, *extra: str) -> Worker:
    return group.spawn(member_id, "--termination-log", str(tmp_path / f"{member_id}.termination-log"), *extra,
                       env=pod_env(member_id))


def ended_of(tmp_path: Path, member_id: str, container: str = "worker") -> set[EndedInstance]:
    nonce = parse_termination_message((tmp_path / f"{member_id}.termination-log").read_text())
    assert nonce is not None
    return {EndedInstance(container, nonce)}


def pod_ref(member_id: str) -> PodRef:
    return PodRef("shop", f"pod-{member_id}", f"uid-{member_id}")


def anyone(_: bytes) -> bool:
    return True  # these groups are made by the test, without an owner marker


def pod_of(tmp_path: Path, member_id: str) -> dict[str, Any]:
    """The pod status the kubelet writes once the worker's container instance has ended."""
    message = (tmp_path / f"{member_id}.termination-log").read_text()
    return {"metadata": {"name": f"pod-{member_id}", "namespace": "shop", "uid": f"uid-{member_id}",
                         "labels": {"app": "w"}},
            "status": {"containerStatuses": [{"name": "worker", "state": {"running": {}},
                                              "lastState": {"terminated": {"exitCode": 137, "message": message}}}]}}


def claims_of(zk: KazooClient, group_path: str, session: int) -> set[str]:
    paths = GroupPaths.of(group_path)
    owned = set()
    for name in zk.get_children(paths.owners):
        stat = zk.exists(paths.owner(name))
        if stat is not None and stat.ephemeralOwner == session:
            owned.add(name)
    return owned


def member_sessions(zk: KazooClient, group_path: str) -> dict[str, int]:
    paths = GroupPaths.of(group_path)
    out = {}
    for name in zk.get_children(paths.clients):
        stat = zk.exists(paths.client(name))
        if stat is not None:
            out[name] = stat.ephemeralOwner
    return out


def seed(zk: KazooClient, group_path: str) -> None:
    for name in RESOURCES:
        zk.create(GroupPaths.of(group_path).resource(name), makepath=True)


def test_a_killed_members_node_and_claims_go_at_once(zk: KazooClient, zk_hosts: str, group_path: str,
                                                     tmp_path: Path) -> None:
    seed(zk, group_path)
    group = Group(zk_hosts, group_path, tmp_path, session_timeout=T)
    try:
        w1, w2 = spawn(group, tmp_path, "w1"), spawn(group, tmp_path, "w2")
        group.wait_settled(RESOURCES, 60)
        before = member_sessions(zk, group_path)
        w1_node = next(n for n in before if "-w1-" in n)
        w2_claims = claims_of(zk, group_path, before[next(n for n in before if "-w2-" in n)])
        held = w1.owned()
        w1.kill()
        ended = ended_of(tmp_path, "w1")
        # Another pod's report of the same nonce (same name, another UID), another container's, and a
        # report without the nonce end nothing.
        assert end_instances(zk, group_path, PodRef("shop", "pod-w1", "uid-x"), ended, owned=anyone) == []
        assert end_instances(zk, group_path, pod_ref("w1"), ended_of(tmp_path, "w1", "sidecar"), owned=anyone) == []
        assert end_instances(zk, group_path, pod_ref("w1"), {EndedInstance("worker", "0" * 32)}, owned=anyone) == []
        outcomes = end_instances(zk, group_path, pod_ref("w1"), ended, owned=anyone)
        assert [(o.member_node, o.outcome) for o in outcomes] == [(w1_node, Outcome.CLOSED)] and held
        assert w1_node not in member_sessions(zk, group_path)
        assert claims_of(zk, group_path, before[w1_node]) == set()
        assert claims_of(zk, group_path, before[next(n for n in before if "-w2-" in n)]) >= w2_claims
        # Long before w1's session could expire, w2 works on everything.
        wait_for(lambda: w2.owned() == RESOURCES, T / 2, lambda: f"w2 owns {sorted(w2.owned())}")
        assert end_instances(zk, group_path, pod_ref("w1"), ended, owned=anyone) == []  # a re-run: nothing to do
        events = group.events()
        assert overlaps(events) == [] and token_regressions(events) == []
    finally:
        group.stop_all()


def test_the_member_node_records_only_the_digest_of_a_fresh_nonce(zk: KazooClient, zk_hosts: str, group_path: str,
                                                                  tmp_path: Path) -> None:
    """Issue 19 E, H, K: each start of the worker draws a new nonce that only the termination-message file
    holds; the member node records its digest and the pod from the downward API, never a hostname."""
    seed(zk, group_path)
    group = Group(zk_hosts, group_path, tmp_path, session_timeout=T)
    paths = GroupPaths.of(group_path)

    def record() -> dict[str, Any]:
        (name,) = zk.get_children(paths.clients)
        return dict(json.loads(zk.get(paths.client(name))[0]))

    try:
        w1 = spawn(group, tmp_path, "w1")
        group.wait_settled(RESOURCES, 60)
        first = next(iter(ended_of(tmp_path, "w1"))).nonce
        # The worker CLI (the image's entry point) records its session with the member node (issue 28).
        (name,) = zk.get_children(paths.clients)
        data, stat = zk.get(paths.session_record(name))
        assert decode_session(data).session_id == stat.ephemeralOwner == zk.exists(paths.client(name)).ephemeralOwner
        assert record() == {"id": "w1", "joined": record()["joined"], "instanceDigest": instance_digest(first),
                            "podNamespace": "shop", "pod": "pod-w1", "podUid": "uid-w1", "container": "worker"}
        assert w1.terminate() == 0  # a graceful leave
        spawn(group, tmp_path, "w1")  # the container restarted: a new instance
        group.wait_settled(RESOURCES, 60)
        second = next(iter(ended_of(tmp_path, "w1"))).nonce
        assert second != first and record()["instanceDigest"] == instance_digest(second)
        group.stop_all()
        group.spawn("w1", "--termination-log", str(tmp_path / "bare.termination-log"))  # no downward API
        group.wait_settled(RESOURCES, 60)
        assert set(record()) == {"id", "joined", "instanceDigest"}
    finally:
        group.stop_all()


def test_a_paused_member_is_never_ended(ctx: OperatorContext, zk: KazooClient, zk_hosts: str, group_path: str,
                                       tmp_path: Path) -> None:
    """SIGSTOP: the container still runs, so no terminated state carries its nonce; a running state
    with the nonce (impossible from a kubelet, but the rule must not care) ends nothing either."""
    seed(zk, group_path)
    group = Group(zk_hosts, group_path, tmp_path, session_timeout=T)
    try:
        w1 = spawn(group, tmp_path, "w1")
        spawn(group, tmp_path, "w2")
        group.wait_settled(RESOURCES, 60)
        w1.pause()
        body = pod_of(tmp_path, "w1")
        body["status"]["containerStatuses"][0] = {"name": "worker", "state": {"running": {}}}
        spec = {"zookeeper": {"connect": zk_hosts, "path": group_path}, "failover": "KubeletConfirmed"}
        entry = index_entry("shop", "orders", spec)
        assert entry is not None
        assert asyncio.run(Failover(ctx).handle_pod(body, entry.values())) == []
        assert len(member_sessions(zk, group_path)) == 2
    finally:
        w1.resume()
        group.stop_all()


@pytest.mark.parametrize("digest", [False, True], ids=["open", "digest-acl"])
def test_the_operator_ends_the_member_of_a_pod_that_opted_in(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path,
    digest: bool,
) -> None:
    spec: dict[str, Any] = {"zookeeper": {"connect": zk_hosts, "path": group_path}, "resources": sorted(RESOURCES),
                            "failover": "KubeletConfirmed", "podSelector": {"matchLabels": {"app": "w"}}}
    extra: list[str] = []
    if digest:
        kube.secrets["zk-digest"] = DigestCredentials("op", "pw")
        spec["zookeeper"]["credentialsSecret"] = "zk-digest"
        (tmp_path / "password").write_text("pw")
        extra = ["--zk-user", "op", "--zk-password-file", str(tmp_path / "password")]
    apply_spec(ctx, ctx.group("shop", "orders", "uid-orders"), spec, generation=1)
    entry = index_entry("shop", "orders", spec)
    assert entry is not None
    group = Group(zk_hosts, group_path, tmp_path, session_timeout=T, extra=extra)
    try:
        w1, w2 = spawn(group, tmp_path, "w1"), spawn(group, tmp_path, "w2")
        group.wait_settled(RESOURCES, 60)
        w1.kill()
        failover = Failover(ctx)
        other = pod_of(tmp_path, "w1")
        other["metadata"]["labels"] = {"app": "other"}
        assert asyncio.run(failover.handle_pod(other, entry.values())) == []  # not the group's pod
        outcomes = asyncio.run(failover.handle_pod(pod_of(tmp_path, "w1"), entry.values()))
        assert [o.outcome for o in outcomes] == [Outcome.CLOSED]
        wait_for(lambda: w2.owned() == RESOURCES, T / 2, lambda: f"w2 owns {sorted(w2.owned())}")
        assert index_entry("shop", "orders", {**spec, "failover": "SessionExpiry"}) is None
        events = group.events()
        assert overlaps(events) == [] and token_regressions(events) == []
    finally:
        group.stop_all()
        if digest:
            zk.add_auth("digest", "op:pw")
            zk.delete(group_path, recursive=True)
