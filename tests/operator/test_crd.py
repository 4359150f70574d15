"""The CRD is generated from the pydantic models and must stay structural and in sync."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from rebalanser_operator.spec import crdgen, models

REPO = Path(__file__).resolve().parents[2]


def walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")


def schema() -> dict[str, Any]:
    crd = crdgen.build_crd()
    result: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return result


def test_committed_crd_files_match_the_models() -> None:
    expected = crdgen.render()
    for relative in crdgen.OUTPUTS:
        committed = (REPO / relative).read_text()
        assert committed == expected, f"{relative} drifted from models.py: run `make crds`"


def test_check_mode_reports_drift_and_write_mode_fixes_it(tmp_path: Path) -> None:
    (tmp_path / "crds").mkdir()
    (tmp_path / crdgen.OUTPUTS[0]).write_text("stale\n")
    assert crdgen.main(["--root", str(tmp_path), "--check"]) == 1
    assert crdgen.main(["--root", str(tmp_path)]) == 0
    assert crdgen.main(["--root", str(tmp_path), "--check"]) == 0
    assert (tmp_path / crdgen.OUTPUTS[1]).read_text() == crdgen.render()


def test_schema_is_structural() -> None:
    for where, node in walk(schema()):
        for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "title", "$defs", "nullable", "const"):
            assert forbidden not in node, f"{forbidden} at {where}"
        if "additionalProperties" in node:
            assert isinstance(node["additionalProperties"], dict), where
            assert "properties" not in node, where
        if where.endswith(".properties") or where.endswith("x-kubernetes-validations"):
            continue
        if "properties" in node or "items" in node:
            assert "type" in node, f"no type at {where}"


def test_every_status_field_is_declared() -> None:
    declared = schema()["properties"]["status"]["properties"]
    for name, field in models.ResourceGroupStatus.model_fields.items():
        key = field.alias or name
        assert key in declared, f"status.{key} would be pruned by the API server"


def test_names_scope_subresource_and_printer_columns() -> None:
    crd = crdgen.build_crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "resourcegroups.rebalanser.io"
    assert spec["group"] == "rebalanser.io" and spec["scope"] == "Namespaced"
    assert spec["names"]["plural"] == "resourcegroups" and spec["names"]["shortNames"] == ["rg"]
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority", 0) == 0]
    assert columns == ["Algorithm", "Resources", "Members", "Assigned", "Coordinator", "Phase", "Ready", "Age"]
    ready = next(c for c in version["additionalPrinterColumns"] if c["name"] == "Ready")
    assert ready["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    wide = {c["name"]: c for c in version["additionalPrinterColumns"] if c.get("priority", 0) == 1}
    assert set(wide) == {"Interval", "Served-By"}  # with operator replicas: which one serves the group
    assert wide["Served-By"]["jsonPath"] == ".status.servedBy.replica"


def test_no_spec_field_is_a_floating_point_number() -> None:
    """The Kubernetes API conventions: durations are whole seconds (or duration strings), never floats."""
    def numbers(node: dict[str, Any], where: str) -> list[str]:
        found = [where] if node.get("type") == "number" else []
        for name, child in node.get("properties", {}).items():
            found += numbers(child, f"{where}.{name}")
        if isinstance(node.get("items"), dict):
            found += numbers(node["items"], f"{where}[]")
        return found

    assert numbers(schema()["properties"]["spec"], "spec") == []
    for section, name in (("zookeeper", "sessionTimeoutSeconds"), ("rebalance", "minIntervalSeconds"),
                          ("rebalance", "maxIntervalSeconds"), ("rebalance", "departureGraceSeconds")):
        assert schema()["properties"]["spec"]["properties"][section]["properties"][name]["type"] == "integer"


def test_the_last_rebalance_times_are_date_times() -> None:
    last = schema()["properties"]["status"]["properties"]["lastRebalance"]["properties"]
    assert last["startedAt"]["format"] == last["completedAt"]["format"] == "date-time"


@pytest.mark.parametrize(("older", "current"), [
    ("spec.workload", "spec.workloadRef"),
    ("spec.zookeeper.credentialsSecret", "spec.zookeeper.credentialsSecretRef"),
    ("spec.zookeeper.tls.secret", "spec.zookeeper.tls.secretRef"),
])
def test_each_older_form_stays_in_the_schema_marked_deprecated(older: str, current: str) -> None:
    """Objects stored with the older form still validate and keep it (nothing is pruned); its
    description names the field to write instead."""
    def node(dotted: str) -> dict[str, Any]:
        found = schema()
        for name in dotted.split("."):
            found = found["properties"][name]
        return found

    assert node(older)["description"].startswith(f"Deprecated: write {current.rsplit('.', 1)[-1]} ")
    assert not node(current)["description"].startswith("Deprecated")


def test_validation_rules_are_in_the_schema() -> None:
    spec = schema()["properties"]["spec"]
    assert spec["required"] == ["zookeeper"]
    assert spec["properties"]["zookeeper"]["required"] == ["connect"]
    resources = spec["properties"]["resources"]
    assert resources["x-kubernetes-list-type"] == "set"
    assert resources["maxItems"] == models.MAX_EXPLICIT_RESOURCES
    assert resources["items"]["pattern"] == models.RESOURCE_NAME_PATTERN
    path = spec["properties"]["zookeeper"]["properties"]["path"]
    assert {"rule": "self == oldSelf", "message": "zookeeper.path is immutable"} in path["x-kubernetes-validations"]
    rebalance = spec["properties"]["rebalance"]
    (order,) = rebalance["x-kubernetes-validations"]
    assert "minIntervalSeconds <= self.maxIntervalSeconds" in order["rule"]
    # create only: on an object stored with a fraction (number seconds) the rule cannot evaluate, and
    # ratcheting does not excuse that, so an update (a finalizer's removal too) would be refused
    assert order["rule"].startswith("oldSelf.hasValue() || ") and order["optionalOldSelf"] is True
    assert spec["properties"]["algorithm"]["enum"] == ["ResourceBarrier", "GlobalBarrier"]
    conditions = schema()["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"


def test_generated_yaml_is_a_single_document() -> None:
    documents = list(yaml.safe_load_all(crdgen.render()))
    assert len(documents) == 1 and documents[0]["kind"] == "CustomResourceDefinition"


def test_every_field_has_a_description() -> None:
    """What ``kubectl explain rg --recursive`` shows (``metadata`` is the API server's own)."""
    missing = []

    def visit(node: dict[str, Any], path: str) -> None:
        for key, child in (node.get("properties") or {}).items():
            if "description" not in child and f"{path}.{key}" != ".metadata":
                missing.append(f"{path}.{key}")
            visit(child, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            visit(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            visit(node["additionalProperties"], f"{path}{{}}")

    visit(schema(), "")
    assert not missing, f"fields without a description: {missing}"
