"""The Makefile's own promises: `make help` lists every target, `typecheck` and `unit` exist and are what
they say."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAKEFILE = (REPO / "Makefile").read_text()


def targets() -> set[str]:
    return set(re.findall(r"^([a-z][a-z-]*):", MAKEFILE, re.M))


def test_make_help_lists_every_target() -> None:
    shown = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    listed = set(re.findall(r"^make (\S+)", shown, re.M))
    assert listed == targets(), f"missing from make help: {sorted(targets() - listed)}"
    phony = set(re.search(r"^\.PHONY:(.*?)(?<!\\)\n", MAKEFILE, re.M | re.S).group(1).replace("\\", " ").split())  # type: ignore[union-attr]
    assert phony == targets(), (sorted(phony ^ targets()))


def test_typecheck_has_a_rule_and_lint_runs_it() -> None:
    assert re.search(r"^typecheck:.*\n\t\$\(BIN\)/mypy ", MAKEFILE, re.M)
    assert re.search(r"^lint:.*\btypecheck\b", MAKEFILE, re.M)


def test_unit_runs_the_operators_pure_tests_too() -> None:
    shown = subprocess.run(["make", "-n", "unit"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "tests/unit" in shown and "tests/operator" in shown and "not zk" in shown, shown


def test_the_venv_and_the_image_install_the_constraints() -> None:
    assert "-c constraints.txt" in MAKEFILE
    assert re.search(r"pip install .*-c constraints\.txt", (REPO / "Dockerfile").read_text())
