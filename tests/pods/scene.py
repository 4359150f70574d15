"""The pod end-to-end scene: namespaces, the chart, examples/, a tools pod, evidence, and what they show.

Everything goes through ``kubectl`` and ``helm`` and the project's image; the tests' evidence is the
worker pods' own JSON logs (:mod:`tests.support.podlogs`) and the ResourceGroup's status.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.kubectl import JsonStream, Kube, wait_until
from tests.support.podcluster import IMAGE, IMAGE_REPOSITORY, IMAGE_TAG, REPO
from tests.support.podlogs import PodLogs
from tests.support.podtools import Tools

EXAMPLES = REPO / "examples"
CHART = REPO / "charts" / "rebalanser-operator"
OUT = REPO / ".pod-e2e"

NS = "rb-pods"  # the operator, the ResourceGroup and the workers (restricted Pod Security)
DOOMED = "rb-pods-doomed"  # a second namespace served by the first operator, deleted with everything in it
OWN = "rb-pods-own"  # a namespace with an operator of its own (a second release), deleted with everything
TOOLS = "rb-pods-tools"  # the tools pod (host PID namespace: it can SIGKILL a worker's process)
RELEASE = "rb-pods"
FULLNAME = f"{RELEASE}-rebalanser-operator"
GROUP = "orders"
WORKERS = "orders-worker"
SELECTOR = "app.kubernetes.io/name=orders-worker"
OPERATOR_SELECTOR = f"app.kubernetes.io/name=rebalanser-operator,app.kubernetes.io/instance={RELEASE}"
ZK_CONNECT = "zk.zookeeper.svc.cluster.local:2181"
ZK_NAMESPACE = "zookeeper"
RESTRICTED = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")}


def example(name: str) -> Any:
    return yaml.safe_load((EXAMPLES / name).read_text())


def worker_args() -> dict[str, str]:
    container = example("workers.yaml")["spec"]["template"]["spec"]["containers"][0]
    return dict(a.removeprefix("--").split("=", 1) for a in container["args"] if "=" in a)


@dataclass(frozen=True)
class Bound:
    """The documented reassignment bound: the worker's session timeout + the rebalance interval + the
    previous owner's stop time (at most its stop timeout) + departure grace, plus ``slack`` for a
    loaded 2-core machine."""

    session_timeout: float
    interval: float
    stop_timeout: float
    grace: float
    slack: float = 10.0

    @property
    def seconds(self) -> float:
        return self.session_timeout + self.interval + self.stop_timeout + self.grace + self.slack

    @classmethod
    def of_examples(cls) -> Bound:
        args, spec = worker_args(), example("resourcegroup.yaml")["spec"]
        return cls(float(args["session-timeout"]), float(spec["rebalance"]["maxIntervalSeconds"]),
                   float(args["stop-timeout"]), float(spec["rebalance"].get("departureGraceSeconds", 0)))


@dataclass
class Scene:
    kube: Kube
    out: Path
    logs: dict[str, PodLogs] = field(default_factory=dict)
    watch: JsonStream | None = None
    durations: dict[str, float] = field(default_factory=dict)

    @property
    def tools(self) -> Tools:
        return Tools(self.kube, TOOLS, IMAGE)

    def zk_status(self, namespace: str) -> dict[str, Any]:
        return self.tools.zk_status(ZK_CONNECT, f"/rebalanser/{namespace}/{GROUP}")

    def purge_groups(self, *namespaces: str) -> None:
        self.tools.purge(ZK_CONNECT, *(f"/rebalanser/{ns}" for ns in namespaces))

    def namespace(self, name: str, labels: dict[str, str]) -> None:
        meta = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
        self.kube.kubectl("apply", "-f", "-", input=json.dumps(meta))

    def rg(self, namespace: str = NS) -> dict[str, Any]:
        result: dict[str, Any] = self.kube.json("get", "rg", GROUP, "-n", namespace)
        return result

    def status(self, namespace: str = NS) -> dict[str, Any]:
        return dict(self.rg(namespace).get("status") or {})

    def worker_pods(self, namespace: str = NS) -> list[dict[str, Any]]:
        pods = self.kube.json("get", "pods", "-n", namespace, "-l", SELECTOR)["items"]
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def ready_workers(self, namespace: str = NS) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.worker_pods(namespace) if _ready(p))

    def operator_pods(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.kube.json("get", "pods", "-n", NS, "-l", OPERATOR_SELECTOR)["items"]
        return items

    def stable(self, namespace: str, members: int, timeout: float = 180.0) -> dict[str, Any]:
        """Waits until the status shows ``members`` live worker pods sharing every resource, Stable."""
        last: dict[str, Any] = {}

        def check() -> dict[str, Any] | None:
            nonlocal last
            last = self.status(namespace)
            pods = set(self.ready_workers(namespace))
            owners = {m for m, rs in (last.get("assignments") or {}).items() if rs}
            ok = (last.get("phase") == "Stable" and last.get("members") == members and len(pods) == members
                  and last.get("resources") and last.get("assigned") == last.get("resources")
                  and owners <= pods and len(owners) == min(members, int(last["resources"])))
            return last if ok else None

        result: dict[str, Any] = wait_until(check, timeout, lambda: (
            f"{namespace}/{GROUP} not Stable with {members} members: status "
            f"{json.dumps({k: last.get(k) for k in ('phase', 'members', 'resources', 'assigned', 'message')})}, "
            f"ready pods {self.ready_workers(namespace)}"), poll=1.0)
        return result

    def apply_examples(self, namespace: str) -> None:
        """kubectl apply examples/resourcegroup.yaml and examples/workers.yaml (with the image under test)."""
        workers = (EXAMPLES / "workers.yaml").read_text().replace("image: rebalanser:dev", f"image: {IMAGE}")
        self.kube.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / "resourcegroup.yaml"))
        self.kube.kubectl("apply", "-n", namespace, "-f", "-", input=workers)

    def helm_install(self, release: str, namespace: str, *extra: str) -> None:
        """helm install the chart with examples/values.yaml (the image, the allowed ensemble; the image under test)."""
        self.kube.helm("upgrade", "--install", release, str(CHART), "-n", namespace, "-f",
                       str(EXAMPLES / "values.yaml"), "--set", f"image.repository={IMAGE_REPOSITORY}",
                       "--set", f"image.tag={IMAGE_TAG}", *extra, "--wait", "--timeout", "240s", timeout=300)

    def follow(self, namespace: str) -> PodLogs:
        logs = PodLogs(self.kube, namespace=namespace, selector=SELECTOR, dir=self.out / "logs" / namespace)
        self.logs[namespace] = logs.start()
        return logs

    def follow_operators(self, namespace: str = NS) -> PodLogs:
        """The operator pods' logs (JSON lines), kept under .pod-e2e/logs for a post-mortem."""
        logs = PodLogs(self.kube, namespace=namespace, selector="app.kubernetes.io/name=rebalanser-operator",
                       dir=self.out / "logs" / f"{namespace}-operator", container="operator")
        self.logs[f"{namespace}-operator"] = logs.start()
        return logs

    def timed(self, name: str, started: float) -> None:
        self.durations[name] = round(time.monotonic() - started, 1)
        (self.out / "durations.json").write_text(json.dumps(self.durations, indent=1) + "\n")

    def close(self) -> None:
        for logs in self.logs.values():
            logs.stop()
        if self.watch is not None:
            self.watch.stop()


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def ready_condition(status: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), {})


def owners(status: dict[str, Any]) -> dict[str, list[str]]:
    return {m: list(rs) for m, rs in (status.get("assignments") or {}).items() if rs}
