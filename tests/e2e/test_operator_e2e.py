"""The operator end to end: Helm chart on a real kube-apiserver, real ZooKeeper, real worker processes.

The operator runs locally as a subprocess with the chart's ServiceAccount identity (a TokenRequest token),
so every API call it makes is checked against the chart's RBAC. There is no kubelet: the chart's
Deployment never gets a Pod, which is fine, the subprocess stands in for it.

Tests run in file order and share one cluster, one ZooKeeper, one operator (module state).
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from rebalanser.paths import GroupPaths
from rebalanser.wire import decode_config

from tests.operator.spec_limits import largest_specs, oversized_specs
from tests.support.cluster import REPO, UP_TIMEOUT, Cluster
from tests.support.invariants import episodes
from tests.support.kubectl import Kube
from tests.support.listener import Listener
from tests.support.liveness import healthy
from tests.support.podtoken import token_kubeconfig
from tests.support.zk import ZkCluster, admin_client, free_port, serving_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(UP_TIMEOUT)]

NS = "rebalanser-e2e"
RELEASE = "rbo"
SERVICE_ACCOUNT = f"{RELEASE}-rebalanser-operator"
CHART = REPO / "charts" / "rebalanser-operator"
BIN = Path(sys.executable).parent
GROUP = "orders"
GROUP_PATH = f"/rebalanser/{NS}/{GROUP}"
#: The first segment of the largest spec's path (tests.operator.spec_limits): a path root of its own.
LARGEST_SPEC_ROOT = "/" + "p" * 99


def wait_for(predicate: Callable[[], Any], timeout: float, what: str | Callable[[], str], poll: float = 0.2) -> Any:
    """Bounded wait; returns the predicate's truthy value or fails saying what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except (KeyError, IndexError, TypeError, ValueError):
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {detail}")
        time.sleep(poll)


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    """A ZooKeeper of our own: the outage test stops and restarts it."""
    with serving_cluster(tmp_path_factory.mktemp("e2e-zk"), size=1) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def zk(zookeeper: ZkCluster) -> Iterator[KazooClient]:
    with admin_client(zookeeper.hosts) as client:
        yield client


@pytest.fixture(scope="module")
def installed(kube: Cluster) -> Cluster:
    """``helm install`` of the chart (CRD from crds/, ServiceAccount, RBAC, Deployment, Service), with
    confirmed-death failover's access to pods (the operator below watches them: ``--failover-pods``)."""
    return install_chart(kube, NS, RELEASE, "--set", "failover.enabled=true")


def install_chart(kube: Cluster, namespace: str, release: str, *values: str) -> Cluster:
    """``helm install`` of the chart as ``release`` into ``namespace``; returns once the CRD is established."""
    kube.create_namespace(namespace)
    proc = subprocess.run(
        [str(kube.helm), "install", release, str(CHART), "--namespace", namespace,
         "--kubeconfig", str(kube.kubeconfig), *values],
        capture_output=True, text=True, env=kube.env(), timeout=120, check=False,
    )
    assert proc.returncode == 0, f"helm install failed: {proc.stderr}"
    wait_for(
        lambda: "Established" in kube.run_kubectl(
            "get", "crd", "resourcegroups.rebalanser.io", "-o",
            "jsonpath={.status.conditions[?(@.status=='True')].type}", check=False).stdout,
        60, "the ResourceGroup CRD to be established",
    )
    return kube


@dataclass
class OperatorProcess:
    """``rebalanser-operator`` as a subprocess with the ServiceAccount's kubeconfig."""

    kubeconfig: Path
    env: dict[str, str]
    log: Path
    namespace: str = NS
    metrics_port: int = field(default_factory=free_port)
    liveness_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    #: The program to run (default: this checkout's ``rebalanser-operator``), e.g. an earlier release's.
    command: tuple[str, ...] = ()
    cwd: Path | None = None
    #: Further options for the operator (e.g. a short ``--credentials-grace``).
    args: tuple[str, ...] = ()
    #: The ZooKeeper servers ResourceGroups may name (REBALANSER_ALLOWED_ENSEMBLES: an earlier release
    #: ignores it); the operator refuses every ResourceGroup without it.
    allowed_ensembles: str = ""

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [*(self.command or (str(BIN / "rebalanser-operator"),)), "--namespace", self.namespace,
                 "--metrics-port", str(self.metrics_port),
                 "--liveness", f"http://127.0.0.1:{self.liveness_port}/healthz", "--log-format", "full", *self.args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**self.env, "KUBECONFIG": str(self.kubeconfig),
                     "REBALANSER_ALLOWED_ENSEMBLES": self.allowed_ensembles}, cwd=self.cwd,
            )
        wait_for(self.live, 60, lambda: f"the operator's liveness endpoint; log:\n{self.text()[-3000:]}")

    def live(self) -> bool:
        assert self.proc is not None
        return healthy(self.proc, self.liveness_port, "the operator", self.text)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def service_account_kubeconfig(
    kube: Cluster, path: Path, namespace: str = NS, service_account: str = SERVICE_ACCOUNT
) -> Path:
    token = kube.run_kubectl("create", "token", service_account, "-n", namespace, "--duration=2h").stdout.strip()
    return token_kubeconfig(kube.kubeconfig, path, token, namespace)


@pytest.fixture(scope="module")
def operator(
    installed: Cluster, zookeeper: ZkCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    base = tmp_path_factory.mktemp("operator")
    running = OperatorProcess(service_account_kubeconfig(installed, base / "kubeconfig"), installed.env(),
                              base / "operator.log", allowed_ensembles=zookeeper.hosts,
                              args=("--path-root", "/rebalanser/{namespace}", "--path-root", LARGEST_SPEC_ROOT,
                                    "--failover-pods"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


@dataclass
class Workers:
    hosts: str
    log_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, member_id: str) -> None:
        out = open(self.log_dir / f"{member_id}.log", "wb")  # noqa: SIM115 - owned by the child
        self.procs[member_id] = subprocess.Popen(
            [str(BIN / "rebalanser"), "worker", "--zk", self.hosts, "--group", GROUP_PATH, "--id", member_id,
             "--session-timeout", "2", "--json"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )

    def events(self) -> list[dict[str, Any]]:
        """Every JSON event the workers wrote so far (their logs mix in other lines)."""
        found = []
        for log in sorted(self.log_dir.glob("*.log")):
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    try:
                        found.append(json.loads(line))
                    except ValueError:
                        continue
        return found

    def kill(self, member_id: str) -> None:
        proc = self.procs.pop(member_id)
        proc.kill()
        proc.wait(10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs.clear()


@pytest.fixture(scope="module")
def workers(zookeeper: ZkCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    pool = Workers(zookeeper.hosts, tmp_path_factory.mktemp("workers"))
    try:
        yield pool
    finally:
        pool.stop_all()


# ----------------------------------------------------------------------------------------- helpers


def manifest(hosts: str, name: str = GROUP, **spec: Any) -> str:
    body = {
        "apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"zookeeper": {"connect": hosts}, **spec},
    }
    return json.dumps(body)


def get_rg(kube: Cluster, name: str = GROUP) -> dict[str, Any] | None:
    proc = kube.run_kubectl("get", "resourcegroup", name, "-n", NS, "-o", "json", check=False)
    if proc.returncode != 0:
        return None
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def status(kube: Cluster, name: str = GROUP) -> dict[str, Any]:
    rg = get_rg(kube, name) or {}
    result: dict[str, Any] = rg.get("status", {})
    return result


def condition(st: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions", []) if c["type"] == kind), {})


def wait_status(
    kube: Cluster, predicate: Callable[[dict[str, Any]], Any], timeout: float, what: str, name: str = GROUP
) -> dict[str, Any]:
    last: dict[str, Any] = {}

    def check() -> Any:
        nonlocal last
        last = status(kube, name)
        return last if predicate(last) else None

    result: dict[str, Any] = wait_for(check, timeout, lambda: f"{what}; last status: {json.dumps(last)[:3000]}", 0.3)
    return result


def children(zk: KazooClient, path: str) -> list[str]:
    return sorted(zk.get_children(path)) if zk.exists(path) else []


def refreshes(metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith("rebalanser_operator_status_refresh_seconds_count "):
            return float(line.split()[1])
    return 0.0


def names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(count)]


# ------------------------------------------------------------------------------------------- tests


def test_chart_installs_crd_rbac_and_service_account(installed: Cluster) -> None:
    kube = installed
    kube.run_kubectl("get", "serviceaccount", SERVICE_ACCOUNT, "-n", NS)
    kube.run_kubectl("get", "role,rolebinding", f"{NS}-{SERVICE_ACCOUNT}", "-n", NS)
    who = f"--as=system:serviceaccount:{NS}:{SERVICE_ACCOUNT}"

    def can(*args: str) -> str:
        return kube.run_kubectl("auth", "can-i", *args, who, check=False).stdout.strip()

    assert can("patch", "resourcegroups.rebalanser.io", "-n", NS) == "yes"
    assert can("patch", "resourcegroups.rebalanser.io", "--subresource=status", "-n", NS) == "yes"
    assert can("create", "events", "-n", NS) == "yes"
    assert can("get", "secrets", "-n", NS) == "yes"
    assert can("watch", "secrets", "-n", NS) == "no"  # read by name only (a rotation by re-reading)
    assert can("list", "secrets", "-n", NS) == "no"
    assert can("watch", "pods", "-n", NS) == "yes"  # this module installs with failover.enabled
    assert can("watch", "pods", "-n", "default") == "no"  # only in the served namespace
    # ResourceGroups are granted cluster-wide (a namespace deletion must not strand a finalizer);
    # everything else only in the served namespaces.
    assert can("patch", "resourcegroups.rebalanser.io", "-n", "default") == "yes"
    assert can("get", "secrets", "-n", "default") == "no"
    assert can("create", "events", "-n", "default") == "no"
    assert can("create", "pods", "-n", NS) == "no"


def test_kubectl_explain_describes_the_fields(installed: Cluster) -> None:
    text = installed.run_kubectl("explain", "resourcegroups.status.lastRebalance.moved").stdout
    assert "Resources that changed owner" in text, text
    text = installed.run_kubectl("explain", "resourcegroups.spec.resourceSets.count").stdout
    assert "How many names" in text, text


def explained_fields(tree: str) -> list[str]:
    """The field paths of ``kubectl explain X --recursive``'s FIELDS block (two spaces of indent a level;
    ``enum:`` lines skipped)."""
    paths: list[str] = []
    stack: list[str] = []
    for line in tree.split("FIELDS:", 1)[1].splitlines():
        name = line.strip().split("\t", 1)[0]
        if not name or name.startswith("enum:") or "\t" not in line:
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2 - 1
        stack[depth:] = [name]
        paths.append(".".join(stack))
    return paths


def test_kubectl_explain_gives_every_field_a_description(installed: Cluster) -> None:
    """What ``kubectl explain rg.spec --recursive`` lists (and rg.status), each field explained on its own
    by the API server from the published schema: none without a description."""
    for top in ("spec", "status"):
        paths = explained_fields(installed.run_kubectl("explain", f"rg.{top}", "--recursive").stdout)
        assert len(paths) >= 15, paths
        for path in paths:
            text = installed.run_kubectl("explain", f"rg.{top}.{path}").stdout
            description = text.split("DESCRIPTION:", 1)[1].split("FIELDS:", 1)[0].strip()
            assert description and description != "<empty>", f"rg.{top}.{path} has no description:\n{text}"


def test_resource_group_creates_znodes_and_config(
    installed: Cluster, operator: OperatorProcess, zookeeper: ZkCluster, zk: KazooClient
) -> None:
    kube = installed
    kube.run_kubectl("apply", "-f", "-", input=manifest(
        zookeeper.hosts, resources=["extra"], resourceSets=[{"prefix": "orders-", "count": 8}],
        rebalance={"minIntervalSeconds": 1, "maxIntervalSeconds": 2},
    ))
    paths = GroupPaths.of(GROUP_PATH)
    expected = sorted([*names("orders-", 8), "extra"])
    wait_for(lambda: children(zk, paths.resources) == expected, 30,
             lambda: f"resource znodes {expected}, have {children(zk, paths.resources)}")
    config = decode_config(zk.get(paths.config)[0])
    assert (config.min_interval_seconds, config.max_interval_seconds) == (1, 2)
    rg = get_rg(kube)
    assert rg is not None and "rebalanser.io/finalizer" in rg["metadata"]["finalizers"]
    st = wait_status(kube, lambda s: s.get("resources") == 9 and s.get("observedGeneration") == 1, 30,
                     "status with 9 resources")
    assert st["phase"] == "Pending" and condition(st, "Ready")["reason"] == "NoMembers"
    assert condition(st, "ZooKeeperConnected")["status"] == "True"
    assert condition(st, "ResourcesSynced")["status"] == "True"


def test_the_owner_marker_names_the_object_and_the_cluster(
    installed: Cluster, operator: OperatorProcess, zk: KazooClient
) -> None:
    """The group root records the ResourceGroup's UID and the cluster id, which by default is the UID of
    namespace kube-system (read with the chart's RBAC), as the operator's start line says."""
    marker = json.loads(zk.get(GROUP_PATH)[0])["resourceGroup"]
    uid = installed.run_kubectl("get", "rg", GROUP, "-n", NS, "-o", "jsonpath={.metadata.uid}").stdout.strip()
    cluster = installed.run_kubectl("get", "namespace", "kube-system", "-o", "jsonpath={.metadata.uid}").stdout.strip()
    assert marker == {"namespace": NS, "name": GROUP, "uid": uid, "clusterId": cluster}
    assert f"cluster id={cluster}" in operator.text()


def test_the_workers_config_map_is_published(
    installed: Cluster, operator: OperatorProcess, zookeeper: ZkCluster
) -> None:
    def data() -> dict[str, str] | None:
        proc = installed.run_kubectl("get", "configmap", f"{GROUP}-rebalanser", "-n", NS, "-o", "json", check=False)
        return json.loads(proc.stdout).get("data") if proc.returncode == 0 else None

    published = wait_for(data, 30, f"ConfigMap {GROUP}-rebalanser")
    assert published == {"REBALANSER_ZK": zookeeper.hosts, "REBALANSER_GROUP": GROUP_PATH,
                         "REBALANSER_RESOURCE_GROUP": f"{NS}/{GROUP}"}
    cm = installed.run_kubectl("get", "configmap", f"{GROUP}-rebalanser", "-n", NS, "-o", "json").stdout
    (reference,) = json.loads(cm)["metadata"]["ownerReferences"]
    assert reference["kind"] == "ResourceGroup" and reference["name"] == GROUP


def test_workers_join_and_status_becomes_ready(installed: Cluster, operator: OperatorProcess, workers: Workers) -> None:
    kube = installed
    for member in ("w1", "w2", "w3"):
        workers.start(member)
    st = wait_status(
        kube, lambda s: s.get("phase") == "Stable" and s.get("members") == 3 and s.get("assigned") == 9, 90,
        "Stable with 3 members and 9 assigned",
    )
    assert condition(st, "Ready")["status"] == "True" and condition(st, "Balanced")["status"] == "True"
    assert st["coordinator"] in {"w1", "w2", "w3"}
    assigned = sorted(r for rs in st["assignments"].values() for r in rs)
    assert assigned == sorted([*names("orders-", 8), "extra"]) and st["unassigned"] == []
    assert {len(rs) for rs in st["assignments"].values()} == {3}
    assert st["lastRebalance"]["completedAt"]
    table = kube.run_kubectl("get", "rg", "-n", NS).stdout.splitlines()
    assert table[0].split() == ["NAME", "ALGORITHM", "RESOURCES", "MEMBERS", "ASSIGNED", "COORDINATOR", "PHASE",
                                "READY", "AGE"]
    row = table[1].split()
    assert row[:5] == [GROUP, "ResourceBarrier", "9", "3", "9"] and row[6:8] == ["Stable", "True"]
    wide = kube.run_kubectl("get", "rg", GROUP, "-n", NS, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[6:9] == ["PHASE", "READY", "INTERVAL"], wide[0]
    assert wide[1].split()[6:8] == ["Stable", "True"], wide
    events = kube.run_kubectl("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={GROUP}",
                              "-o", "jsonpath={.items[*].reason}").stdout.split()
    assert "Rebalanced" in events and "ResourcesSynced" in events
    # The last rebalances, as docs/operator.md lists them: the API server selects the Rebalanced events
    # of this ResourceGroup by field.
    rebalances = kube.run_kubectl(
        "get", "events", "-n", NS, "--sort-by=.lastTimestamp", "--field-selector",
        f"involvedObject.kind=ResourceGroup,involvedObject.name={GROUP},reason=Rebalanced",
        "-o", "jsonpath={range .items[*]}{.reason}/{.message}{'\\n'}{end}",
    ).stdout.split("\n")
    rebalances = [line for line in rebalances if line]
    assert rebalances and all(line.startswith("Rebalanced/generation ") for line in rebalances), rebalances


def test_the_kubectl_plugin_answers_by_the_resource_groups_name(installed: Cluster, workers: Workers) -> None:
    """``kubectl rebalanser owner/pod`` reads the ResourceGroup (where its group lives) and answers from
    ZooKeeper: the same owners as the workers' own events, and exit 1 for a resource nobody owns."""
    owners = {resource: eps[-1].worker for resource, eps in episodes(workers.events()).items()}
    env = {**os.environ, "KUBECTL": str(installed.kubectl)}

    def plugin(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rebalanser.kubectl_plugin", *args, "--rg", GROUP, "-n", NS,
                               "--kubeconfig", str(installed.kubeconfig)],
                              capture_output=True, text=True, timeout=60, env=env, check=False)

    asked = ["extra", *names("orders-", 8)]
    current = json.loads(plugin("owner", *asked, "--json").stdout)["owners"]
    assert current == {r: owners[r] for r in asked}, (current, owners)
    member = current["extra"]
    pod = plugin("pod", member)
    assert pod.returncode == 0 and "extra" in pod.stdout.split("\t")[-1].split(), pod
    missing = plugin("owner", "no-such-resource")
    assert missing.returncode == 1 and "(unassigned)" in missing.stdout, missing
    whole = plugin("status")
    assert whole.returncode == 0 and GROUP_PATH in whole.stdout, whole


def test_killed_worker_is_reflected_in_status(installed: Cluster, operator: OperatorProcess, workers: Workers) -> None:
    workers.kill("w2")
    st = wait_status(
        installed, lambda s: s.get("members") == 2 and s.get("assigned") == 9 and s.get("phase") == "Stable", 60,
        "Stable with 2 members after killing w2",
    )
    assert "w2" not in st["assignments"]


def test_patched_resources_reach_znodes_and_status(
    installed: Cluster, operator: OperatorProcess, zk: KazooClient
) -> None:
    installed.run_kubectl(
        "patch", "rg", GROUP, "-n", NS, "--type", "merge",
        "-p", json.dumps({"spec": {"resources": ["extra", "new-1", "new-2"], "resourceSets": [
            {"prefix": "orders-", "count": 4}]}}),
    )
    expected = sorted([*names("orders-", 4), "extra", "new-1", "new-2"])
    paths = GroupPaths.of(GROUP_PATH)
    wait_for(lambda: children(zk, paths.resources) == expected, 30,
             lambda: f"resource znodes {expected}, have {children(zk, paths.resources)}")
    st = wait_status(
        installed, lambda s: s.get("resources") == 7 and s.get("assigned") == 7 and s.get("phase") == "Stable"
        and s.get("observedGeneration") == 2, 60, "7 resources, all assigned, observedGeneration 2",
    )
    assert sorted(r for rs in st["assignments"].values() for r in rs) == expected


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"spec": {"resources": ["ok", "bad/name"]}}, "spec.resources[1]"),
        ({"spec": {"resources": [".."]}}, "spec.resources[0]"),
        ({"spec": {"resources": ["dup", "dup"]}}, "Duplicate value"),
        ({"spec": {"zookeeper": {"path": "/elsewhere"}}}, "zookeeper.path is immutable"),
        ({"spec": {"algorithm": "RoundRobin"}}, "spec.algorithm"),
    ],
)
def test_invalid_changes_are_rejected_by_the_api_server(
    installed: Cluster, operator: OperatorProcess, patch: dict[str, Any], message: str
) -> None:
    proc = installed.run_kubectl("patch", "rg", GROUP, "-n", NS, "--type", "merge", "-p", json.dumps(patch),
                                 check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_invalid_new_objects_are_rejected(installed: Cluster, zookeeper: ZkCluster) -> None:
    missing = json.loads(manifest(zookeeper.hosts, name="no-connect"))
    missing["spec"]["zookeeper"] = {}
    proc = installed.run_kubectl("apply", "-f", "-", input=json.dumps(missing), check=False)
    assert proc.returncode != 0 and "spec.zookeeper.connect: Required value" in proc.stderr, proc.stderr
    reserved = manifest(zookeeper.hosts, name="reserved")
    reserved = reserved.replace('"zookeeper": {', '"zookeeper": {"path": "/zookeeper/x", ')
    proc = installed.run_kubectl("apply", "-f", "-", input=reserved, check=False)
    assert proc.returncode != 0 and "reserved by ZooKeeper" in proc.stderr, proc.stderr


def test_spec_invalid_beyond_the_schema_is_an_error_without_retries(
    installed: Cluster, operator: OperatorProcess, zookeeper: ZkCluster
) -> None:
    name = "too-big"
    installed.run_kubectl("apply", "-f", "-", input=manifest(
        zookeeper.hosts, name=name,
        resourceSets=[{"prefix": "a", "count": 60_000}, {"prefix": "b", "count": 60_000}]))
    st = wait_status(installed, lambda s: s.get("phase") == "Error", 30, "phase Error for 120,000 resources", name)
    assert "at most 100000" in st["message"]
    assert condition(st, "ResourcesSynced")["reason"] == "InvalidSpec"
    wait_for(lambda: refreshes(operator.metrics()) >= 3, 30, "a few status refreshes")
    assert 'rebalanser_operator_reconciles_total{result="invalid"} 1.0' in operator.metrics(), "retried"
    installed.run_kubectl("delete", "rg", name, "-n", NS, "--wait=true", "--timeout=60s")
    assert get_rg(installed, name) is None


def test_an_interval_order_broken_by_a_change_is_an_error_until_fixed(
    installed: Cluster, operator: OperatorProcess
) -> None:
    """The API server checks the interval order on create only (docs/operator.md, "Deprecated forms":
    on an object stored with a fraction the rule could not evaluate, and every update would be
    refused); a change that breaks it is refused by the operator, and a fix brings the group back."""
    def patch(rebalance: dict[str, int]) -> None:
        installed.run_kubectl("patch", "rg", GROUP, "-n", NS, "--type", "merge", "-p",
                              json.dumps({"spec": {"rebalance": rebalance}}))

    patch({"minIntervalSeconds": 40, "maxIntervalSeconds": 5})
    st = wait_status(installed, lambda s: s.get("phase") == "Error", 30, "phase Error for min > max")
    assert "minIntervalSeconds must not exceed" in st["message"]
    patch({"minIntervalSeconds": 1, "maxIntervalSeconds": 2})
    wait_status(installed, lambda s: s.get("phase") == "Stable", 60, "Stable again after the fix")


def test_adding_a_path_later_is_rejected(installed: Cluster, operator: OperatorProcess) -> None:
    proc = installed.run_kubectl(
        "patch", "rg", GROUP, "-n", NS, "--type", "merge", "-p",
        json.dumps({"spec": {"zookeeper": {"path": GROUP_PATH}}}), check=False,
    )
    assert proc.returncode != 0 and "cannot be added or removed" in proc.stderr, proc.stderr


def test_operator_restart_resumes_without_duplicate_work_and_without_status_flapping(
    installed: Cluster, operator: OperatorProcess, zk: KazooClient
) -> None:
    def reasons() -> Counter[str]:
        return Counter(installed.run_kubectl(
            "get", "events", "-n", NS, "--field-selector", f"involvedObject.name={GROUP}",
            "-o", "jsonpath={.items[*].reason}").stdout.split())

    before_status = wait_status(installed, lambda s: s.get("phase") == "Stable", 60, "Stable before the restart")
    ready_since = condition(before_status, "Ready")["lastTransitionTime"]
    before_events = reasons()
    czxid = zk.exists(f"{GROUP_PATH}/resources/extra").czxid
    samples: list[dict[str, Any]] = []

    def sampled(predicate: Callable[[], Any]) -> Callable[[], Any]:
        def step() -> Any:
            samples.append(status(installed))
            return predicate()
        return step

    # Every version the API server holds during the restart (a watch), and a poll every ~0.3 s.
    with Kube(installed.kubeconfig, installed.bin_dir).watch_json("get", "rg", GROUP, "-n", NS) as stream:
        operator.stop()
        operator.start()
        wait_for(sampled(lambda: "rebalanser_operator_reconciles_total{result=\"ok\"} 1.0" in operator.metrics()),
                 30, lambda: f"the resumed operator to reconcile once; metrics:\n{operator.metrics()[:2000]}", 0.3)
        wait_for(sampled(lambda: refreshes(operator.metrics()) >= 3), 30,
                 "three status refreshes by the resumed operator", 0.3)
        versions = [v.obj.get("status") or {} for v in stream.snapshot()]
    metrics = operator.metrics()
    assert "rebalanser_operator_resources_created_total 0.0" in metrics
    assert "rebalanser_operator_resources_deleted_total 0.0" in metrics
    flapped = [
        st for st in [*samples, *versions]
        if st.get("phase") != "Stable" or condition(st, "Ready").get("status") != "True"
        or condition(st, "Ready").get("lastTransitionTime") != ready_since
        or any(st.get(key) != before_status.get(key) for key in ("coordinator", "members", "assignments", "epoch"))
    ]
    assert len(samples) >= 10 and versions, f"too few samples: {len(samples)} polled, {len(versions)} watched"
    assert not flapped, (f"{len(flapped)} of {len(samples) + len(versions)} status samples flapped; first: "
                         f"{json.dumps(flapped[0])[:2000]}")
    assert reasons() == before_events, "the resumed operator re-announced something"
    after = status(installed)
    assert after["phase"] == "Stable" and after["lastRebalance"] == before_status["lastRebalance"]
    assert zk.exists(f"{GROUP_PATH}/resources/extra").czxid == czxid


def test_zookeeper_outage_and_recovery_without_restarting_the_operator(
    installed: Cluster, operator: OperatorProcess, zookeeper: ZkCluster
) -> None:
    assert operator.proc is not None
    pid = operator.proc.pid
    zookeeper.stop()
    try:
        down = wait_status(installed, lambda s: condition(s, "ZooKeeperConnected").get("status") == "False", 60,
                           "ZooKeeperConnected=False while ZooKeeper is down")
        assert down["phase"] == "Degraded"
        assert condition(down, "ZooKeeperConnected")["reason"] == "ConnectionLost"
    finally:
        zookeeper.start()
    wait_status(installed, lambda s: condition(s, "ZooKeeperConnected").get("status") == "True"
                and s.get("phase") == "Stable", 90, "ZooKeeperConnected=True and Stable after ZooKeeper restarted")
    assert operator.proc.poll() is None and operator.proc.pid == pid


def test_metrics_endpoint(operator: OperatorProcess) -> None:
    text = operator.metrics()
    assert "rebalanser_operator_reconciles_total" in text
    assert f'rebalanser_group_members{{name="{GROUP}",namespace="{NS}"}}' in text


@pytest.mark.parametrize("corner", ["long-names", "many-names"])
def test_the_largest_spec_passes_client_and_server_side_apply_and_is_handled(
    installed: Cluster, operator: OperatorProcess, zookeeper: ZkCluster, zk: KazooClient, corner: str
) -> None:
    """Every field at the schema's maximum but the credentials (resourceSets generate nothing here, to
    keep ZooKeeper small: their counts hardly change the object's size). kubectl's client-side apply keeps a copy in an
    annotation; the operator keeps only a digest, so both fit, and edits keep working."""
    name = f"max-{corner}"
    spec = largest_specs(connect=zookeeper.hosts)[corner]
    spec["resourceSets"] = [{**s, "count": 0} for s in spec["resourceSets"]]
    del spec["zookeeper"]["credentialsSecretRef"]  # no such Secret here (about 800 bytes less)
    body = json.loads(manifest(zookeeper.hosts, name=name))
    body["spec"] = spec
    installed.run_kubectl("apply", "-f", "-", input=json.dumps(body), timeout=120)
    synced = wait_status(installed, lambda s: condition(s, "ResourcesSynced").get("status") == "True"
                         and s.get("resources") == len(spec["resources"]), 120,
                         f"{name}: ResourcesSynced with {len(spec['resources'])} resources", name=name)
    assert synced["zookeeperPath"] == spec["zookeeper"]["path"]
    # kopf stores what it handled in its own patch after the handler returns; the status loop's patch
    # (which reports ResourcesSynced) may come first, so the digest is awaited, not assumed.
    def stored() -> dict[str, str] | None:
        found: dict[str, str] = (get_rg(installed, name) or {})["metadata"]["annotations"]
        return found if "rebalanser.io/last-handled-spec-digest" in found else None

    annotations = wait_for(stored, 60, f"{name}: kopf's last-handled digest stored")
    assert "rebalanser.io/last-handled-configuration" not in annotations
    assert len(annotations["rebalanser.io/last-handled-spec-digest"]) == 64
    assert sum(len(k) + len(v) for k, v in annotations.items()) < 256 * 1024
    # An edit by client-side apply (a three-way merge against the kept copy), then by server-side apply.
    full = list(spec["resources"])
    for cut, how in ((1, ()), (2, ("--server-side", "--force-conflicts", "--field-manager", "e2e"))):
        body["spec"]["resources"] = full[:-cut]
        want = len(full) - cut
        installed.run_kubectl("apply", *how, "-f", "-", input=json.dumps(body), timeout=120)
        wait_status(installed, lambda s, n=want: s.get("resources") == n, 120,
                    f"{name}: the {'server' if how else 'client'}-side edit reconciled", name=name)
    installed.run_kubectl("delete", "rg", name, "-n", NS, "--wait=true", "--timeout=120s", timeout=150)
    wait_for(lambda: zk.exists(spec["zookeeper"]["path"]) is None, 60, f"{name}: its znodes deleted")


@pytest.mark.parametrize("corner", ["long-names+1", "many-names+1"])
def test_a_spec_past_the_limits_is_rejected_at_admission(installed: Cluster, zookeeper: ZkCluster, corner: str) -> None:
    body = json.loads(manifest(zookeeper.hosts, name="too-big"))
    body["spec"] = oversized_specs(zookeeper.hosts)[corner]
    proc = installed.run_kubectl("apply", "-f", "-", input=json.dumps(body), check=False, timeout=120)
    assert proc.returncode != 0 and "spec.resources" in proc.stderr, proc.stderr[-2000:]
    assert "resourceSets" in proc.stderr or "Too many" in proc.stderr, proc.stderr[-2000:]
    assert get_rg(installed, "too-big") is None


def test_a_named_workloads_rollout_is_watched(
    installed: Cluster, operator: OperatorProcess, zookeeper: ZkCluster
) -> None:
    """spec.workload: the operator watches the Deployment (no controller runs here, so its status is
    written by hand) and raises the interval while it rolls out, lowers it once done."""
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "none"}]}}},
    }
    installed.run_kubectl("apply", "-f", "-", input=json.dumps(deployment))

    def deployment_status(**fields: int) -> None:
        generation = json.loads(installed.run_kubectl("get", "deployment", "web", "-n", NS, "-o", "json").stdout)[
            "metadata"]["generation"]
        patch = {"status": {"observedGeneration": generation, **fields}}
        installed.run_kubectl("patch", "deployment", "web", "-n", NS, "--subresource=status", "--type=merge",
                              "-p", json.dumps(patch))

    deployment_status(replicas=2, updatedReplicas=2, availableReplicas=2, readyReplicas=2)
    installed.run_kubectl("apply", "-f", "-", input=manifest(
        zookeeper.hosts, name="rollouts", resources=["a"], workload={"kind": "Deployment", "name": "web"},
        rebalance={"minIntervalSeconds": 1, "maxIntervalSeconds": 20, "adaptive": True}))
    wait_status(installed, lambda s: s.get("effectiveIntervalSeconds") == 1, 120, "interval 1 (no rollout)",
                name="rollouts")
    deployment_status(replicas=3, updatedReplicas=1, availableReplicas=2, readyReplicas=2)  # old pods running
    wait_status(installed, lambda s: s.get("effectiveIntervalSeconds") == 20, 60, "interval 20 during the rollout",
                name="rollouts")
    deployment_status(replicas=2, updatedReplicas=2, availableReplicas=2, readyReplicas=2)
    installed.run_kubectl("delete", "rg", "rollouts", "-n", NS, "--timeout=120s")
    installed.run_kubectl("delete", "deployment", "web", "-n", NS)


def test_a_tenants_attacks_are_refused_with_a_reason_and_touch_nothing(
    installed: Cluster, operator: OperatorProcess, zookeeper: ZkCluster, zk: KazooClient, workers: Workers
) -> None:
    """ResourceGroups naming a parent, another namespace, the inside of a live group, another
    application's tree, a chroot, or a ZooKeeper outside the allowed list (with a credentials Secret):
    each is refused (phase Error, the reason as ResourcesSynced's and a Warning Event), deleting it
    releases the finalizer, and nothing of the victim changes; the ZooKeeper not allowed never sees a
    connection. Before: all were admitted, and their deletion removed the named trees."""
    kube = installed
    kafka = "/brokers-e2e"
    zk.create(f"{kafka}/ids/0", b'{"host": "kafka-0"}', makepath=True)
    zk.create(f"{kafka}/topics/orders", b'{"partitions": 12}', makepath=True)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "stolen", "namespace": NS},
              "data": {"username": base64.b64encode(b"victim").decode(),
                       "password": base64.b64encode(b"victims-password").decode()}}
    kube.run_kubectl("apply", "-f", "-", input=json.dumps(secret))
    listener = Listener()

    def snapshot() -> dict[str, Any]:
        paths = GroupPaths.of(GROUP_PATH)
        # the victim's own operator may tune its interval meanwhile (a decay after an earlier test's churn):
        # G/config is compared without that one field
        config = {k: v for k, v in json.loads(zk.get(paths.config)[0]).items() if k != "effectiveIntervalSeconds"}
        return {"marker": zk.get(GROUP_PATH)[0], "resources": sorted(zk.get_children(paths.resources)),
                "config": config, "acl": zk.get_acls(GROUP_PATH)[0],
                "kafka": {node: zk.get(node)[0] for node in (kafka, f"{kafka}/ids/0", f"{kafka}/topics/orders")},
                "parent": zk.get(f"/rebalanser/{NS}")[0]}

    attacks = {  # name -> (zookeeper spec, reason)
        "parent": ({"connect": zookeeper.hosts, "path": "/rebalanser"}, "PathNotAllowed"),
        "other-namespace": ({"connect": zookeeper.hosts, "path": "/rebalanser/another-team/orders"},
                            "PathNotAllowed"),
        "inside": ({"connect": zookeeper.hosts, "path": f"{GROUP_PATH}/owners"}, "PathInUse"),
        "same-path": ({"connect": zookeeper.hosts, "path": GROUP_PATH}, "PathInUse"),
        "kafka": ({"connect": zookeeper.hosts, "path": kafka}, "PathNotAllowed"),
        "chroot": ({"connect": f"{zookeeper.hosts}/rebalanser/another-team", "path": "/orders"}, "PathNotAllowed"),
        "exfiltrate": ({"connect": f"127.0.0.1:{listener.port}", "credentialsSecret": "stolen"},
                       "EnsembleNotAllowed"),
    }
    victim = wait_status(kube, lambda s: s.get("phase") == "Stable", 120, "the victim Stable before the attacks")
    members, assigned = victim["members"], victim["assigned"]  # earlier tests of the module may have killed one
    try:
        before = snapshot()
        for name, (zookeeper_spec, _) in attacks.items():
            body = json.loads(manifest(zookeeper.hosts, name=name, resources=["x"]))
            body["spec"]["zookeeper"] = zookeeper_spec
            kube.run_kubectl("apply", "-f", "-", input=json.dumps(body))
        for name, (_, reason) in attacks.items():
            def refused(s: dict[str, Any], reason: str = reason) -> bool:
                return s.get("phase") == "Error" and condition(s, "ResourcesSynced").get("reason") == reason

            st = wait_status(kube, refused, 60, f"{name}: {reason}", name)
            assert not [key for key in ("members", "assignments", "pods", "coordinator") if key in st], st
            reasons = kube.run_kubectl("get", "events", "-n", NS, "--field-selector", f"involvedObject.name={name}",
                                       "-o", "jsonpath={.items[*].reason}").stdout.split()
            assert reason in reasons, (name, reasons)
        kube.run_kubectl("delete", "rg", *attacks, "-n", NS, "--wait=true", "--timeout=60s")
        for name in attacks:
            assert get_rg(kube, name) is None, f"{name} was not deleted"
        assert snapshot() == before
        assert listener.accepted == 0 and b"victims-password" not in listener.received
        st = wait_status(kube, lambda s: s.get("phase") == "Stable" and s.get("members") == members, 120,
                         f"the victim still Stable with its {members} members")
        assert st["assigned"] == assigned
    finally:
        listener.close()
        kube.run_kubectl("delete", "rg", *attacks, "-n", NS, "--ignore-not-found", "--wait=false", check=False)
        kube.run_kubectl("delete", "secret", "stolen", "-n", NS, "--ignore-not-found", check=False)
        zk.delete(kafka, recursive=True)


def test_a_pods_ended_container_instance_is_failed_over_by_its_uid(
    installed: Cluster, operator: OperatorProcess, zookeeper: ZkCluster, zk: KazooClient, tmp_path: Path,
) -> None:
    """spec.failover: KubeletConfirmed through the API server: the member node records the Pod object's
    real UID (no kubelet here: the pod's status is written by hand, as the kubelet would, from the killed
    worker's termination-message file). Its member node and claims go long before its session expires."""
    path = f"/rebalanser/{NS}/confirmed"
    installed.run_kubectl("apply", "-f", "-", input=manifest(
        zookeeper.hosts, name="confirmed", resources=["a", "b", "c", "d"], failover="KubeletConfirmed",
        podSelector={"matchLabels": {"app": "confirmed-worker"}}, rebalance={"minIntervalSeconds": 1}))
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "confirmed-0", "namespace": NS, "labels": {"app": "confirmed-worker"}},
           "spec": {"containers": [{"name": "worker", "image": "none"}]}}
    installed.run_kubectl("apply", "-f", "-", input=json.dumps(pod))
    created = installed.run_kubectl("get", "pod", "confirmed-0", "-n", NS, "-o", "json").stdout
    uid = json.loads(created)["metadata"]["uid"]
    wait_for(lambda: zk.exists(GroupPaths.of(path).resource("d")), 120, "the group's znodes")
    log = tmp_path / "termination-log"
    env = {**os.environ, "POD_NAMESPACE": NS, "POD_NAME": "confirmed-0", "POD_UID": uid,
           "REBALANSER_CONTAINER": "worker"}
    session_timeout = 30
    procs = [subprocess.Popen(
        [str(BIN / "rebalanser"), "worker", "--zk", zookeeper.hosts, "--group", path, "--id", member,
         "--session-timeout", str(session_timeout), "--json", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env if extra else None,
    ) for member, extra in (("victim", ["--termination-log", str(log)]), ("survivor", []))]
    try:
        paths = GroupPaths.of(path)
        wait_for(lambda: len(children(zk, paths.clients)) == 2 and log.exists(), 60, "two members")
        victim = next(n for n in children(zk, paths.clients) if "-victim-" in n)
        session = zk.exists(paths.client(victim)).ephemeralOwner
        def claim_owners() -> set[int]:  # a claim may go between the listing and its read
            stats = [zk.exists(paths.owner(r)) for r in children(zk, paths.owners)]
            return {stat.ephemeralOwner for stat in stats if stat is not None}

        wait_for(lambda: session in claim_owners(), 60, "the victim to claim")
        procs[0].kill()
        procs[0].wait(10)
        killed = time.monotonic()
        status_patch = {"status": {"containerStatuses": [{
            "name": "worker", "image": "none", "imageID": "", "ready": False, "restartCount": 1,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "Error", "message": log.read_text()}}}]}}
        installed.run_kubectl("patch", "pod", "confirmed-0", "-n", NS, "--subresource=status", "--type=merge",
                              "-p", json.dumps(status_patch))
        wait_for(lambda: zk.exists(paths.client(victim)) is None, session_timeout / 2,
                 lambda: f"the victim's member node is still there; operator log:\n{operator.text()[-3000:]}")
        assert session not in claim_owners(), "the victim's claims outlived its member node"
        assert time.monotonic() - killed < session_timeout
        # The operator logs the failover after it has ended the member (its node is gone first): awaited.
        wait_for(lambda: "failover: pod confirmed-0" in operator.text(), 10,
                 lambda: f"no failover line in the operator's log:\n{operator.text()[-3000:]}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
        installed.run_kubectl("delete", "pod", "confirmed-0", "-n", NS, "--wait=false")
        installed.run_kubectl("delete", "rg", "confirmed", "-n", NS, "--timeout=120s")


def test_delete_removes_znodes_and_releases_the_finalizer(
    installed: Cluster, operator: OperatorProcess, zk: KazooClient, workers: Workers
) -> None:
    workers.stop_all()
    installed.run_kubectl("delete", "rg", GROUP, "-n", NS, "--wait=true", "--timeout=60s")
    assert get_rg(installed) is None
    wait_for(lambda: zk.exists(GROUP_PATH) is None, 30, f"{GROUP_PATH} to be deleted")


def test_keep_annotation_leaves_znodes(
    installed: Cluster, operator: OperatorProcess, zookeeper: ZkCluster, zk: KazooClient
) -> None:
    name = "kept"
    path = f"/rebalanser/{NS}/{name}"
    installed.run_kubectl("apply", "-f", "-", input=manifest(zookeeper.hosts, name=name, resources=["a"]))
    wait_for(lambda: children(zk, f"{path}/resources") == ["a"], 30, f"{path}/resources/a")
    installed.run_kubectl("annotate", "rg", name, "-n", NS, "rebalanser.io/keep-znodes=true")
    installed.run_kubectl("delete", "rg", name, "-n", NS, "--wait=true", "--timeout=60s")
    assert get_rg(installed, name) is None
    assert children(zk, f"{path}/resources") == ["a"]


def test_rbac_was_sufficient(operator: OperatorProcess) -> None:
    text = operator.text()
    denied = re.search(r"APIForbiddenError|\b[Ff]orbidden\b|Not enough permissions", text)
    assert denied is None, f"the operator hit an RBAC limit ({denied.group(0) if denied else ''}):\n{text[-3000:]}"
