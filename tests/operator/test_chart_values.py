"""What the chart refuses up front (so nothing crash-loops or renders nothing without a word), what it
says about itself (Chart.yaml, a README current with values.yaml), and the uninstall check it runs."""

from __future__ import annotations

import base64
import json
import subprocess
import tarfile
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


def helm_docs_readme() -> str:
    """The chart's README as `make chart-readme` writes it (helm-docs, which scripts/install-helm-docs.sh builds
    into the cache when it is missing), printed instead of written."""
    proc = subprocess.run(["make", "-s", "--no-print-directory", "chart-readme", "CHART_README_FLAGS=--dry-run"],
                          cwd=REPO, capture_output=True, text=True, timeout=1800, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def readme_rows(readme: str) -> dict[str, str]:
    """Key -> description, from the values table of the README (helm-docs: | Key | Type | Default | Description |)."""
    table = readme.split("\n## Values\n", 1)[1]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and " | " in line]
    return {cells[0].removeprefix("| "): cells[-1].removesuffix(" |").strip() for cells in rows[1:]}


def leaf_paths(values: Any, prefix: str = "") -> list[str]:
    """The dotted path of every value that is not a non-empty mapping (a list is one value)."""
    if isinstance(values, dict) and values:
        return [path for key, value in values.items() for path in leaf_paths(value, f"{prefix}{key}.")]
    return [prefix.removesuffix(".")]


def test_the_charts_readme_is_current_with_values_yaml() -> None:
    generated = helm_docs_readme()
    assert (CHART / "README.md").read_text() == generated, (
        "charts/rebalanser-operator/README.md is out of date: make chart-readme")
    for key in ("uninstallCheck.enabled", "metrics.serviceMonitor.enabled", "operator.allowedEnsembles"):
        assert key in readme_rows(generated)


def test_every_value_has_a_description_in_the_readme() -> None:
    """Every key of values.yaml carries a "# --" comment that helm-docs read (a comment it misreads, e.g. one
    whose first line holds " --", leaves the row's description empty)."""
    rows = readme_rows((CHART / "README.md").read_text())
    undescribed = [path for path in leaf_paths(DEFAULTS) if not rows.get(path)]
    assert undescribed == [], f"values.yaml: no '# --' description helm-docs could read for {undescribed}"
    assert len(rows) >= len(leaf_paths(DEFAULTS)) > 50


def test_the_packaged_chart_carries_the_charts_readme_and_not_its_template(helm: Path, tmp_path: Path) -> None:
    """What scripts/dist.sh packages: the source chart as it is."""
    proc = subprocess.run([str(helm), "package", str(CHART), "--destination", str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    (package,) = tmp_path.glob("rebalanser-operator-*.tgz")
    with tarfile.open(package) as archive:
        names = set(archive.getnames())
        readme = archive.extractfile("rebalanser-operator/README.md")
        assert readme is not None and readme.read().decode() == (CHART / "README.md").read_text()
    assert "rebalanser-operator/values.yaml" in names and "rebalanser-operator/README.md.gotmpl" not in names


def test_uninstall_runs_a_check_first_that_lists_the_served_namespaces(helm: Path) -> None:
    (job,) = by_kind(render(helm, "--set", "rbac.watchNamespaces={shop,billing}"), "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert "hook-succeeded" in job["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    assert "hook-failed" not in job["metadata"]["annotations"]["helm.sh/hook-delete-policy"]  # its log stays
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "rebalanser_operator.uninstallcheck"]
    assert container["args"] == ["--namespace=shop", "--namespace=billing", "--release=ops/rel-rebalanser-operator"]
    assert pod["serviceAccountName"] == "rel-rebalanser-operator" and job["spec"]["backoffLimit"] == 0
    (wide,) = by_kind(render(helm, "--set", "rbac.clusterWide=true"), "Job")
    assert wide["spec"]["template"]["spec"]["containers"][0]["args"] == ["--all-namespaces",
                                                                         "--release=ops/rel-rebalanser-operator"]
    assert not by_kind(render(helm, "--set", "uninstallCheck.enabled=false"), "Job")


def test_the_checks_pod_is_not_selected_as_an_operator_pod(helm: Path) -> None:
    """A failed check's pod stays for its log: the Deployment's and the Service's selectors (and whatever
    finds the operator's pods by them) must not match it."""
    objects = render(helm)
    (job,) = by_kind(objects, "Job")
    labels = job["spec"]["template"]["metadata"]["labels"]
    (deployment,) = by_kind(objects, "Deployment")
    services = [service["spec"]["selector"] for service in by_kind(objects, "Service")]
    selectors = [deployment["spec"]["selector"]["matchLabels"], *services]
    for selector in selectors:
        assert not all(labels.get(k) == v for k, v in selector.items()), (selector, labels)
    assert labels["app.kubernetes.io/instance"] == "rel" and labels["app.kubernetes.io/component"] == "uninstall-check"


def test_the_check_passes_only_when_no_resource_group_remains() -> None:
    assert verdict([])[0] == 0
    status, message = verdict([("shop", "orders"), ("billing", "invoices")])
    assert status == 1
    assert "2 ResourceGroups remain (billing/invoices, shop/orders)" in message
    assert "kubectl delete resourcegroups --all -n billing; kubectl delete resourcegroups --all -n shop" in message
    assert "--no-hooks" in message
    many = verdict([("shop", f"g{i:02d}") for i in range(25)])[1]
    assert "and 5 more" in many


def test_the_operators_x509_identity_is_its_tls_secret_mounted_and_never_both(helm: Path) -> None:
    """zookeeperIdentity.tls.secretName: the TLS Secret's three keys as files of one read-only directory,
    named by REBALANSER_ZK_IDENTITY_TLS_DIR; with the digest's secretName too, the install is refused."""
    pod = by_kind(render(helm, "--set", "zookeeperIdentity.tls.secretName=operator-cert"),
                  "Deployment")[0]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert not {"REBALANSER_ZK_IDENTITY_USER", "REBALANSER_ZK_IDENTITY_PASSWORD_FILE"} & set(env)
    mount = next(m for m in container["volumeMounts"] if m["name"] == "zookeeper-identity-tls")
    assert mount["readOnly"] and env["REBALANSER_ZK_IDENTITY_TLS_DIR"]["value"] == mount["mountPath"]
    volume = next(v for v in pod["volumes"] if v["name"] == "zookeeper-identity-tls")
    assert volume["secret"] == {"secretName": "operator-cert", "items": [
        {"key": name, "path": name} for name in ("ca.crt", "tls.crt", "tls.key")]}
    both = helm_template(helm, "--set", "zookeeperIdentity.secretName=operator-zk",
                         "--set", "zookeeperIdentity.tls.secretName=operator-cert")
    assert both.returncode != 0 and "not both" in both.stderr, both.stderr


def test_the_liveness_probes_timing_is_a_value(helm: Path) -> None:
    """liveness.{periodSeconds,timeoutSeconds,failureThreshold}: by default an operator that has not answered
    for 2 minutes is restarted (20 s, 10 s, 6), and a start with thousands of ResourceGroups (whose event loop
    answers /healthz late) can allow more."""
    def probe(*args: str) -> dict[str, Any]:
        deployment = by_kind(render(helm, *args), "Deployment")[0]
        found: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
        return found

    timing = ("periodSeconds", "timeoutSeconds", "failureThreshold")
    assert [probe()[k] for k in timing] == [20, 10, 6]
    relaxed = probe("--set", "liveness.timeoutSeconds=10", "--set", "liveness.failureThreshold=15")
    assert [relaxed[k] for k in timing] == [20, 10, 15]
    assert relaxed["httpGet"]["path"] == "/healthz"
    assert schema_errors(with_values(liveness__timeoutSeconds=0)) and not schema_errors(
        with_values(liveness__failureThreshold=15))
