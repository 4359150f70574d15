"""A hostile ZooKeeper client against an operator with its own identity, on the real cluster (issue 29,
attacks 1, 2 and the smaller ones).

The operator (in a namespace of its own, with the identity from the Secret ``zookeeperIdentity``
names and a path root of its own, ``/hostile-identity/{namespace}``, so that the parents it closes are
never those of the other pod tests on the shared ZooKeeper) serves a victim namespace with the
ResourceGroup ``orders`` (credentials, two worker pods) and an attacker namespace with five groups and
five Secrets. From a tools pod, an anonymous ZooKeeper client then tries what worked before:

- squatting a future group's path (in the victim's namespace and in a namespace not served yet), with
  a planted epoch;
- a forged owner marker and a ``setAcl`` on the victim namespace's root, and on the top node;
- reading a worker's member record (pod name, UID), before and after the victim's Secret rotates.

Evidence from ZooKeeper (each attempt's error, read in the tools pod), the servers' own lists of
clients (``stat``: the operator pod's connections) and the API server (the victim's status): every
attempt is refused with NoAuth, the operator holds one session for seven groups with six Secrets, and
the victim stays Stable with its two members throughout.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.support.hostile import settle
from tests.support.kubectl import Kube, wait_until
from tests.support.podcluster import IMAGE, IMAGE_REPOSITORY, IMAGE_TAG, REPO
from tests.support.podtools import Tools

CHART = REPO / "charts" / "rebalanser-operator"
EXAMPLES = REPO / "examples"
OUT = REPO / ".pod-hostile-identity"
PREFIX = "hid"
OPS, VICTIM, ATTACKER, TOOLS = (f"{PREFIX}-{n}" for n in ("ops", "victim", "attacker", "tools"))
RELEASE = PREFIX
ZK_CONNECT = "zk.zookeeper.svc.cluster.local:2181"
TOP = "/hostile-identity"
GROUP = "orders"
SECRET, PASSWORD, ROTATED = "orders-zk", "victim-password-2e8d41", "victim-rotated-9a07c3"
IDENTITY_SECRET = "rebalanser-zk-identity"
IDENTITY_USER, IDENTITY_PASSWORD = "rebalanser-operator", "operator-password-6b1d9e4f0a3c7e25"
SELECTOR = "app.kubernetes.io/name=orders-worker"

#: Run in the tools pod as an anonymous client: each attempt and what ZooKeeper answered.
ATTACK_SCRIPT = """
import json, sys
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE
zk = KazooClient(hosts=sys.argv[1], timeout=10)
zk.start(timeout=30)
top, victim_root, group = sys.argv[2], sys.argv[3], sys.argv[4]
out = {}
def attempt(name, call):
    try:
        call()
        out[name] = "succeeded"
    except Exception as exc:
        out[name] = type(exc).__name__
attempt("squat a future group", lambda: zk.create(victim_root + "/future/epoch", b"999", makepath=True))
attempt("squat a namespace not served yet", lambda: zk.create(top + "/later/orders", b"", makepath=True))
attempt("forge a marker on the namespace root", lambda: zk.set(victim_root,
        b'{"resourceGroup": {"namespace": "x", "name": "y", "uid": "z", "clusterId": ""}}'))
attempt("setAcl on the namespace root", lambda: zk.set_acls(victim_root, OPEN_ACL_UNSAFE))
attempt("setAcl on the top node", lambda: zk.set_acls(top, OPEN_ACL_UNSAFE))
attempt("setAcl on the group root", lambda: zk.set_acls(group, OPEN_ACL_UNSAFE))
members = zk.get_children(group + "/clients")
out["members"] = len(members)
for member in members[:1]:
    attempt("read a member record", lambda: zk.get(group + "/clients/" + member))
zk.stop()
print(json.dumps(out))
"""

#: The server's connections (``stat``: the cluster's servers allow ruok, srvr, mntr and stat), from the tools pod.
STAT_SCRIPT = """
import socket, sys
host, port = sys.argv[1].split(":")
s = socket.create_connection((host, int(port)), timeout=5)
s.sendall(b"stat")
chunks = []
while True:
    data = s.recv(65536)
    if not data:
        break
    chunks.append(data)
print(b"".join(chunks).decode(errors="replace"))
"""


def secret(namespace: str, name: str, username: str, password: str) -> dict[str, Any]:
    data = {"username": username, "password": password}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": name, "namespace": namespace},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def resource_group(namespace: str, name: str, secret_name: str) -> dict[str, Any]:
    return {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"zookeeper": {"connect": ZK_CONNECT, "sessionTimeoutSeconds": 10,
                                   "credentialsSecretRef": {"name": secret_name}},
                     "resourceSets": [{"prefix": f"{name}-", "count": 12}],
                     "rebalance": {"minIntervalSeconds": 1, "maxIntervalSeconds": 2}}}


def victim_workers() -> dict[str, Any]:
    """examples/workers.yaml with the image under test, two replicas and the group's credentials (the
    operator's id reaches them from the ConfigMap, through envFrom)."""
    deployment = yaml.safe_load((EXAMPLES / "workers.yaml").read_text())
    deployment["metadata"]["namespace"] = VICTIM
    deployment["spec"]["replicas"] = 2
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    container["image"] = IMAGE
    container["env"] = [*container.get("env", []),
                        {"name": "REBALANSER_ZK_USERNAME",
                         "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "username"}}},
                        {"name": "REBALANSER_ZK_PASSWORD_FILE", "value": "/etc/rebalanser/zk/password"}]
    container["volumeMounts"] = [*container.get("volumeMounts", []),
                                 {"name": "zk", "mountPath": "/etc/rebalanser/zk", "readOnly": True}]
    items = [{"key": "password", "path": "password"}]
    pod["volumes"] = [*pod.get("volumes", []), {"name": "zk", "secret": {"secretName": SECRET, "items": items}}]
    return dict(deployment)


class Scene:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.tools = Tools(kube, TOOLS, IMAGE)

    def apply(self, *objects: dict[str, Any]) -> None:
        self.kube.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        body = self.kube.maybe_json("get", "rg", name, "-n", namespace) or {}
        return dict(body.get("status") or {})

    def synced(self, namespace: str, name: str) -> bool:
        conditions = {c["type"]: c for c in self.status(namespace, name).get("conditions", [])}
        return conditions.get("ResourcesSynced", {}).get("status") == "True"

    def victim_stable(self) -> dict[str, Any] | None:
        s = self.status(VICTIM, GROUP)
        return s if s.get("phase") == "Stable" and s.get("members") == 2 and s.get("assigned") == 12 else None

    def attack(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.tools.python(ATTACK_SCRIPT, ZK_CONNECT, TOP, f"{TOP}/{VICTIM}",
                                                              f"{TOP}/{VICTIM}/{GROUP}"))
        return result

    def operator_sessions(self) -> int:
        """The operator pod's connections, in each server's own list of clients (``stat``)."""
        ip = self.kube.json("get", "pods", "-n", OPS, "-l", "app.kubernetes.io/name=rebalanser-operator")[
            "items"][0]["status"]["podIP"]
        total = 0
        for server in range(3):
            out = self.tools.python(STAT_SCRIPT, f"zk-{server}.zk-hs.zookeeper.svc.cluster.local:2181")
            total += sum(1 for line in out.splitlines() if line.strip().startswith(f"/{ip}:"))
        return total

    def clear(self) -> None:
        for namespace in (ATTACKER, VICTIM):
            self.kube.kubectl("delete", "deployment", "--all", "-n", namespace, "--ignore-not-found",
                              "--wait=true", check=False, timeout=120)
            self.kube.kubectl("delete", "rg", "--all", "-n", namespace, "--wait=true", check=False, timeout=60)
            if self.kube.maybe_json("get", "namespace", namespace) is not None:
                for rg in self.kube.json("get", "rg", "-n", namespace)["items"]:
                    self.kube.kubectl("patch", "rg", rg["metadata"]["name"], "-n", namespace, "--type=merge",
                                      "-p", '{"metadata":{"finalizers":null}}', check=False)
        if self.kube.helm("status", RELEASE, "-n", OPS, check=False).returncode == 0:
            self.kube.helm("uninstall", RELEASE, "-n", OPS, "--wait", "--timeout", "120s", check=False)
        for namespace in (ATTACKER, VICTIM, OPS):
            self.kube.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true", check=False,
                              timeout=180)


@pytest.fixture(scope="module")
def scene(kube: Kube) -> Iterator[Scene]:
    # the kube fixture brings the cluster up with this checkout's image loaded
    OUT.mkdir(parents=True, exist_ok=True)
    s = Scene(kube)
    s.clear()
    s.tools.create()
    s.tools.purge(ZK_CONNECT, TOP)  # as the ensemble's administrator: whatever an earlier run left there
    for namespace in (OPS, VICTIM, ATTACKER):
        s.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    s.apply(secret(OPS, IDENTITY_SECRET, IDENTITY_USER, IDENTITY_PASSWORD))
    kube.helm("upgrade", "--install", RELEASE, str(CHART), "-n", OPS,
              "--set", f"image.repository={IMAGE_REPOSITORY}", "--set", f"image.tag={IMAGE_TAG}",
              "--set", f"rbac.watchNamespaces={{{VICTIM},{ATTACKER}}}",
              "--set", f"operator.allowedEnsembles={{{ZK_CONNECT}}}",
              "--set", f"operator.pathRoot={TOP}/{{namespace}}",
              "--set", f"zookeeperIdentity.secretName={IDENTITY_SECRET}",
              "--set", "metrics.serviceMonitor.enabled=false",
              "--wait", "--timeout", "180s", timeout=240)
    try:
        yield s
    finally:
        operator_log = kube.kubectl("logs", "-n", OPS, "-l", "app.kubernetes.io/name=rebalanser-operator",
                                    "--tail=-1", check=False).stdout
        (OUT / "operator.log").write_text(operator_log)
        s.clear()
        s.tools.purge(ZK_CONNECT, TOP)
        s.tools.delete()


def test_a_hostile_zookeeper_client_cannot_squat_lock_or_read(scene: Scene) -> None:
    started = time.monotonic()
    if "--zk-identity-user" not in scene.tools.exec("rebalanser-operator", "--help"):
        pytest.fail(f"the image {IMAGE} has no operator identity (--zk-identity-user): it was not built from "
                    "this checkout")
    scene.apply(secret(VICTIM, SECRET, "orders", PASSWORD), resource_group(VICTIM, GROUP, SECRET), victim_workers())
    attacker_groups = [f"g{i}" for i in range(5)]
    scene.apply(*(secret(ATTACKER, f"zk-{n}", f"tenant-{n}", f"password-{n}-0123456789") for n in attacker_groups),
                *(resource_group(ATTACKER, n, f"zk-{n}") for n in attacker_groups))
    wait_until(lambda: scene.victim_stable() is not None, 240,
               lambda: f"the victim Stable with two members: {scene.status(VICTIM, GROUP)}")
    wait_until(lambda: all(scene.synced(ATTACKER, n) for n in attacker_groups), 90,
               lambda: "the attacker namespace's five groups Synced")
    problems: list[str] = []
    sessions = scene.operator_sessions()
    if sessions != 1:
        problems.append(f"the operator holds {sessions} ZooKeeper sessions for 6 groups with 6 Secrets (want 1)")
    before = scene.attack()
    problems += [f"{name}: {outcome}" for name, outcome in before.items()
                 if name != "members" and outcome != "NoAuthError"]
    if before.get("members") != 2:
        problems.append(f"the victim's members as the attacker listed them: {before.get('members')}")
    # The victim's credentials rotate: its workers' nodes keep their intended ACL (never world-readable).
    scene.apply(secret(VICTIM, SECRET, "orders", ROTATED))
    events = settle(lambda: "SecretApplied" in scene.kube.kubectl("get", "events", "-n", VICTIM).stdout, 120)
    if not events:
        problems.append("the rotated Secret was not applied within 120 s")
    after = scene.attack()
    if after.get("read a member record") != "NoAuthError":
        problems.append(f"after the rotation, a member record: {after.get('read a member record')}")
    status = settle(scene.victim_stable, 120) or scene.status(VICTIM, GROUP)
    if status.get("phase") != "Stable":
        problems.append(f"the victim after the attacks: {status.get('phase')} {status.get('message')}")
    print(json.dumps({"seconds": round(time.monotonic() - started, 1), "sessions": sessions, "before": before,
                      "after": after, "problems": problems}, indent=1))
    (OUT / "result.json").write_text(json.dumps({"before": before, "after": after, "sessions": sessions}))
    assert not problems, "the hostile client got through:\n" + "\n".join(problems)
