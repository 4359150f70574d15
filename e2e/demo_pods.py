"""``make demo`` on the real cluster: the operator and the workers as pods of the project's image.

    python -m e2e.demo --pods [--duration SECONDS] [--kill-after SECONDS]

1. ``helm upgrade --install`` of the chart into namespace ``rebalanser-demo`` (restricted Pod
   Security), with examples/values.yaml: the operator runs as a pod;
2. examples/resourcegroup.yaml and examples/workers.yaml (three worker pods) in the same namespace;
3. the same live view as the host demo, from ``kubectl get rg -o json``; after ``--kill-after``
   seconds the coordinator's process is SIGKILLed (from a tools pod sharing the node's PID namespace).
   The group runs with ``failover: KubeletConfirmed``: once the kubelet reports the container ended,
   the operator ends its member, its successor hands its resources out at once (whatever the
   interval the start-up raised), the view says how long that took, and the kubelet restarts the
   container.

Ctrl-C (or ``--duration``) removes what it installed: workers first (they leave gracefully), then the
ResourceGroup (the operator deletes its znodes), then the chart and the namespaces.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from e2e.demo_stack import HANDLED, REPO, Interrupted, Say, on_signal
from e2e.demo_view import Screen, Snapshot, WorkerRow, describe_rebalance, from_resource_group, render
from e2e.lab.kubectl import Kube, KubeError
from e2e.lab.podcluster import IMAGE
from e2e.lab.podtools import Tools

NAMESPACE = "rebalanser-demo"
TOOLS_NAMESPACE = "rebalanser-demo-tools"
RELEASE = "rebalanser"
GROUP = "orders"
WORKERS = "orders-worker"
SELECTOR = "app.kubernetes.io/name=orders-worker"
EXAMPLES = REPO / "examples"
CHART = REPO / "charts" / "rebalanser-operator"
RESTRICTED = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}
FAILOVER = "KubeletConfirmed"  # a dead worker's resources move when the kubelet reports it, not after T
RG_SOURCE = f"ResourceGroup status (kubectl get rg {GROUP} -n {NAMESPACE} -o json), written by the operator pod"


@dataclass
class PodStack:
    kube: Kube
    say: Say
    workers: int = 3
    tools: Tools = field(init=False)

    def __post_init__(self) -> None:
        self.tools = Tools(self.kube, TOOLS_NAMESPACE, IMAGE)

    def set_up(self) -> None:
        meta = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": RESTRICTED}}
        self.kube.kubectl("apply", "-f", "-", input=json.dumps(meta))
        self.say(f"helm upgrade --install {RELEASE} charts/rebalanser-operator -n {NAMESPACE} "
                 "-f examples/values.yaml (namespace labelled pod-security.kubernetes.io/enforce=restricted)")
        self.kube.helm("upgrade", "--install", RELEASE, str(CHART), "-n", NAMESPACE, "-f",
                       str(EXAMPLES / "values.yaml"), "--wait", "--timeout", "240s", timeout=300)
        operator = self.kube.json("get", "pods", "-n", NAMESPACE, "-l",
                                  f"app.kubernetes.io/instance={RELEASE}")["items"]
        self.say(f"operator pod Ready: {', '.join(p['metadata']['name'] for p in operator)}")
        self.say(f"tools pod in {TOOLS_NAMESPACE} (shares the node's PID namespace: it can SIGKILL a worker)")
        self.tools.create()
        group = yaml.safe_load((EXAMPLES / "resourcegroup.yaml").read_text())
        group["spec"]["failover"] = FAILOVER
        self.kube.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=json.dumps(group))
        self.kube.kubectl("apply", "-n", NAMESPACE, "-f", str(EXAMPLES / "workers.yaml"))
        if self.workers != 3:
            self.kube.kubectl("scale", f"deployment/{WORKERS}", "-n", NAMESPACE, f"--replicas={self.workers}")
        self.say(f"applied examples/resourcegroup.yaml with failover: {FAILOVER} and examples/workers.yaml "
                 f"({self.workers} worker pods); "
                 f"in another terminal: kubectl -n {NAMESPACE} get rg -w   (KUBECONFIG={self.kube.kubeconfig})")

    def snapshot(self) -> Snapshot:
        proc = self.kube.kubectl("get", "rg", GROUP, "-n", NAMESPACE, "-o", "json", check=False, timeout=15)
        if proc.returncode != 0:
            return Snapshot(source=RG_SOURCE, error=proc.stderr.strip()[-300:])
        snapshot = from_resource_group(json.loads(proc.stdout))
        if snapshot is None:
            return Snapshot(source=RG_SOURCE, error="the operator has not written the status yet")
        snapshot.source = RG_SOURCE
        return snapshot

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.kube.json("get", "pods", "-n", NAMESPACE, "-l", SELECTOR)["items"]
        return items

    def rows(self) -> list[WorkerRow]:
        rows = []
        for pod in self.pods():
            statuses = pod.get("status", {}).get("containerStatuses", [])
            restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
            state = "Terminating" if pod["metadata"].get("deletionTimestamp") else pod["status"].get("phase", "?")
            note = f", restarts {restarts}" if restarts else ""
            rows.append(WorkerRow(pod["metadata"]["name"], None, f"pod {state}{note}"))
        return rows

    def restarts(self, pod: str) -> int:
        found = self.kube.maybe_json("get", "pod", pod, "-n", NAMESPACE)
        statuses = (found or {}).get("status", {}).get("containerStatuses", [])
        return sum(int(c.get("restartCount", 0)) for c in statuses)

    def cleanup(self) -> None:
        steps: list[tuple[str, Callable[[], object]]] = [
            ("workers", lambda: self.kube.kubectl("delete", "deployment", WORKERS, "-n", NAMESPACE,
                                                  "--ignore-not-found", "--wait=true", "--timeout=90s", timeout=120)),
            ("ResourceGroup", lambda: self.kube.kubectl("delete", "rg", GROUP, "-n", NAMESPACE, "--ignore-not-found",
                                                        "--wait=true", "--timeout=120s", timeout=150)),
            ("chart", lambda: self.kube.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "120s",
                                             check=False, timeout=150)),
            ("namespaces", lambda: [self.kube.kubectl("delete", "namespace", ns, "--wait=false",
                                                      "--ignore-not-found", check=False)
                                    for ns in (NAMESPACE, TOOLS_NAMESPACE)]),
        ]
        for name, step in steps:
            self.say(f"removing the {name}")
            try:
                step()
            except (KubeError, subprocess.SubprocessError) as exc:
                self.say(f"cleanup of the {name} failed: {exc}")
        self.say(f"clean: workers, ResourceGroup (its znodes deleted by the operator), chart and namespaces "
                 f"{NAMESPACE}, {TOOLS_NAMESPACE} removed")


@dataclass
class PodScenario:
    stack: PodStack
    screen: Screen
    started: float
    kill_after: float
    events: list[str] = field(default_factory=list)
    milestones: set[str] = field(default_factory=set)
    last: Snapshot | None = None
    stable_at: float | None = None
    victim: str | None = None
    killed_at: float | None = None
    restarts_before: int = 0

    def since(self) -> float:
        return time.monotonic() - self.started

    def event(self, message: str) -> None:
        line = f"+{self.since():5.1f}s {message}"
        self.events.append(line)
        self.screen.event(line)

    def observe(self, s: Snapshot) -> None:
        if s.error is not None:
            return
        old = self.last
        if old is not None:
            if s.coordinator != old.coordinator and s.coordinator:
                self.event(f"coordinator {old.coordinator or '-'} -> {s.coordinator} (epoch {s.epoch})")
            if s.phase != old.phase and s.phase:
                self.event(f"phase {old.phase or '-'} -> {s.phase}")
            if s.member_count != old.member_count:
                self.event(f"members {old.member_count} -> {s.member_count}")
            done = (s.last_rebalance or {}).get("completedAt")
            if done and done != (old.last_rebalance or {}).get("completedAt"):
                self.event(f"rebalance: {describe_rebalance(s.last_rebalance)}")
        self.last = s
        self._milestones(s)

    def _milestones(self, s: Snapshot) -> None:
        n = self.stack.workers
        holders = [m for m, rs in s.assignments.items() if rs]
        if "initial" not in self.milestones and s.complete and len(holders) == min(n, s.resources):
            self.milestones.add("initial")
            self.stable_at = self.since()
            self.event(f"MILESTONE all {s.resources} resources assigned to {n} workers "
                       f"(coordinator {s.coordinator}, epoch {s.epoch})")
        if self.killed_at is not None and "after-kill" not in self.milestones and s.complete \
                and s.coordinator != self.victim:
            self.milestones.add("after-kill")
            self.event(f"MILESTONE rebalanced after the kill: all {s.resources} resources assigned, new coordinator "
                       f"{s.coordinator} (epoch {s.epoch}), {self.since() - self.killed_at:.1f}s after SIGKILL")
        if "after-kill" in self.milestones and "back" not in self.milestones and self.victim is not None \
                and s.complete and self.victim in holders and len(holders) == min(n, s.resources) \
                and self.stack.restarts(self.victim) > self.restarts_before:
            self.milestones.add("back")
            self.event(f"MILESTONE {self.victim} is back (its container restarted by the kubelet): all "
                       f"{s.resources} resources assigned to {n} workers")

    def step(self) -> None:
        if self.kill_after > 0 and self.killed_at is None and self.stable_at is not None \
                and self.since() >= self.stable_at + self.kill_after and self.last is not None:
            self.victim = self.last.coordinator
            if self.victim is None:
                return
            self.restarts_before = self.stack.restarts(self.victim)
            pids = self.stack.tools.kill_worker(self.victim)
            self.killed_at = self.since()
            self.event(f"SIGKILL the coordinator {self.victim} (node pid {', '.join(map(str, pids))}): the kubelet "
                       f"reports its container ended, the operator ends its member ({FAILOVER}), its resources "
                       "are handed out at once, and the kubelet restarts the container")


def run_pods(args: argparse.Namespace, kube: Kube, say: Say) -> int:
    """The pod demo; returns the exit code. Cleans up whatever it installed."""
    import signal

    for sig in HANDLED:
        signal.signal(sig, on_signal)
    stack = PodStack(kube, say, workers=args.workers)
    code = 0
    try:
        stack.set_up()
        screen = Screen()
        scenario = PodScenario(stack, screen, time.monotonic(), args.kill_after)
        clock = time.monotonic()
        say(f"live view: refreshing every {args.refresh:g}s" + (f" for {args.duration:g}s" if args.duration else "")
            + "; Ctrl-C stops and cleans up")
        while args.duration is None or time.monotonic() - clock < args.duration:
            tick = time.monotonic()
            snapshot = stack.snapshot()
            scenario.observe(snapshot)
            scenario.step()
            title = (f"Rebalanser demo (pods) - ResourceGroup {NAMESPACE}/{GROUP}   live view "
                     f"+{time.monotonic() - clock:.0f}s{f' of {args.duration:g}s' if args.duration else ''}   "
                     "(Ctrl-C: stop and clean up)")
            screen.frame(title, render(snapshot, stack.rows(), scenario.events))
            time.sleep(max(0.0, args.refresh - (time.monotonic() - tick)))
        say(f"--duration {args.duration:g}s reached; milestones: {', '.join(sorted(scenario.milestones)) or 'none'}")
    except Interrupted as exc:
        say(f"{exc} received: cleaning up")
    except (KubeError, AssertionError, subprocess.SubprocessError) as exc:
        say(f"error: {exc}")
        code = 1
    finally:
        for sig in HANDLED:
            signal.signal(sig, signal.SIG_IGN)
        stack.cleanup()
    return code

