"""The chart as a dependency of another chart: Helm passes every subchart a ``global`` value, which the
values schema must accept."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.operator.test_chart import CHART, helm  # noqa: F401  (the helm fixture)


def test_the_chart_renders_as_a_subchart_with_global_values(helm: Path, tmp_path: Path) -> None:  # noqa: F811
    parent = tmp_path / "parent"
    (parent / "charts").mkdir(parents=True)
    (parent / "Chart.yaml").write_text("apiVersion: v2\nname: parent\nversion: 1.0.0\n")
    shutil.copytree(CHART, parent / "charts" / CHART.name)
    proc = subprocess.run([str(helm), "template", "rel", str(parent), "--namespace", "ops",
                           "--set", "global.imageRegistry=example"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "kind: Deployment" in proc.stdout
