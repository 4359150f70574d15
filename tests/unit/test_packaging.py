"""What the distribution declares: ranges in pyproject.toml, exact versions in constraints.txt, one
version source that the chart follows, a license file matching the declared license, markers once."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import rebalanser
import yaml

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def requirements() -> list[str]:
    extras = [r for group in PROJECT["optional-dependencies"].values() for r in group]
    return [*PROJECT["dependencies"], *(r for r in extras if not r.startswith("rebalanser["))]


def name_of(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_dependencies_are_ranges_not_pins() -> None:
    pinned = [r for r in requirements() if "==" in r]
    assert not pinned, f"exact pins belong in constraints.txt: {pinned}"
    unbounded = [r for r in PROJECT["dependencies"] if "<" not in r]
    assert not unbounded, f"the core dependencies need an upper bound: {unbounded}"


def test_constraints_pin_every_dependency_exactly() -> None:
    lines = [line for line in (REPO / "constraints.txt").read_text().splitlines() if line and not line.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[^\s]+", line) for line in lines), lines
    pinned = {line.split("==")[0].lower().replace("_", "-") for line in lines}
    missing = {name_of(r) for r in requirements()} - pinned
    assert not missing, f"constraints.txt lacks {sorted(missing)}"


def test_one_version_source_and_the_chart_follows_it() -> None:
    assert PROJECT["dynamic"] == ["version"] and "version" not in PROJECT
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "rebalanser.__version__"}
    chart = yaml.safe_load((REPO / "charts" / "rebalanser-operator" / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == rebalanser.__version__, chart


def test_the_license_file_is_the_declared_license() -> None:
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_typed_packages_and_urls() -> None:
    assert (REPO / "worker_lib" / "rebalanser" / "py.typed").exists()
    assert (REPO / "operator" / "rebalanser_operator" / "py.typed").exists()
    assert "Typing :: Typed" in PROJECT["classifiers"]
    assert {"Homepage", "Source", "Issues"} <= set(PROJECT["urls"])


def test_each_pytest_marker_is_declared_once() -> None:
    names = [marker.split(":")[0] for marker in PYPROJECT["tool"]["pytest"]["ini_options"]["markers"]]
    assert len(names) == len(set(names)), names
