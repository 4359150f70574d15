"""A tools pod from the project's image, for what only a pod can do: SIGKILL a worker's process, read
ZooKeeper and fetch a Service's URL from inside the cluster.

    tools = Tools(kube, namespace="ops")
    tools.create()                       # Pod "tools" with the node's PID namespace; waits until Ready
    tools.kill_worker("orders-worker-7c9d-abcde")   # SIGKILL the process whose --id is that pod's name
    tools.zk_status(connect, "/rebalanser/shop/orders")    # `rebalanser status --json`, as a dict

A container's main process is PID 1 of its own PID namespace, which ignores SIGKILL sent from inside
that namespace (``kubectl exec POD -- kill -9 1`` does nothing). The tools pod shares the node's PID
namespace (``hostPID``), a parent of every container's, so its SIGKILL is real: the kubelet then
restarts the container. ``hostPID`` is refused under the baseline and restricted Pod Security
Standards, so the tools pod lives in a namespace of its own without them.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from e2e.lab.kubectl import Kube, KubeError
from e2e.lab.podcluster import IMAGE

#: SIGKILLs every worker process whose member id is ``argv[1]``: ``--id=<id>`` on its command line, or
#: (the examples' workers, whose id defaults to their pod's name) ``POD_NAME=<id>`` in its environment.
KILL_SCRIPT = """
import os, signal, sys, time
wanted = "--id=" + sys.argv[1]
pod = ("POD_NAME=" + sys.argv[1]).encode()
found = []
for entry in os.listdir("/proc"):
    if not entry.isdigit():
        continue
    try:
        argv = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace").split("\\0")
        if "worker" not in argv:
            continue
        named = wanted in argv or (not any(a.startswith("--id") for a in argv)
                                   and pod in open(f"/proc/{entry}/environ", "rb").read().split(b"\\0"))
    except OSError:
        continue
    if named:
        found.append(int(entry))
ts = time.monotonic_ns()
for pid in found:
    os.kill(pid, signal.SIGKILL)
print(f"ts={ts}", *found)
"""

FETCH_SCRIPT = """
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())
"""

SRVR_SCRIPT = """
import socket, sys
with socket.create_connection((sys.argv[1], 2181), timeout=5) as s:
    s.sendall(b"srvr")
    print(s.recv(4096).decode(errors="replace"))
"""

#: argv: connect string, the administrator's "user:password" ('' for none), the paths to delete
PURGE_SCRIPT = """
import sys
from kazoo.client import KazooClient
auth = [("digest", sys.argv[2])] if sys.argv[2] else []
zk = KazooClient(hosts=sys.argv[1], timeout=10, auth_data=auth)
zk.start(timeout=30)
for path in sys.argv[3:]:
    if zk.exists(path):
        zk.delete(path, recursive=True)
zk.stop()
"""

#: the local cluster's ZooKeeper administrator (scripts/cluster.sh up makes it): passes every ACL
ADMIN_SECRET, ADMIN_NAMESPACE = "zk-admin", "zookeeper"


def admin_identity(kube: Kube) -> str:
    """The ensemble administrator's ``user:password`` from its Secret, '' when the cluster has none."""
    secret = kube.maybe_json("get", "secret", ADMIN_SECRET, "-n", ADMIN_NAMESPACE)
    if secret is None:
        return ""
    user, password = (base64.b64decode(secret["data"][key]).decode() for key in ("username", "password"))
    return f"{user}:{password}"


def manifest(namespace: str, image: str) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: tools, namespace: {namespace}}}
spec:
  hostPID: true
  terminationGracePeriodSeconds: 0
  containers:
    - name: tools
      image: {image}
      imagePullPolicy: IfNotPresent
      command: ["sleep", "infinity"]
"""


@dataclass(frozen=True)
class Tools:
    kube: Kube
    namespace: str
    image: str = IMAGE

    def create(self, timeout: float = 180.0) -> None:
        meta = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        self.kube.kubectl("apply", "-f", "-", input=json.dumps(meta))
        self.kube.kubectl("apply", "-f", "-", input=manifest(self.namespace, self.image))
        self.kube.kubectl("wait", "--for=condition=Ready", "pod/tools", "-n", self.namespace,
                          f"--timeout={timeout:.0f}s", timeout=timeout + 20)

    def delete(self) -> None:
        self.kube.kubectl("delete", "namespace", self.namespace, "--wait=false", "--ignore-not-found", check=False)

    def exec(self, *command: str, timeout: float = 60.0) -> str:
        return self.kube.kubectl("exec", "-n", self.namespace, "tools", "--", *command, timeout=timeout).stdout

    def python(self, script: str, *args: str, timeout: float = 60.0) -> str:
        return self.exec("python3", "-c", script, *args, timeout=timeout)

    def kill_worker(self, member_id: str) -> list[int]:
        """SIGKILLs every worker process whose ``--id`` is ``member_id``; returns their (node) pids."""
        return self.kill_worker_timed(member_id)[1]

    def kill_worker_timed(self, member_id: str) -> tuple[int, list[int]]:
        """:meth:`kill_worker`, also returning the node's CLOCK_MONOTONIC (ns) right before the SIGKILL."""
        ts, *pids = self.python(KILL_SCRIPT, member_id).split()
        return int(ts.removeprefix("ts=")), [int(pid) for pid in pids]

    def zk_status(self, connect: str, group: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.exec("rebalanser", "status", "--zk", connect, "--group", group,
                                                      "--json"))
        return result

    def purge(self, connect: str, *paths: str, identity: str | None = None, timeout: float = 60.0) -> None:
        """Deletes ``paths`` and everything under them, as ``identity`` (``user:password``), by default the
        ensemble's administrator when the cluster has one: what an earlier run left may carry the ACL of an
        identity nobody holds any more. A failure's message never shows the password."""
        who = admin_identity(self.kube) if identity is None else identity
        try:
            self.python(PURGE_SCRIPT, connect, who, *paths, timeout=timeout)
        except KubeError as exc:
            raise KubeError(str(exc).replace(who, "<identity>") if who else str(exc)) from None

    def fetch(self, url: str) -> str | None:
        """The body at ``url`` as seen from inside the cluster, None when it cannot be fetched."""
        proc = self.kube.kubectl("exec", "-n", self.namespace, "tools", "--", "python3", "-c", FETCH_SCRIPT, url,
                                 check=False, timeout=30)
        return proc.stdout if proc.returncode == 0 else None

    def zookeeper_mode(self, address: str) -> str:
        """``leader``/``follower``/``standalone`` from the four-letter ``srvr`` command ('' if refused)."""
        proc = self.kube.kubectl("exec", "-n", self.namespace, "tools", "--", "python3", "-c", SRVR_SCRIPT, address,
                                 check=False, timeout=30)
        for line in proc.stdout.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return ""
