"""``make demo`` (``python -m e2e.demo``) end to end, as a user runs it, in a state dir of its own.

The full run needs the local control plane (built on first use, like ``make demo`` itself); the
``--no-cluster`` runs need only ZooKeeper. Each run must show every resource assigned to the three
workers, a rebalance after the SIGKILL, the killed worker getting its share back, and leave no process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e.demo_stack import pid_alive
from tests.support.cluster import REPO, UP_TIMEOUT, controlplane_built

ALL_ASSIGNED = "MILESTONE all 12 resources assigned to 3 workers"
AFTER_KILL = "MILESTONE rebalanced after the kill: all 12 resources assigned to 2 workers"
BACK = "is back: all 12 resources assigned to 3 workers"


def demo_cmd(state: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "e2e.demo", "--state-dir", str(state), *args]


def run_demo(state: Path, *args: str, timeout: float, env: dict[str, str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(demo_cmd(state, *args), cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False, env=env)
    (state / "test-output.txt").write_text(proc.stdout + proc.stderr)
    return proc


def leftovers(state: Path) -> list[str]:
    """Recorded demo processes still running, plus anything whose command line mentions the state dir."""
    entries = json.loads((state / "pids.json").read_text())
    alive = [f"{e['name']} ({e['pid']})" for e in entries if pid_alive(int(e["pid"]), str(e["cmdline"]))]
    found = subprocess.run(["pgrep", "-af", str(state)], capture_output=True, text=True, check=False)
    return alive + found.stdout.splitlines()


def recorded(state: Path) -> set[str]:
    return {str(e["name"]) for e in json.loads((state / "pids.json").read_text())}


def frames(output: str) -> list[str]:
    return output.split("\n---- ")[1:]


def assert_story(output: str) -> None:
    assert ALL_ASSIGNED in output, output[-4000:]
    assert AFTER_KILL in output, output[-4000:]
    assert BACK in output, output[-4000:]
    assert output.index(ALL_ASSIGNED) < output.index("SIGKILL the") < output.index(AFTER_KILL) < output.index(BACK)
    assert "clean: no demo process left" in output


@pytest.mark.e2e
@pytest.mark.timeout(UP_TIMEOUT + 600)
def test_demo_with_control_plane_operator_and_workers(tmp_path: Path) -> None:
    state = tmp_path / "demo"
    timeout = 300.0 if controlplane_built() else UP_TIMEOUT + 300.0
    # As `make demo` runs it (--pods) where the real cluster is not there: one line, then host processes.
    env = {**os.environ, "REBALANSER_CLUSTER_DIR": str(tmp_path / "no-cluster")}
    proc = run_demo(state, "--pods", "--duration", "45", timeout=timeout, env=env)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    fallback = [line for line in out.splitlines() if "running the demo with host processes instead" in line]
    assert len(fallback) == 1 and fallback[0].startswith("make demo: no real cluster"), out[:2000]
    assert_story(out)
    assert "operator running" in out and "as ServiceAccount rebalanser-system/rebalanser-operator" in out
    # The operator's status path is what was shown, with every resource on three workers.
    rg_frames = [f for f in frames(out) if f.splitlines()[1].startswith("source: ResourceGroup status")]
    assert any("phase Stable" in f and "members 3   resources 12   assigned 12   unassigned 0" in f for f in rg_frames)
    assert any("members 2   resources 12   assigned 12   unassigned 0" in f for f in rg_frames)
    assert {"zookeeper", "etcd", "kube-apiserver", "operator", "worker-1", "worker-2", "worker-3"} <= recorded(state)
    assert leftovers(state) == []
    assert not list((state / "cluster").glob("*.pid")) and not (state / "cluster" / "etcd-data").exists()


@pytest.mark.zk
@pytest.mark.timeout(240)
def test_demo_without_cluster(tmp_path: Path) -> None:
    state = tmp_path / "demo"
    proc = run_demo(state, "--no-cluster", "--duration", "30", "--kill-after", "5", "--restart-after", "5",
                    timeout=180)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    assert_story(out)
    assert "source: rebalanser status --json" in out
    assert {"zookeeper", "worker-1", "worker-2", "worker-3"} == recorded(state)
    assert leftovers(state) == []


@pytest.mark.zk
@pytest.mark.timeout(240)
def test_ctrl_c_cleans_up(tmp_path: Path) -> None:
    state = tmp_path / "demo"
    proc = subprocess.Popen(demo_cmd(state, "--no-cluster", "--kill-after", "0"), cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    try:
        for line in proc.stdout:
            lines.append(line)
            if ALL_ASSIGNED in line or time.monotonic() > deadline:
                break
        assert any(ALL_ASSIGNED in line for line in lines), "".join(lines)[-4000:]
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(lines) + rest
    assert proc.returncode == 0, out[-4000:]
    assert "SIGINT received: cleaning up" in out and "clean: no demo process left" in out
    assert leftovers(state) == []
