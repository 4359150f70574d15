"""The repository states its contracts in its own docs: no tracked file cites a document that lives
outside it (the starting contracts, or any path above the checkout)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUTSIDE = re.compile(r"CONTRACTS\.md|ANCHORS\.md|STYLE\.md|REAL-CLUSTER\.md|\.\./shared/|/work/shared")


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    paths = [REPO / n for n in names.decode().split("\0") if n]
    return [p for p in paths if p.is_file() and p.suffix not in {".png", ".svg", ".gz", ".jar"}]


def test_no_tracked_file_cites_a_document_outside_the_repository() -> None:
    files = tracked_text_files()
    assert len(files) > 100, "git ls-files found too little: not a checkout?"
    hits = []
    for path in files:
        if path == Path(__file__).resolve():
            continue
        text = path.read_text(errors="replace")
        hits += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in OUTSIDE.finditer(text)]
    assert hits == [], "\n".join(hits)
