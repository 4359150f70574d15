"""The release workflow publishes exactly what `make dist` builds, and the docs say it cannot run here."""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())


def steps(job: str) -> list[dict[str, object]]:
    return list(WORKFLOW["jobs"][job]["steps"])


def text(job: str) -> str:
    return yaml.safe_dump(steps(job))


def test_a_tag_publishes_the_wheel_a_signed_multi_arch_image_with_its_sbom_and_the_oci_chart() -> None:
    assert WORKFLOW[True]["push"]["tags"] == ["v*.*.*"]  # YAML reads the key `on` as True
    assert "python -m build" in text("dist") and "helm package charts/rebalanser-operator " in text("dist")
    assert any("pypi-publish" in str(step.get("uses")) for step in steps("python-package"))
    build = next(step for step in steps("image") if "build-push-action" in str(step.get("uses")))
    platforms = build["with"]["platforms"]  # type: ignore[index]
    assert "linux/arm64" in platforms and "linux/amd64" in platforms
    assert "cosign sign" in text("image") and "cosign attest" in text("image") and "cyclonedx" in text("image")
    assert "helm push" in text("chart")


def test_the_docs_say_the_workflow_cannot_run_here_and_make_dist_builds_what_it_publishes() -> None:
    doc = (REPO / "docs" / "release.md").read_text()
    assert "It cannot run here" in doc and "make dist" in doc
    dist = (REPO / "scripts" / "dist.sh").read_text().replace('"', "")
    for made in ("$PYTHON -m build", "$HELM package", "$DOCKER save", "sbom.cdx.json"):
        assert made in dist, made


PACKAGE_PAGE = REPO / "PACKAGE.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")
BLOB = "https://github.com/rebalanser/rebalanser/blob/main/"


def test_the_package_index_page_is_its_own_with_absolute_links() -> None:
    """The index shows pyproject's readme without the repository beside it: relative links would break
    there, so it is PACKAGE.md (absolute links, each to a file that exists), not the developers' README."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["readme"] == {"file": "PACKAGE.md", "content-type": "text/markdown"}
    links = LINK.findall(PACKAGE_PAGE.read_text())
    assert links and all(link.startswith("https://") for link in links), links
    for link in links:
        if link.startswith(BLOB):
            assert (REPO / link.removeprefix(BLOB)).is_file(), link


@pytest.mark.slow
def test_the_sdist_carries_the_tests_and_the_package_page(tmp_path: Path) -> None:
    """What `make dist` builds first (scripts/dist.sh, stopped after the wheel and the sdist)."""
    proc = subprocess.run([str(REPO / "scripts" / "dist.sh"), str(tmp_path)],
                          env={**os.environ, "DIST_PYTHON_ONLY": "1"}, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sdist,) = tmp_path.glob("rebalanser-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        info = archive.extractfile(next(m for m in archive.getmembers() if m.name.endswith("/PKG-INFO")))
        assert info is not None
        metadata = info.read().decode()
    for carried in ("tests/conftest.py", "tests/unit/test_assignment.py", "tests/operator/test_crd.py",
                    "e2e/lab/cluster.py", "charts/rebalanser-operator/values.yaml",
                    "crds/resourcegroups.rebalanser.io.yaml"):
        assert carried in names, carried
    assert not any("__pycache__" in name for name in names)
    assert PACKAGE_PAGE.read_text().strip() in metadata
    (wheel,) = tmp_path.glob("rebalanser-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert not any(name.startswith("tests/") for name in archive.namelist())
