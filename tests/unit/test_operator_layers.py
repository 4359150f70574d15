"""The operator's code is layered: each module imports only from its own layer or the layers below it,
and no modules import each other in a circle (docs/operator.md, "Code layout").

Every import of ``rebalanser_operator`` counts, wherever it is written: at the top of a module, inside a
function, or under ``if TYPE_CHECKING`` (a circle hidden there is still a circle in the design).
"""

from __future__ import annotations

import ast
from pathlib import Path

import rebalanser_operator

PACKAGE = "rebalanser_operator"
ROOT = Path(rebalanser_operator.__file__).parent

#: Bottom to top. A module belongs to the first layer with a prefix that names it or its package.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("spec", ("spec",)),  # the CRD's models: what a ResourceGroup says
    ("status", ("status",)),  # pure status, tuning and rollout values; the read of a group's znodes
    ("failover", ("failover",)),  # which members a pod proves dead, and ending them in ZooKeeper
    ("services", ("tenancy", "zktls", "x509name", "identity", "zkpool", "metrics", "clusterid", "diffbase", "kube",
                  "replicas", "replicafence", "releaseclaim", "zkfence")),
    ("controller", ("controller",)),  # one group's state, messages, pure plans, and its step runner
    ("apply", ("apply",)),  # the I/O steps that carry the plans out
    ("shell", ("runtime", "statusloop", "podwatch", "replicaserve", "replicadeath", "readiness", "handlers", "main",
               "launch", "uninstallcheck", "")),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def layer_of(module: str) -> int:
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (prefix and module.startswith(prefix + ".")):
                return index
    raise AssertionError(f"{PACKAGE}.{module} belongs to no layer: add it to LAYERS (and to docs/operator.md)")


def _resolve(name: str) -> str | None:
    """``rebalanser_operator.x.y`` as a module of the package (a name imported from a module: the module)."""
    if name != PACKAGE and not name.startswith(PACKAGE + "."):
        return None
    parts = name.split(".")[1:]
    while parts:
        candidate = ROOT.joinpath(*parts)
        if candidate.with_suffix(".py").is_file() or (candidate / "__init__.py").is_file():
            return ".".join(parts)
        parts = parts[:-1]
    return ""


def imports_of(path: Path) -> set[str]:
    """The package's modules that ``path`` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            target = _resolve(name)
            if target is not None:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(path): path for path in ROOT.rglob("*.py")}
    return {name: imports_of(path) - {name} for name, path in modules.items()}


def test_every_module_has_a_layer() -> None:
    for module in graph():
        layer_of(module)


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    upward = sorted(
        f"{source} ({LAYERS[layer_of(source)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for source, targets in graph().items() for target in targets if layer_of(target) > layer_of(source)
    )
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_circle() -> None:
    edges = graph()
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            circle = [*trail[trail.index(module):], module]
            raise AssertionError("import circle: " + " -> ".join(circle))
        if module in done:
            return
        for target in sorted(edges.get(module, ())):
            visit(target, [*trail, module])
        done.add(module)

    for module in sorted(edges):
        visit(module, [])


def test_the_checks_see_an_upward_import_and_a_circle(tmp_path: Path) -> None:
    """The test can fail: a module of a low layer that imports one above it is reported."""
    source = tmp_path / "probe.py"
    source.write_text("def f() -> None:\n    from rebalanser_operator.apply.actions import event\n")
    assert imports_of(source) == {"apply.actions"}
    assert layer_of("apply.actions") > layer_of("spec.models")
    typed = tmp_path / "typed.py"
    typed.write_text("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from rebalanser_operator import runtime\n")
    assert imports_of(typed) == {"runtime"}
