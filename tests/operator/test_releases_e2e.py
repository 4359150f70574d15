"""Two operator releases that serve the same namespace (issue 32, "What bad input gets";
docs/operator-replicas.md, "Two releases"): two ``rebalanser-operator`` processes with different release
identities (REBALANSER_RELEASE) against one real kube-apiserver and one real ZooKeeper. Release A is a
replica of an operator group of its own and serves namespace ``rb-releases``; release B is one operator
without an operator group (a release of one replica) and serves it and ``rb-releases-b``.

Evidence is the operators' own log lines: ``replica-serve``, ``replica-write``, ``replica-stop`` (with the
member, the group and the wall-clock time, as in test_replicas_e2e), a ZooKeeper session opened for the
group and its reconcile (``reconciled <namespace>/<name>: ...``), and the objects' status and Events.
Without release claims both releases act on every group of the shared namespace: both apply its spec in
ZooKeeper, and both try to write its status (the second one's writes, dropping the first one's
``servedBy``, are refused by the replica fence: seen on main before this change). With them: the group
is A's; B does nothing for it and says so (``status.refusedReleases`` and a Warning Event naming A), B
serves its other namespace's group, and once A stops (its heartbeat Lease expires) B takes A's group
over (claim 2: its status writes pass the fence although its token, 0, is below A's) and applies its
spec.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rebalanser_operator.replicafence import fence_manifests

from e2e.demo_stack import stop_process
from tests.e2e.test_operator_e2e import wait_for
from tests.operator.test_replicas_e2e import OPERATORS, await_fence, load
from tests.support.cluster import REPO, UP_TIMEOUT, Cluster, start_cluster
from tests.support.liveness import healthy
from tests.support.replicalines import Line, parse
from tests.support.zk import ZkCluster, free_port, serving_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(UP_TIMEOUT)]

SHARED = "rb-releases"  # both releases serve it
ONLY_B = "rb-releases-b"  # release B alone serves it
A, B = "rb-ops-a/rebalanser-operator", "rb-ops-b/rebalanser-operator"
LEASE_S = 6.0
RESOURCES = 3
BIN = Path(sys.executable).parent
SYNC_BOUND_S = 120.0
#: B takes A's group over within the lease after A's last renewal, plus B's poll (half the lease) and a
#: generous margin for a loaded two-core machine.
HANDOVER_BOUND_S = 30.0


@dataclass
class Operator:
    release: str
    member: str
    log: Path
    proc: subprocess.Popen[bytes]
    liveness_port: int

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def lines(self) -> list[Line]:
        return parse(self.text())

    def served(self, group: str) -> list[Line]:
        return [ln for ln in self.lines() if ln.group == group and ln.kind in ("serve", "write")]

    def acted(self, group: str) -> list[str]:
        """Every sign of this operator acting for ``group``: its serving lines, a session opened for the group
        and a reconcile of it in ZooKeeper."""
        steps = re.findall(rf"^.*(?:reconciled {re.escape(group)}:|{re.escape(group)}: opening a ZooKeeper session).*$",
                           self.text(), re.MULTILINE)
        return [str(ln) for ln in self.served(group)] + steps

    def live(self) -> bool:
        return healthy(self.proc, self.liveness_port, self.member, self.text)

    def stop(self) -> None:
        stop_process(self.proc, 60)


@dataclass
class Releases:
    kube: Cluster
    zk: ZkCluster
    work: Path
    operators: list[Operator]

    def start(self, release: str, member: str, namespaces: tuple[str, ...], *, operator_group: bool) -> Operator:
        port = free_port()
        log = self.work / f"{member}.log"
        env = {**self.kube.env(), "REBALANSER_RELEASE": release, "REBALANSER_RELEASE_LEASE_SECONDS": str(LEASE_S),
               "POD_NAMESPACE": release.split("/")[0], "POD_NAME": member}
        group = f"/rebalanser-operator/releases-{member}-{uuid.uuid4().hex[:8]}"  # an operator group per release
        replica = ["--replica-zk", self.zk.hosts, "--replica-group", group, "--replica-id", member,
                   "--replica-session-timeout", "10"] if operator_group else []
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [str(BIN / "rebalanser-operator"), *(f"--namespace={ns}" for ns in namespaces), "--metrics-port", "0",
                 "--liveness", f"http://127.0.0.1:{port}/healthz", "--log-format", "full",
                 "--allowed-ensemble", self.zk.hosts, *replica],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            )
        operator = Operator(release, member, log, proc, port)
        self.operators.append(operator)
        wait_for(operator.live, 90, lambda: f"{member}'s liveness endpoint; log:\n{operator.text()[-3000:]}")
        return operator

    def group(self, namespace: str, name: str) -> dict[str, Any]:
        return json.loads(self.kube.run_kubectl("get", "rg", name, "-n", namespace, "-o", "json").stdout)

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        return self.group(namespace, name).get("status") or {}

    def apply(self, namespace: str, name: str, resources: int) -> None:
        body = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"zookeeper": {"connect": self.zk.hosts},
                         "resourceSets": [{"prefix": "r-", "count": resources}]}}
        self.kube.run_kubectl("apply", "-f", "-", input=json.dumps(body))

    def synced(self, namespace: str, name: str, resources: int) -> None:
        wait_for(lambda: self.status(namespace, name).get("resources") == resources, SYNC_BOUND_S,
                 lambda: f"{namespace}/{name} synced with {resources} resources (load {load()}): "
                         f"{self.status(namespace, name)}")

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        out = self.kube.run_kubectl("get", "events", "-n", namespace, "-o", "json",
                                    "--field-selector", f"involvedObject.name={name}").stdout
        return list(json.loads(out)["items"])


@pytest.fixture
def releases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Releases]:
    work = tmp_path_factory.mktemp("releases")
    with start_cluster(work / "kube") as kube, serving_cluster(work / "zk", size=1) as zk:
        for namespace in (SHARED, ONLY_B, OPERATORS, A.split("/")[0], B.split("/")[0]):
            kube.create_namespace(namespace)
        kube.run_kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
        kube.wait_established("resourcegroups.rebalanser.io")
        fence = {"apiVersion": "v1", "kind": "List", "items": fence_manifests("rebalanser-replica-fence")}
        kube.run_kubectl("apply", "-f", "-", input=json.dumps(fence))  # as the chart installs it, with replicas
        await_fence(kube)
        running = Releases(kube, zk, work, [])
        try:
            yield running
        finally:
            for operator in running.operators:
                operator.stop()
            for namespace in (SHARED, ONLY_B):
                kube.run_kubectl("delete", "rg", "--all", "-n", namespace, "--wait=false", check=False)


def test_a_second_release_refuses_a_group_the_first_serves_says_why_and_takes_it_over_when_the_first_is_gone(
    releases: Releases,
) -> None:
    g, h = f"{SHARED}/g", f"{ONLY_B}/h"
    first = releases.start(A, "a-0", (SHARED,), operator_group=True)
    releases.apply(SHARED, "g", RESOURCES)
    releases.synced(SHARED, "g", RESOURCES)
    wait_for(lambda: first.served(g), 30, lambda: f"a-0 serving {g}")

    second = releases.start(B, "b-0", (SHARED, ONLY_B), operator_group=False)
    releases.apply(ONLY_B, "h", RESOURCES)
    releases.synced(ONLY_B, "h", RESOURCES)  # B at work

    # B either acts on g too (two releases sharing a group) or leaves it to A and says so.
    def decided() -> bool:
        return bool(second.acted(g)) or B in (releases.status(SHARED, "g").get("refusedReleases") or {})

    wait_for(decided, 60, lambda: f"release B to act on {g} or refuse it: {releases.status(SHARED, 'g')}")
    assert not second.acted(g), f"both releases act on {g}: A {first.acted(g)[:2]}, B {second.acted(g)[:2]}"

    # The reason, in the status and in an Event, names the release that serves the group.
    status = releases.status(SHARED, "g")
    refusal = status["refusedReleases"][B]
    assert refusal["reason"] == "ServedByAnotherRelease" and refusal["servedBy"] == A, refusal
    assert A in refusal["message"] and B in refusal["message"], refusal
    assert status["servedBy"]["release"] == A and status["servedBy"]["claim"] == 1, status["servedBy"]
    warnings = wait_for(lambda: [e for e in releases.events(SHARED, "g") if e["reason"] == "ServedByAnotherRelease"],
                        30, lambda: f"the Warning Event: {releases.events(SHARED, 'g')}")
    assert warnings[0]["type"] == "Warning" and A in warnings[0]["message"], warnings
    assert releases.status(ONLY_B, "h")["servedBy"]["release"] == B  # B serves what A does not

    # A spec change of g is applied by A alone.
    releases.apply(SHARED, "g", RESOURCES + 1)
    releases.synced(SHARED, "g", RESOURCES + 1)
    assert not second.acted(g), f"release B acted on {g}: {second.acted(g)}"
    assert B in (releases.status(SHARED, "g").get("refusedReleases") or {}), "A's writes removed B's refusal"

    # The chart's uninstall check (its pre-delete hook): g does not hold A's uninstall (B, live, serves its
    # namespace and takes it over); h holds B's (nobody else serves it); g is not B's to hold.
    def check(release: str, *namespaces: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rebalanser_operator.uninstallcheck",
                               *(f"--namespace={ns}" for ns in namespaces), f"--release={release}"],
                              env=releases.kube.env(), capture_output=True, text=True, timeout=60, check=False)

    for_a = check(A, SHARED)
    assert for_a.returncode == 0 and "may be uninstalled" in for_a.stdout, for_a.stderr
    for_b = check(B, SHARED, ONLY_B)
    assert for_b.returncode == 1 and h in for_b.stderr and g not in for_b.stderr, for_b.stderr

    # A goes away (as an uninstall stops it): its heartbeat Lease expires and B takes g over, claim 2.
    first.stop()
    stopped_at = time.time()

    def taken_over() -> dict[str, Any] | None:
        current = releases.status(SHARED, "g")
        return current if current.get("servedBy", {}).get("release") == B else None

    after = wait_for(taken_over, HANDOVER_BOUND_S,
                     lambda: f"release B to take {g} over (load {load()}): {releases.status(SHARED, 'g')}")
    assert after["servedBy"]["claim"] == 2 and after["servedBy"]["replica"] == "b-0", after["servedBy"]
    assert B not in (after.get("refusedReleases") or {}), after
    served_at = min(ln.at for ln in second.lines() if ln.group == g and ln.kind == "serve")
    last_a = max(ln.at for ln in first.lines() if ln.group == g)
    assert last_a <= served_at, f"A acted on {g} at {last_a:.3f}, after B began serving it at {served_at:.3f}"
    releases.apply(SHARED, "g", RESOURCES + 2)
    releases.synced(SHARED, "g", RESOURCES + 2)  # applied by B, its status written past A's larger token
    print(f"\nrelease B refused {g} while A served it, served {h}; A stopped: B served {g} "
          f"{served_at - stopped_at:.2f} s later (lease {LEASE_S:g} s; load {load()})")
