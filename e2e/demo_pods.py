"""``make demo`` on the real cluster: the operator and the workers as pods of the project's image.

    python -m e2e.demo --pods [--duration SECONDS] [--kill-after SECONDS]

1. ``helm upgrade --install`` of the chart into namespace ``rebalanser-demo`` (``--namespace``; restricted
   Pod Security), with examples/values.yaml and ``failover.enabled=true`` (the operator may watch the
   pods, which ``KubeletConfirmed`` needs): the operator runs as a pod;
2. examples/resourcegroup.yaml and examples/workers.yaml (three worker pods) in the same namespace;
3. the same live view as the host demo, from ``kubectl get rg -o json``; after ``--kill-after``
   seconds the coordinator's process is SIGKILLed (from a tools pod sharing the node's PID namespace).
   The group runs with ``failover: KubeletConfirmed``: once the kubelet reports the container ended,
   the operator ends its member, its successor hands its resources out at once (whatever the
   interval the start-up raised), the view says how long that took (by the status, and by the worker
   pods' own logs: the kill's instant, taken on the node, against their ``tick`` events), and the
   kubelet restarts the container.

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


def rg_source(namespace: str) -> str:
    return f"ResourceGroup status (kubectl get rg {GROUP} -n {namespace} -o json), written by the operator pod"


@dataclass
class PodStack:
    kube: Kube
    say: Say
    workers: int = 3
    namespace: str = NAMESPACE  # the chart, the group and its workers; the tools pod goes to <namespace>-tools
    tools: Tools = field(init=False)

    def __post_init__(self) -> None:
        self.tools = Tools(self.kube, self.tools_namespace, IMAGE)

    @property
    def tools_namespace(self) -> str:
        return TOOLS_NAMESPACE if self.namespace == NAMESPACE else f"{self.namespace}-tools"

    def set_up(self) -> None:
        meta = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace, "labels": RESTRICTED}}
        self.kube.kubectl("apply", "-f", "-", input=json.dumps(meta))
        self.say(f"helm upgrade --install {RELEASE} charts/rebalanser-operator -n {self.namespace} "
                 "-f examples/values.yaml --set failover.enabled=true (the operator may watch the pods: "
                 "KubeletConfirmed; namespace labelled pod-security.kubernetes.io/enforce=restricted)")
        repository, tag = IMAGE.rsplit(":", 1)
        self.kube.helm("upgrade", "--install", RELEASE, str(CHART), "-n", self.namespace, "-f",
                       str(EXAMPLES / "values.yaml"), "--set", "failover.enabled=true",
                       "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
                       "--wait", "--timeout", "240s", timeout=300)
        operator = self.kube.json("get", "pods", "-n", self.namespace, "-l",
                                  f"app.kubernetes.io/instance={RELEASE}")["items"]
        self.say(f"operator pod Ready: {', '.join(p['metadata']['name'] for p in operator)}")
        self.say(f"tools pod in {self.tools_namespace} (shares the node's PID namespace: it can SIGKILL a worker)")
        self.tools.create()
        group = yaml.safe_load((EXAMPLES / "resourcegroup.yaml").read_text())
        group["spec"]["failover"] = FAILOVER
        self.kube.kubectl("apply", "-n", self.namespace, "-f", "-", input=json.dumps(group))
        workers = (EXAMPLES / "workers.yaml").read_text().replace("image: rebalanser:dev", f"image: {IMAGE}")
        self.kube.kubectl("apply", "-n", self.namespace, "-f", "-", input=workers)
        if self.workers != 3:
            self.kube.kubectl("scale", f"deployment/{WORKERS}", "-n", self.namespace, f"--replicas={self.workers}")
        self.say(f"applied examples/resourcegroup.yaml with failover: {FAILOVER} and examples/workers.yaml "
                 f"({self.workers} worker pods); "
                 f"in another terminal: kubectl -n {self.namespace} get rg -w   (KUBECONFIG={self.kube.kubeconfig})")

    def snapshot(self) -> Snapshot:
        proc = self.kube.kubectl("get", "rg", GROUP, "-n", self.namespace, "-o", "json", check=False, timeout=15)
        if proc.returncode != 0:
            return Snapshot(source=rg_source(self.namespace), error=proc.stderr.strip()[-300:])
        snapshot = from_resource_group(json.loads(proc.stdout))
        if snapshot is None:
            return Snapshot(source=rg_source(self.namespace), error="the operator has not written the status yet")
        snapshot.source = rg_source(self.namespace)
        return snapshot

    def pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.kube.json("get", "pods", "-n", self.namespace, "-l", SELECTOR)["items"]
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
        found = self.kube.maybe_json("get", "pod", pod, "-n", self.namespace)
        statuses = (found or {}).get("status", {}).get("containerStatuses", [])
        return sum(int(c.get("restartCount", 0)) for c in statuses)

    def worked_again(self, resources: set[str], since: int) -> float | None:
        """Seconds from ``since`` (the node's CLOCK_MONOTONIC, ns) until every one of ``resources`` was
        worked on, by the worker pods' own logs (their ``tick`` events), or None while one is missing."""
        first: dict[str, int] = {}
        for pod in self.pods():
            proc = self.kube.kubectl("logs", pod["metadata"]["name"], "-c", "worker", "-n", self.namespace,
                                     "--since=5m", check=False, timeout=30)
            for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
                event = _event(line)
                if event and event.get("event") == "tick" and event.get("resource") in resources \
                        and int(event["ts"]) >= since:
                    resource = str(event["resource"])
                    first[resource] = min(first.get(resource, int(event["ts"])), int(event["ts"]))
        if set(first) != resources:
            return None
        return (max(first.values()) - since) / 1e9

    def cleanup(self) -> None:
        steps: list[tuple[str, Callable[[], object]]] = [
            ("workers", lambda: self.kube.kubectl("delete", "deployment", WORKERS, "-n", self.namespace,
                                                  "--ignore-not-found", "--wait=true", "--timeout=90s", timeout=120)),
            ("ResourceGroup", lambda: self.kube.kubectl("delete", "rg", GROUP, "-n", self.namespace,
                                                        "--ignore-not-found", "--wait=true", "--timeout=120s",
                                                        timeout=150)),
            ("chart", lambda: self.kube.helm("uninstall", RELEASE, "-n", self.namespace, "--wait", "--timeout", "120s",
                                             check=False, timeout=150)),
            ("namespaces", lambda: [self.kube.kubectl("delete", "namespace", ns, "--wait=false",
                                                      "--ignore-not-found", check=False)
                                    for ns in (self.namespace, self.tools_namespace)]),
        ]
        for name, step in steps:
            self.say(f"removing the {name}")
            try:
                step()
            except (KubeError, subprocess.SubprocessError) as exc:
                self.say(f"cleanup of the {name} failed: {exc}")
        self.say(f"clean: workers, ResourceGroup (its znodes deleted by the operator), chart and namespaces "
                 f"{self.namespace}, {self.tools_namespace} removed")


def _event(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "ts" in event else None


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
    kill_ns: int = 0  # the node's CLOCK_MONOTONIC right before the SIGKILL (the workers' ``ts`` clock)
    victim_resources: set[str] = field(default_factory=set)
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
        if "after-kill" in self.milestones and "worked-again" not in self.milestones and self.victim_resources:
            seconds = self.stack.worked_again(self.victim_resources, self.kill_ns)
            if seconds is not None:
                self.milestones.add("worked-again")
                self.event(f"MILESTONE worked on again {seconds:.2f}s after SIGKILL: the worker pods' own logs show "
                           f"every one of the {len(self.victim_resources)} resources {self.victim} held worked on by "
                           "a live worker")
        if self.kill_after > 0 and self.killed_at is None and self.stable_at is not None \
                and self.since() >= self.stable_at + self.kill_after and self.last is not None:
            self.victim = self.last.coordinator
            if self.victim is None:
                return
            self.restarts_before = self.stack.restarts(self.victim)
            self.victim_resources = set(self.last.assignments.get(self.victim) or [])
            before = time.monotonic_ns()
            self.kill_ns, pids = self.stack.tools.kill_worker_timed(self.victim)
            after = time.monotonic_ns()
            # The tools pod runs on the node: on a local cluster that is this kernel, and its clock is ours.
            at = self.kill_ns if before <= self.kill_ns <= after else before
            self.killed_at = self.since() - (after - at) / 1e9
            self.event(f"SIGKILL the coordinator {self.victim} (node pid {', '.join(map(str, pids))}): the kubelet "
                       f"reports its container ended, the operator ends its member ({FAILOVER}), its resources "
                       "are handed out at once, and the kubelet restarts the container")


def run_pods(args: argparse.Namespace, kube: Kube, say: Say) -> int:
    """The pod demo; returns the exit code. Cleans up whatever it installed."""
    import signal

    for sig in HANDLED:
        signal.signal(sig, on_signal)
    stack = PodStack(kube, say, workers=args.workers, namespace=args.namespace or NAMESPACE)
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
            title = (f"Rebalanser demo (pods) - ResourceGroup {stack.namespace}/{GROUP}   live view "
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

