"""The CRD's reference fields and name rule on a real kube-apiserver, and the upgrade to them from the
CRD commit abfa2d8 shipped (``tests/operator/fixtures/crd-abfa2d8.yaml``):

- objects created under the earlier CRD (the older fields, and a 230-character name without
  ``spec.zookeeper.path`` that it admitted) stay readable with every field after this checkout's CRD is
  applied, and can still be updated, have a finalizer added and removed, and be deleted (the name rule
  is checked on create only);
- the new fields are admitted with their default key names; an object can move from an older field to
  its reference;
- what the new rules refuse is refused at admission with their messages.

Only the API server is needed (no operator, no ZooKeeper). The module leaves this checkout's CRD in place.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from rebalanser_operator.spec import crdgen, models

from tests.support.cluster import REPO, UP_TIMEOUT, Cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(UP_TIMEOUT)]

NS = "crdconv-references"
PREVIOUS_CRD = REPO / "tests" / "operator" / "fixtures" / "crd-abfa2d8.yaml"
CONNECT = "zk-0.zk:2181"
#: A valid object name (DNS subdomain) past the 200 characters a default path segment may have.
LONG_NAME = ".".join(["n" * 56] * 4)  # 227 characters
LEGACY_SPEC: dict[str, Any] = {
    "zookeeper": {"connect": CONNECT, "credentialsSecret": "zk-digest", "tls": {"secret": "zk-tls"}},
    "resources": ["r-0", "r-1"],
    "workload": {"kind": "Deployment", "name": "orders-worker"},
    "podSelector": {"matchLabels": {"app": "orders"}},
}


def body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": models.API_VERSION, "kind": models.KIND, "metadata": {"name": name, "namespace": NS},
            "spec": spec}


def create(kube: Cluster, name: str, spec: dict[str, Any], *,
           dry_run: bool = False) -> subprocess.CompletedProcess[str]:
    args = ["create", "-o", "json", "-f", "-"] + (["--dry-run=server"] if dry_run else [])
    return kube.run_kubectl(*args, input=json.dumps(body(name, spec)), check=False)


def get(kube: Cluster, name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(kube.run_kubectl("get", "rg", name, "-n", NS, "-o", "json").stdout)
    return result


def patch(kube: Cluster, name: str, change: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return kube.run_kubectl("patch", "rg", name, "-n", NS, "--type=merge", "-p", json.dumps(change), check=False)


def apply_crd(kube: Cluster, manifest: Path) -> None:
    """Server-side apply of a CRD manifest, then wait until the API server serves its schema."""
    kube.run_kubectl("apply", "--server-side", "--force-conflicts", "-f", str(manifest))
    wanted = yaml.safe_load(manifest.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        crd = json.loads(kube.run_kubectl("get", "crd", models.CRD_NAME, "-o", "json").stdout)
        established = {c["type"] for c in crd.get("status", {}).get("conditions", []) if c["status"] == "True"}
        if crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"] == wanted and "Established" in established:
            return
        time.sleep(0.2)
    raise AssertionError(f"the CRD from {manifest.name} was not established within 60s")


@pytest.fixture(scope="module")
def upgraded(kube: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    """The earlier CRD with objects created under it, then this checkout's CRD applied."""
    apply_crd(kube, PREVIOUS_CRD)
    kube.run_kubectl("create", "namespace", NS, check=False)
    for name in ("legacy", LONG_NAME):
        created = create(kube, name, LEGACY_SPEC)
        assert created.returncode == 0, f"the earlier CRD refused {name[:20]}…: {created.stderr}"
    current = tmp_path_factory.mktemp("crd") / crdgen.CRD_FILE
    current.write_text(crdgen.render())
    apply_crd(kube, current)
    return kube


def test_objects_of_the_earlier_crd_keep_every_field(upgraded: Cluster) -> None:
    for name in ("legacy", LONG_NAME):
        tls = {"secret": "zk-tls", "verifyHostname": False}
        assert get(upgraded, name)["spec"] == {**LEGACY_SPEC, "zookeeper": {
            **LEGACY_SPEC["zookeeper"], "sessionTimeoutSeconds": 10, "tls": tls},
            "resourceSets": [], "algorithm": "ResourceBarrier", "failover": "SessionExpiry",
            "rebalance": {"adaptive": True, "departureGraceSeconds": 0, "maxIntervalSeconds": 30,
                          "minIntervalSeconds": 2}}


def test_a_long_name_admitted_earlier_can_still_be_changed_and_deleted(upgraded: Cluster) -> None:
    """The name rule is a create-time rule: updates to an object stored before it pass."""
    changed = patch(upgraded, LONG_NAME, {"spec": {"resources": ["r-0", "r-1", "r-2"]},
                                          "metadata": {"finalizers": [models.FINALIZER]}})
    assert changed.returncode == 0, changed.stderr
    assert get(upgraded, LONG_NAME)["spec"]["resources"] == ["r-0", "r-1", "r-2"]
    upgraded.run_kubectl("delete", "rg", LONG_NAME, "-n", NS, "--wait=false")
    released = patch(upgraded, LONG_NAME, {"metadata": {"finalizers": None}})
    assert released.returncode == 0, released.stderr
    gone = upgraded.run_kubectl("get", "rg", LONG_NAME, "-n", NS, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_the_name_rule_refuses_a_long_name_at_creation_unless_a_path_is_set(upgraded: Cluster) -> None:
    refused = create(upgraded, LONG_NAME, LEGACY_SPEC, dry_run=True)
    assert refused.returncode != 0 and models.NAME_LENGTH_MESSAGE in refused.stderr, refused.stderr
    with_path = {**LEGACY_SPEC, "zookeeper": {**LEGACY_SPEC["zookeeper"], "path": "/rebalanser/long"}}
    admitted = create(upgraded, LONG_NAME, with_path, dry_run=True)
    assert admitted.returncode == 0, admitted.stderr
    longest = "n" * models.DEFAULT_PATH_NAME_MAX
    admitted = create(upgraded, longest, LEGACY_SPEC, dry_run=True)
    assert admitted.returncode == 0, admitted.stderr


def test_the_references_are_admitted_with_their_default_keys(upgraded: Cluster) -> None:
    spec = {"zookeeper": {"connect": CONNECT, "credentialsSecretRef": {"name": "zk-digest", "passwordKey": "pw"},
                          "tls": {"secretRef": {"name": "zk-tls", "caKey": "ca.pem"}}},
            "workloadRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "w"},
            "podSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["orders"]},
                                                 {"key": "canary", "operator": "DoesNotExist"}]}}
    created = create(upgraded, "references", spec)
    assert created.returncode == 0, created.stderr
    stored = get(upgraded, "references")["spec"]
    assert stored["zookeeper"]["credentialsSecretRef"] == {"name": "zk-digest", "usernameKey": "username",
                                                           "passwordKey": "pw"}
    assert stored["zookeeper"]["tls"]["secretRef"] == {"name": "zk-tls", "caKey": "ca.pem",
                                                       "certificateKey": "tls.crt", "privateKeyKey": "tls.key"}
    assert stored["podSelector"]["matchExpressions"][1] == {"key": "canary", "operator": "DoesNotExist", "values": []}
    parsed = models.ResourceGroupSpec.parse(stored)  # what the operator reads from it
    assert parsed.zookeeper.credentials is not None and parsed.zookeeper.credentials.password_key == "pw"
    assert parsed.workload is not None and parsed.workload.name == "w"


def test_an_object_moves_from_an_older_field_to_its_reference(upgraded: Cluster) -> None:
    moved = patch(upgraded, "legacy", {"spec": {
        "zookeeper": {"credentialsSecret": None, "credentialsSecretRef": {"name": "zk-digest"},
                      "tls": {"secret": None, "secretRef": {"name": "zk-tls"}}},
        "workload": None, "workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "orders-worker"}}})
    assert moved.returncode == 0, moved.stderr
    spec = get(upgraded, "legacy")["spec"]
    assert "credentialsSecret" not in spec["zookeeper"] and "workload" not in spec
    assert spec["zookeeper"]["tls"]["secretRef"]["name"] == "zk-tls"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"zookeeper": {"connect": CONNECT, "credentialsSecret": "a", "credentialsSecretRef": {"name": "b"}}},
         "set credentialsSecret or credentialsSecretRef, not both"),
        ({"zookeeper": {"connect": CONNECT, "tls": {"secret": "a", "secretRef": {"name": "b"}}}},
         "set secret or secretRef, not both"),
        ({"zookeeper": {"connect": CONNECT, "tls": {"verifyHostname": True}}}, "needs secret or secretRef"),
        ({"zookeeper": {"connect": CONNECT}, "workload": {"kind": "Deployment", "name": "w"},
          "workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"}},
         "set workload or workloadRef, not both"),
        ({"zookeeper": {"connect": CONNECT}, "workloadRef": {"apiVersion": "v1", "kind": "Deployment", "name": "w"}},
         "Unsupported value"),
        ({"zookeeper": {"connect": CONNECT}, "podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
         models.SELECTOR_VALUES_MESSAGE),
        ({"zookeeper": {"connect": CONNECT},
          "podSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}},
         models.SELECTOR_VALUES_MESSAGE),
    ],
)
def test_the_new_rules_refuse_at_admission(upgraded: Cluster, change: dict[str, Any], message: str) -> None:
    refused = create(upgraded, "refused", change, dry_run=True)
    assert refused.returncode != 0 and message in refused.stderr, refused.stderr
    with pytest.raises(models.SpecError):  # and the operator's models agree
        models.ResourceGroupSpec.parse(change)


def test_cleanup(upgraded: Cluster) -> None:
    upgraded.run_kubectl("delete", "namespace", NS, "--wait=false", check=False)
