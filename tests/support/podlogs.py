"""Worker pods' own JSON event streams, collected with ``kubectl logs`` while the pods come and go.

    logs = PodLogs(kube, namespace="shop", selector="app.kubernetes.io/name=orders-worker", dir=tmp)
    logs.start()
    ...
    events = logs.events()     # every event of every pod and container instance, sorted by ts
    logs.stop()

Every running container instance is followed (``kubectl logs -f``) from the moment it is seen, so the
lines of a pod that is later deleted are kept; after a restart the previous instance's whole log is
fetched with ``kubectl logs --previous`` as well. Each event gets ``_pid`` = the container's restart
count (its instance), so the checkers in :mod:`tests.support.invariants` tell a restarted worker from
its earlier self. ``ts`` is CLOCK_MONOTONIC, comparable across pods on one node and with the test's
own ``time.monotonic_ns()``.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests.support.invariants import Event
from tests.support.kubectl import Kube, KubeError


def parse_log(text: str, instance: int) -> list[Event]:
    """The JSON events in one container log (other lines, e.g. Python logging on stderr, are skipped)."""
    events = []
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and "event" in event and "id" in event and "ts" in event:
            event["_pid"] = instance
            events.append(event)
    return events


def merge(streams: list[list[Event]]) -> list[Event]:
    """One stream, sorted by ts, without the duplicates that following and ``--previous`` both saw."""
    seen: set[tuple[Any, ...]] = set()
    merged = []
    for stream in streams:
        for e in stream:
            key = (e["id"], e["_pid"], e["event"], e["ts"], e.get("resource"), str(e.get("resources")))
            if key not in seen:
                seen.add(key)
                merged.append(e)
    merged.sort(key=lambda e: int(e["ts"]))
    return merged


class PodLogs:
    def __init__(self, kube: Kube, *, namespace: str, selector: str, dir: Path, container: str = "worker",
                 poll: float = 1.0) -> None:
        self.kube, self.namespace, self.selector, self.container = kube, namespace, selector, container
        self.dir, self.poll = dir, poll
        dir.mkdir(parents=True, exist_ok=True)
        self._followers: dict[tuple[str, int], subprocess.Popen[str]] = {}
        self._previous: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._lock = threading.Lock()
        self.errors: list[str] = []

    def start(self) -> PodLogs:
        self.scan()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            try:
                self.scan()
            except (KubeError, ValueError) as exc:
                self.errors.append(str(exc))

    def scan(self) -> None:
        """Starts a follower for every running container instance not yet followed; fetches the
        previous instance's log after a restart."""
        pods = self.kube.json("get", "pods", "-n", self.namespace, "-l", self.selector)["items"]
        for pod in pods:
            name = pod["metadata"]["name"]
            for status in pod.get("status", {}).get("containerStatuses", []):
                if status["name"] != self.container:
                    continue
                instance = int(status.get("restartCount", 0))
                state = status.get("state", {})
                if ("running" in state or "terminated" in state) and (name, instance) not in self._followers:
                    self._follow(name, instance)
                if instance > 0 and (name, instance - 1) not in self._previous:
                    self._fetch_previous(name, instance - 1)

    def _follow(self, pod: str, instance: int) -> None:
        out = open(self.dir / f"{pod}.{instance}.log", "w")  # noqa: SIM115 (owned by the process)
        proc = self.kube.popen("logs", "-f", pod, "-c", self.container, "-n", self.namespace, stdout=out)
        out.close()
        with self._lock:
            self._followers[(pod, instance)] = proc

    def _fetch_previous(self, pod: str, instance: int) -> None:
        proc = self.kube.kubectl("logs", "--previous", pod, "-c", self.container, "-n", self.namespace,
                                 check=False, timeout=60)
        if proc.returncode == 0:
            (self.dir / f"{pod}.{instance}.previous.log").write_text(proc.stdout)
            self._previous.add((pod, instance))

    def fetch_previous(self, pod: str) -> None:
        """Fetches (again) the log of the previous instance of ``pod``'s container, now."""
        status = self.kube.json("get", "pod", pod, "-n", self.namespace)["status"]
        for container in status.get("containerStatuses", []):
            if container["name"] == self.container and int(container.get("restartCount", 0)) > 0:
                self._fetch_previous(pod, int(container["restartCount"]) - 1)

    def events(self) -> list[Event]:
        streams = []
        for path in sorted(self.dir.glob("*.log")):
            pod_instance = path.name.removesuffix(".log").removesuffix(".previous")
            instance = int(pod_instance.rsplit(".", 1)[1])
            streams.append(parse_log(path.read_text(errors="replace"), instance))
        return merge(streams)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        with self._lock:
            followers = list(self._followers.values())
        for proc in followers:
            if proc.poll() is None:
                proc.terminate()
        for proc in followers:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
