"""`python -m bench.compare REF --quick` installs REF's library into a virtualenv of its own and runs the same
cells for both sides alternately (bench/compare.py): here REF is HEAD, one repeat of the smallest size and the
claim book."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.zk


def test_compare_runs_both_libraries_alternately_and_tables_them(tmp_path: Path) -> None:
    out, md = tmp_path / "compare.json", tmp_path / "compare.md"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.compare", "HEAD", "--quick", "--repeats", "1", "--only", "N=3 ,claim book",
         "--out", str(out), "--md", str(md)],
        cwd=REPO, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert "ref-venv" in result["ref"]["library"], result["ref"]
    assert result["head"]["library"].startswith(str(REPO)), result["head"]
    cells = [r["cell"] for r in result["rows"]]
    assert cells == [f"resource-barrier N=3 R=30 {f}" for f in ("join", "leave", "kill")] + [
        f"claim book R=500 {s}" for s in ("claim", "retake", "release")], cells
    for r in result["rows"]:
        assert r["ref_p50_ms"] is not None and r["head_p50_ms"] is not None, r
        assert r["load_warning"] == (r["load_max"] >= 2.0)
    claim, release = result["rows"][3], result["rows"][5]
    assert claim["floor_ms"] > 0 and release["floor_ms"] > 0 and claim["head_x_floor"] and release["ref_x_floor"]
    assert "| cell | REF p50 | HEAD p50 | change | floor (REF x, HEAD x) | load (1 min) |" in md.read_text()
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True).stdout
    assert "ref-src" not in worktrees, "REF's worktree is removed"
