"""The v1alpha1 cleanup's upgrade path on a real kube-apiserver: objects stored under the CRD as commit
4c5c8c2 shipped it (``tests/operator/fixtures/crd-4c5c8c2.yaml``: number seconds, the older field forms)
stay valid and keep every field once this checkout's CRD is applied the way docs/operator.md says; the
operator's models read them with the same meaning as the current forms; a stored fraction of a second
is read rounded up and named (never lost), while a new fraction is refused by the API server.

There is only v1alpha1 and no conversion webhook, so the older forms stay in the schema (deprecated)
and the whole-seconds fields rely on the API server's validation ratcheting (on by default since
Kubernetes 1.30): an update that leaves such a field unchanged is admitted, one that writes a new
fraction is refused. The module leaves this checkout's CRD in place, as the modules after it expect.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from rebalanser_operator.spec.models import FINALIZER, ResourceGroupSpec
from rebalanser_operator.spec.notices import spec_notices

from tests.e2e.test_crd_upgrade_e2e import CHART_CRDS, apply_server_side, create_like_helm, wait_crd_settled
from tests.support.cluster import REPO, UP_TIMEOUT, Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(UP_TIMEOUT)]

NS = "rebalanser-field-forms"
TODAYS_CRD = REPO / "tests" / "operator" / "fixtures" / "crd-4c5c8c2.yaml"
CONNECT = "zk-0.zk:2181"
#: Everything the 4c5c8c2 CRD admitted in its older forms: fractions of seconds, workload,
#: credentialsSecret, tls.secret.
OLDER: dict[str, Any] = {
    "zookeeper": {"connect": CONNECT, "sessionTimeoutSeconds": 2.5, "credentialsSecret": "zk-digest",
                  "tls": {"secret": "zk-tls"}},
    "resources": ["orders-0", "orders-1"],
    "rebalance": {"minIntervalSeconds": 0.5, "maxIntervalSeconds": 30.0, "departureGraceSeconds": 1.5},
    "workload": {"kind": "Deployment", "name": "orders-worker"},
}
#: The same meaning in the current forms (the fractions rounded up).
CURRENT: dict[str, Any] = {
    "zookeeper": {"connect": CONNECT, "sessionTimeoutSeconds": 3, "credentialsSecretRef": {"name": "zk-digest"},
                  "tls": {"secretRef": {"name": "zk-tls"}}},
    "resources": ["orders-0", "orders-1"],
    "rebalance": {"minIntervalSeconds": 1, "maxIntervalSeconds": 30, "departureGraceSeconds": 2},
    "workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "orders-worker"},
}
STATUS = {"phase": "Stable", "lastRebalance": {"startedAt": "2026-01-01T00:00:00.000Z",
                                               "completedAt": "2026-01-01T00:00:00.041Z", "durationMs": 41}}


def body(name: str, spec: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
                       "metadata": {"name": name, "namespace": NS, "finalizers": [FINALIZER]}, "spec": spec})


def stored(kube: Cluster, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kube.run_kubectl("get", "rg", name, "-n", NS, "-o", "json").stdout)
    return result


def patch(kube: Cluster, name: str, change: dict[str, Any], *extra: str) -> Any:
    return kube.run_kubectl("patch", "rg", name, "-n", NS, "--type=merge", "-p", json.dumps(change), *extra,
                            check=False)


def meaning(spec: ResourceGroupSpec) -> tuple[Any, ...]:
    zk = spec.zookeeper
    assert zk.tls is not None
    return (zk.connect, zk.session_timeout_seconds, zk.credentials, zk.tls.secret_keys, spec.rebalance,
            spec.workload, spec.resources)


@pytest.fixture(scope="module")
def upgraded(kube: Cluster) -> Iterator[Cluster]:
    """The older objects stored under the 4c5c8c2 CRD, then this checkout's CRD applied over it."""
    kube.create_namespace(NS)
    create_like_helm(kube, TODAYS_CRD)
    kube.run_kubectl("create", "-f", "-", input=body("older", OLDER))
    patch(kube, "older", {"status": STATUS}, "--subresource=status").check_returncode()
    assert stored(kube, "older")["spec"]["zookeeper"]["sessionTimeoutSeconds"] == 2.5
    applied = apply_server_side(kube, CHART_CRDS)
    assert applied.returncode == 0, applied.stderr
    wait_crd_settled(kube)
    try:
        yield kube
    finally:
        for name in ("older", "current"):
            patch(kube, name, {"metadata": {"finalizers": None}})
        kube.run_kubectl("delete", "namespace", NS, "--wait=false", check=False)


def holds(found: Any, wanted: Any) -> bool:
    """Every field of ``wanted`` is in ``found`` with its value (the API server adds defaults beside them)."""
    if isinstance(wanted, dict):
        return isinstance(found, dict) and all(key in found and holds(found[key], value)
                                               for key, value in wanted.items())
    return bool(found == wanted)


def test_the_stored_object_keeps_every_field_of_the_older_forms(upgraded: Cluster) -> None:
    obj = stored(upgraded, "older")
    assert holds(obj["spec"], OLDER), obj["spec"]
    assert obj["status"]["lastRebalance"] == STATUS["lastRebalance"]


def test_updates_that_leave_the_older_forms_alone_are_admitted(upgraded: Cluster) -> None:
    """A label, a status write (what the operator does) and a finalizer's removal (what a delete needs)
    all pass validation under the new CRD: the stored fractions are left as they are."""
    labelled = patch(upgraded, "older", {"metadata": {"labels": {"team": "orders"}}})
    assert labelled.returncode == 0, labelled.stderr
    status = patch(upgraded, "older", {"status": {"phase": "Rebalancing"}}, "--subresource=status")
    assert status.returncode == 0, status.stderr
    finalizers = patch(upgraded, "older", {"metadata": {"finalizers": [FINALIZER, "example.com/keep"]}})
    assert finalizers.returncode == 0, finalizers.stderr
    assert stored(upgraded, "older")["spec"]["zookeeper"]["sessionTimeoutSeconds"] == 2.5


def test_the_operator_reads_the_older_forms_with_the_current_meaning(upgraded: Cluster) -> None:
    upgraded.run_kubectl("create", "-f", "-", input=body("current", CURRENT))
    older, current = (ResourceGroupSpec.parse(stored(upgraded, name)["spec"]) for name in ("older", "current"))
    assert meaning(older) == meaning(current)
    notices = spec_notices(stored(upgraded, "older")["spec"])
    assert [n.split(" ", 1)[0] for n in notices] == [
        "spec.workload", "spec.zookeeper.credentialsSecret", "spec.zookeeper.tls.secret",
        "spec.zookeeper.sessionTimeoutSeconds:", "spec.rebalance.minIntervalSeconds:",
        "spec.rebalance.departureGraceSeconds:",
    ]
    assert "it is read as 3 (rounded up): write 3" in notices[3]
    assert spec_notices(stored(upgraded, "current")["spec"]) == ()


def test_a_new_fraction_is_refused_and_a_whole_number_fixes_it(upgraded: Cluster) -> None:
    fresh = {**CURRENT, "zookeeper": {**CURRENT["zookeeper"], "sessionTimeoutSeconds": 2.5}}
    refused = upgraded.run_kubectl("create", "--dry-run=server", "-f", "-", input=body("fresh", fresh), check=False)
    assert refused.returncode != 0 and "sessionTimeoutSeconds" in refused.stderr, refused.stderr
    changed = patch(upgraded, "older", {"spec": {"zookeeper": {"sessionTimeoutSeconds": 3.5}}})
    assert changed.returncode != 0 and "sessionTimeoutSeconds" in changed.stderr, changed.stderr
    fixed = patch(upgraded, "older", {"spec": {"zookeeper": {"sessionTimeoutSeconds": 3}}})
    assert fixed.returncode == 0, fixed.stderr
    interval = patch(upgraded, "older", {"spec": {"rebalance": {"minIntervalSeconds": 1.5}}})
    assert interval.returncode != 0 and "minIntervalSeconds" in interval.stderr, interval.stderr
    assert spec_notices(stored(upgraded, "older")["spec"])[3:] == spec_notices(OLDER)[4:]


def test_new_objects_may_still_use_the_older_field_names(upgraded: Cluster) -> None:
    """Deprecated, not removed: a manifest written for the earlier release applies unchanged (its
    whole numbers are integers to the API server)."""
    whole = {**OLDER, "zookeeper": {**OLDER["zookeeper"], "sessionTimeoutSeconds": 10},
             "rebalance": {"minIntervalSeconds": 2, "maxIntervalSeconds": 30, "departureGraceSeconds": 0}}
    admitted = upgraded.run_kubectl("create", "--dry-run=server", "-f", "-", input=body("whole", whole), check=False)
    assert admitted.returncode == 0, admitted.stderr


def test_ready_is_a_default_column(upgraded: Cluster) -> None:
    header = upgraded.run_kubectl("get", "rg", "-n", NS).stdout.splitlines()[0].split()
    assert header[-2:] == ["READY", "AGE"] and "INTERVAL" not in header


def test_the_uninstall_check_refuses_while_resource_groups_remain(upgraded: Cluster) -> None:
    """The chart's pre-delete hook, run as the Job runs it (here with the admin kubeconfig)."""
    def check(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rebalanser_operator.uninstallcheck", *args],
                              env=upgraded.env(), capture_output=True, text=True, timeout=60, check=False)

    refused = check("--namespace", NS, "--namespace", "default")
    assert refused.returncode == 1, refused.stderr
    assert f"{NS}/older" in refused.stderr and f"kubectl delete resourcegroups --all -n {NS}" in refused.stderr
    assert check("--all-namespaces").returncode == 1
    passed = check("--namespace", "default")
    assert passed.returncode == 0 and "may be uninstalled" in passed.stdout, passed.stderr
