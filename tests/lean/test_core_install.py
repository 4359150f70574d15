"""The wheel, installed into a clean virtualenv with the core dependencies alone, runs a worker.

``pip install rebalanser`` must bring kazoo and nothing else: pydantic, PyYAML and prometheus_client
are extras. The test builds the wheel from a copy of the sources (the checkout stays clean), installs
it into a fresh virtualenv (kazoo comes from pip's configured index), checks that no optional
dependency is importable there, and runs ``rebalanser worker`` against the real ZooKeeper until it
works on every resource of its group.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.integration.conftest import add_resources
from tests.support.workers import wait_for

pytestmark = pytest.mark.zk

REPO = Path(__file__).resolve().parents[2]
CORE = {"rebalanser", "kazoo"}
OPTIONAL = ("pydantic", "yaml", "prometheus_client", "kopf", "kubernetes", "matplotlib")
RESOURCES = [f"r{i}" for i in range(6)]

CHECK_IMPORTS = f"""
import importlib.util, json
import rebalanser, rebalanser.recipes.discovery, rebalanser.cli
from rebalanser import Client, GroupConfig, Options
from rebalanser.recipes.discovery import load_config
assert load_config('{{"port": 1}}') == {{"port": 1}}
try:
    load_config("port: 1")
except ValueError as exc:
    assert "rebalanser[recipes]" in str(exc), exc
else:
    raise AssertionError("YAML was read without PyYAML")
print(json.dumps({{name: importlib.util.find_spec(name) is not None for name in {list(OPTIONAL)!r}}}))
"""


def run(*argv: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A virtualenv holding the wheel and its core dependencies only."""
    root = tmp_path_factory.mktemp("lean")
    source = root / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    for name in ("worker_lib", "operator"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    started = time.monotonic()
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", root / "dist", source)
    built = time.monotonic()
    (wheel,) = (root / "dist").glob("rebalanser-*.whl")
    run(sys.executable, "-m", "venv", root / "venv")
    python = root / "venv" / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel)
    print(f"\nwheel {wheel.name} ({wheel.stat().st_size} bytes) built in {built - started:.1f}s, "
          f"installed with its core dependencies in {time.monotonic() - built:.1f}s")
    yield root / "venv"


def test_only_the_core_dependencies_are_installed(core_venv: Path) -> None:
    listed = json.loads(run(core_venv / "bin" / "python", "-m", "pip", "list", "--format", "json",
                            "--disable-pip-version-check").stdout)
    installed = {p["name"].lower().replace("_", "-") for p in listed} - {"pip", "setuptools", "wheel"}
    print(f"core install: {sorted(installed)}")
    assert installed == CORE, f"the core install pulled more than kazoo: {sorted(installed - CORE)}"


def test_the_library_imports_without_the_extras(core_venv: Path) -> None:
    found = json.loads(run(core_venv / "bin" / "python", "-c", CHECK_IMPORTS).stdout.strip().splitlines()[-1])
    assert not any(found.values()), f"optional packages present in the core install: {found}"


def test_metrics_port_without_the_extra_says_which_extra(core_venv: Path, zk_hosts: str, group_path: str) -> None:
    proc = subprocess.run([str(core_venv / "bin" / "rebalanser"), "worker", "--zk", zk_hosts, "--group", group_path,
                           "--metrics-port", "9"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "rebalanser[metrics]" in proc.stderr, proc.stderr[-2000:]


def test_the_operator_command_without_the_extra_says_which_extra(core_venv: Path) -> None:
    proc = subprocess.run([str(core_venv / "bin" / "rebalanser-operator"), "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "rebalanser[operator]" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_a_worker_runs_with_the_core_dependencies_alone(
    core_venv: Path, zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    add_resources(zk, group_path, RESOURCES)
    events = tmp_path / "events.jsonl"
    with events.open("w") as out:
        worker = subprocess.Popen(
            [str(core_venv / "bin" / "rebalanser"), "worker", "--zk", zk_hosts, "--group", group_path, "--id", "lean",
             "--json", "--min-interval", "0.2", "--session-timeout", "4", "--tick", "0.2"],
            stdout=out, stderr=subprocess.PIPE, text=True,
        )
    try:
        def ticked() -> set[str]:
            records = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
            return {r["resource"] for r in records if r["event"] == "tick"}

        wait_for(lambda: ticked() == set(RESOURCES) or worker.poll() is not None, 60,
                 lambda: f"the core-install worker did not work on every resource: {sorted(ticked())}")
        if worker.poll() is not None:
            _, stderr = worker.communicate()
            pytest.fail(f"the worker exited {worker.returncode}: {stderr[-2000:]}")
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    records = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    assert records[-1]["event"] == "stopped", records[-3:]


def test_the_installed_distribution_is_typed_licensed_and_versioned(core_venv: Path) -> None:
    probe = (
        "import importlib.metadata as m, importlib.resources as r, json, rebalanser\n"
        "d = m.distribution('rebalanser')\n"
        "print(json.dumps({'version': d.version, 'own': rebalanser.__version__,\n"
        "  'typed': r.files('rebalanser').joinpath('py.typed').is_file(),\n"
        "  'license': d.metadata['License-Expression'], 'files': [str(f) for f in d.files or []],\n"
        "  'requires': d.requires}))"
    )
    found = json.loads(run(core_venv / "bin" / "python", "-I", "-c", probe).stdout)  # -I: not the checkout
    assert found["version"] == found["own"], found
    assert found["typed"] and found["license"] == "Apache-2.0", found
    assert any(f.endswith("licenses/LICENSE") for f in found["files"]), found["files"]
    assert not [r for r in found["requires"] if re.search(r"==\s*\d", r)], found["requires"]


def test_a_group_is_made_and_filled_with_the_core_dependencies_alone(
    core_venv: Path, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    rebalanser = core_venv / "bin" / "rebalanser"
    run(rebalanser, "group", "create", "--zk", zk_hosts, "--group", group_path)
    run(rebalanser, "group", "resources", "add", "--zk", zk_hosts, "--group", group_path, "a", "b")
    listed = run(rebalanser, "group", "resources", "list", "--zk", zk_hosts, "--group", group_path).stdout
    assert listed.split() == ["a", "b"] and sorted(zk.get_children(f"{group_path}/resources")) == ["a", "b"]
