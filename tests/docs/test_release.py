"""The release workflow publishes exactly what `make dist` builds, and the docs say it cannot run here."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())


def steps(job: str) -> list[dict[str, object]]:
    return list(WORKFLOW["jobs"][job]["steps"])


def text(job: str) -> str:
    return yaml.safe_dump(steps(job))


def test_a_tag_publishes_the_wheel_a_signed_multi_arch_image_with_its_sbom_and_the_oci_chart() -> None:
    assert WORKFLOW[True]["push"]["tags"] == ["v*.*.*"]  # YAML reads the key `on` as True
    assert "python -m build" in text("dist") and "helm package" in text("dist") and "chart_readme.py" in text("dist")
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
