"""The upgrade to the operator's own ZooKeeper identity on a real API server (issue 29, item 6).

Today's release (commit 6be94a0, ``git archive`` of its ``operator/`` and ``worker_lib/``; this
checkout's operator where the history lacks it) runs first, without an identity: it creates a group
with credentials (two workers, which name only the group's credentials in their nodes) and one without,
under open parents; a hostile client squats a future group's path meanwhile. Then this checkout's
operator starts in its place with an identity, as docs/operator.md ("Upgrading to an identity") says.
Evidence from ZooKeeper (the parents' and the groups' ACLs, read as the operator) and the API server
(statuses, Events): both groups stay Synced, the parents and the groups are taken over, the squatted
root is refused with its reason, a new group is created, and once the workers restart with the
operator's id from their ConfigMap the group is Stable again with its two members.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Permissions
from rebalanser_operator.identity import OperatorIdentity, parent_acl

from tests.e2e.test_crd_upgrade_e2e import CHART_CRDS, apply_server_side, wait_crd_settled
from tests.e2e.test_operator_e2e import BIN, OperatorProcess, wait_for
from tests.support.cluster import REPO, UP_TIMEOUT, Cluster
from tests.support.zk import ZkCluster, admin_client, serving_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(UP_TIMEOUT)]

NS = "rebalanser-identity"
EARLIER = "6be94a0"  # main before the identity: today's release
USER, PASSWORD = "orders", "orders-password-0c1f9e"
OPERATOR = OperatorIdentity.digest("rebalanser-operator", "operator-password-5f2b7d0c4e9a1b3c")
MEMBERS = ("w1", "w2")


def earlier_source(into: Path) -> Path | None:
    if subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{EARLIER}^{{commit}}"],
                      capture_output=True, check=False).returncode != 0:
        return None
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", EARLIER, "operator", "worker_lib"],
                             capture_output=True, check=True, timeout=60)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True, timeout=60)
    return into


def resource_group(name: str, credentials: bool) -> dict[str, Any]:
    zookeeper: dict[str, Any] = {"connect": "", "sessionTimeoutSeconds": 10}
    if credentials:
        zookeeper["credentialsSecretRef"] = {"name": "orders-zk"}
    return {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"zookeeper": zookeeper, "resourceSets": [{"prefix": f"{name}-", "count": 6}],
                     "rebalance": {"minIntervalSeconds": 1, "maxIntervalSeconds": 2}}}


@dataclass
class Scene:
    kube: Cluster
    zookeeper: ZkCluster
    base: Path
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def apply(self, *objects: dict[str, Any]) -> None:
        for o in objects:
            if o.get("kind") == "ResourceGroup":
                o["spec"]["zookeeper"]["connect"] = self.zookeeper.hosts
        self.kube.run_kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))

    def status(self, name: str) -> dict[str, Any]:
        proc = self.kube.run_kubectl("get", "rg", name, "-n", NS, "-o", "json", check=False)
        return dict(json.loads(proc.stdout).get("status") or {}) if proc.returncode == 0 else {}

    def synced(self, name: str) -> dict[str, Any] | None:
        status = self.status(name)
        cond = {c["type"]: c for c in status.get("conditions", [])}.get("ResourcesSynced", {})
        return status if cond.get("status") == "True" else None

    def reason(self, name: str) -> str:
        status = self.status(name)
        return str({c["type"]: c for c in status.get("conditions", [])}.get("ResourcesSynced", {}).get("reason", ""))

    def stable(self, name: str) -> dict[str, Any] | None:
        s = self.status(name)
        return s if s.get("phase") == "Stable" and s.get("members") == len(MEMBERS) else None

    def event_reasons(self) -> set[str]:
        events = json.loads(self.kube.run_kubectl("get", "events", "-n", NS, "-o", "json").stdout)["items"]
        return {e["reason"] for e in events}

    def start_workers(self, operator_id: str | None) -> None:
        (self.base / "password").write_text(PASSWORD)
        env = {k: v for k, v in os.environ.items() if k != "REBALANSER_ZK_OPERATOR_ID"}
        if operator_id is not None:
            env["REBALANSER_ZK_OPERATOR_ID"] = operator_id
        for member in MEMBERS:
            out = open(self.base / f"{member}.log", "ab")  # noqa: SIM115 - owned by the child
            self.workers.append(subprocess.Popen(
                [str(BIN / "rebalanser"), "worker", "--zk", self.zookeeper.hosts,
                 "--group", f"/rebalanser/{NS}/secured", "--id", member, "--session-timeout", "4", "--json",
                 "--zk-user", USER, "--zk-password-file", str(self.base / "password")],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env))

    def stop_workers(self) -> None:
        for proc in self.workers:
            proc.terminate()
        for proc in self.workers:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.workers.clear()


@pytest.fixture(scope="module")
def scene(kube: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    base = tmp_path_factory.mktemp("identity-upgrade")
    assert apply_server_side(kube, CHART_CRDS).returncode == 0
    wait_crd_settled(kube)
    kube.create_namespace(NS)
    with serving_cluster(base / "zk", size=1) as zookeeper:
        yield Scene(kube, zookeeper, base)


def test_the_new_operator_with_an_identity_takes_over_what_todays_release_created(scene: Scene) -> None:
    kube, hosts = scene.kube, scene.zookeeper.hosts
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": "orders-zk", "namespace": NS},
              "data": {"username": base64.b64encode(USER.encode()).decode(),
                       "password": base64.b64encode(PASSWORD.encode()).decode()}}
    scene.apply(secret)
    source = earlier_source(scene.base / EARLIER)
    if source is None:
        print(f"\n{EARLIER} is not in the history: today's objects are made by this checkout without an identity")
        earlier = OperatorProcess(kube.kubeconfig, kube.env(), scene.base / "operator-earlier.log", namespace=NS,
                                  allowed_ensembles=hosts)
    else:
        env = {**kube.env(), "PYTHONPATH": f"{source / 'worker_lib'}{os.pathsep}{source / 'operator'}"}
        earlier = OperatorProcess(kube.kubeconfig, env, scene.base / "operator-earlier.log", namespace=NS,
                                  command=(sys.executable, "-m", "rebalanser_operator.main"), cwd=source,
                                  allowed_ensembles=hosts)
    (scene.base / "operator-password").write_text(OPERATOR.password)
    upgraded = OperatorProcess(kube.kubeconfig, kube.env(), scene.base / "operator.log", namespace=NS,
                               allowed_ensembles=hosts,
                               args=("--zk-identity-user", OPERATOR.username,
                                     "--zk-identity-password-file", str(scene.base / "operator-password")))
    earlier.start()
    try:
        scene.apply(resource_group("secured", True), resource_group("open", False))
        wait_for(lambda: scene.synced("secured"), 60, "secured Synced under today's release")  # then workers join
        scene.start_workers(None)
        wait_for(lambda: scene.stable("secured"), 90, lambda: f"secured Stable under today's release: "
                                                                f"{scene.status('secured')}")
        wait_for(lambda: scene.synced("open"), 30, "open Synced under today's release")
        with admin_client(hosts) as attacker:  # the parents are open: a squat of a future group's path
            attacker.create(f"/rebalanser/{NS}/future/epoch", b"999", makepath=True)
    finally:
        earlier.stop()
    upgraded.start()
    try:
        # Today's groups are re-applied at the new operator's start: both stay Synced, taken over.
        for name in ("secured", "open"):
            wait_for(lambda n=name: scene.synced(n), 60, lambda n=name: f"{n} Synced after the upgrade: "
                                                                        f"{scene.status(n)}")
        wait_for(lambda: "TakenOver" in scene.event_reasons(), 60,
                 lambda: f"a TakenOver Event for the group made under its credentials: {scene.event_reasons()}")
        with admin_client(hosts, auth_data=[OPERATOR.auth]) as op:
            for node in ("/rebalanser", f"/rebalanser/{NS}"):
                assert sorted(op.get_acls(node)[0], key=str) == sorted(parent_acl(OPERATOR), key=str), node
            for name in ("secured", "open"):
                assert ACL(Permissions.ALL, OPERATOR.id) in op.get_acls(f"/rebalanser/{NS}/{name}")[0], name
        with admin_client(hosts) as attacker:
            with pytest.raises(NoAuthError):
                attacker.create(f"/rebalanser/{NS}/another-squat", b"")
            with pytest.raises(NoAuthError):
                attacker.set_acls(f"/rebalanser/{NS}", OPEN_ACL_UNSAFE)
        # The squatted root is refused with its reason; a new group is created.
        scene.apply(resource_group("future", True), resource_group("fresh", True))
        wait_for(lambda: scene.reason("future") == "NotCreatedByOperator", 60,
                 lambda: f"the squatted root refused: {scene.status('future')}")
        wait_for(lambda: scene.synced("fresh"), 60, lambda: f"a new group Synced: {scene.status('fresh')}")
        # The workers restart (docs: rollout restart) and name the operator from their ConfigMap.
        config = json.loads(kube.run_kubectl("get", "configmap", "secured-rebalanser", "-n", NS, "-o", "json").stdout)
        operator_id = config["data"]["REBALANSER_ZK_OPERATOR_ID"]
        assert operator_id == OPERATOR.acl_id
        scene.stop_workers()
        scene.start_workers(operator_id)
        wait_for(lambda: scene.stable("secured"), 90, lambda: f"secured Stable with the restarted workers: "
                                                                f"{scene.status('secured')}")
    finally:
        scene.stop_workers()
        kube.run_kubectl("delete", "rg", "--all", "-n", NS, "--wait=true", "--timeout=60s", check=False, timeout=90)
        upgraded.stop()
