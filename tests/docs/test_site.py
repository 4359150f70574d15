"""The documentation site builds in strict mode (any warning fails), API reference included."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=300, cwd=config.parent)


def test_the_site_builds_strictly_with_the_api_reference(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = build(REPO / "mkdocs.yml", tmp_path / "site")
    print(f"\nmkdocs build --strict: {time.monotonic() - started:.1f}s")
    assert proc.returncode == 0, proc.stderr[-4000:]
    api = (tmp_path / "site" / "api" / "rebalanser" / "index.html").read_text()
    for name in ("rebalanser.Client", "rebalanser.Options", "rebalanser.Handler", "owns", "on_assigned"):
        assert name in api, f"{name} is missing from the API reference"
    assert ":class:" not in api and 'class="autorefs autorefs-internal"' in api, "docstring roles are not links"
    assert "PrometheusMetrics" in (tmp_path / "site" / "api" / "metrics" / "index.html").read_text()
    assert (tmp_path / "site" / "figures" / "bench-latency.svg").is_file()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The check has teeth: the same configuration over docs with one dangling link does not build."""
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs)
    with (docs / "index.md").open("a") as f:
        f.write("\nSee [a page that does not exist](missing.md).\n")
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    config["docs_dir"] = str(docs)
    config.pop("hooks")
    config["plugins"] = ["search"]  # the API pages then fail too; the link is what this test is about
    config["nav"] = [entry for entry in config["nav"] if "API reference" not in entry]
    for page in (docs / "api").iterdir():
        page.write_text(page.read_text().replace(":::", "::"))
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    proc = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert proc.returncode != 0 and "missing.md" in proc.stderr, proc.stderr[-4000:]
