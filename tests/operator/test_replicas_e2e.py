"""Operator replicas sharing the ResourceGroups (docs/operator-replicas.md): three ``rebalanser-operator``
processes against one real kube-apiserver and one real ZooKeeper, each a member of the operator group.

Evidence is the replicas' own log lines, never their opinion: ``replica-serve`` when a replica starts
serving a group (with its claim's token), ``replica-write`` after each status patch it made, and
``replica-stop`` when it has stopped serving it (all with the wall-clock time; the processes share a
host). From them: every group's status is written, each group's serving intervals of different
replicas never overlap, every write lies inside its writer's interval, and after one replica is
SIGKILLed its groups are served, and their status written, by the others well before its session
could expire: each replica stands for a Pod object of the operator's namespace (no kubelet here: the
test writes the killed replica's pod status as the kubelet would, from its termination-message file),
and the others end its membership when they see it. Status writes are fenced: each carries
``status.servedBy`` (the replica and its token), and the admission policy of
:mod:`rebalanser_operator.replicafence` refuses one with a smaller token than the stored one; a replica
frozen with SIGSTOP while it serves groups writes nothing for them once thawed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rebalanser_operator.replicafence import fence_manifests
from rebalanser_operator.zkfence import stored_fence

from e2e.demo_stack import stop_process
from tests.e2e.test_operator_e2e import wait_for
from tests.support.cluster import REPO, UP_TIMEOUT, Cluster, start_cluster
from tests.support.liveness import healthy
from tests.support.replicalines import Line, check_one_at_a_time, closed_session, intervals, parse, serving_now
from tests.support.zk import ZkCluster, admin_client, free_port, serving_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(UP_TIMEOUT)]

NS = "rb-replicas"
OPERATORS = "rb-operators"  # the operator's own namespace: its pods
SELECTOR = "app=rb-operator"
BIN = Path(sys.executable).parent
REPLICAS = 3
GROUPS = 10
RESOURCES = 5
SESSION_TIMEOUT = 10.0
#: Liveness bounds on a loaded two-core machine; the SIGKILL handover's is half the session timeout, so that
#: only the reported death can meet it (issue 32's target is 2 s).
SYNC_BOUND_S = 180.0
HANDOVER_BOUND_S = SESSION_TIMEOUT / 2
GRACEFUL_BOUND_S = 5.0


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


@dataclass
class Replica:
    member: str
    log: Path
    proc: subprocess.Popen[bytes]
    liveness_port: int
    termination_log: Path
    readiness_port: int = 0

    def ready(self) -> tuple[int, str]:
        """The readiness endpoint's status and text."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.readiness_port}/readyz", timeout=2) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()

    def live(self) -> bool:
        return healthy(self.proc, self.liveness_port, self.member, self.text)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def lines(self) -> list[Line]:
        return parse(self.text())

    def stop(self) -> None:
        stop_process(self.proc, 60)


@dataclass
class Scene:
    cluster: Cluster
    zk: ZkCluster
    work: Path
    group: str
    replicas: list[Replica] = field(default_factory=list)
    #: further options of every replica
    extra: tuple[str, ...] = ()

    def start(self, member: str) -> Replica:
        log = self.work / f"{member}.log"
        port, readiness = free_port(), free_port()
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": member, "namespace": OPERATORS, "labels": {"app": "rb-operator"}},
               "spec": {"automountServiceAccountToken": False, "containers": [{"name": "operator", "image": "none"}]}}
        self.cluster.run_kubectl("apply", "-f", "-", input=json.dumps(pod))
        uid = json.loads(self.cluster.run_kubectl("get", "pod", member, "-n", OPERATORS, "-o", "json").stdout)
        termination_log = self.work / f"{member}.termination-log"
        env = {**self.cluster.env(), "POD_NAMESPACE": OPERATORS, "POD_NAME": member,
               "POD_UID": uid["metadata"]["uid"], "REBALANSER_CONTAINER": "operator",
               "REBALANSER_TERMINATION_LOG": str(termination_log)}
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [str(BIN / "rebalanser-operator"), "--namespace", NS, "--metrics-port", "0",
                 "--liveness", f"http://127.0.0.1:{port}/healthz", "--log-format", "full",
                 "--allowed-ensemble", self.zk.hosts, "--replica-zk", self.zk.hosts, "--replica-group", self.group,
                 "--replica-id", member, "--replica-session-timeout", str(SESSION_TIMEOUT),
                 "--replica-pod-selector", SELECTOR, "--failover-pods",
                 "--replica-readiness", f"http://127.0.0.1:{readiness}/readyz", *self.extra],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            )
        replica = Replica(member, log, proc, port, termination_log, readiness)
        self.replicas.append(replica)
        wait_for(replica.live, 90, lambda: f"{member}'s liveness endpoint; log:\n{replica.text()[-3000:]}")
        return replica

    def lines(self) -> list[Line]:
        return sorted((line for r in self.replicas for line in r.lines()), key=lambda line: line.at)

    def statuses(self) -> dict[str, dict[str, Any]]:
        items = json.loads(self.cluster.run_kubectl("get", "rg", "-n", NS, "-o", "json").stdout)["items"]
        return {f"{NS}/{rg['metadata']['name']}": rg.get("status") or {} for rg in items}


@contextmanager
def running_scene(work: Path, extra: tuple[str, ...] = ()) -> Iterator[Scene]:
    with start_cluster(work / "kube") as kube, serving_cluster(work / "zk", size=1) as zk:
        kube.create_namespace(NS)
        kube.create_namespace(OPERATORS)
        kube.run_kubectl("create", "serviceaccount", "default", "-n", OPERATORS, check=False)
        kube.run_kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
        kube.wait_established("resourcegroups.rebalanser.io")
        fence = {"apiVersion": "v1", "kind": "List", "items": fence_manifests("rebalanser-replica-fence")}
        kube.run_kubectl("apply", "-f", "-", input=json.dumps(fence))  # as the chart would, with replicas
        await_fence(kube)
        running = Scene(kube, zk, work, f"/rebalanser-operator/e2e-{uuid.uuid4().hex[:8]}", extra=extra)
        try:
            for i in range(REPLICAS):
                running.start(f"op-{i}")
            yield running
        finally:
            for replica in running.replicas:
                replica.stop()
            kube.run_kubectl("delete", "rg", "--all", "-n", NS, "--wait=false", check=False)


@pytest.fixture
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    with running_scene(tmp_path_factory.mktemp("replicas")) as running:
        yield running


LIMIT = 4


@pytest.fixture
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    with running_scene(tmp_path_factory.mktemp("replicas"), ("--max-groups-per-namespace", str(LIMIT))) as running:
        yield running


def await_fence(kube: Cluster) -> None:
    """Until the API server enforces the policy (it compiles a new one in the background): a probe object of a
    namespace no operator serves, its status given a token, then a smaller one until that is refused."""
    probe = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
             "metadata": {"name": "fence-probe", "namespace": OPERATORS},
             "spec": {"zookeeper": {"connect": "127.0.0.1:1"}, "resources": ["a"]}}
    kube.run_kubectl("apply", "-f", "-", input=json.dumps(probe))

    def status(token: int) -> subprocess.CompletedProcess[str]:
        return kube.run_kubectl("patch", "rg", "fence-probe", "-n", OPERATORS, "--subresource=status", "--type=merge",
                                "-p", json.dumps({"status": {"servedBy": {"replica": "probe", "token": token}}}),
                                check=False)

    def refused() -> bool:  # 1,000 then 1: while the policy is not in force yet, both pass (and 1 is stored)
        assert status(1000).returncode == 0
        return status(1).returncode != 0

    wait_for(refused, 60, lambda: "the admission policy to refuse a smaller token")
    kube.run_kubectl("delete", "rg", "fence-probe", "-n", OPERATORS)


def manifests(hosts: str, resources: int = RESOURCES) -> str:
    items = [
        {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
         "metadata": {"name": f"g{i:02d}", "namespace": NS},
         "spec": {"zookeeper": {"connect": hosts}, "resourceSets": [{"prefix": "r-", "count": resources}]}}
        for i in range(GROUPS)
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def test_each_group_is_served_by_one_replica_a_frozen_ones_writes_are_refused_and_a_killed_ones_groups_move(
    scene: Scene,
) -> None:
    groups = {f"{NS}/g{i:02d}" for i in range(GROUPS)}
    started = time.monotonic()
    scene.cluster.run_kubectl("apply", "-f", "-", input=manifests(scene.zk.hosts))
    synced(scene, RESOURCES)
    synced_s = time.monotonic() - started

    # Exactly one replica serves each group now, every group's status was written, by its server, whose
    # name and token the status carries.
    def settled(cut: dict[str, float]) -> Callable[[], dict[str, str] | None]:
        def check() -> dict[str, str] | None:
            now = serving_now(check_one_at_a_time(scene.lines(), cut))
            return now if set(now) == groups else None
        return check

    owners = wait_for(settled({}), 60, lambda: f"one server per group: {serving_now(intervals(scene.lines()))}")
    writers = {line.group for line in scene.lines() if line.kind == "write"}
    assert writers == groups, f"groups whose status no replica wrote: {groups - writers}"
    shares = {r.member: sum(1 for m in owners.values() if m == r.member) for r in scene.replicas}
    assert all(shares.values()), f"a replica serves nothing: {shares}"
    readiness = {r.member: r.ready() for r in scene.replicas}
    assert all(code == 200 and text.startswith("Assigned") for code, text in readiness.values()), readiness
    wait_for(lambda: all(scene.statuses()[g].get("servedBy", {}).get("replica") == m for g, m in owners.items()), 30,
             lambda: f"status.servedBy naming the servers {owners}: {scene.statuses()}")
    fences_match(scene, groups)

    # The fence: a status write with a smaller token than the stored one is refused by the API server.
    group = sorted(groups)[0]
    stored = scene.statuses()[group]["servedBy"]
    stale = scene.cluster.run_kubectl(
        "patch", "rg", group.split("/")[1], "-n", NS, "--subresource=status", "--type=merge", "-p",
        json.dumps({"status": {"phase": "Error", "servedBy": {"replica": "op-stale", "token": stored["token"] - 1}}}),
        check=False)
    assert stale.returncode != 0 and "smaller than the stored one" in stale.stderr, stale
    assert scene.statuses()[group]["servedBy"] == stored and scene.statuses()[group]["phase"] != "Error"

    # A group deleted: its server deletes its znodes and releases the finalizer; the others wait, act on
    # nothing, and the group leaves the operator group's resources.
    doomed = json.loads(manifests(scene.zk.hosts))["items"][0]
    doomed["metadata"]["name"] = "doomed"
    scene.cluster.run_kubectl("apply", "-f", "-", input=json.dumps(doomed))
    key = f"{NS}/doomed"
    wait_for(lambda: scene.statuses()[key].get("resources") == RESOURCES, 60, lambda: "the doomed group synced")
    server = wait_for(lambda: serving_now(check_one_at_a_time(scene.lines())).get(key), 30, lambda: "its server")
    with admin_client(scene.zk.hosts) as zk:
        assert zk.exists(f"/rebalanser/{NS}/doomed") and zk.exists(f"{scene.group}/resources/{NS}.doomed")
        scene.cluster.run_kubectl("delete", "rg", "doomed", "-n", NS, "--wait=true", "--timeout=90s", timeout=120)
        assert zk.exists(f"/rebalanser/{NS}/doomed") is None, "the deleted group's znodes are still there"
        wait_for(lambda: zk.exists(f"{scene.group}/resources/{NS}.doomed") is None, 30,
                 lambda: "the deleted group to leave the operator group's resources")
    deleters = [r.member for r in scene.replicas if re.search(rf"deletion: .*/rebalanser/{NS}/doomed\b", r.text())]
    assert deleters == [server], f"the deletion was carried out by {deleters}, its server is {server}"

    # SIGSTOP a replica: its groups move once its session expires; thawed, it writes nothing for them.
    frozen = min(scene.replicas, key=lambda r: shares[r.member])
    frozen_groups = {g for g, m in owners.items() if m == frozen.member}
    frozen.proc.send_signal(signal.SIGSTOP)
    frozen_at = time.time()
    cut = {frozen.member: frozen_at}
    try:
        wait_for(lambda: all(serving_now(intervals(scene.lines(), cut)).get(g) not in (None, frozen.member)
                             for g in frozen_groups), SESSION_TIMEOUT + 30,
                 lambda: f"the frozen replica's groups moved: {serving_now(intervals(scene.lines(), cut))}")
        scene.cluster.run_kubectl("apply", "-f", "-", input=manifests(scene.zk.hosts, RESOURCES + 1))
        synced(scene, RESOURCES + 1)
    finally:
        thawed_at = time.time()  # before the CONT: every line the thawed replica writes comes after it
        frozen.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: any(ln.member == frozen.member and ln.kind == "stop" and ln.at > thawed_at
                         for ln in frozen.lines()), 30, lambda: f"{frozen.member} to stop serving after its thaw")
    late = [ln for ln in frozen.lines() if ln.kind == "write" and ln.at > frozen_at
            and any(s[0] == frozen.member and s[2] < frozen_at for s in intervals(scene.lines()).get(ln.group, []))]
    assert not late, f"the thawed replica wrote for groups it had lost: {late}"
    fences_match(scene, groups)
    with admin_client(scene.zk.hosts) as zk:  # nothing of the spec it knew was written back
        counts = {g: len(zk.get_children(f"/rebalanser/{g}/resources")) for g in frozen_groups}
    stale = {g: n for g, n in counts.items() if n != RESOURCES + 1}
    assert not stale, f"groups of the thawed replica whose resources went back: {stale}"
    # The thawed replica rejoined: the rebalance that gives it its share again moves groups, so the groups'
    # servers are read once it serves again (else a group counted as the victim's may move before the kill).
    wait_for(lambda: frozen.member in serving_now(check_one_at_a_time(scene.lines(), cut)).values(), 60,
             lambda: f"{frozen.member} serving again after its thaw: {serving_now(intervals(scene.lines(), cut))}")
    owners = wait_for(settled(cut), 60, lambda: f"one server per group: {serving_now(intervals(scene.lines(), cut))}")

    # SIGKILL the replica serving the most groups now: the others serve its groups.
    shares = {r.member: sum(1 for m in owners.values() if m == r.member) for r in scene.replicas}
    victim = max(scene.replicas, key=lambda r: shares[r.member])
    moved = {g for g, m in owners.items() if m == victim.member}
    victim.proc.send_signal(signal.SIGKILL)
    killed_at = time.time()
    victim.proc.wait(10)
    cut = {**cut, victim.member: killed_at}
    report_ended(scene, victim)

    def taken_over() -> dict[str, float] | None:
        lines = scene.lines()
        now = serving_now(check_one_at_a_time(lines, cut))
        if any(now.get(group) in (None, victim.member) for group in moved):
            return None
        return {g: min(ln.at for ln in lines if ln.kind == "serve" and ln.group == g and ln.at > killed_at) - killed_at
                for g in moved}

    taken = wait_for(taken_over, HANDOVER_BOUND_S + 30, lambda: f"the groups of {victim.member} moved "
                     f"(load {load()}): {serving_now(intervals(scene.lines(), cut))}; killed at {killed_at:.3f}, its "
                     f"groups {sorted(moved)}: {[ln for ln in scene.lines() if ln.group in moved]}")

    # The new owners act: a spec change of every group is applied and its status written by its server.
    scene.cluster.run_kubectl("apply", "-f", "-", input=manifests(scene.zk.hosts, RESOURCES + 2))
    synced(scene, RESOURCES + 2)
    lines = scene.lines()
    spans = check_one_at_a_time(lines, cut)
    late_writers = {ln.group: ln.member for ln in lines if ln.kind == "write" and ln.at > killed_at}
    assert moved <= set(late_writers) and victim.member not in late_writers.values(), late_writers
    assert not any(ln.member == victim.member and ln.at > killed_at for ln in lines)
    assert set(serving_now(spans)) == groups and victim.member not in serving_now(spans).values()
    ended = [r.member for r in scene.replicas if f"replica-ended member={r.member} pod={victim.member}" in r.text()]
    assert ended, "no replica reported ending the killed replica's membership"

    # A graceful leave (SIGTERM, as a rolling update's): each group stops before its next owner starts.
    leaving, staying = [r for r in scene.replicas if r is not victim]
    handed = {g for g, m in serving_now(spans).items() if m == leaving.member}
    left_at = time.time()
    leaving.stop()
    wait_for(lambda: all(serving_now(check_one_at_a_time(scene.lines(), cut)).get(g) == staying.member
                         for g in handed), 60, lambda: f"the groups of {leaving.member} moved to {staying.member}")
    lines = scene.lines()
    gaps = {g: min(ln.at for ln in lines if ln.kind == "serve" and ln.group == g and ln.member == staying.member
                   and ln.at > left_at)
            - max(ln.at for ln in lines if ln.kind == "stop" and ln.group == g and ln.member == leaving.member)
            for g in handed}
    check_one_at_a_time(lines, cut)
    wait_for(lambda: all(scene.statuses()[g]["servedBy"]["replica"] == staying.member for g in groups), 30,
             lambda: f"status.servedBy naming {staying.member}: {scene.statuses()}")
    fences_match(scene, groups)

    print(f"\n{GROUPS} groups synced in {synced_s:.1f} s on {REPLICAS} replicas; {frozen.member} frozen with "
          f"{len(frozen_groups)} groups, no write after its thaw; {victim.member} SIGKILLed serving {len(moved)}: "
          f"served again after {', '.join(f'{t:.2f}' for t in sorted(taken.values()))} s (session timeout "
          f"{SESSION_TIMEOUT:g} s, membership ended by {', '.join(ended)}); {leaving.member} SIGTERMed serving "
          f"{len(handed)}: gap stop -> next owner's start {', '.join(f'{t * 1000:.0f}' for t in sorted(gaps.values()))}"
          f" ms (load {load()})")
    assert max(taken.values()) <= HANDOVER_BOUND_S, f"handover took {max(taken.values()):.1f} s (load {load()})"
    assert all(0 <= gap <= GRACEFUL_BOUND_S for gap in gaps.values()), f"graceful handover gaps {gaps}"


def fences_match(scene: Scene, groups: set[str]) -> None:
    """Each group root's fence in ZooKeeper names the replica and token its status names (the server)."""
    def fences() -> dict[str, tuple[tuple[str, int] | None, tuple[str, int] | None]]:
        statuses = scene.statuses()
        with admin_client(scene.zk.hosts) as zk:
            found = {g: stored_fence(zk.get(f"/rebalanser/{g}")[0]) for g in groups}
        served = {g: (s["servedBy"]["replica"], s["servedBy"]["token"]) if "servedBy" in s else None
                  for g, s in statuses.items() if g in groups}
        return {g: (found[g], served.get(g)) for g in groups if found[g] != served.get(g)}

    wait_for(lambda: not fences(), 30, lambda: f"fences in ZooKeeper unlike status.servedBy: {fences()}")


def report_ended(scene: Scene, replica: Replica) -> None:
    """Writes the pod status the kubelet would write for the replica's ended container instance."""
    status = {"status": {"containerStatuses": [{
        "name": "operator", "image": "none", "imageID": "", "ready": False, "restartCount": 1,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 137, "reason": "Error",
                                     "message": replica.termination_log.read_text()}}}]}}
    scene.cluster.run_kubectl("patch", "pod", replica.member, "-n", OPERATORS, "--subresource=status", "--type=merge",
                              "-p", json.dumps(status))


def synced(scene: Scene, resources: int) -> None:
    wait_for(lambda: len(scene.statuses()) == GROUPS
             and all(s.get("resources") == resources for s in scene.statuses().values()), SYNC_BOUND_S,
             lambda: f"every group synced with {resources} resources (load {load()}): {scene.statuses()}")


WORKER_T = 10
#: A worker killed while its group has no operator replica is worked on again before its session could
#: have expired and been noticed (issue 32's target: 3 s at T = 10 s). What proves the failover freed its
#: resources is a replica's line showing the worker's session closed (an expired one cannot be); the time
#: bound is a liveness bound with room for a loaded machine.
WORKER_BOUND_S = 0.9 * WORKER_T


def test_a_worker_killed_while_its_group_changes_replica_is_failed_over_by_the_next_one(scene: Scene) -> None:
    """The replica serving a KubeletConfirmed group is SIGKILLed (its death not reported yet: the group has
    no server); a worker of the group is then SIGKILLed and the kubelet's report of it written, which no
    replica acts on; then the replica's death is reported. The replica that gains the group catches up on
    the report, and the dead worker's resources are worked on again long before its session expires."""
    name, path = "fo", f"/rebalanser/{NS}/fo"
    group = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
             "metadata": {"name": name, "namespace": NS},
             "spec": {"zookeeper": {"connect": scene.zk.hosts}, "resources": list("abcdef"),
                      "failover": "KubeletConfirmed", "podSelector": {"matchLabels": {"app": "fo-worker"}},
                      "rebalance": {"minIntervalSeconds": 1}}}
    scene.cluster.run_kubectl("apply", "-f", "-", input=json.dumps(group))
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "fo-0", "namespace": NS, "labels": {"app": "fo-worker"}},
           "spec": {"automountServiceAccountToken": False, "containers": [{"name": "worker", "image": "none"}]}}
    scene.cluster.run_kubectl("create", "serviceaccount", "default", "-n", NS, check=False)
    scene.cluster.run_kubectl("apply", "-f", "-", input=json.dumps(pod))
    uid = json.loads(scene.cluster.run_kubectl("get", "pod", "fo-0", "-n", NS, "-o", "json").stdout)["metadata"]["uid"]
    with admin_client(scene.zk.hosts) as zk:
        wait_for(lambda: zk.exists(f"{path}/resources/f"), 60, lambda: "the group's znodes")
    termination = scene.work / "fo-victim.termination-log"
    env = {**os.environ, "POD_NAMESPACE": NS, "POD_NAME": "fo-0", "POD_UID": uid, "REBALANSER_CONTAINER": "worker"}
    logs = {member: scene.work / f"fo-{member}.log" for member in ("victim", "survivor")}
    workers: dict[str, subprocess.Popen[bytes]] = {}
    for member, extra in (("victim", ["--termination-log", str(termination)]), ("survivor", [])):
        with open(logs[member], "wb") as out:
            workers[member] = subprocess.Popen(
                [str(BIN / "rebalanser"), "worker", "--zk", scene.zk.hosts, "--group", path, "--id", member,
                 "--session-timeout", str(WORKER_T), "--json", *extra],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env if extra else None)
    try:
        def ticks(member: str) -> list[dict[str, Any]]:
            found = []
            for line in logs[member].read_text(errors="replace").splitlines():
                if line.startswith("{") and '"tick"' in line:
                    found.append(json.loads(line))
            return found

        def held(member: str, since: int = 0) -> set[str]:
            return {t["resource"] for t in ticks(member) if t["ts"] > since}

        wait_for(lambda: len(held("victim")) and len(held("victim") | held("survivor")) == 6, 60,
                 lambda: f"both workers at work: {held('victim')} {held('survivor')}")
        server = wait_for(lambda: serving_now(intervals(scene.lines())).get(f"{NS}/{name}"), 30, lambda: "its server")
        replica = next(r for r in scene.replicas if r.member == server)
        wait_for(lambda: scene.statuses()[f"{NS}/{name}"].get("members") == 2, 30, lambda: "the status' two members")

        replica.proc.send_signal(signal.SIGKILL)  # the group has no server until its death is reported
        replica.proc.wait(10)
        killed_ns = time.monotonic_ns()
        workers["victim"].kill()
        workers["victim"].wait(10)
        victims = held("victim")
        status = {"status": {"containerStatuses": [{
            "name": "worker", "image": "none", "imageID": "", "ready": False, "restartCount": 1,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "Error", "message": termination.read_text()}}}]}}
        scene.cluster.run_kubectl("patch", "pod", "fo-0", "-n", NS, "--subresource=status", "--type=merge",
                                  "-p", json.dumps(status))
        time.sleep(1.0)  # the report reaches every replica while none serves the group (a fault's timing)
        report_ended(scene, replica)

        def again() -> float | None:
            firsts = {r: min((t["ts"] for t in ticks("survivor") if t["resource"] == r and t["ts"] > killed_ns),
                             default=None) for r in victims}
            return None if None in firsts.values() else max(v for v in firsts.values() if v is not None)

        last = wait_for(again, WORKER_T + 30, lambda: f"the survivor to work on {victims}")
        taken = (last - killed_ns) / 1e9
        new_server = serving_now(intervals(scene.lines(), {server: time.time()})).get(f"{NS}/{name}")
        print(f"\nworker killed 0 s, its pod's report 0 s, the replica's death reported 1 s after: the victim's "
              f"{len(victims)} resources worked on again after {taken:.2f} s (T = {WORKER_T} s; group served by "
              f"{new_server}; load {load()})")
        caught = [r.member for r in scene.replicas
                  if r is not replica and any(closed_session(line, "fo-0") for line in r.text().splitlines())]
        assert caught, "no replica failed the worker over"
        assert taken <= WORKER_BOUND_S, f"worked on again after {taken:.1f} s (load {load()})"
    finally:
        for proc in workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)


def test_the_groups_per_namespace_limit_holds_over_every_replica(limited: Scene) -> None:
    """--max-groups-per-namespace counts the namespace's ResourceGroups, not each replica's share: the
    oldest LIMIT are served, the rest are LimitExceeded, whichever replica holds them."""
    # Created in name order: the oldest LIMIT (by creation time, then name) are g00 to g03.
    limited.cluster.run_kubectl("apply", "-f", "-", input=manifests(limited.zk.hosts))

    def verdicts() -> dict[str, str] | None:
        found = {}
        for key, status in limited.statuses().items():
            synced = next((c for c in status.get("conditions") or [] if c["type"] == "ResourcesSynced"), None)
            if synced is None or (synced["status"] != "True" and synced["reason"] != "LimitExceeded"):
                return None
            found[key] = "served" if synced["status"] == "True" else synced["reason"]
        return found if len(found) == GROUPS else None

    found = wait_for(verdicts, SYNC_BOUND_S, lambda: f"every group served or refused: {limited.statuses()}")
    served = sorted(k for k, v in found.items() if v == "served")
    owners = serving_now(intervals(limited.lines()))
    print(f"\nlimit {LIMIT}: served {served}; the {GROUPS} groups' servers {sorted(set(owners.values()))}")
    assert served == [f"{NS}/g{i:02d}" for i in range(LIMIT)], found
    assert len(set(owners.values())) > 1, f"one replica serves every group: {owners}"
