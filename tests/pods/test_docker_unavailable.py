"""Where Docker cannot run, the install step says why in one line (exit 3), and the pod tests skip."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.kube import DOCKER_SH, DOCKER_UNAVAILABLE_EXIT, REPO


def as_nobody(script: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", "nobody", "--", "env", f"REBALANSER_CACHE={cache}", str(script)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )


def test_install_docker_reports_one_line_without_root() -> None:
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root (and runuser) to run the install step as an unprivileged user")
    with tempfile.TemporaryDirectory() as tmp:  # pytest's own tmp dirs are private to root
        cache = Path(tmp)
        cache.chmod(0o777)
        proc = as_nobody(DOCKER_SH, cache)
        prereqs = as_nobody(REPO / "scripts" / "cluster-prereqs.sh", cache)
    assert proc.returncode == DOCKER_UNAVAILABLE_EXIT, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("docker unavailable: "), lines
    assert prereqs.returncode == 0  # make test goes on
    assert prereqs.stderr.splitlines() == [f"cluster prerequisites skipped: {lines[0]}"]
