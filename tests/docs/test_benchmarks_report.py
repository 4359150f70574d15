"""docs/benchmarks.md is what ``bench.report`` renders from bench/results.json, and the profiling findings in
it are bench/findings.md's: a note written into the report by hand would be lost at the next ``make bench``
(``--merge``, ``--split-only`` and ``--coldstart-only`` render the whole report again)."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from bench.report import markdown
from bench.run import FINDINGS_FILE, load_findings

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results.json"
REPORT = REPO / "docs" / "benchmarks.md"


def test_the_stored_results_carry_every_finding_of_the_findings_file() -> None:
    stored = json.loads(RESULTS.read_text()).get("findings", [])
    written = load_findings(FINDINGS_FILE)
    assert len(written) > 10, f"{FINDINGS_FILE} gave too few findings: {len(written)}"
    missing = [f[:100] for f in written if f not in stored]
    extra = [f[:100] for f in stored if f not in written]
    assert (missing, extra) == ([], []), "bench/results.json's findings differ from bench/findings.md"


def test_the_report_is_the_rendering_of_the_stored_results() -> None:
    rendered = markdown(json.loads(RESULTS.read_text())).splitlines()
    written = REPORT.read_text().splitlines()
    diff = [line[:160] for line in difflib.unified_diff(written, rendered, "docs/benchmarks.md", "rendered",
                                                         lineterm="", n=0)]
    assert diff == [], "docs/benchmarks.md differs from bench.report's rendering of bench/results.json " \
                       "(a hand edit? put findings in bench/findings.md):\n" + "\n".join(diff[:30])
