"""The tests the documentation cites exist: every ``tests/…py`` path named in docs/ and README.md is a
file, and every ``tests/…py::test_name`` names a test defined in it (a renamed or removed test would
otherwise leave a doc claiming a check that no longer runs)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PATH = re.compile(r"(?<![\w/.])(tests/[\w/]+\.py)(?:::(\w+))?")


def cited(text: str) -> list[tuple[str, str | None]]:
    return [(match[1], match[2]) for match in PATH.finditer(text)]


def missing(root: Path, text: str) -> list[str]:
    problems = []
    for path, name in cited(text):
        source = root / path
        if not source.is_file():
            problems.append(f"{path}: no such file")
        elif name and not re.search(rf"^\s*(?:async\s+)?def {name}\(", source.read_text(), re.MULTILINE):
            problems.append(f"{path}::{name}: no such test")
    return problems


def test_every_cited_test_exists() -> None:
    pages = [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]
    problems = [f"{page.relative_to(REPO)}: {problem}" for page in pages for problem in missing(REPO, page.read_text())]
    assert len([ref for page in pages for ref in cited(page.read_text())]) >= 20, "the docs cite their tests"
    assert not problems, "\n".join(problems)


def test_a_stale_reference_is_found(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_kept() -> None:\n    pass\n")
    text = "`tests/test_x.py::test_kept`, `tests/test_x.py::test_renamed` and `tests/test_gone.py`"
    assert missing(tmp_path, text) == [
        "tests/test_x.py::test_renamed: no such test", "tests/test_gone.py: no such file"]
