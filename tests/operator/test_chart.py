"""The Helm chart: lint, render, and check what the rendered manifests promise."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from rebalanser_operator.replicafence import MESSAGE, RULE, config_manifests, fence_manifests, writer_manifests
from rebalanser_operator.spec import crdgen

from tests.support import rbactable

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
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment",
        "Job"}  # the uninstall check, a pre-delete hook (test_chart_values.py)
    assert len(by_kind(docs, "ClusterRoleBinding")) == 3
    docs = [d for d in docs if not d["metadata"]["name"].endswith(("-view", "-edit"))]  # aggregated, bound to nobody
    roles = {r["metadata"]["name"]: r for r in by_kind(docs, "Role")}
    assert set(roles) == {"ops-rel-rebalanser-operator", "ops-rel-rebalanser-operator-cluster-id"}
    role = roles["ops-rel-rebalanser-operator"]
    assert role["metadata"]["namespace"] == "ops"
    assert roles["ops-rel-rebalanser-operator-cluster-id"]["metadata"]["namespace"] == "ops"
    assert rules_of(role) == {
        "/events": {"create"},
        "/configmaps": {"get", "create", "update"},  # the workers' ConfigMap per ResourceGroup (only its own)
        "/secrets": {"get"},  # referenced Secrets, by name: never listed or watched
        "apps/deployments": {"get", "list", "watch"},  # spec.workload: rollouts are watched
        "apps/statefulsets": {"get", "list", "watch"},
    }  # no pods: only with failover.enabled
    cluster_roles = {r["metadata"]["name"]: rules_of(r) for r in by_kind(docs, "ClusterRole")}
    assert cluster_roles == {
        "ops-rel-rebalanser-operator-scanning": {
            "apiextensions.k8s.io/customresourcedefinitions": {"list", "watch"},
            "/namespaces": {"get", "list", "watch"},
        },
        # Cluster-wide, so a ResourceGroup deleted with its namespace (and the namespace's RoleBindings)
        # can still have its finalizer released.
        "ops-rel-rebalanser-operator-resourcegroups": {
            "rebalanser.io/resourcegroups": {"get", "list", "watch", "patch"},
            "rebalanser.io/resourcegroups/status": {"get", "patch"},
        },
        # Another release's heartbeat, a Lease in its own namespace (docs/operator-replicas.md, Two releases).
        "ops-rel-rebalanser-operator-releases": {"coordination.k8s.io/leases": {"get"}},
    }
    bindings = {b["metadata"]["name"]: b for b in by_kind(docs, "ClusterRoleBinding")}
    groups = bindings["ops-rel-rebalanser-operator-resourcegroups"]
    assert groups["roleRef"]["name"] == "ops-rel-rebalanser-operator-resourcegroups"
    assert groups["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-rebalanser-operator", "namespace": "ops"}]
    (deployment,) = by_kind(docs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--namespace=ops" in container["args"] and "--standalone" in container["args"]
    assert container["command"] == ["rebalanser-operator"]
    # One release per ResourceGroup (docs/operator-replicas.md, Two releases): its identity names its Lease.
    assert "--release=ops/rel-rebalanser-operator" in container["args"]


def served_roles(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Roles of served namespaces (not the cluster id's Role in the operator's own namespace)."""
    return [r for r in by_kind(docs, "Role") if not r["metadata"]["name"].endswith("-cluster-id")]


def test_cluster_wide_option(helm: Path) -> None:
    docs = render(helm, "--set", "rbac.clusterWide=true")
    assert not served_roles(docs)
    roles = {r["metadata"]["name"]: rules_of(r) for r in by_kind(docs, "ClusterRole")}
    assert set(roles) == {"ops-rel-rebalanser-operator", "ops-rel-rebalanser-operator-scanning",
                          "ops-rel-rebalanser-operator-view", "ops-rel-rebalanser-operator-edit",
                          "ops-rel-rebalanser-operator-releases"}
    assert "rebalanser.io/resourcegroups/status" in roles["ops-rel-rebalanser-operator"]
    assert roles["ops-rel-rebalanser-operator"]["/secrets"] == {"get"}
    container = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert "--all-namespaces" in container["args"]


def test_peering_rules_only_when_enabled(helm: Path) -> None:
    assert "kopf.dev/kopfpeerings" not in rules_of(served_roles(render(helm))[0])
    docs = render(helm, "--set", "operator.peering=rebalanser")
    assert "kopf.dev/kopfpeerings" in rules_of(served_roles(docs)[0])
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


def test_service_monitor_only_when_asked_for_and_with_the_prometheus_operator_api(helm: Path) -> None:
    assert not by_kind(render(helm), "ServiceMonitor")
    assert not by_kind(render(helm, "--api-versions", "monitoring.coreos.com/v1"), "ServiceMonitor")  # off by default
    assert not by_kind(render(helm, "--set", "metrics.serviceMonitor.enabled=true"), "ServiceMonitor")
    docs = render(helm, "--api-versions", "monitoring.coreos.com/v1", "--set", "metrics.serviceMonitor.enabled=true")
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


def test_more_than_one_replica_is_refused_with_a_reason_without_an_operator_group(helm: Path) -> None:
    proc = subprocess.run(
        [str(helm), "template", "rel", str(CHART), "--set", "replicas=2"], capture_output=True, text=True,
        check=False,
    )
    assert proc.returncode != 0 and "needs replicaGroup.zookeeper" in proc.stderr, proc.stderr
    assert by_kind(render(helm, "--set", "replicas=0"), "Deployment")[0]["spec"]["replicas"] == 0
    single = by_kind(render(helm), "Deployment")[0]
    assert single["spec"]["strategy"] == {"type": "Recreate"}
    container = single["spec"]["template"]["spec"]["containers"][0]
    assert not [a for a in container["args"] if a.startswith("--replica")]
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {e["name"] for e in container["env"]}.isdisjoint({"POD_NAME", "POD_UID", "REBALANSER_CONTAINER"})


FENCE_API = ("--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")


def test_replicas_share_the_groups_through_their_own_group(helm: Path) -> None:
    """docs/operator-replicas.md: the flags, the pod's identity, a rolling update, the fence."""
    docs = render(helm, "--set", "replicas=3", "--set", "replicaGroup.zookeeper=zk-0:2181\\,zk-1:2181",
                  "--set", "replicaGroup.path=/ops/rebalanser", *FENCE_API)
    deployment = by_kind(docs, "Deployment")[0]
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["name"] == "operator"
    args = [a for a in container["args"] if a.startswith("--replica")]
    assert args == ["--replica-zk=zk-0:2181,zk-1:2181", "--replica-session-timeout=10",
                    "--replica-pod-selector=app.kubernetes.io/instance=rel,app.kubernetes.io/component=operator",
                    "--replica-readiness=http://0.0.0.0:8082/readyz", "--replica-group=/ops/rebalanser"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "ready"}
    assert {"name": "ready", "containerPort": 8082, "protocol": "TCP"} in container["ports"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/instance"] == "rel" and labels["app.kubernetes.io/component"] == "operator"
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_UID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.uid"
    assert env["REBALANSER_CONTAINER"]["value"] == "operator"
    assert container.get("terminationMessagePath", "/dev/termination-log") == "/dev/termination-log"
    (policy,) = [d for d in by_kind(docs, "ValidatingAdmissionPolicy") if d["metadata"]["name"].endswith("-fence")]
    ours = fence_manifests(policy["metadata"]["name"])[0]
    assert policy["spec"]["matchConstraints"] == ours["spec"]["matchConstraints"]
    assert [v["expression"] for v in policy["spec"]["validations"]] == [RULE]
    assert policy["spec"]["validations"][0]["message"] == MESSAGE
    bindings = by_kind(docs, "ValidatingAdmissionPolicyBinding")
    (binding,) = [d for d in bindings if d["metadata"]["name"].endswith("-fence")]
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    sa = f"system:serviceaccount:ops:{deployment['spec']['template']['spec']['serviceAccountName']}"
    for suffix, manifests in (("-replica-writer", writer_manifests), ("-replica-config", config_manifests)):
        (other,) = [d for d in by_kind(docs, "ValidatingAdmissionPolicy") if d["metadata"]["name"].endswith(suffix)]
        assert other["spec"] == manifests(other["metadata"]["name"], sa)[0]["spec"]
        (other_binding,) = [d for d in bindings if d["metadata"]["name"].endswith(suffix)]
        assert other_binding["spec"] == {"policyName": other["metadata"]["name"], "validationActions": ["Deny"]}
    (budget,) = by_kind(docs, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()
    without = render(helm, *FENCE_API)
    assert not [d for d in by_kind(without, "ValidatingAdmissionPolicy")
                if d["metadata"]["name"].endswith(("-fence", "-writer", "-replica-config"))]
    assert not by_kind(without, "PodDisruptionBudget")


def test_the_ha_example_runs_three_replicas_one_per_node(helm: Path) -> None:
    docs = render(helm, "-f", str(REPO / "examples" / "values-ha.yaml"))
    spec = by_kind(docs, "Deployment")[0]["spec"]
    assert spec["replicas"] == 3 and spec["strategy"]["type"] == "RollingUpdate"
    term = spec["template"]["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= \
        spec["template"]["metadata"]["labels"].items()


# ------------------------------------------------------------------------- least privilege (issue 20)

SA = "system:serviceaccount:ops:rel-rebalanser-operator"


def granted(docs: list[dict[str, Any]], namespace: str) -> dict[str, frozenset[str]]:
    """What the rendered Roles and ClusterRoles bound to the operator's ServiceAccount grant in
    ``namespace``, as ``{plural[.group][/sub]: verbs}`` (the shape of tests/support/rbactable.py)."""
    bound = {(b["roleRef"]["kind"], b["roleRef"]["name"], b["metadata"].get("namespace"))
             for b in docs if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
             and any(s.get("name") == "rel-rebalanser-operator" for s in b["subjects"])}
    out: dict[str, set[str]] = {}
    for role in docs:
        if role["kind"] == "ClusterRole" and ("ClusterRole", role["metadata"]["name"], None) not in bound:
            continue
        if role["kind"] == "Role" and (role["metadata"]["namespace"] != namespace or
                                       ("Role", role["metadata"]["name"], namespace) not in bound):
            continue
        if role["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    name, _, sub = resource.partition("/")
                    key = (f"{name}.{group}" if group else name) + (f"/{sub}" if sub else "")
                    names = rule.get("resourceNames")
                    key += f"[{' '.join(names)}]" if names else ""
                    out.setdefault(key, set()).update(rule["verbs"])
    return {k: frozenset(v) for k, v in out.items()}


@pytest.mark.parametrize("enabled", [(), ("failover.enabled",), ("failover.enabled", "operator.peering"),
                                     ("rbac.clusterWide", "operator.peering"), ("replicaGroup.zookeeper",)])
def test_the_chart_grants_exactly_the_docs_rbac_table(helm: Path, enabled: tuple[str, ...]) -> None:
    sets = {"failover.enabled": "failover.enabled=true", "operator.peering": "operator.peering=rb",
            "rbac.clusterWide": "rbac.clusterWide=true", "replicaGroup.zookeeper": "replicaGroup.zookeeper=zk:2181"}
    args = ["--set", "rbac.watchNamespaces={shop}"]
    for value in enabled:
        args += ["--set", sets[value]]
    docs = render(helm, *args)
    rows = rbactable.table_rows()
    for namespace, served in (("shop", True), ("ops", False), ("other", False)):
        assert granted(docs, namespace) == rbactable.expected(rows, served=served, own=namespace == "ops",
                                                              enabled=enabled), namespace


def test_cluster_scoped_names_are_unique_per_release_namespace(helm: Path) -> None:
    def names(namespace: str) -> set[str]:
        proc = subprocess.run([str(helm), "template", "rel", str(CHART), "--namespace", namespace],
                              capture_output=True, text=True, check=True)
        docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
        return {d["metadata"]["name"] for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")}

    first, second = names("team-a"), names("team-b")
    assert first and not first & second, (first, second)
    assert all(name.startswith("team-a-rel-") for name in first), first


def test_resource_groups_join_the_view_and_edit_roles(helm: Path) -> None:
    roles = {r["metadata"]["name"]: r for r in by_kind(render(helm), "ClusterRole")}
    view, edit = roles["ops-rel-rebalanser-operator-view"], roles["ops-rel-rebalanser-operator-edit"]
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert rules_of(view) == {"rebalanser.io/resourcegroups": {"get", "list", "watch"},
                              "rebalanser.io/resourcegroups/status": {"get", "list", "watch"}}
    labels = edit["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-edit"] == labels[
        "rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert {"create", "update", "patch", "delete"} <= rules_of(edit)["rebalanser.io/resourcegroups"]
    bindings = {b["roleRef"]["name"] for b in by_kind(render(helm), "ClusterRoleBinding")}
    assert not bindings & {view["metadata"]["name"], edit["metadata"]["name"]}, "aggregated roles are bound to nobody"
    off = render(helm, "--set", "rbac.aggregateToDefaultRoles=false")
    assert not [r for r in by_kind(off, "ClusterRole") if r["metadata"]["name"].endswith(("-view", "-edit"))]


def test_an_existing_service_account_must_be_named(helm: Path) -> None:
    proc = subprocess.run([str(helm), "template", "rel", str(CHART), "--set", "serviceAccount.create=false"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "serviceAccount.name" in proc.stderr, proc.stderr
    docs = render(helm, "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=rb-operator")
    assert not by_kind(docs, "ServiceAccount")
    assert by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["serviceAccountName"] == "rb-operator"
    subjects = [s for b in docs if b["kind"].endswith("Binding") for s in b["subjects"]]
    assert subjects and all(s["name"] == "rb-operator" for s in subjects), subjects


def test_pods_are_watched_only_with_failover(helm: Path) -> None:
    def args_and_rules(*extra: str) -> tuple[list[str], dict[str, set[str]]]:
        docs = render(helm, *extra)
        return (by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"],
                rules_of(served_roles(docs)[0]))

    args, rules = args_and_rules()
    assert "--failover-pods" not in args and "/pods" not in rules
    args, rules = args_and_rules("--set", "failover.enabled=true")
    assert "--failover-pods" in args and rules["/pods"] == {"get", "list", "watch"}


def test_the_config_map_policy_binds_the_operator_to_its_own_config_maps(helm: Path) -> None:
    assert not by_kind(render(helm), "ValidatingAdmissionPolicy"), "only where the API server serves it"
    docs = render(helm, "--api-versions", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")
    (policy,) = by_kind(docs, "ValidatingAdmissionPolicy")
    (binding,) = by_kind(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert SA in policy["spec"]["matchConditions"][0]["expression"]
    assert "rebalanser-operator" in policy["spec"]["validations"][0]["expression"]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules[0]["resources"] == ["configmaps"] and "UPDATE" in rules[0]["operations"]


def test_tenancy_settings_reach_the_operator_as_environment(helm: Path) -> None:
    def env(*extra: str) -> dict[str, str]:
        container = by_kind(render(helm, *extra), "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e.get("value") for e in container["env"]}

    assert not {k for k in env() if k.startswith("REBALANSER_")}, "unset values are not passed"
    got = env("--set", "operator.pathRoot=/rebalanser/{namespace}", "--set",
              "operator.allowedEnsembles={zk-0:2181\\,zk-1:2181,other:2181}", "--set", "operator.clusterId=east",
              "--set", "operator.limits.groupsPerNamespace=20", "--set", "operator.limits.resourcesPerGroup=5000",
              "--set", "operator.limits.sessionsPerNamespace=12", "--set", "operator.limits.workersPerNamespace=6",
              "--set", "operator.limits.secretKeyBytes=65536", "--set", "operator.limits.tlsStoreBytes=4194304")
    assert got["REBALANSER_PATH_ROOT"] == "/rebalanser/{namespace}"
    assert got["REBALANSER_ALLOWED_ENSEMBLES"] == "zk-0:2181,zk-1:2181;other:2181"
    assert got["REBALANSER_CLUSTER_ID"] == "east"
    assert got["REBALANSER_MAX_GROUPS_PER_NAMESPACE"] == "20"
    assert got["REBALANSER_MAX_RESOURCES_PER_GROUP"] == "5000"
    assert (got["REBALANSER_MAX_SESSIONS_PER_NAMESPACE"], got["REBALANSER_WORKERS_PER_NAMESPACE"]) == ("12", "6")
    assert (got["REBALANSER_MAX_SECRET_KEY_BYTES"], got["REBALANSER_MAX_TLS_STORE_BYTES"]) == ("65536", "4194304")


def test_network_policies_are_opt_in_and_confine_traffic(helm: Path) -> None:
    assert not by_kind(render(helm), "NetworkPolicy")
    zk_peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "zookeeper"}}}
    docs = render(helm, "--set", "networkPolicy.operator.enabled=true", "--set", "networkPolicy.workers.enabled=true",
                  "--set-json", f"networkPolicy.zookeeper.to=[{json.dumps(zk_peer)}]",
                  "--set-json", 'networkPolicy.workers.podSelector={"matchLabels":{"app":"orders"}}',
                  "--set", "rbac.watchNamespaces={shop,pay}")
    policies = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in by_kind(docs, "NetworkPolicy")}
    operator = policies[("ops", "rel-rebalanser-operator")]
    assert operator["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert operator["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "rel"
    assert {p["port"] for rule in operator["spec"]["ingress"] for p in rule["ports"]} == {8080, 8081}
    egress = operator["spec"]["egress"]
    assert any(rule.get("to") == [zk_peer] and {p["port"] for p in rule["ports"]} == {2181, 2281} for rule in egress)
    assert all(rule.get("ports") for rule in egress), "every egress rule is limited to its ports"
    for namespace in ("shop", "pay"):
        workers = policies[(namespace, "ops-rel-rebalanser-operator-workers")]
        assert workers["spec"]["podSelector"] == {"matchLabels": {"app": "orders"}}
        assert workers["spec"]["policyTypes"] == ["Egress"]
        assert any(rule.get("to") == [zk_peer] for rule in workers["spec"]["egress"])
    proc = subprocess.run([str(helm), "template", "rel", str(CHART), "--set", "networkPolicy.workers.enabled=true"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "podSelector" in proc.stderr, "an empty selector would cut every pod's egress"


def test_notes_warn_when_the_operator_serves_its_own_namespace(helm: Path, tmp_path: Path) -> None:
    # `helm template` leaves NOTES.txt out: render a copy of the chart in which it is an ordinary template
    # (a YAML block scalar, as helm parses what templates render).
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    text = (chart / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "notes-as-template.txt").write_text(
        "notes: |\n" + "".join(f"  {line}\n" for line in text.splitlines()))

    def notes(*extra: str) -> str:
        proc = subprocess.run([str(helm), "template", "rel", str(chart), "--namespace", "ops", "--show-only",
                               "templates/notes-as-template.txt", *extra], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        return str(yaml.safe_load(proc.stdout)["notes"])

    assert "WARNING: the operator serves its own namespace" in notes()
    assert "WARNING: operator.allowedEnsembles is empty" in notes()
    quiet = notes("--set", "rbac.watchNamespaces={shop}", "--set", "operator.allowedEnsembles={zk:2181}")
    assert "WARNING" not in quiet, quiet


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = by_kind(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def test_image_digest_pins_the_reference(helm: Path) -> None:
    digest = "sha256:" + "ab" * 32
    pinned = operator_container(render(helm, "--set", f"image.digest={digest}", "--set", "image.tag=9.9"))
    assert pinned["image"] == f"ghcr.io/rebalanser/rebalanser@{digest}"
    assert operator_container(render(helm, "--set", "image.tag=9.9"))["image"] == "ghcr.io/rebalanser/rebalanser:9.9"


def test_container_security_context_is_hardened_and_configurable(helm: Path) -> None:
    default = operator_container(render(helm))["securityContext"]
    assert default["readOnlyRootFilesystem"] is True and default["allowPrivilegeEscalation"] is False
    assert default["capabilities"] == {"drop": ["ALL"]} and default["runAsNonRoot"] is True
    changed = operator_container(render(helm, "--set", "containerSecurityContext.readOnlyRootFilesystem=false"))
    assert changed["securityContext"]["readOnlyRootFilesystem"] is False


def test_extra_volumes_and_mounts_are_added(helm: Path) -> None:
    docs = render(helm, "--set-json", 'extraVolumes=[{"name":"ca","configMap":{"name":"zk-ca"}}]',
                  "--set-json", 'extraVolumeMounts=[{"name":"ca","mountPath":"/etc/zk-ca","readOnly":true}]')
    (deployment,) = by_kind(docs, "Deployment")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert [v["name"] for v in volumes] == ["tmp", "ca"] and volumes[1]["configMap"] == {"name": "zk-ca"}
    mounts = operator_container(docs)["volumeMounts"]
    assert [m["mountPath"] for m in mounts] == ["/tmp", "/etc/zk-ca"]


def test_startup_probe_defaults_and_can_be_turned_off(helm: Path) -> None:
    probe = operator_container(render(helm))["startupProbe"]
    assert probe["httpGet"] == {"path": "/healthz", "port": "health"}
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 120
    tuned = operator_container(render(helm, "--set", "startupProbe.failureThreshold=7"))["startupProbe"]
    assert tuned["failureThreshold"] == 7
    assert "startupProbe" not in operator_container(render(helm, "--set", "startupProbe=null"))


def test_schema_refuses_bad_new_values(helm: Path) -> None:
    for bad in (["--set", "image.digest=latest"], ["--set", "startupProbe.periods=3"],
                ["--set-json", 'extraVolumeMounts=[{"name":"x"}]'], ["--set", "crds.templted=true"]):
        proc = subprocess.run([str(helm), "template", "rel", str(CHART), *bad], capture_output=True, text=True,
                              check=False)
        assert proc.returncode != 0 and "schema" in proc.stderr, (bad, proc.stderr)


def test_crd_is_in_crds_folder_by_default_not_in_templates(helm: Path) -> None:
    assert not by_kind(render(helm), "CustomResourceDefinition")
    (crd,) = by_kind(render(helm, "--include-crds"), "CustomResourceDefinition")
    assert "helm.sh/resource-policy" not in crd["metadata"].get("annotations", {})


def test_templated_crd_is_the_generated_one_kept_on_uninstall(helm: Path) -> None:
    docs = render(helm, "--set", "crds.templated=true", "--skip-crds")
    (crd,) = by_kind(docs, "CustomResourceDefinition")
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    generated = yaml.safe_load(crdgen.render())
    del crd["metadata"]["annotations"]
    assert crd == generated


def test_the_chart_grants_the_cluster_id_fallback_in_the_operators_own_namespace(helm: Path) -> None:
    """clusterid.py keeps its id in ConfigMap rebalanser-cluster-id of the operator's own namespace when
    kube-system's UID cannot be read: the operator may read that one ConfigMap there and create it
    (also when the own namespace is not served)."""
    from rebalanser_operator.clusterid import CONFIG_MAP

    for args in ((), ("--set", "rbac.clusterWide=true")):
        own = granted(render(helm, "--set", "rbac.watchNamespaces={shop}", *args), "ops")
        assert "get" in own.get(f"configmaps[{CONFIG_MAP}]", frozenset()) | own.get("configmaps", frozenset()), args
        assert "create" in own.get("configmaps", frozenset()), args


def test_the_operators_zookeeper_identity_comes_from_a_secret_of_its_namespace(helm: Path) -> None:
    """zookeeperIdentity.secretName: the user name from its key, the password as a mounted file (never in
    the environment); unset, the operator runs without an identity (and says so)."""
    def container_and_volumes(*extra: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        pod = by_kind(render(helm, *extra), "Deployment")[0]["spec"]["template"]["spec"]
        return pod["containers"][0], pod["volumes"]

    container, volumes = container_and_volumes()
    names = {e["name"] for e in container["env"]}
    assert not names & {"REBALANSER_ZK_IDENTITY_USER", "REBALANSER_ZK_IDENTITY_PASSWORD_FILE"}
    assert [v["name"] for v in volumes] == ["tmp"]
    container, volumes = container_and_volumes("--set", "zookeeperIdentity.secretName=operator-zk",
                                               "--set", "zookeeperIdentity.passwordKey=pw")
    env = {e["name"]: e for e in container["env"]}
    assert env["REBALANSER_ZK_IDENTITY_USER"]["valueFrom"]["secretKeyRef"] == {"name": "operator-zk", "key": "username"}
    path = env["REBALANSER_ZK_IDENTITY_PASSWORD_FILE"]["value"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "zookeeper-identity")
    assert mount["readOnly"] and path == f"{mount['mountPath']}/password"
    volume = next(v for v in volumes if v["name"] == "zookeeper-identity")
    assert volume["secret"] == {"secretName": "operator-zk", "items": [{"key": "pw", "path": "password"}]}
    assert not any("valueFrom" in e and e["valueFrom"].get("secretKeyRef", {}).get("key") == "pw"
                   for e in container["env"]), "the password never reaches the environment"
