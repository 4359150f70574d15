"""The member's state machines do no I/O: they import neither kazoo nor anything that blocks, sleeps,
reads clocks or starts threads, so their transitions are functions of their arguments (the member's
loop passes in the session, the time and what ZooKeeper answered)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "worker_lib" / "rebalanser"
MACHINES = ("resource_state", "standby", "member_state", "follow")
FORBIDDEN = ("kazoo", "threading", "time", "socket", "subprocess", "queue", "asyncio", "random", "os", "logging")
# rebalanser modules a machine may use: values and other pure rules only
ALLOWED_OWN = {"rebalanser.standby", "rebalanser.member_events", "rebalanser.paths", "rebalanser.config",
               "rebalanser.wire", "rebalanser.errors"}


def _imports(name: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names
                                      if node.module == "rebalanser"}
    return found


@pytest.mark.parametrize("machine", MACHINES)
def test_a_member_state_machine_imports_nothing_that_does_io(machine: str) -> None:
    imports = _imports(machine)
    io = sorted(m for m in imports if m.split(".")[0] in FORBIDDEN)
    assert not io, f"{machine} imports {io}"
    own = sorted(m for m in imports if m.startswith("rebalanser") and m != "rebalanser" and m not in ALLOWED_OWN)
    assert not own, f"{machine} imports {own} (not a pure module)"
