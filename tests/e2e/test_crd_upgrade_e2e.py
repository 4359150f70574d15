"""Upgrading the CRD under live ResourceGroups, on a real kube-apiserver with a real ZooKeeper and worker
processes, the operator a subprocess with the chart's ServiceAccount (as in test_operator_e2e.py).

1. The upgrade path of docs/operator.md: the CRD as an earlier release shipped it (commit 45a0771,
   ``tests/operator/fixtures/crd-45a0771.yaml``, created as ``helm install`` creates a chart's CRD) and
   that release's operator (its ``operator/`` and ``worker_lib/`` taken from the repository's history
   with ``git archive``; this checkout's operator where the history lacks the commit, as in a shallow
   clone), a group valid under it and Ready; then this checkout's CRD applied server-side and this
   checkout's operator in place of the earlier one: the stored object is still admitted and keeps every
   field, the group stays Ready, ZooKeeper is untouched, and the newer fields (``spec.zookeeper.tls``,
   ``status.pods``) are accepted.
2. The ``v1alpha1`` -> ``v1beta1`` plan with the planned CRD (``crdgen --beta-plan``): serve both
   (storage ``v1alpha1``), read and write in both with the operator reconciling, switch storage, migrate
   with a no-op rewrite (etcd read back to prove it), drop ``v1alpha1`` from ``status.storedVersions``;
   then the same steps backwards, so that this checkout's ``v1alpha1``-only CRD applies again.

The CRD is cluster-wide and the API server is the session's: the module leaves this checkout's CRD in
place (stored versions ``[v1alpha1]``) for the modules after it. Tests run in file order.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kazoo.client import KazooClient
from rebalanser.paths import GroupPaths
from rebalanser_operator.spec import crdgen

from tests.e2e.test_operator_e2e import (
    BIN,
    OperatorProcess,
    condition,
    install_chart,
    service_account_kubeconfig,
    wait_for,
)
from tests.support.cluster import REPO, UP_TIMEOUT, Cluster
from tests.support.zk import ZkCluster, admin_client, serving_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(UP_TIMEOUT)]

NS = "rebalanser-upgrade"
RELEASE = "rbo-upgrade"
SERVICE_ACCOUNT = f"{RELEASE}-rebalanser-operator"
CRD = "resourcegroups.rebalanser.io"
OLD_CRD = REPO / "tests" / "operator" / "fixtures" / "crd-45a0771.yaml"
CHART_CRDS = REPO / "charts" / "rebalanser-operator" / "crds"
ALPHA = "rebalanser.io/v1alpha1"
BETA = "rebalanser.io/v1beta1"
GROUP = "ledger"
GROUP_PATH = f"/rebalanser/{NS}/{GROUP}"
MEMBERS = ("ledger-worker-0", "ledger-worker-1")
#: The release the fixture CRD and the earlier operator come from.
EARLIER = "45a0771"


# ----------------------------------------------------------------------------------------- helpers


def rg_json(kube: Cluster, name: str, version: str = "v1alpha1") -> dict[str, Any] | None:
    proc = kube.run_kubectl("get", f"resourcegroups.{version}.rebalanser.io", name, "-n", NS, "-o", "json",
                            check=False)
    if proc.returncode != 0:
        return None
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def wait_status(kube: Cluster, predicate: Callable[[dict[str, Any]], Any], timeout: float, what: str,
                name: str = GROUP) -> dict[str, Any]:
    last: dict[str, Any] = {}

    def check() -> Any:
        nonlocal last
        last = (rg_json(kube, name) or {}).get("status", {})
        return last if predicate(last) else None

    result: dict[str, Any] = wait_for(check, timeout, lambda: f"{what}; last status: {json.dumps(last)[:3000]}", 0.3)
    return result


def ready(st: dict[str, Any]) -> bool:
    return st.get("phase") == "Stable" and condition(st, "Ready").get("status") == "True"


def crd_json(kube: Cluster) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kube.run_kubectl("get", "crd", CRD, "-o", "json").stdout)
    return result


#: What docs/operator.md tells users to run before ``helm upgrade``, fed by ``helm show crds CHART``
#: (``--force-conflicts``: Helm created the CRD, so its field manager owns ``spec.versions`` and a plain
#: server-side apply is refused).
UPGRADE_COMMAND = ("kubectl", "apply", "--server-side", "--force-conflicts", "-f", "-")


def apply_server_side(kube: Cluster, path: Path) -> subprocess.CompletedProcess[str]:
    """``UPGRADE_COMMAND`` fed the CRD manifests of ``path`` (a file, or a folder as ``helm show crds`` prints
    a chart's crds/: each file, one after the other)."""
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    manifests = "".join(f"---\n{f.read_text()}\n" for f in files)
    return kube.run_kubectl(*UPGRADE_COMMAND[1:], input=manifests, check=False)


def create_like_helm(kube: Cluster, manifest: Path) -> None:
    """The CRD as ``helm install`` leaves it (an update by the field manager ``helm``); replaces a CRD
    another module left (the API server needs its resourceVersion for that)."""
    crd = yaml.safe_load(manifest.read_text())
    current = kube.run_kubectl("get", "crd", CRD, "-o", "json", check=False)
    if current.returncode == 0:
        crd["metadata"]["resourceVersion"] = json.loads(current.stdout)["metadata"]["resourceVersion"]
        kube.run_kubectl("replace", "--field-manager=helm", "-f", "-", input=json.dumps(crd))
    else:
        kube.run_kubectl("create", "--field-manager=helm", "-f", "-", input=json.dumps(crd))
    wait_crd_settled(kube)


def wait_crd_settled(kube: Cluster) -> None:
    def settled() -> bool:
        crd = crd_json(kube)
        types = {c["type"] for c in crd.get("status", {}).get("conditions", []) if c["status"] == "True"}
        return {"Established", "NamesAccepted"} <= types
    wait_for(settled, 60, "the CRD to be Established")


def admitted_new_field(kube: Cluster, hosts: str) -> subprocess.CompletedProcess[str]:
    """A server-side dry run of a ResourceGroup with ``spec.zookeeper.tls`` (a field newer than 45a0771)."""
    body = {"apiVersion": ALPHA, "kind": "ResourceGroup", "metadata": {"name": "with-tls", "namespace": NS},
            "spec": {"zookeeper": {"connect": hosts, "tls": {"secret": "zk-client-tls"}}}}
    return kube.run_kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(body),
                            check=False)


def readmitted(kube: Cluster, obj: dict[str, Any], version: str = ALPHA) -> subprocess.CompletedProcess[str]:
    """A stored object, as read, admitted as a new object (a server-side dry run): validation of a
    create covers every field, where an update would ratchet over unchanged ones."""
    copy = {"apiVersion": version, "kind": "ResourceGroup",
            "metadata": {"name": f"{obj['metadata']['name']}-copy", "namespace": NS}, "spec": obj["spec"]}
    return kube.run_kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(copy), check=False)


def etcd_api_versions(kube: Cluster) -> dict[str, str]:
    """``namespace/name`` -> the apiVersion each ResourceGroup is stored in, read from etcd itself."""
    prefix = b"/registry/rebalanser.io/resourcegroups/"
    body = json.dumps({"key": base64.b64encode(prefix).decode(),
                       "range_end": base64.b64encode(prefix[:-1] + b"0").decode()}).encode()
    request = urllib.request.Request(f"{kube.etcd_url}/v3/kv/range", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        kvs = json.loads(response.read()).get("kvs", [])
    return {base64.b64decode(kv["key"])[len(prefix):].decode(): json.loads(base64.b64decode(kv["value"]))["apiVersion"]
            for kv in kvs}


def migrate(kube: Cluster, version: str) -> None:
    """Step 3 of the plan: every ResourceGroup rewritten once, unchanged (docs/operator.md's command,
    repeated on a conflict with the operator's own writes), until etcd holds ``version`` only."""
    def rewritten() -> bool:
        listing = kube.run_kubectl("get", "rg", "-A", "-o", "json").stdout
        kube.run_kubectl("replace", "-f", "-", input=listing, check=False)
        return set(etcd_api_versions(kube).values()) <= {f"rebalanser.io/{version}"}
    wait_for(rewritten, 60, lambda: f"every stored ResourceGroup in {version}; etcd: {etcd_api_versions(kube)}", 0.5)


def set_stored_versions(kube: Cluster, versions: list[str]) -> None:
    """Step 3's end: the CRD's ``status.storedVersions`` (the status subresource) lists ``versions``."""
    kube.run_kubectl("patch", "crd", CRD, "--subresource=status", "--type=merge",
                     "-p", json.dumps({"status": {"storedVersions": versions}}))
    assert crd_json(kube)["status"]["storedVersions"] == versions


def zk_snapshot(zk: KazooClient) -> dict[str, tuple[int, int]]:
    """(czxid, mzxid) of the group's config and every resource znode: any write by the operator shows."""
    paths = GroupPaths.of(GROUP_PATH)
    nodes = [paths.config, *(f"{paths.resources}/{name}" for name in zk.get_children(paths.resources))]
    result = {}
    for node in nodes:
        stat = zk.exists(node)
        assert stat is not None, node
        result[node] = (stat.czxid, stat.mzxid)
    return result


def earlier_operator_source(into: Path) -> Path | None:
    """The earlier release's ``operator/`` and ``worker_lib/`` under ``into``; None without the history."""
    if subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{EARLIER}^{{commit}}"],
                      capture_output=True, check=False).returncode != 0:
        return None
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", EARLIER, "operator", "worker_lib"],
                             capture_output=True, check=True, timeout=60)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True, timeout=60)
    return into


@dataclass
class Scene:
    kube: Cluster
    zookeeper: ZkCluster
    zk: KazooClient
    operator: OperatorProcess
    log_dir: Path
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    plan_dir: Path | None = None
    #: This checkout's operator, started in place of ``operator`` by the upgrade.
    upgraded: OperatorProcess | None = None

    def start_workers(self) -> None:
        for member in MEMBERS:
            out = open(self.log_dir / f"{member}.log", "wb")  # noqa: SIM115 - owned by the child
            self.workers.append(subprocess.Popen(
                [str(BIN / "rebalanser"), "worker", "--zk", self.zookeeper.hosts, "--group", GROUP_PATH,
                 "--id", member, "--session-timeout", "4", "--json"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "POD_NAME": member, "POD_UID": f"uid-{member}"},
            ))

    def stop_workers(self) -> None:
        for proc in self.workers:
            proc.terminate()
        for proc in self.workers:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.workers.clear()

    def plan(self, storage: str) -> Path:
        """The planned CRD (``crdgen --beta-plan storage``) as a file to apply."""
        assert self.plan_dir is not None
        path = self.plan_dir / f"crd-plan-{storage}.yaml"
        path.write_text(crdgen.render(crdgen.build_beta_plan_crd(storage)))
        return path


def restore_checkout_crd(scene: Scene) -> None:
    """Leaves this checkout's CRD with stored versions ``[v1alpha1]``, whatever step a test stopped at."""
    kube = scene.kube
    if "v1beta1" in crd_json(kube).get("status", {}).get("storedVersions", []):
        assert apply_server_side(kube, scene.plan("v1alpha1")).returncode == 0
        wait_crd_settled(kube)
        migrate(kube, "v1alpha1")
        set_stored_versions(kube, ["v1alpha1"])
    proc = apply_server_side(kube, CHART_CRDS)
    assert proc.returncode == 0, proc.stderr
    wait_crd_settled(kube)


# ---------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def scene(kube: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    """The earlier release's CRD, the chart, a ZooKeeper, the operator; on exit the groups are deleted
    (the operator still running, so finalizers run) and this checkout's CRD is put back."""
    base = tmp_path_factory.mktemp("upgrade")
    create_like_helm(kube, OLD_CRD)
    install_chart(kube, NS, RELEASE)  # the CRD exists: Helm leaves it as it is
    with serving_cluster(base / "zk", size=1) as zookeeper, admin_client(zookeeper.hosts) as zk:
        kubeconfig = service_account_kubeconfig(kube, base / "kubeconfig", NS, SERVICE_ACCOUNT)
        source = earlier_operator_source(base / EARLIER)
        if source is None:
            print(f"\n{EARLIER} is not in the repository's history: the earlier CRD runs with this checkout's operator")
            earlier = OperatorProcess(kubeconfig, kube.env(), base / "operator-earlier.log", namespace=NS,
                                      allowed_ensembles=zookeeper.hosts)
        else:
            env = {**kube.env(), "PYTHONPATH": f"{source / 'worker_lib'}{os.pathsep}{source / 'operator'}"}
            earlier = OperatorProcess(kubeconfig, env, base / "operator-earlier.log", namespace=NS,
                                      command=(sys.executable, "-m", "rebalanser_operator.main"), cwd=source,
                                      allowed_ensembles=zookeeper.hosts)
        earlier.start()
        scene = Scene(kube, zookeeper, zk, earlier, base, plan_dir=base,
                      upgraded=OperatorProcess(kubeconfig, kube.env(), base / "operator.log", namespace=NS,
                                               allowed_ensembles=zookeeper.hosts))
        try:
            yield scene
        finally:
            try:
                scene.stop_workers()  # the operator deletes a group's znodes only once its members are gone
                kube.run_kubectl("delete", "rg", "--all", "-n", NS, "--wait=true", "--timeout=60s", check=False,
                                 timeout=90)
            finally:
                scene.operator.stop()
                restore_checkout_crd(scene)


# ------------------------------------------------------------------------------------------- tests


def test_the_docs_give_the_command_tested_here() -> None:
    assert "helm show crds CHART | " + " ".join(UPGRADE_COMMAND) in (REPO / "docs" / "operator.md").read_text()


def test_the_crd_upgrades_under_live_groups_without_touching_zookeeper(scene: Scene) -> None:
    kube, zk, hosts = scene.kube, scene.zk, scene.zookeeper.hosts
    refused = admitted_new_field(kube, hosts)
    assert refused.returncode != 0 and 'unknown field "spec.zookeeper.tls"' in refused.stderr, (
        f"the fixture should be the CRD from before spec.zookeeper.tls: {refused.stderr or refused.stdout}")
    kube.run_kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": ALPHA, "kind": "ResourceGroup", "metadata": {"name": GROUP, "namespace": NS},
        "spec": {"zookeeper": {"connect": hosts, "path": GROUP_PATH, "sessionTimeoutSeconds": 8},
                 "resources": ["ledger-special"], "resourceSets": [{"prefix": "ledger-", "count": 6}],
                 "algorithm": "ResourceBarrier",
                 "rebalance": {"minIntervalSeconds": 1, "maxIntervalSeconds": 2, "adaptive": True},
                 "failover": "SessionExpiry"},
    }))
    wait_status(kube, lambda s: s.get("resources") == 7 and s.get("observedGeneration") == 1, 30,
                "the operator to create the group under the earlier release's CRD")
    scene.start_workers()
    before = wait_status(kube, lambda s: ready(s) and s.get("members") == 2 and s.get("assigned") == 7, 90,
                         "Ready with 2 members and 7 assigned under the earlier release's CRD")
    assert "pods" not in before, "status.pods is not in the earlier CRD: the API server prunes it"
    stored = rg_json(kube, GROUP)
    assert stored is not None
    zk_before = zk_snapshot(zk)

    # the upgrade, as docs/operator.md tells users (the earlier CRD was created by Helm, whose field
    # manager owns spec.versions: without --force-conflicts the apply is refused and changes nothing)
    plain = kube.run_kubectl("apply", "--server-side", "-f", str(CHART_CRDS), check=False)
    assert plain.returncode != 0 and 'conflict with "helm"' in plain.stderr, plain.stderr or plain.stdout
    applied = apply_server_side(kube, CHART_CRDS)
    assert applied.returncode == 0, f"`kubectl apply --server-side` of the new CRD failed: {applied.stderr}"
    wait_crd_settled(kube)
    wait_for(lambda: admitted_new_field(kube, hosts).returncode == 0, 30,
             lambda: f"spec.zookeeper.tls admitted by the new CRD: {admitted_new_field(kube, hosts).stderr}")
    accepted = json.loads(admitted_new_field(kube, hosts).stdout)
    assert accepted["spec"]["zookeeper"]["tls"] == {"secret": "zk-client-tls", "verifyHostname": False}

    after = rg_json(kube, GROUP)
    assert after is not None and after["spec"] == stored["spec"], "the new CRD pruned or changed the spec"
    assert after["metadata"]["generation"] == stored["metadata"]["generation"]
    copy = readmitted(kube, after)
    assert copy.returncode == 0, f"the stored object is not valid under the new CRD: {copy.stderr}"

    # the earlier operator replaced by this checkout's, as `helm upgrade` does: the group stays Ready throughout
    ready_since = condition(before, "Ready")["lastTransitionTime"]
    samples: list[dict[str, Any]] = []

    def sampled() -> Any:
        st = (rg_json(kube, GROUP) or {}).get("status", {})
        samples.append(st)
        return st.get("pods") == {member: member for member in MEMBERS}

    assert scene.upgraded is not None
    scene.operator.stop()
    scene.operator = scene.upgraded
    scene.operator.start()
    wait_for(sampled, 60, lambda: f"status.pods (newer than the earlier CRD) filled in by the restarted operator; "
                                  f"last status: {json.dumps(samples[-1] if samples else {})[:2000]}", 0.3)
    flapped = [st for st in samples if not ready(st)
               or condition(st, "Ready").get("lastTransitionTime") != ready_since
               or st.get("assignments") != before["assignments"]]
    assert not flapped, f"{len(flapped)} of {len(samples)} samples not Ready as before: {json.dumps(flapped[0])[:2000]}"
    metrics = scene.operator.metrics()
    assert "rebalanser_operator_resources_created_total 0.0" in metrics, metrics[:3000]
    assert "rebalanser_operator_resources_deleted_total 0.0" in metrics, metrics[:3000]
    assert zk_snapshot(zk) == zk_before, "the upgrade wrote to ZooKeeper"


def test_the_v1beta1_plan_on_the_api_server(scene: Scene) -> None:
    kube, zk = scene.kube, scene.zk
    resources = GroupPaths.of(GROUP_PATH).resources
    start = rg_json(kube, GROUP)
    assert start is not None and ready(start["status"]), "the group should be Ready from the upgrade test"
    ready_since = condition(start["status"], "Ready")["lastTransitionTime"]
    zk_before = zk_snapshot(zk)

    # 1. serve both, store v1alpha1
    assert apply_server_side(kube, scene.plan("v1alpha1")).returncode == 0
    wait_crd_settled(kube)
    beta = wait_for(lambda: rg_json(kube, GROUP, "v1beta1"), 30, "the group served as v1beta1")
    assert beta["apiVersion"] == BETA and beta["spec"] == start["spec"]
    assert readmitted(kube, beta, BETA).returncode == 0
    kube.run_kubectl("patch", "resourcegroups.v1beta1.rebalanser.io", GROUP, "-n", NS, "--type=json", "-p",
                     json.dumps([{"op": "add", "path": "/spec/resources/-", "value": "via-beta"}]))
    wait_for(lambda: zk.exists(f"{resources}/via-beta"), 30, "the operator (watching v1alpha1) to create "
             "the znode of a resource added through v1beta1")
    kube.run_kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": BETA, "kind": "ResourceGroup", "metadata": {"name": "journal", "namespace": NS},
        "spec": {"zookeeper": {"connect": scene.zookeeper.hosts}, "resources": ["j-0", "j-1"]}}))
    wait_status(kube, lambda s: s.get("resources") == 2 and s.get("observedGeneration") == 1, 30,
                "the operator to take up a group created as v1beta1", "journal")
    assert set(etcd_api_versions(kube).values()) == {ALPHA}

    # 2. switch storage to v1beta1
    assert apply_server_side(kube, scene.plan("v1beta1")).returncode == 0
    wait_crd_settled(kube)
    assert crd_json(kube)["status"]["storedVersions"] == ["v1alpha1", "v1beta1"]
    refused = apply_server_side(kube, CHART_CRDS)
    assert refused.returncode != 0 and "storedVersions" in refused.stderr, (
        f"dropping v1beta1 while it may be stored must be refused: {refused.stderr}")

    # 3. migrate (a no-op rewrite of every object), then drop v1alpha1 from the stored versions
    migrate(kube, "v1beta1")
    set_stored_versions(kube, ["v1beta1"])
    for version in ("v1alpha1", "v1beta1"):
        obj = rg_json(kube, GROUP, version)
        assert obj is not None and obj["spec"]["resources"] == [*start["spec"]["resources"], "via-beta"]
        assert {k: v for k, v in obj["spec"].items() if k != "resources"} == {
            k: v for k, v in start["spec"].items() if k != "resources"}
    kube.run_kubectl("patch", "rg", GROUP, "-n", NS, "--type=json", "-p",
                     json.dumps([{"op": "add", "path": "/spec/resources/-", "value": "after-migration"}]))
    wait_for(lambda: zk.exists(f"{resources}/after-migration"), 30, "the operator to reconcile after the move")
    st = wait_status(kube, lambda s: ready(s) and s.get("assigned") == 9, 60, "Ready with 9 assigned after the move")
    assert condition(st, "Ready")["lastTransitionTime"] == ready_since, "Ready flapped during the move"
    current = zk_snapshot(zk)
    assert {node: current[node] for node in zk_before} == zk_before, "the move rewrote a znode"

    # and back (a release that must be rolled back, and this checkout's v1alpha1-only CRD for the next module)
    restore_checkout_crd(scene)
    assert [v["name"] for v in crd_json(kube)["spec"]["versions"]] == ["v1alpha1"]
    wait_for(lambda: rg_json(kube, GROUP, "v1beta1") is None, 30, "v1beta1 to be no longer served")
    final = rg_json(kube, GROUP)
    assert final is not None and ready(final["status"]) and "after-migration" in final["spec"]["resources"]
