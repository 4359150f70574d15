"""The Helm chart: lint, render, and check what the rendered manifests promise."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from rebalanser_operator import crdgen

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "rebalanser-operator"


def find_helm() -> Path | None:
    proc = subprocess.run(
        [str(REPO / "scripts" / "build-controlplane.sh"), "--bin-dir"], capture_output=True, text=True, check=False
    )
    candidates = [Path(proc.stdout.strip()) / "helm"] if proc.returncode == 0 else []
    cache = Path(os.environ.get("REBALANSER_CACHE", Path.home() / ".cache" / "rebalanser"))
    candidates += [Path(p) for p in sorted(glob.glob(str(cache / "controlplane-*" / "bin" / "helm")))]
    on_path = shutil.which("helm")
    candidates += [Path(on_path)] if on_path else []
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


@pytest.fixture(scope="module")
def helm() -> Path:
    found = find_helm()
    if found is None:
        pytest.skip("helm binary not found: build it with scripts/build-controlplane.sh "
                    "(~/.cache/rebalanser/controlplane-*/bin/helm)")
    return found


def render(helm: Path, *args: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [str(helm), "template", "rel", str(CHART), "--namespace", "ops", *args],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def rules_of(role: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault(f"{group}/{resource}", set()).update(rule["verbs"])
    return out


def test_chart_lints(helm: Path) -> None:
    proc = subprocess.run([str(helm), "lint", str(CHART), "--strict"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_chart_crd_is_the_generated_one() -> None:
    assert (CHART / "crds" / crdgen.CRD_FILE).read_text() == crdgen.render()


def test_default_install_is_namespaced_least_privilege(helm: Path) -> None:
    docs = render(helm)
    assert {d["kind"] for d in docs} == {
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment"}
    assert len(by_kind(docs, "ClusterRoleBinding")) == 2
    (role,) = by_kind(docs, "Role")
    assert role["metadata"]["namespace"] == "ops"
    assert rules_of(role) == {
        "/events": {"create"},
        "/configmaps": {"create", "update"},  # the workers' ConfigMap per ResourceGroup
        "/secrets": {"get", "list", "watch"},  # referenced Secrets are watched for rotation
        "apps/deployments": {"get", "list", "watch"},  # spec.workload: rollouts are watched
        "apps/statefulsets": {"get", "list", "watch"},
        "/pods": {"get", "list", "watch"},  # spec.failover: KubeletConfirmed
    }
    cluster_roles = {r["metadata"]["name"]: rules_of(r) for r in by_kind(docs, "ClusterRole")}
    assert cluster_roles == {
        "rel-rebalanser-operator-scanning": {
            "apiextensions.k8s.io/customresourcedefinitions": {"list", "watch"},
            "/namespaces": {"get", "list", "watch"},
        },
        # Cluster-wide, so a ResourceGroup deleted with its namespace (and the namespace's RoleBindings)
        # can still have its finalizer released.
        "rel-rebalanser-operator-resourcegroups": {
            "rebalanser.io/resourcegroups": {"get", "list", "watch", "patch"},
            "rebalanser.io/resourcegroups/status": {"get", "patch"},
        },
    }
    bindings = {b["metadata"]["name"]: b for b in by_kind(docs, "ClusterRoleBinding")}
    groups = bindings["rel-rebalanser-operator-resourcegroups"]
    assert groups["roleRef"]["name"] == "rel-rebalanser-operator-resourcegroups"
    assert groups["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-rebalanser-operator", "namespace": "ops"}]
    (deployment,) = by_kind(docs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--namespace=ops" in container["args"] and "--standalone" in container["args"]
    assert container["command"] == ["rebalanser-operator"]


def test_cluster_wide_option(helm: Path) -> None:
    docs = render(helm, "--set", "rbac.clusterWide=true")
    assert not by_kind(docs, "Role")
    roles = {r["metadata"]["name"]: rules_of(r) for r in by_kind(docs, "ClusterRole")}
    assert set(roles) == {"rel-rebalanser-operator", "rel-rebalanser-operator-scanning"}
    assert "rebalanser.io/resourcegroups/status" in roles["rel-rebalanser-operator"]
    assert "/secrets" in roles["rel-rebalanser-operator"]
    container = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert "--all-namespaces" in container["args"]


def test_peering_rules_only_when_enabled(helm: Path) -> None:
    assert "kopf.dev/kopfpeerings" not in rules_of(by_kind(render(helm), "Role")[0])
    docs = render(helm, "--set", "operator.peering=rebalanser")
    assert "kopf.dev/kopfpeerings" in rules_of(by_kind(docs, "Role")[0])
    container = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert "--peering=rebalanser" in container["args"] and "--standalone" not in container["args"]


def test_pod_meets_the_restricted_pod_security_standard(helm: Path) -> None:
    deployment = by_kind(render(helm), "Deployment")[0]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_service_monitor_only_with_the_prometheus_operator_api(helm: Path) -> None:
    assert not by_kind(render(helm), "ServiceMonitor")
    docs = render(helm, "--api-versions", "monitoring.coreos.com/v1")
    (monitor,) = by_kind(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True, "per-group namespace/name labels would be renamed"
    (service,) = by_kind(docs, "Service")
    assert service["spec"]["ports"][0]["name"] == "metrics"


def test_values_schema_rejects_unknown_keys(helm: Path) -> None:
    proc = subprocess.run(
        [str(helm), "template", "rel", str(CHART), "--set", "operator.typo=1"], capture_output=True, text=True,
        check=False,
    )
    assert proc.returncode != 0 and "typo" in proc.stderr


def test_pods_carry_the_full_recommended_labels(helm: Path) -> None:
    labels = by_kind(render(helm), "Deployment")[0]["spec"]["template"]["metadata"]["labels"]
    for key in ("name", "instance", "version", "managed-by", "part-of", "component"):
        assert f"app.kubernetes.io/{key}" in labels, (key, labels)
    assert labels["app.kubernetes.io/component"] == "operator"


def test_openshift_values_leave_the_uid_to_the_platform(helm: Path) -> None:
    default = by_kind(render(helm), "Deployment")[0]["spec"]["template"]["spec"]["securityContext"]
    assert default["runAsUser"] == 10001
    docs = render(helm, "-f", str(REPO / "examples" / "values-openshift.yaml"))
    pod = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]
    assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(pod["securityContext"]), pod["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    for container in pod["containers"]:
        assert "runAsUser" not in container["securityContext"]


def test_more_than_one_replica_is_refused_with_a_reason(helm: Path) -> None:
    proc = subprocess.run(
        [str(helm), "template", "rel", str(CHART), "--set", "replicas=2"], capture_output=True, text=True,
        check=False,
    )
    assert proc.returncode != 0 and "exactly one replica" in proc.stderr, proc.stderr
    assert by_kind(render(helm, "--set", "replicas=0"), "Deployment")[0]["spec"]["replicas"] == 0
