"""A hostile tenant on a real API server: the chart installed into a namespace of its own, one operator
(the chart's ServiceAccount, as a process) serving two tenant namespaces, one ZooKeeper that another
application (``/brokers``) also uses, and the victim's two workers as processes with its credentials.

The attacker's ResourceGroups (:class:`tests.support.hostile.Victim`): the victim namespace's parent
znode, the claims container inside the victim's group, ``/brokers``, the victim's group through a
chroot in ``connect``, and a server outside the allowed ensembles (a listener here that records every
connection); then the attacker deletes them. Evidence: ZooKeeper snapshots before and after (every
node, its creation, data and ACL of the victim's parent, root, config and resources and of
``/brokers``, the victim's claims), the victim's status and Secret through the API server, the
workers' own JSON event streams (no overlap, no token regression) and the listener. The same attacks
run on the real cluster in tests/pods/test_hostile_tenant.py.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_operator_e2e import BIN, OperatorProcess, service_account_kubeconfig
from tests.support.cluster import REPO, Cluster
from tests.support.hostile import Victim, create_other_app, settle, snapshot
from tests.support.invariants import overlaps, token_regressions
from tests.support.zk import ZkCluster, admin_client, serving_cluster

CHART = REPO / "charts" / "rebalanser-operator"
OPS, VICTIM_NS, ATTACKER = "ht-ops", "ht-victim", "ht-attacker"
RELEASE = "ht"
SERVICE_ACCOUNT = f"{RELEASE}-rebalanser-operator"
GROUP = "orders"
SECRET, PASSWORD = "orders-zk", "victim-password-5d1e"
VICTIM_AUTH = [("digest", f"orders:{PASSWORD}")]  # the snapshots read every node the victim's group holds


class Listener:
    """A TCP server that records who connected and what they sent first (a Secret sent to a server
    outside the allowed ensembles would arrive here)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.hits: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            conn.settimeout(3)
            try:
                first = conn.recv(4096)
            except OSError:
                first = b""
            self.hits.append(f"{peer} sent {len(first)} bytes")
            conn.close()

    def close(self) -> None:
        self.sock.close()


class VictimWorkers:
    """``rebalanser worker`` processes of the victim's group, with its credentials and JSON events."""

    def __init__(self, hosts: str, group: str, password_file: Path, log_dir: Path) -> None:
        self.hosts, self.group, self.password_file, self.log_dir = hosts, group, password_file, log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, member_id: str) -> None:
        out = open(self.log_dir / f"worker-{member_id}.log", "wb")  # noqa: SIM115 - owned by the child
        self.procs.append(subprocess.Popen(
            [str(BIN / "rebalanser"), "worker", "--zk", self.hosts, "--group", self.group, "--id", member_id,
             "--session-timeout", "4", "--json", "--zk-user", "orders", "--zk-password-file", str(self.password_file)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))

    def events(self) -> list[dict[str, Any]]:
        found = []
        for log in sorted(self.log_dir.glob("worker-*.log")):
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(event, dict) and "event" in event:
                        event.setdefault("_pid", 0)
                        found.append(event)
        found.sort(key=lambda e: int(e.get("ts", 0)))
        return found

    def stop_all(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def resource_group(namespace: str, name: str, zookeeper: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"zookeeper": {"sessionTimeoutSeconds": 10, **zookeeper},
                     "resourceSets": [{"prefix": "orders-", "count": 12}],
                     "rebalance": {"minIntervalSeconds": 1, "maxIntervalSeconds": 2}}}


def secret(namespace: str, name: str, username: str, password: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": name, "namespace": namespace},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in (("username", username),
                                                                          ("password", password))}}


def operator_supports(flag: str) -> bool:
    proc = subprocess.run([str(BIN / "rebalanser-operator"), "--help"], capture_output=True, text=True, check=False)
    return flag in proc.stdout


class Scene:
    def __init__(self, kube: Cluster, zookeeper: ZkCluster, base: Path) -> None:
        self.kube, self.zookeeper, self.base = kube, zookeeper, base
        self.victim = Victim(zookeeper.hosts, f"/rebalanser/{VICTIM_NS}", f"/rebalanser/{VICTIM_NS}/{GROUP}",
                             "/brokers")

    def apply(self, *objects: dict[str, Any]) -> None:
        self.kube.run_kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        proc = self.kube.run_kubectl("get", "rg", name, "-n", namespace, "-o", "json", check=False)
        return dict(json.loads(proc.stdout).get("status") or {}) if proc.returncode == 0 else {}

    def victim_stable(self) -> dict[str, Any] | None:
        s = self.status(VICTIM_NS, GROUP)
        ok = s.get("phase") == "Stable" and s.get("members") == 2 and s.get("assigned") == s.get("resources") == 12
        return s if ok else None

    def secret(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(
            self.kube.run_kubectl("get", "secret", SECRET, "-n", VICTIM_NS, "-o", "json").stdout)
        return result


@pytest.fixture(scope="module")
def scene(kube: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    base = tmp_path_factory.mktemp("hostile")
    with serving_cluster(base / "zk", size=1) as zookeeper:
        for namespace in (OPS, VICTIM_NS, ATTACKER):
            kube.create_namespace(namespace)
        proc = subprocess.run(
            [str(kube.helm), "--kubeconfig", str(kube.kubeconfig), "upgrade", "--install", RELEASE, str(CHART),
             "-n", OPS, "--set", "replicas=0", "--set", f"rbac.watchNamespaces={{{VICTIM_NS},{ATTACKER}}}",
             "--set", f"operator.allowedEnsembles={{{zookeeper.hosts}}}"],
            capture_output=True, text=True, env=kube.env(), timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        yield Scene(kube, zookeeper, base)


def test_a_hostile_tenant_cannot_touch_another_tenants_group(scene: Scene) -> None:
    started = time.monotonic()
    kube, victim = scene.kube, scene.victim
    listener = Listener()
    scene.apply(secret(VICTIM_NS, SECRET, "orders", PASSWORD), secret(ATTACKER, "attacker-zk", "attacker", "pw"))
    with admin_client(scene.zookeeper.hosts) as zk:
        create_other_app(zk, victim.other_app)
    if not operator_supports("--allowed-ensemble"):
        pytest.skip("this operator has no tenancy settings (--allowed-ensemble, issue 20): the attacks would "
                    "succeed; run against a build with them")
    extra = ["--namespace", ATTACKER, "--secret-poll", "2", "--allowed-ensemble", scene.zookeeper.hosts]
    operator = OperatorProcess(service_account_kubeconfig(kube, scene.base / "kubeconfig", OPS, SERVICE_ACCOUNT),
                               kube.env(), scene.base / "operator.log", namespace=VICTIM_NS, args=tuple(extra))
    (scene.base / "password").write_text(PASSWORD)
    workers = VictimWorkers(scene.zookeeper.hosts, victim.group, scene.base / "password", scene.base)
    operator.start()
    try:
        scene.apply(resource_group(VICTIM_NS, GROUP, {"connect": scene.zookeeper.hosts, "credentialsSecret": SECRET}))
        for member in ("w1", "w2"):
            workers.start(member)
        status_before = settle(scene.victim_stable, 90)
        assert status_before, f"the victim never became Stable: {scene.status(VICTIM_NS, GROUP)}"
        secret_before = scene.secret()
        with admin_client(scene.zookeeper.hosts, auth_data=VICTIM_AUTH) as zk:
            before = snapshot(zk, victim.root, victim.other_app)
        assert len([p for p in before if p.startswith(f"{victim.group}/owners/")]) == 12, sorted(before)

        attacks = victim.attacks(listener.address)
        scene.apply(*(resource_group(ATTACKER, name, zk_spec) for name, zk_spec in attacks.items()))
        settle(lambda: all(scene.status(ATTACKER, n).get("phase") not in (None, "Pending") for n in attacks), 30)
        refusals = {n: {k: scene.status(ATTACKER, n).get(k) for k in ("phase", "message")} for n in attacks}
        deleted = kube.run_kubectl("delete", "rg", "--all", "-n", ATTACKER, "--wait=true", "--timeout=45s",
                                   check=False, timeout=70)
        stuck = [] if deleted.returncode == 0 else json.loads(
            kube.run_kubectl("get", "rg", "-n", ATTACKER, "-o", "json").stdout)["items"]
        for rg in stuck:  # evidence first; then out of the way
            kube.run_kubectl("patch", "rg", rg["metadata"]["name"], "-n", ATTACKER, "--type=merge",
                             "-p", '{"metadata":{"finalizers":null}}', check=False)

        with admin_client(scene.zookeeper.hosts, auth_data=VICTIM_AUTH) as zk:
            problems = victim.changed(before, snapshot(zk, victim.root, victim.other_app))
        problems += [f"attack {n} was not refused: {r}" for n, r in refusals.items() if r["phase"] != "Error"]
        problems += [f"the attacker's {rg['metadata']['name']} was not released within 45 s" for rg in stuck]
        problems += [f"connection to a server outside the allowed ensembles: {hit}" for hit in listener.hits]
        status_after = settle(scene.victim_stable, 20) or scene.status(VICTIM_NS, GROUP)
        problems += [f"victim status {key}: {status_before.get(key)} -> {status_after.get(key)}"
                     for key in ("phase", "members", "resources", "assigned", "assignments", "coordinator",
                                 "zookeeperPath") if status_after.get(key) != status_before.get(key)]
        secret_after = scene.secret()
        if (secret_after["data"], secret_after["metadata"]["resourceVersion"]) != (
                secret_before["data"], secret_before["metadata"]["resourceVersion"]):
            problems.append("the victim's Secret changed")
        events = workers.events()
        problems += [] if events else ["no worker events"]
        problems += [f"overlap: {o}" for o in overlaps(events)[:5]]
        problems += [f"token regression: {t}" for t in token_regressions(events)[:5]]
        attacker_events = kube.run_kubectl("get", "events", "-n", ATTACKER, "-o", "json").stdout
        problems += [f"{leak!r} in the attacker's Events" for leak in (PASSWORD, '"w1"', '"w2"')
                     if leak in attacker_events]
        print(json.dumps({"seconds": round(time.monotonic() - started, 1), "refusals": refusals,
                          "znodes_compared": len(before), "victim_events": len(events), "problems": problems},
                         indent=1))
        assert not problems, "the hostile tenant got through:\n" + "\n".join(problems[:60])
    finally:
        workers.stop_all()
        kube.run_kubectl("delete", "rg", "--all", "-n", VICTIM_NS, "--wait=true", "--timeout=60s", check=False,
                         timeout=90)
        operator.stop()
        listener.close()
