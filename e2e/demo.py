"""``make demo``: the whole local stack, with a ResourceGroup's status shown live.

    python -m e2e.demo [--duration SECONDS] [--no-cluster] [--state-dir DIR] [--workers N] [--resources N]

1. a real ZooKeeper server (data in STATE/zk);
2. the local control plane (etcd + kube-apiserver, STATE/cluster; built from Go modules on first use);
3. ``helm install`` of charts/rebalanser-operator into ``rebalanser-system`` (CRD, RBAC, ...);
4. the operator, run on this host as the chart's ServiceAccount (there is no kubelet to run its Pod);
5. a ResourceGroup ``demo/orders`` with 12 resources, and three ``rebalanser worker`` processes;
6. the status, refreshed every second; after ~10 s the coordinator is SIGKILLed (its resources move once
   its session expires), ~10 s later it is restarted (it gets its share back).

Ctrl-C (or SIGTERM, or ``--duration``) stops everything it started. ``--no-cluster`` runs steps 1, 5 and 6
only (the resources are created in ZooKeeper directly), for machines without Go.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from e2e.demo_stack import GROUP, HANDLED, NAMESPACE, REPO, DemoError, Interrupted, Say, Settings, Stack, on_signal
from e2e.demo_view import Screen, Snapshot, StatusSource, WorkerRow, describe_rebalance, render
from e2e.lab.cluster import ClusterError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m e2e.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="stop and clean up after this many seconds of live view (default: until Ctrl-C)")
    p.add_argument("--no-cluster", action="store_true", help="ZooKeeper and workers only (no Go needed)")
    p.add_argument("--pods", action="store_true",
                   help="the operator and the workers as pods on the real cluster (make cluster-up); "
                        "host processes when it is not there")
    p.add_argument("--namespace", default=None,
                   help="--pods: the namespace of the chart, the group and the workers (default rebalanser-demo)")
    p.add_argument("--state-dir", type=Path, default=REPO / ".demo", help="where state and logs go (default .demo)")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--resources", type=int, default=12)
    p.add_argument("--kill-after", type=float, default=10.0, metavar="SECONDS",
                   help="SIGKILL the coordinator this long after all resources are assigned (0: never)")
    p.add_argument("--restart-after", type=float, default=10.0, metavar="SECONDS",
                   help="restart the killed worker this long after the kill")
    p.add_argument("--session-timeout", type=float, default=4.0, help="workers' ZooKeeper session timeout")
    p.add_argument("--refresh", type=float, default=1.0, help="seconds between status refreshes")
    args = p.parse_args(argv)
    if args.workers < 1 or args.resources < 1:
        p.error("--workers and --resources must be at least 1")
    return args


@dataclass
class Clock:
    started: float = field(default_factory=time.monotonic)

    def since(self) -> float:
        return time.monotonic() - self.started


def make_say(clock: Clock, log: Path) -> Say:
    """Progress lines go to stdout and to STATE/demo.log; a closed terminal does not stop the clean-up."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")

    def say(message: str) -> None:
        line = f"[demo {clock.since():6.1f}s] {message}"
        with open(log, "a") as out:
            out.write(line + "\n")
        try:
            print(line, flush=True)
        except OSError:  # the terminal went away (SIGHUP, EIO, EPIPE): keep going with the log file
            pass
    return say


# ------------------------------------------------------------------------------------------ scenario


@dataclass
class Scenario:
    """Watches the snapshots, reports what changed, and kills/restarts a worker on schedule."""

    stack: Stack
    screen: Screen
    clock: Clock
    kill_after: float
    restart_after: float
    events: list[str] = field(default_factory=list)
    states: dict[str, str] = field(default_factory=dict)
    stable_at: float | None = None
    victim: str | None = None
    killed_at: float | None = None
    restarted_at: float | None = None
    milestones: set[str] = field(default_factory=set)
    last: Snapshot | None = None

    def event(self, message: str) -> None:
        line = f"+{self.clock.since():5.1f}s {message}"
        self.events.append(line)
        self.screen.event(line)

    def observe(self, s: Snapshot) -> None:
        if s.error is None:
            self._changes(self.last, s)
            self._milestones(s)
            self.last = s

    def _changes(self, old: Snapshot | None, new: Snapshot) -> None:
        if old is None:
            return
        if old.source != new.source:
            self.event(f"status source: {new.source}")
        if new.coordinator != old.coordinator and new.coordinator:
            self.event(f"coordinator {old.coordinator or '-'} -> {new.coordinator} (epoch {new.epoch})")
        if new.phase != old.phase and new.phase:
            self.event(f"phase {old.phase or '-'} -> {new.phase}")
        if new.member_count != old.member_count:
            self.event(f"members {old.member_count} -> {new.member_count}")
        done = (new.last_rebalance or {}).get("completedAt")
        if done and done != (old.last_rebalance or {}).get("completedAt"):
            self.event(f"rebalance: {describe_rebalance(new.last_rebalance)}")

    def _milestones(self, s: Snapshot) -> None:
        n = self.stack.settings.workers
        owners = [m for m, rs in s.assignments.items() if rs]
        if s.complete and len(owners) == min(n, s.resources) and "initial" not in self.milestones:
            self.milestones.add("initial")
            self.stable_at = self.clock.since()
            self.event(f"MILESTONE all {s.resources} resources assigned to {n} workers "
                       f"(coordinator {s.coordinator}, epoch {s.epoch})")
        if self.killed_at is not None and "after-kill" not in self.milestones and s.complete \
                and self.victim not in owners and s.member_count == n - 1:
            self.milestones.add("after-kill")
            self.event(f"MILESTONE rebalanced after the kill: all {s.resources} resources assigned to "
                       f"{n - 1} workers, {self.clock.since() - self.killed_at:.1f}s after SIGKILL "
                       f"(coordinator {s.coordinator}, epoch {s.epoch})")
        if self.restarted_at is not None and "after-restart" not in self.milestones and s.complete \
                and s.member_count == n and (self.victim in owners or s.resources < n):
            self.milestones.add("after-restart")
            self.event(f"MILESTONE {self.victim} is back: all {s.resources} resources assigned to {n} workers, "
                       f"{self.clock.since() - self.restarted_at:.1f}s after the restart")

    def step(self) -> None:
        now = self.clock.since()
        if self.killed_at is None and self.kill_after > 0 and self.stable_at is not None \
                and now >= self.stable_at + self.kill_after:
            self._kill()
        elif self.killed_at is not None and self.restarted_at is None and now >= self.killed_at + self.restart_after:
            self._restart()

    def _kill(self) -> None:
        coordinator = self.last.coordinator if self.last else None
        self.victim = coordinator if coordinator in self.stack.workers else sorted(self.stack.workers)[-1]
        pid = self.stack.kill_worker(self.victim)
        self.killed_at = self.clock.since()
        self.states[self.victim] = "KILLED (SIGKILL)"
        role = "the coordinator " if self.victim == coordinator else ""
        self.event(f"SIGKILL {role}{self.victim} (pid {pid}): its session expires in "
                   f"~{self.stack.settings.session_timeout:g}s, then its resources move")

    def _restart(self) -> None:
        assert self.victim is not None
        pid = self.stack.start_worker(self.victim)
        self.restarted_at = self.clock.since()
        self.states[self.victim] = "running (restarted)"
        self.event(f"restarted {self.victim} (pid {pid})")

    def worker_rows(self) -> list[WorkerRow]:
        return [WorkerRow(m, self.stack.worker_pid(m), self._state(m)) for m in self.stack.settings.member_ids()]

    def _state(self, member_id: str) -> str:
        code = self.stack.worker_exit(member_id)
        return f"exited ({code})" if code is not None else self.states.get(member_id, "running")


# ------------------------------------------------------------------------------------------ phases


def set_up(stack: Stack) -> None:
    stack.start_zookeeper()
    if stack.settings.with_cluster:
        stack.start_control_plane()
        stack.install_chart()
        stack.start_operator()
        stack.apply_resource_group()
        stack.wait_for_group()
    else:
        stack.say("--no-cluster: no control plane, no operator; the resources are created in ZooKeeper directly")
        stack.seed_resources()
    for member_id in stack.settings.member_ids():
        pid = stack.start_worker(member_id)
        stack.say(f"started {member_id} (pid {pid}): rebalanser worker --group /rebalanser/{NAMESPACE}/{GROUP} --json")


def live_view(stack: Stack, args: argparse.Namespace, demo_clock: Clock) -> None:
    """Refreshes until ``--duration`` (counted from here) or a signal; events are stamped on the demo's clock."""
    clock = Clock()
    screen = Screen()
    scenario = Scenario(stack, screen, demo_clock, args.kill_after, args.restart_after)
    source = StatusSource(stack.hosts, stack.cluster, stack.operator_alive)
    stack.say(f"live view: refreshing every {args.refresh:g}s" + (f" for {args.duration:g}s" if args.duration else "")
              + "; Ctrl-C stops and cleans up")
    scenario.event(f"workers started: {', '.join(stack.settings.member_ids())}")
    while args.duration is None or clock.since() < args.duration:
        tick = time.monotonic()
        snapshot = source.read()
        scenario.observe(snapshot)
        scenario.step()
        title = (f"Rebalanser demo - ResourceGroup {NAMESPACE}/{GROUP}   live view +{clock.since():.0f}s"
                 f"{f' of {args.duration:g}s' if args.duration else ''}   (Ctrl-C: stop and clean up)")
        screen.frame(title, render(snapshot, scenario.worker_rows(), scenario.events))
        time.sleep(max(0.0, args.refresh - (time.monotonic() - tick)))
    stack.say(f"--duration {args.duration:g}s reached; milestones: {', '.join(sorted(scenario.milestones)) or 'none'}")


def _ignore_signals() -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        try:
            print(f"[demo] {signal.Signals(signum).name} ignored: cleaning up, please wait", flush=True)
        except OSError:
            pass
    for sig in HANDLED:
        signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    clock = Clock()
    if args.pods and not args.no_cluster:
        from e2e.demo_pods import run_pods
        from e2e.lab.podcluster import NoCluster, pod_cluster

        try:
            kube = pod_cluster()
        except NoCluster as exc:
            print(f"make demo: no real cluster ({exc}); running the demo with host processes instead", flush=True)
        else:
            return run_pods(args, kube, make_say(clock, args.state_dir.resolve() / "demo.log"))
    settings = Settings(state_dir=args.state_dir.resolve(), workers=args.workers, resources=args.resources,
                        session_timeout=args.session_timeout, with_cluster=not args.no_cluster)
    stack = Stack(settings, make_say(clock, settings.state_dir / "demo.log"))
    for sig in HANDLED:
        signal.signal(sig, on_signal)
    code = 0
    try:
        stack.reap_stale()
        set_up(stack)
        live_view(stack, args, clock)
    except Interrupted as exc:
        stack.say(f"{exc} received: cleaning up")
    except (DemoError, ClusterError, TimeoutError, subprocess.SubprocessError) as exc:
        stack.say(f"error: {exc}")
        code = 1
    finally:
        _ignore_signals()
        stack.cleanup()
    return code


if __name__ == "__main__":
    sys.exit(main())
