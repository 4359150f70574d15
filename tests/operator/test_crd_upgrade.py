"""The CRD upgrade path at the schema level: every object an earlier release's CRD admitted stays valid,
with all its fields, under this checkout's CRD; the checker finds each kind of breaking change; the
planned v1beta1 CRD serves the same schema under both versions. (The e2e module
tests/e2e/test_crd_upgrade_e2e.py walks the same path on a real API server.)"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from rebalanser_operator.spec import crdgen, models
from rebalanser_operator.spec.crdcompat import (
    ACCEPTED_CHANGES,
    admits_stored_objects,
    breaking_changes,
    version_schema,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: The CRD as commit 45a0771 shipped it (before spec.zookeeper.tls, status.pods, status.zookeeperConnect).
OLD_CRD = FIXTURES / "crd-45a0771.yaml"
#: The CRD as commit abfa2d8 shipped it (before credentialsSecretRef, tls.secretRef, workloadRef,
#: podSelector.matchExpressions and the name-length rule).
PREVIOUS_CRD = FIXTURES / "crd-abfa2d8.yaml"
#: The CRD as commit 4c5c8c2 shipped it (number seconds, Ready only in -o wide, plain-string timestamps).
TODAYS_CRD = FIXTURES / "crd-4c5c8c2.yaml"


def old_schema(fixture: Path = OLD_CRD) -> dict[str, Any]:
    return version_schema(yaml.safe_load(fixture.read_text()), "v1alpha1")


def new_schema() -> dict[str, Any]:
    return version_schema(crdgen.build_crd(), models.VERSION)


def test_the_fixture_is_an_earlier_release_without_the_newer_fields() -> None:
    old = old_schema()
    assert "tls" not in old["properties"]["spec"]["properties"]["zookeeper"]["properties"]
    assert "pods" not in old["properties"]["status"]["properties"]
    assert "tls" in new_schema()["properties"]["spec"]["properties"]["zookeeper"]["properties"]


@pytest.mark.parametrize("fixture", [OLD_CRD, PREVIOUS_CRD], ids=lambda path: path.stem)
def test_this_checkouts_crd_admits_every_object_the_earlier_release_admitted(fixture: Path) -> None:
    """Every breaking change is one made on purpose, with its reason (the whole-seconds fields, the
    timestamps' format); tests/e2e/test_crd_upgrade_e2e.py shows the API server lets stored objects through."""
    assert [c for c in breaking_changes(old_schema(fixture), new_schema()) if c not in ACCEPTED_CHANGES] == []


def test_every_accepted_change_is_one_this_checkout_makes() -> None:
    """The list of accepted changes holds nothing stale: each is found against the release before it."""
    assert sorted(breaking_changes(old_schema(TODAYS_CRD), new_schema())) == sorted(ACCEPTED_CHANGES)


def test_the_previous_fixture_lacks_the_reference_fields_this_checkout_adds() -> None:
    old, new = old_schema(PREVIOUS_CRD), new_schema()
    for schema, present in ((old, False), (new, True)):
        spec = schema["properties"]["spec"]["properties"]
        zookeeper = spec["zookeeper"]["properties"]
        assert ("credentialsSecretRef" in zookeeper) is present
        assert ("secretRef" in zookeeper["tls"]["properties"]) is present
        assert ("workloadRef" in spec) is present
        assert ("matchExpressions" in spec["podSelector"]["properties"]) is present
        assert bool(schema.get("x-kubernetes-validations")) is present


@pytest.mark.parametrize(
    ("rule", "node", "admits"),
    [
        ({"rule": "oldSelf.hasValue() || size(self.x) < 3", "optionalOldSelf": True}, {}, True),
        ({"rule": "oldSelf.hasValue() || size(self.x) < 3"}, {}, False),  # without optionalOldSelf
        ({"rule": "!has(self.newField) || self.a", "optionalOldSelf": False}, {"properties": {"a": {}}}, True),
        ({"rule": "!has(self.a) || self.b"}, {"properties": {"a": {}}}, False),  # a field stored objects hold
        ({"rule": "!has(self.a) || self.b"}, {"x-kubernetes-preserve-unknown-fields": True}, False),
        ({"rule": "has(self.a) || has(self.b)"}, {"properties": {"a": {}}, "required": ["a"]}, True),
        ({"rule": "has(self.a) || has(self.b)"}, {"properties": {"a": {}}}, False),  # a was optional
        ({"rule": "self.a || !has(self.newField)"}, {"properties": {"a": {}}}, False),  # not the form
    ],
)
def test_a_new_rule_is_accepted_only_in_a_form_that_admits_stored_objects(
    rule: dict[str, Any], node: dict[str, Any], admits: bool
) -> None:
    assert admits_stored_objects(rule, node) is admits
    new = {**node, "x-kubernetes-validations": [rule]}
    assert (breaking_changes(node, new) == []) is admits


def _node(schema: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = schema
    for name in dotted.split("."):
        node = node["properties"][name]
    return node


@pytest.mark.parametrize(
    ("where", "change", "expected"),
    [
        ("spec.zookeeper", lambda n: n["properties"].pop("credentialsSecret"),
         ".spec.zookeeper.credentialsSecret: removed"),
        ("spec.resources", lambda n: n.update(maxItems=n["maxItems"] - 1), ".spec.resources: maxItems lowered"),
        ("spec.resourceSets", lambda n: n["items"].update(required=["prefix", "count", "extra"]),
         ".spec.resourceSets[]: newly required ['extra']"),
        ("spec.algorithm", lambda n: n["enum"].remove("GlobalBarrier"),
         ".spec.algorithm: enum no longer admits ['GlobalBarrier']"),
        ("spec.rebalance", lambda n: n.setdefault("x-kubernetes-validations", []).append({"rule": "self.adaptive"}),
         ".spec.rebalance: new validation rule 'self.adaptive'"),
        ("spec.zookeeper.connect", lambda n: n.update(pattern="^[a-z]+$"), ".spec.zookeeper.connect: pattern"),
        ("spec.zookeeper.sessionTimeoutSeconds", lambda n: n.update(minimum=5),
         ".spec.zookeeper.sessionTimeoutSeconds: minimum raised from 1 to 5"),
        ("spec.rebalance.adaptive", lambda n: n.update(type="string"), ".spec.rebalance.adaptive: type changed"),
        ("status.assignments", lambda n: n.pop("additionalProperties"), ".status.assignments: additionalProperties"),
    ],
)
def test_each_kind_of_breaking_change_is_found(where: str, change: Any, expected: str) -> None:
    """The check has teeth: the same comparison against a deliberately broken copy of this checkout's
    schema names the change."""
    broken = copy.deepcopy(new_schema())
    change(_node(broken, where))
    found = breaking_changes(old_schema(), broken)
    assert any(line.startswith(expected) for line in found), found


def test_additions_are_not_breaking() -> None:
    new = copy.deepcopy(new_schema())
    _node(new, "spec")["properties"]["future"] = {"type": "string", "maxLength": 3, "description": "x"}
    _node(new, "spec.resources").pop("maxItems")
    _node(new, "spec.zookeeper.connect")["description"] = "changed"
    assert [c for c in breaking_changes(old_schema(), new) if c not in ACCEPTED_CHANGES] == []


@pytest.mark.parametrize("storage", [models.VERSION, crdgen.BETA_VERSION])
def test_the_beta_plan_serves_both_versions_with_one_schema(storage: str) -> None:
    crd = crdgen.build_beta_plan_crd(storage)
    versions = {entry["name"]: entry for entry in crd["spec"]["versions"]}
    assert sorted(versions) == ["v1alpha1", "v1beta1"]
    assert all(entry["served"] for entry in versions.values())
    assert [name for name, entry in versions.items() if entry["storage"]] == [storage]
    assert crd["spec"]["conversion"] == {"strategy": "None"}
    alpha, beta = (version_schema(crd, name) for name in ("v1alpha1", "v1beta1"))
    assert breaking_changes(alpha, beta) == [] and breaking_changes(beta, alpha) == []
    assert alpha["properties"]["spec"] == new_schema()["properties"]["spec"]
    assert beta["properties"]["apiVersion"]["description"] == "rebalanser.io/v1beta1"
    # the shipped CRD is untouched by the plan: v1alpha1 only
    assert [entry["name"] for entry in crdgen.build_crd()["spec"]["versions"]] == ["v1alpha1"]


def test_the_beta_plan_is_printed_and_never_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crdgen.main(["--root", str(tmp_path), "--beta-plan", "v1beta1"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == crdgen.build_beta_plan_crd("v1beta1")
    assert not any(tmp_path.iterdir())
    with pytest.raises(ValueError, match="storage must be"):
        crdgen.build_beta_plan_crd("v2")
