"""``make demo`` on the real cluster (``python -m e2e.demo --pods``): the operator and the workers as
pods, the live view from the ResourceGroup's status, a SIGKILLed coordinator restarted by the kubelet,
and everything removed afterwards."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from e2e.demo_pods import NAMESPACE, TOOLS_NAMESPACE
from tests.support.kubectl import Kube
from tests.support.podcluster import REPO

pytestmark = [pytest.mark.pods, pytest.mark.timeout(900)]


def test_pod_demo_tells_the_story_and_cleans_up(kube: Kube, tmp_path: Path) -> None:
    env = {**kube.env(), "REBALANSER_CLUSTER_DIR": str(kube.kubeconfig.parent)}
    proc = subprocess.run(
        # 90 s: the restarted victim gets its share back only with the next full rebalance, once the
        # interval the start-up raised (30 s) has passed; its resources themselves move at once.
        [sys.executable, "-m", "e2e.demo", "--pods", "--state-dir", str(tmp_path / "demo"), "--duration", "90",
         "--kill-after", "5"],
        cwd=REPO, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, check=False, env=env,
    )
    out = proc.stdout + proc.stderr
    (REPO / ".pod-e2e").mkdir(exist_ok=True)
    (REPO / ".pod-e2e" / "demo-pods.txt").write_text(out)
    assert proc.returncode == 0, out[-4000:]
    assert "operator pod Ready" in out
    assert "source: ResourceGroup status (kubectl get rg orders -n rebalanser-demo -o json)" in out
    assert "--set failover.enabled=true" in out  # KubeletConfirmed is inert unless the operator may watch pods
    story = ["MILESTONE all 12 resources assigned to 3 workers", "SIGKILL the coordinator",
             "MILESTONE rebalanced after the kill", "is back (its container restarted by the kubelet)"]
    positions = [out.find(line) for line in story]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), (positions, out[-4000:])
    # The time a user sees, from the workers' own logs: after the kill.
    assert out.find("MILESTONE worked on again") > positions[1], out[-4000:]
    assert "clean:" in out
    for namespace in (NAMESPACE, TOOLS_NAMESPACE):
        phase = kube.kubectl("get", "namespace", namespace, "-o", "jsonpath={.status.phase}", check=False)
        assert phase.returncode != 0 or phase.stdout == "Terminating", f"{namespace} left behind"
