"""What the chart refuses up front (so nothing crash-loops or renders nothing without a word), what it
says about itself (Chart.yaml, a README current with values.yaml), and the uninstall check it runs."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from rebalanser_operator.uninstallcheck import verdict

from tests.operator.test_chart import CHART, REPO, by_kind, helm, render

__all__ = ["helm"]  # the fixture, shared with test_chart.py

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


def with_values(**dotted: Any) -> dict[str, Any]:
    values = json.loads(json.dumps(DEFAULTS))
    for path, value in dotted.items():
        node = values
        *parents, last = path.split("__")
        for key in parents:
            node = node[key]
        node[last] = value
    return values


def schema_errors(values: dict[str, Any]) -> list[str]:
    return [error.message for error in jsonschema.Draft7Validator(SCHEMA).iter_errors(values)]


def helm_template(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), "template", "rel", str(CHART), "--namespace", "ops", *args],
                          capture_output=True, text=True, check=False)


def test_the_defaults_pass_the_schema() -> None:
    assert schema_errors(DEFAULTS) == []


@pytest.mark.parametrize("ensemble", ["zk-0:2181/apps", "zk-0:2181,zk-1:2181/", "zk:2181/rebalanser/shop"])
def test_the_schema_refuses_a_chroot_in_allowed_ensembles(ensemble: str) -> None:
    """The operator exits 2 at start on one (and the pod crash-loops): refused at install instead."""
    assert schema_errors(with_values(operator__allowedEnsembles=[ensemble]))
    assert schema_errors(with_values(operator__allowedEnsembles=["zk-0:2181,zk-1:2181", "*"])) == []


def test_the_schema_refuses_a_cluster_wide_worker_policy_without_namespaces() -> None:
    values = with_values(rbac__clusterWide=True)
    values["networkPolicy"]["workers"].update(enabled=True, podSelector={"matchLabels": {"app": "w"}})
    assert schema_errors(values)
    values["networkPolicy"]["workers"]["namespaces"] = ["shop"]
    assert schema_errors(values) == []
    values["networkPolicy"]["workers"]["enabled"] = False
    values["networkPolicy"]["workers"]["namespaces"] = []
    assert schema_errors(values) == []


def test_helm_refuses_both_with_the_field_named(helm: Path) -> None:
    chroot = helm_template(helm, "--set", "operator.allowedEnsembles={zk-0:2181/apps}")
    assert chroot.returncode != 0 and "allowedEnsembles" in chroot.stderr, chroot.stderr
    empty = helm_template(helm, "--set", "rbac.clusterWide=true", "--set", "networkPolicy.workers.enabled=true",
                          "--set", "networkPolicy.workers.podSelector.matchLabels.app=w")
    assert empty.returncode != 0 and "namespaces" in empty.stderr, empty.stderr
    docs = render(helm, "--set", "rbac.clusterWide=true", "--set", "networkPolicy.workers.enabled=true",
                  "--set", "networkPolicy.workers.podSelector.matchLabels.app=w",
                  "--set", "networkPolicy.workers.namespaces={shop}")
    assert [p["metadata"]["namespace"] for p in by_kind(docs, "NetworkPolicy")] == ["shop"]


def test_the_chart_names_its_home_sources_maintainers_and_icon() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["home"].startswith("https://") and meta["sources"] and meta["sources"][0].startswith("https://")
    assert meta["maintainers"][0]["name"]
    prefix = "data:image/svg+xml;base64,"
    assert meta["icon"].startswith(prefix)
    assert base64.b64decode(meta["icon"][len(prefix):]).startswith(b"<svg ")


def test_the_charts_readme_is_current_with_values_yaml() -> None:
    generated = subprocess.run([sys.executable, str(REPO / "scripts" / "chart_readme.py"), str(CHART)],
                               capture_output=True, text=True, check=True).stdout
    assert (CHART / "README.md").read_text() == generated, (
        "charts/rebalanser-operator/README.md is out of date: "
        "python scripts/chart_readme.py charts/rebalanser-operator > charts/rebalanser-operator/README.md")
    for key in ("uninstallCheck.enabled", "metrics.serviceMonitor.enabled", "operator.allowedEnsembles"):
        assert f"| `{key}` |" in generated


def test_uninstall_runs_a_check_first_that_lists_the_served_namespaces(helm: Path) -> None:
    (job,) = by_kind(render(helm, "--set", "rbac.watchNamespaces={shop,billing}"), "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert "hook-succeeded" in job["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    assert "hook-failed" not in job["metadata"]["annotations"]["helm.sh/hook-delete-policy"]  # its log stays
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "rebalanser_operator.uninstallcheck"]
    assert container["args"] == ["--namespace=shop", "--namespace=billing"]
    assert pod["serviceAccountName"] == "rel-rebalanser-operator" and job["spec"]["backoffLimit"] == 0
    (wide,) = by_kind(render(helm, "--set", "rbac.clusterWide=true"), "Job")
    assert wide["spec"]["template"]["spec"]["containers"][0]["args"] == ["--all-namespaces"]
    assert not by_kind(render(helm, "--set", "uninstallCheck.enabled=false"), "Job")


def test_the_check_passes_only_when_no_resource_group_remains() -> None:
    assert verdict([])[0] == 0
    status, message = verdict([("shop", "orders"), ("billing", "invoices")])
    assert status == 1
    assert "2 ResourceGroups remain (billing/invoices, shop/orders)" in message
    assert "kubectl delete resourcegroups --all -n billing; kubectl delete resourcegroups --all -n shop" in message
    assert "--no-hooks" in message
    many = verdict([("shop", f"g{i:02d}") for i in range(25)])[1]
    assert "and 5 more" in many
