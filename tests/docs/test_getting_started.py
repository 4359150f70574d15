"""docs/getting-started.md is the one install recipe, checked without a cluster (tests/pods/test_getting_started.py
follows it on the local cluster): its commands parse, name this version's artifacts, keep the operator in a
namespace of its own, allow exactly the ensemble the ResourceGroup connects to, and render the manifests they
promise; the other install pages point to it, and the CRD upgrade command is the same wherever it is given."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import rebalanser
import yaml

from tests.docs.test_examples import kubectl
from tests.support.recipe import CRD_UPGRADE, PAGE, PUSH, REPO, Step, for_the_local_cluster, page_steps, steps

VERSION = rebalanser.__version__
CHART = REPO / "charts" / "rebalanser-operator"
#: Where the other install instructions live; each points to the recipe instead of repeating it.
POINTERS = [REPO / "README.md", REPO / "docs" / "operator.md", REPO / "examples" / "README.md"]


def packaged_chart_readme() -> str:
    """The chart's README, as the package carries it (scripts/dist.sh packages the source chart)."""
    return (CHART / "README.md").read_text()


def step(number: int) -> Step:
    return next(s for s in page_steps() if s.number == number)


def settings() -> dict[str, str]:
    values = dict(re.findall(r"^([A-Z]+)=(\S+)", step(1).script, re.M))
    assert {"REGISTRY", "ZK", "IMAGE"} <= set(values), values
    return values


def test_the_blocks_are_numbered_in_order_and_parse_as_bash() -> None:
    recipe = page_steps()
    assert [s.number for s in recipe] == sorted({s.number for s in recipe}), [s.number for s in recipe]
    script = "\n".join(s.script for s in recipe)
    proc = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_the_parser_keeps_only_sh_blocks_under_numbered_headings() -> None:
    text = "# T\n\n```sh\nnot a step\n```\n## 1. One\n\n```sh\na\n```\n\n```\nNAME out\n```\n## Two\n\n```sh\nb\n```\n"
    assert steps(text) == [Step(1, "One", ("a\n",))]


def test_the_artifacts_named_are_this_versions() -> None:
    blocks = "".join(s.script for s in page_steps())
    named = set(re.findall(r"\b\d+\.\d+\.\d+\b", blocks))
    assert named == {VERSION}, f"the page's commands name versions {sorted(named)}; the package is {VERSION}"
    assert "make dist" in step(2).script


def test_the_image_is_pushed_once_and_the_local_cluster_loads_it_instead() -> None:
    local = for_the_local_cluster(page_steps())
    assert PUSH not in "".join(s.script for s in local) and PUSH in step(3).script
    assert (REPO / "scripts" / "cluster.sh").exists()
    assert settings()["IMAGE"] == f"$REGISTRY/rebalanser:{VERSION}"


def helm_install() -> str:
    script = step(4).script.replace("\\\n", " ")
    (line,) = [line for line in script.splitlines() if line.startswith("helm install ")]
    return line


def test_the_operator_gets_a_namespace_of_its_own_and_serves_the_tenants() -> None:
    line = helm_install()
    own = re.search(r" -n (\S+)", line)
    served = re.search(r"rbac\.watchNamespaces=\{([^}]*)\}", line)
    assert own and served, line
    tenants = set(served[1].split(","))
    assert own[1] not in tenants, f"the operator serves its own namespace {own[1]}"
    page = PAGE.read_text()
    used = set(re.findall(r"kubectl -n (\S+)", page))
    # the operator's own namespace gets only its ZooKeeper identity's Secret, which the chart is told of
    own_uses = re.findall(rf"kubectl -n {re.escape(own[1])} (.*)", page)
    assert all(u.startswith("create secret generic rebalanser-zk-identity ") for u in own_uses), own_uses
    assert "zookeeperIdentity.secretName=rebalanser-zk-identity" in line, line
    assert used - {own[1]} == tenants, f"the page applies into {sorted(used)}, the operator serves {sorted(tenants)}"
    assert f"dist/rebalanser-operator-{VERSION}.tgz" in line and 'image.repository="$REGISTRY/rebalanser"' in line


def rendered_overlay(tmp_path: Path) -> dict[str, Any]:
    """Step 1 and step 6 up to its first kubectl command, run in a copy of the layout (examples/ beside
    the overlay's folder), then the overlay rendered as step 6 renders it."""
    before_kubectl = step(6).script.split("\nkubectl ", 1)[0] + "\n"
    (tmp_path / "examples").symlink_to(REPO / "examples")
    script = f"set -eo pipefail\n{step(1).script}\n{before_kubectl}"
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    (folder,) = re.findall(r"kubectl kustomize --load-restrictor LoadRestrictionsNone (\S+) \|", step(6).script)
    out = subprocess.run([kubectl(), "kustomize", "--load-restrictor", "LoadRestrictionsNone", folder], cwd=tmp_path,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return {doc["kind"]: doc for doc in yaml.safe_load_all(out.stdout)}


def test_the_allowed_ensemble_is_the_connect_string_and_the_workers_run_the_pushed_image(tmp_path: Path) -> None:
    values = settings()
    assert '--set "operator.allowedEnsembles={$ZK}"' in helm_install()
    docs = rendered_overlay(tmp_path)
    group, workers = docs["ResourceGroup"], docs["Deployment"]
    assert group["spec"]["zookeeper"]["connect"] == values["ZK"]
    example = yaml.safe_load((REPO / "examples" / "resourcegroup.yaml").read_text())
    assert values["ZK"] == example["spec"]["zookeeper"]["connect"], "the default is the local cluster's ensemble"
    image = values["IMAGE"].replace("$REGISTRY", values["REGISTRY"])
    assert {c["image"] for c in workers["spec"]["template"]["spec"]["containers"]} == {image}
    zookeeper = group["spec"]["zookeeper"]
    secret = zookeeper.get("credentialsSecretRef", {}).get("name") or zookeeper.get("credentialsSecret")
    assert secret == "zk-digest" and "secret generic zk-digest" in step(5).script


def crd_upgrade_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if "kubectl apply" in line and "crds" in line]


def test_the_crd_upgrade_command_is_the_same_everywhere() -> None:
    pattern = re.compile(r"helm show crds \S+ " + re.escape(CRD_UPGRADE) + r"(\s|$)")
    sources = {
        "docs/getting-started.md": PAGE.read_text(),
        "docs/operator.md": (REPO / "docs" / "operator.md").read_text(),
        "NOTES.txt": (CHART / "templates" / "NOTES.txt").read_text(),
        "the packaged chart's README": packaged_chart_readme(),
    }
    for name, text in sources.items():
        lines = crd_upgrade_lines(text)
        assert lines, f"{name} gives no CRD upgrade command"
        wrong = [line for line in lines if not pattern.search(line)]
        assert not wrong, f"{name}: {wrong}"
    for other in [REPO / "README.md", REPO / "examples" / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        wrong = [line for line in crd_upgrade_lines(other.read_text()) if not pattern.search(line)]
        assert not wrong, f"{other.relative_to(REPO)}: {wrong}"


@pytest.mark.parametrize("page", POINTERS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_other_install_pages_point_to_the_recipe(page: Path) -> None:
    text = page.read_text()
    assert "getting-started.md" in text, f"{page.relative_to(REPO)} does not point to the recipe"
    assert not re.search(r"^\s*helm install ", text, re.M), f"{page.relative_to(REPO)} repeats an install"


def test_the_packaged_charts_readme_points_to_the_recipe() -> None:
    text = packaged_chart_readme()
    assert "docs/getting-started.md" in text and not re.search(r"^\s*helm install ", text, re.M)
    for value in ("image.repository", "rbac.watchNamespaces", "operator.allowedEnsembles"):
        assert value in text.split("## Values")[0], value
