"""Product code, `make demo` included, imports nothing from tests/."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("worker_lib", "operator", "e2e", "examples")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_product_code_imports_nothing_from_tests() -> None:
    offenders = {
        str(path.relative_to(REPO)): sorted(m for m in imported_modules(path) if m == "tests" or m.startswith("tests."))
        for top in PRODUCT for path in (REPO / top).rglob("*.py")
    }
    assert not {path: mods for path, mods in offenders.items() if mods}
