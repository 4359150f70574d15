"""The operator's ServiceAccount can do exactly what docs/operator.md's RBAC table says, and nothing
more, on a real kube-apiserver (RBAC authorizer, admission): the chart installed into a namespace of
its own, serving one tenant namespace, with ``kubectl auth can-i --list`` as the evidence.

"Nothing more" is measured against a ServiceAccount with no bindings in the same namespace (what every
ServiceAccount may do anyway: self reviews, discovery). The ConfigMap admission policy is exercised
by acting as the ServiceAccount on a foreign and on an operator-made ConfigMap.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.support import rbactable
from tests.support.cluster import REPO, Cluster

CHART = REPO / "charts" / "rebalanser-operator"
OPS = "rbac-ops"  # the operator's own namespace (not served)
TENANT = "rbac-tenant"  # served
OTHER = "rbac-other"  # not served
RELEASE = "rb"
SERVICE_ACCOUNT = f"{RELEASE}-rebalanser-operator"
AS_OPERATOR = f"--as=system:serviceaccount:{OPS}:{SERVICE_ACCOUNT}"
BASELINE = "nobody"  # a ServiceAccount without bindings

SETS = {"failover.enabled": "failover.enabled=true", "operator.peering": "operator.peering=rb",
        "rbac.clusterWide": "rbac.clusterWide=true"}


def helm(kube: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(kube.helm), "--kubeconfig", str(kube.kubeconfig), *args],
                          capture_output=True, text=True, env=kube.env(), timeout=180, check=False)
    assert proc.returncode == 0, f"helm {' '.join(args)}: {proc.stderr}"
    return proc


def install(kube: Cluster, enabled: tuple[str, ...]) -> None:
    """The chart with no operator pod (replicas 0: RBAC needs none), in OPS, serving TENANT."""
    sets = [a for value in enabled for a in ("--set", SETS[value])]
    helm(kube, "upgrade", "--install", RELEASE, str(CHART), "-n", OPS, "--set", "replicas=0",
         "--set", f"rbac.watchNamespaces={{{TENANT}}}", "--reset-values", *sets)


@pytest.fixture(scope="module")
def cluster(kube: Cluster) -> Iterator[Cluster]:
    for namespace in (OPS, TENANT, OTHER):
        kube.create_namespace(namespace)
    kube.run_kubectl("create", "serviceaccount", BASELINE, "-n", OPS, check=False)
    try:
        yield kube
    finally:
        # no kubelet runs the chart's pre-delete check Job here: without --no-hooks Helm would wait for it
        helm(kube, "uninstall", RELEASE, "-n", OPS, "--no-hooks")


def can_i_list(kube: Cluster, namespace: str, who: str) -> tuple[rbactable.Grants, frozenset[str]]:
    out = kube.run_kubectl("auth", "can-i", "--list", "-n", namespace, who).stdout
    return rbactable.parse_can_i(out)


def beyond_baseline(kube: Cluster, namespace: str) -> rbactable.Grants:
    grants, urls = can_i_list(kube, namespace, AS_OPERATOR)
    baseline, baseline_urls = can_i_list(kube, namespace, f"--as=system:serviceaccount:{OPS}:{BASELINE}")
    assert urls <= baseline_urls, f"non-resource URLs beyond every ServiceAccount's: {sorted(urls - baseline_urls)}"
    return rbactable.minus(grants, baseline)


@pytest.mark.parametrize("enabled", [(), ("failover.enabled", "operator.peering"),
                                     ("rbac.clusterWide",)], ids=["default", "failover+peering", "cluster-wide"])
def test_the_service_account_can_do_exactly_what_the_rbac_table_says(
    cluster: Cluster, enabled: tuple[str, ...]
) -> None:
    install(cluster, enabled)
    rows = rbactable.table_rows()
    for namespace, served in ((TENANT, True), (OPS, False), (OTHER, False)):
        want = rbactable.expected(rows, served=served, own=namespace == OPS, enabled=enabled)
        got = beyond_baseline(cluster, namespace)
        assert got == want, (f"{namespace} ({'served' if served else 'not served'}, {enabled or 'defaults'}): "
                             f"more than the table: {rbactable.minus(got, want)}; "
                             f"missing: {rbactable.minus(want, got)}")


def config_map(name: str, labels: dict[str, str]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": name, "namespace": TENANT, "labels": labels}, "data": {"k": "v"}})


def test_the_service_account_replaces_only_config_maps_the_operator_made(cluster: Cluster) -> None:
    install(cluster, ())
    served = cluster.run_kubectl("api-resources", "--api-group=admissionregistration.k8s.io", "-o", "name").stdout
    if "validatingadmissionpolicies" not in served:
        pytest.skip("this API server serves no ValidatingAdmissionPolicy")
    cluster.run_kubectl("apply", "-f", "-", input=config_map("app-settings", {}))
    cluster.run_kubectl("apply", "-f", "-",
                        input=config_map("orders-rebalanser", {"app.kubernetes.io/managed-by": "rebalanser-operator"}))

    def replace_as_operator(name: str, labels: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return cluster.run_kubectl("replace", "-f", "-", AS_OPERATOR, input=config_map(name, labels), check=False)

    # The policy reaches the API server's admission a moment after it is created (no event to await):
    # a bounded poll, restoring the foreign ConfigMap after any try that got through.
    deadline = time.monotonic() + 30
    while True:
        foreign = replace_as_operator("app-settings", {"app.kubernetes.io/managed-by": "rebalanser-operator"})
        if foreign.returncode != 0 or time.monotonic() > deadline:
            break
        cluster.run_kubectl("replace", "-f", "-", input=config_map("app-settings", {}))
        time.sleep(0.5)
    assert foreign.returncode != 0 and "only the ConfigMaps it created" in foreign.stderr, foreign.stderr
    labels = json.loads(cluster.run_kubectl(
        "get", "configmap", "app-settings", "-n", TENANT, "-o", "json").stdout)["metadata"].get("labels")
    assert not labels, f"the foreign ConfigMap was changed: {labels}"
    own = replace_as_operator("orders-rebalanser", {"app.kubernetes.io/managed-by": "rebalanser-operator"})
    assert own.returncode == 0, own.stderr


def test_the_operator_refuses_to_replace_a_foreign_config_map(cluster: Cluster) -> None:
    """The operator's own check, without the admission policy (as an administrator, whom the policy
    does not bind): a ConfigMap of the workers' ConfigMap's name that it did not create is left alone."""
    from kubernetes import config as k8s_config
    from rebalanser_operator.kube import ForeignConfigMap, KubernetesGateway

    gateway = KubernetesGateway(k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig)))  # type: ignore[no-untyped-call]
    cluster.run_kubectl("apply", "-f", "-", input=config_map("billing-rebalanser", {}))
    with pytest.raises(ForeignConfigMap, match="not created by the operator"):
        gateway.publish_config(TENANT, "billing-rebalanser", {"REBALANSER_ZK": "elsewhere:2181"}, None)
    data = json.loads(cluster.run_kubectl("get", "configmap", "billing-rebalanser", "-n", TENANT, "-o", "json").stdout)
    assert data["data"] == {"k": "v"}
    gateway.publish_config(TENANT, "shipping-rebalanser", {"REBALANSER_ZK": "zk:2181"}, None)  # created
    gateway.publish_config(TENANT, "shipping-rebalanser", {"REBALANSER_ZK": "zk2:2181"}, None)  # its own: replaced
    data = json.loads(cluster.run_kubectl("get", "configmap", "shipping-rebalanser", "-n", TENANT, "-o", "json").stdout)
    assert data["data"] == {"REBALANSER_ZK": "zk2:2181"}
