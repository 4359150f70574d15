"""Mutual TLS to ZooKeeper inside the real cluster: a single ZooKeeper server in the test namespace
serving only TLS (Netty ``secureClientPort``, PEM key and trust stores from a Secret, ``zoo.cfg`` from
a ConfigMap, the cluster's own ZooKeeper image), the chart's operator, a ResourceGroup naming a TLS
Secret, and worker pods wired by the operator's ConfigMap alone (``envFrom``) with that Secret mounted
where the ConfigMap says. Certificates are made by the test (``openssl``).

Evidence: the worker pods' JSON logs (every resource worked on by exactly one worker, no overlap), the
ResourceGroup's status, the ZooKeeper server's log (the certificate subjects it authenticated), and
one-shot ``rebalanser status`` pods with and without the client certificate.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests.support.invariants import liveness_problems, overlaps, owners_in_window, token_regressions
from tests.support.kubectl import Kube, wait_until
from tests.support.podcluster import IMAGE, IMAGE_REPOSITORY, IMAGE_TAG, REPO
from tests.support.podlogs import PodLogs
from tests.support.tls import Pki

pytestmark = [pytest.mark.pods, pytest.mark.timeout(900)]

NS = "rb-tls"
RELEASE = "rb-tls"
GROUP = "secure"
WORKERS = 2
RESOURCES = 6
CLIENT_SECRET = "zk-client-tls"
CA_ONLY_SECRET = "zk-ca-only"
ZK_CONNECT = f"zk-tls.{NS}.svc.cluster.local:2281"
CHART = REPO / "charts" / "rebalanser-operator"
EXAMPLES = REPO / "examples"
OUT = REPO / ".pod-tls"
WORKER_SELECTOR = f"app.kubernetes.io/name={GROUP}-worker"

#: One server, TLS only to clients: the plain port is bound to the pod's loopback (the probes' use).
ZOO_CFG = """\
tickTime=2000
dataDir=/data
clientPort=2181
clientPortAddress=127.0.0.1
secureClientPort=2281
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location=/tls/server.pem
ssl.keyStore.type=PEM
ssl.trustStore.location=/tls/trust.pem
ssl.trustStore.type=PEM
ssl.clientAuth=need
authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
"""

RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000,
                  "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]}}


def zookeeper_image(kube: Kube) -> str:
    """The image the cluster's own ensemble runs (``scripts/cluster.sh`` loaded it into the node)."""
    sts = kube.json("get", "statefulset", "zk", "-n", "zookeeper")
    return str(sts["spec"]["template"]["spec"]["containers"][0]["image"])


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def secret(name: str, data: dict[str, str], kind: str = "Opaque") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": kind, "metadata": {"name": name}, "data": data}


def zookeeper_manifests(pki: Pki, image: str) -> list[dict[str, Any]]:
    server = pki.server
    stores = {"server.pem": b64(server.certificate.read_bytes() + server.key.read_bytes()),
              "trust.pem": b64(pki.trusted.certificate.read_bytes())}
    labels = {"app.kubernetes.io/name": "zk-tls"}
    container = {
        "name": "zookeeper", "image": image, "imagePullPolicy": "IfNotPresent",
        "command": ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:-UsePerfData",
                    "-Dlogback.configurationFile=/opt/zookeeper/conf/logback.xml", "-cp", "/opt/zookeeper/lib/*",
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain", "/conf/zoo.cfg"],
        "ports": [{"name": "secure", "containerPort": 2281}],
        "readinessProbe": {"tcpSocket": {"port": "secure"}, "periodSeconds": 5},
        "securityContext": RESTRICTED_CONTAINER,
        "resources": {"requests": {"cpu": "50m", "memory": "192Mi"}, "limits": {"memory": "384Mi"}},
        "volumeMounts": [{"name": "conf", "mountPath": "/conf", "readOnly": True},
                         {"name": "tls", "mountPath": "/tls", "readOnly": True},
                         {"name": "data", "mountPath": "/data"}, {"name": "tmp", "mountPath": "/tmp"}],
    }
    return [
        secret("zk-server-tls", stores),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "zk-tls-config"}, "data": {"zoo.cfg": ZOO_CFG}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "zk-tls"},
         "spec": {"selector": labels, "ports": [{"name": "secure", "port": 2281, "targetPort": "secure"}]}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "zk-tls", "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"securityContext": RESTRICTED_POD, "terminationGracePeriodSeconds": 5,
                      "containers": [container],
                      "volumes": [{"name": "conf", "configMap": {"name": "zk-tls-config"}},
                                  {"name": "tls", "secret": {"secretName": "zk-server-tls"}},
                                  {"name": "data", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]}}}},
    ]


def group_manifest() -> dict[str, Any]:
    return {
        "apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": GROUP},
        "spec": {
            "zookeeper": {"connect": ZK_CONNECT, "sessionTimeoutSeconds": 10, "tls": {"secret": CLIENT_SECRET}},
            "resourceSets": [{"prefix": f"{GROUP}-", "count": RESOURCES}],
            "rebalance": {"minIntervalSeconds": 1, "maxIntervalSeconds": 30},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": f"{GROUP}-worker"}},
        },
    }


def workers_manifest(tls_dir: str) -> dict[str, Any]:
    """examples/workers.yaml for the group, as it is (``envFrom`` the group's ConfigMap) plus the TLS
    Secret mounted at ``tls_dir`` (the ConfigMap's REBALANSER_ZK_TLS_DIR)."""
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / "workers.yaml").read_text())
    app = f"{GROUP}-worker"
    doc["metadata"] = {"name": app, "labels": {"app.kubernetes.io/name": app}}
    doc["spec"]["replicas"] = WORKERS
    doc["spec"]["minReadySeconds"] = 0
    doc["spec"]["selector"] = {"matchLabels": {"app.kubernetes.io/name": app}}
    pod = doc["spec"]["template"]
    pod["metadata"]["labels"] = {"app.kubernetes.io/name": app}
    container = pod["spec"]["containers"][0]
    container["image"] = IMAGE
    container["envFrom"] = [{"configMapRef": {"name": f"{GROUP}-rebalanser"}}]
    container["volumeMounts"] = [{"name": "zk-tls", "mountPath": tls_dir, "readOnly": True}]
    pod["spec"]["volumes"] = [{"name": "zk-tls", "secret": {"secretName": CLIENT_SECRET}}]
    return doc


def status_pod(name: str, secret_name: str) -> dict[str, Any]:
    """A one-shot ``rebalanser status`` over TLS with ``secret_name`` mounted as its TLS directory."""
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"rebalanser.io/tls-probe": "1"}},
        "spec": {
            "restartPolicy": "Never", "automountServiceAccountToken": False,
            "securityContext": {**RESTRICTED_POD, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001},
            "containers": [{
                "name": "status", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["rebalanser", "status", f"--zk={ZK_CONNECT}", f"--group=/rebalanser/{NS}/{GROUP}",
                            "--zk-tls-dir=/tls", "--json"],
                "securityContext": RESTRICTED_CONTAINER,
                "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": True}],
            }],
            "volumes": [{"name": "tls", "secret": {"secretName": secret_name}}],
        },
    }


@dataclass
class TlsScene:
    kube: Kube
    pki: Pki
    workers: PodLogs | None = None

    def apply(self, *docs: dict[str, Any]) -> None:
        self.kube.kubectl("apply", "-n", NS, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                          "items": list(docs)}))

    def teardown(self) -> None:
        if self.kube.maybe_json("get", "namespace", NS) is None:
            return
        # Workers first, the group while the operator runs, then the operator and the rest.
        self.kube.kubectl("delete", "deployment", f"{GROUP}-worker", "-n", NS, "--wait=true", check=False, timeout=120)
        self.kube.kubectl("delete", "rg", "--all", "-n", NS, "--wait=true", "--timeout=60s", check=False, timeout=90)
        for rg in self.kube.json("get", "rg", "-n", NS)["items"]:
            self.kube.kubectl("patch", "rg", rg["metadata"]["name"], "-n", NS, "--type=merge",
                              "-p", '{"metadata":{"finalizers":null}}', check=False)
        self.kube.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", check=False)
        self.kube.kubectl("delete", "namespace", NS, "--wait=false", check=False)
        wait_until(lambda: self.kube.maybe_json("get", "namespace", NS) is None, 180, f"namespace {NS} stays")

    def status(self) -> dict[str, Any]:
        return dict(self.kube.json("get", "rg", GROUP, "-n", NS).get("status") or {})

    def config(self) -> dict[str, str]:
        found = self.kube.maybe_json("get", "configmap", f"{GROUP}-rebalanser", "-n", NS)
        return dict(found["data"]) if found else {}

    def zookeeper_log(self) -> str:
        return self.kube.kubectl("logs", "-n", NS, "deployment/zk-tls", check=False).stdout

    def run_status_pods(self, pods: dict[str, str]) -> dict[str, tuple[str, str]]:
        """Runs one status pod per name (its Secret as the value), at once; their final phases and logs."""
        for name, secret_name in pods.items():
            self.kube.kubectl("delete", "pod", name, "-n", NS, "--wait=true", check=False)
            self.apply(status_pod(name, secret_name))

        def phase(name: str) -> str | None:
            value = self.kube.json("get", "pod", name, "-n", NS).get("status", {}).get("phase")
            return str(value) if value in ("Succeeded", "Failed") else None

        phases = wait_until(lambda: all(phase(n) for n in pods) and {n: phase(n) for n in pods}, 120,
                            f"status pods {sorted(pods)} did not finish", poll=1.0)
        return {n: (str(phases[n]), self.kube.kubectl("logs", "-n", NS, n, check=False).stdout) for n in pods}


@pytest.fixture(scope="module")
def scene(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsScene]:
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    s = TlsScene(kube, Pki.create(tmp_path_factory.mktemp("pki")))
    s.teardown()
    started = time.monotonic()
    kube.kubectl("create", "namespace", NS)
    try:
        s.apply(*zookeeper_manifests(s.pki, zookeeper_image(kube)),
                secret(CLIENT_SECRET, s.pki.trusted.issue("worker").secret_data(s.pki.trusted), "kubernetes.io/tls"),
                secret(CA_ONLY_SECRET, {"ca.crt": b64(s.pki.trusted.certificate.read_bytes())}))
        kube.helm("upgrade", "--install", RELEASE, str(CHART), "-n", NS, "-f", str(EXAMPLES / "values.yaml"),
                  "--set", f"image.repository={IMAGE_REPOSITORY}", "--set", f"image.tag={IMAGE_TAG}",
                  "--set", f"operator.allowedEnsembles={{{ZK_CONNECT}}}", "--wait", "--timeout", "240s", timeout=300)
        kube.kubectl("rollout", "status", "deployment/zk-tls", "-n", NS, "--timeout=180s", timeout=200)
        s.apply(group_manifest())
        tls_dir = wait_until(lambda: s.config().get("REBALANSER_ZK_TLS_DIR"), 120,
                             lambda: f"the operator's ConfigMap {GROUP}-rebalanser; status {s.status()}")
        s.apply(workers_manifest(tls_dir))
        s.workers = PodLogs(kube, namespace=NS, selector=WORKER_SELECTOR, dir=OUT / "logs").start()
        print(f"\nTLS scene up in {time.monotonic() - started:.1f}s")
        yield s
    finally:
        (OUT / "zookeeper.log").write_text(s.zookeeper_log())
        if s.workers is not None:
            s.workers.stop()
        s.teardown()


def test_workers_share_the_group_over_mutual_tls(scene: TlsScene) -> None:
    config = scene.config()
    assert config["REBALANSER_ZK"] == ZK_CONNECT and config["REBALANSER_ZK_TLS_SECRET"] == CLIENT_SECRET, config
    assert not any("BEGIN" in value for value in config.values()), "key material in the ConfigMap"
    last: dict[str, Any] = {}

    def stable() -> bool:
        nonlocal last
        last = scene.status()
        owners = {m for m, rs in (last.get("assignments") or {}).items() if rs}
        return (last.get("phase") == "Stable" and last.get("members") == WORKERS
                and last.get("assigned") == RESOURCES and len(owners) == WORKERS)

    started = time.monotonic()
    wait_until(stable, 180, lambda: f"{GROUP} not Stable with {WORKERS} members over TLS: {json.dumps(last)[:2000]}",
               poll=1.0)
    print(f"\nStable over mutual TLS {time.monotonic() - started:.1f}s after the workers were applied")
    assert scene.workers is not None
    resources = {f"{GROUP}-{i}" for i in range(RESOURCES)}
    begin = time.monotonic_ns()
    problems: list[str] = []

    def each_worked_by_one() -> bool:
        nonlocal problems
        events = scene.workers.events() if scene.workers else []
        problems = liveness_problems(events, resources, {e["_pid"] for e in events}, begin, time.monotonic_ns())
        return not problems

    # every resource ticked since ``begin``, each by exactly one worker
    wait_until(each_worked_by_one, 60, lambda: f"not every resource worked on by exactly one worker: {problems}")
    events = scene.workers.events()
    ticking = {who for owners in owners_in_window(events, begin, time.monotonic_ns()).values() for who, _ in owners}
    assert ticking == {m for m, rs in last["assignments"].items() if rs}, "the workers ticking are not the owners"
    assert overlaps(events) == [] and token_regressions(events) == []
    text = scene.zookeeper_log()
    assert "Authenticated Id 'CN=worker'" in text, f"no session with the workers' certificate:\n{text[-3000:]}"


def test_status_over_tls_needs_the_client_certificate(scene: TlsScene) -> None:
    results = scene.run_status_pods({"status-with-certificate": CLIENT_SECRET,
                                     "status-without-certificate": CA_ONLY_SECRET})
    phase, out = results["status-with-certificate"]
    assert phase == "Succeeded", out[-2000:]
    assert json.loads(out[out.index("{"):])["members"], out[-2000:]
    phase, out = results["status-without-certificate"]
    assert phase == "Failed", f"a client without a certificate was let in:\n{out[-2000:]}"
    # refused by the server (no session within the client's connect timeout), not a local error
    assert "cannot connect to ZooKeeper at zk-tls" in out or "Connection time-out" in out, out[-2000:]
    assert "Traceback" not in out, out[-2000:]
