"""The kazoo range that pyproject.toml declares holds only releases that were run (issue 28, 7).

Its two bounds must be recorded as passed in scripts/kazoo-versions.tsv, no release recorded as failed may
lie inside it, ``make kazoo-range`` must run exactly those two bounds and ``make test`` must run it, and
constraints.txt's kazoo must lie inside the range."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_kazoo_range() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kazoo_range", REPO / "scripts" / "kazoo_range.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the dataclass looks its module up while it is made
    spec.loader.exec_module(module)
    return module


kazoo_range = load_kazoo_range()


def recorded() -> dict[str, bool]:
    return {trial.version: trial.passed for trial in kazoo_range.trials()}


def test_both_bounds_of_the_declared_range_were_run_and_passed() -> None:
    low, high = kazoo_range.declared()
    results = recorded()
    for bound in (low, high):
        assert results.get(bound) is True, f"kazoo {bound} bounds pyproject.toml's range but is not recorded as passed"
    assert kazoo_range.version_key(low) <= kazoo_range.version_key(high)


def test_no_release_recorded_inside_the_range_failed() -> None:
    low, high = (kazoo_range.version_key(bound) for bound in kazoo_range.declared())
    inside = {version: passed for version, passed in recorded().items()
              if low <= kazoo_range.version_key(version) <= high}
    assert inside and all(inside.values()), f"a release inside the range failed: {inside}"


def test_make_kazoo_range_runs_the_two_bounds_and_make_test_runs_it() -> None:
    low, high = kazoo_range.declared()
    shown = subprocess.run(["make", "-n", "kazoo-range"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert re.search(rf"scripts/kazoo-range\.sh {re.escape(low)} {re.escape(high)}$", shown, re.M), shown
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^test:[^#\n]*\bkazoo-range\b", makefile, re.M)


def test_the_pinned_kazoo_lies_inside_the_range() -> None:
    pinned = re.search(r"^kazoo==(\S+)$", (REPO / "constraints.txt").read_text(), re.M)
    assert pinned is not None
    low, high = (kazoo_range.version_key(bound) for bound in kazoo_range.declared())
    assert low <= kazoo_range.version_key(pinned[1]) <= high, pinned[1]


def test_the_release_notes_quote_the_declared_range() -> None:
    low, high = kazoo_range.declared()
    assert f"`kazoo>={low},<={high}`" in (REPO / "docs" / "release.md").read_text()


@pytest.mark.parametrize("requirement", ["kazoo>=2.9,<3", "kazoo>=2.9", "kazoo", "kazoo<=2.11.0"])
def test_a_range_with_an_end_nobody_ran_is_refused(tmp_path: Path, requirement: str) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f'[project]\nname = "x"\ndependencies = ["{requirement}"]\n')
    with pytest.raises(ValueError, match="kazoo>=LOW,<=HIGH"):
        kazoo_range.declared(pyproject)


def test_the_bounds_are_read_from_a_closed_range(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["kazoo >= 2.9.0, <= 2.11.0"]\n')
    assert kazoo_range.declared(pyproject) == ("2.9.0", "2.11.0")
