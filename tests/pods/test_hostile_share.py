"""Hostile tenants on the real cluster, attacks 4 and 5 of issue 29: groups that never connect, and a TLS
Secret rotated over and over. One operator (in a namespace of its own) serves a quiet tenant and a noisy
one; the ZooKeeper is a server of its own with ZooKeeper's default connection cap (``maxClientCnxns``
60: the cluster's ensemble, e2e/cluster/zookeeper.yaml, sets it unlimited, which hides attack 3).

- Attack 4: the noisy tenant applies 64 ResourceGroups naming allowed servers that never answer (a
  name that never resolves, a port nobody listens on). The quiet tenant's ordinary reconcile (a
  resource added, until its status shows it) takes at most twice as long as without them.
- Attack 5: the noisy tenant rotates one group's TLS Secret 100 times (a 100 KB CA bundle, each time
  different). The operator's TLS store then holds the live content only; a 700 KB key is refused with
  ``SecretKeyTooLarge`` (condition and Event).

The evidence is read from the API server (statuses, Events) and from the operator pod's /tmp.
"""

from __future__ import annotations

import base64
import json
import statistics
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from rebalanser_operator.zktls import TlsMaterial

from tests.support.kubectl import Kube, KubeError, wait_until
from tests.support.podcluster import IMAGE_REPOSITORY, IMAGE_TAG, REPO

CHART = REPO / "charts" / "rebalanser-operator"
EXAMPLES = REPO / "examples"
OUT = REPO / ".pod-hostile-share"
PREFIX = "rbac-chart-hs"
OPS, QUIET, NOISY, ZK_NS = (f"{PREFIX}-{n}" for n in ("ops", "quiet", "noisy", "zk"))
RELEASE = PREFIX
ZK_CONNECT = f"zk.{ZK_NS}.svc.cluster.local:2181"
#: servers that never answer: a name that never resolves, a port nobody listens on (a trailing dot is
#: refused before any session since connect strings are normalised, in the allow-list too)
NEVER = ("never-resolves.invalid:2181", "127.0.0.1:1")
NOISY_GROUPS = 64
ROTATIONS = 100
SAMPLES = 5
OPERATOR = f"deploy/{RELEASE}-rebalanser-operator"

#: The store of the operator's TLS files in its pod: (contents, bytes, digests).
STORE_SCRIPT = """
import glob, json, os
digests, size = [], 0
for store in glob.glob("/tmp/rebalanser-zk-tls-*"):
    for entry in os.scandir(store):
        if entry.is_dir():
            digests.append(entry.name)
            size += sum(os.path.getsize(os.path.join(entry.path, f)) for f in os.listdir(entry.path))
print(json.dumps([len(digests), size, digests]))
"""


def zookeeper_manifests(image: str) -> list[dict[str, Any]]:
    """e2e/cluster/zookeeper.yaml as one server in namespace ZK_NS, its configuration without the
    ``maxClientCnxns=0`` line that zk-run writes: the server's default cap (60) applies. ``image``: the
    one the cluster's own ensemble runs (tagged with its build at cluster start)."""
    docs = [d for d in yaml.safe_load_all((REPO / "e2e/cluster/zookeeper.yaml").read_text()) if d]
    out = []
    for doc in docs:
        if doc["kind"] == "Namespace":
            doc["metadata"]["name"] = ZK_NS
        else:
            doc["metadata"]["namespace"] = ZK_NS
        if doc["kind"] == "StatefulSet":
            doc["spec"]["replicas"] = 1
            container = doc["spec"]["template"]["spec"]["containers"][0]
            container["image"] = image
            env = {e["name"]: e for e in container["env"]}
            env["ZK_REPLICAS"] = {"name": "ZK_REPLICAS", "value": "1"}
            env["ZK_PEER_DOMAIN"] = {"name": "ZK_PEER_DOMAIN", "value": f"zk-hs.{ZK_NS}.svc.cluster.local"}
            container["env"] = list(env.values())
            container["command"] = ["bash", "-c", "grep -v maxClientCnxns /usr/local/bin/zk-run > /tmp/zk-run && "
                                                  "exec bash /tmp/zk-run"]
        if doc["kind"] == "PodDisruptionBudget":
            continue
        out.append(doc)
    return out


def resource_group(namespace: str, name: str, zookeeper: dict[str, Any], resources: int = 4) -> dict[str, Any]:
    spec = yaml.safe_load((EXAMPLES / "resourcegroup.yaml").read_text())
    spec["metadata"] = {"name": name, "namespace": namespace}
    spec["spec"]["zookeeper"] = {"sessionTimeoutSeconds": 10, **zookeeper}
    for key in ("resourceSets", "workloadRef", "workload"):
        spec["spec"].pop(key, None)
    spec["spec"]["resources"] = [f"r{i}" for i in range(resources)]
    return dict(spec)


def ca_bundle(size: int, rotation: int) -> bytes:
    """A CA bundle of ``size`` bytes, different in each rotation (the operator does not parse it)."""
    line = f"# rotation {rotation} ".ljust(99, "#") + "\n"
    return (line * (size // 100)).encode()


def tls_secret(namespace: str, name: str, ca: bytes) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": name, "namespace": namespace},
            "data": {"ca.crt": base64.b64encode(ca).decode()}}


class Share:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def apply(self, *objects: dict[str, Any]) -> None:
        self.kube.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects), timeout=120)

    def create(self, *objects: dict[str, Any]) -> None:
        """Without kubectl apply's copy in an annotation (limited to 256 KiB)."""
        self.kube.kubectl("create", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects), timeout=120)

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        body = self.kube.maybe_json("get", "rg", name, "-n", namespace) or {}
        return dict(body.get("status") or {})

    def store(self) -> tuple[int, int, list[str]]:
        out = self.kube.kubectl("exec", "-n", OPS, OPERATOR, "--", "python3", "-c", STORE_SCRIPT).stdout
        contents, size, digests = json.loads(out)
        return int(contents), int(size), list(digests)

    def reconcile_seconds(self, resources: int) -> float:
        """The quiet tenant's ordinary reconcile: the spec names ``resources`` resources; how long until
        its status shows them."""
        patch = json.dumps({"spec": {"resources": [f"r{i}" for i in range(resources)]}})
        started = time.monotonic()
        self.kube.kubectl("patch", "rg", "orders", "-n", QUIET, "--type=merge", "-p", patch)
        wait_until(lambda: self.status(QUIET, "orders").get("resources") == resources, 120,
                   lambda: f"the quiet group never showed {resources} resources: {self.status(QUIET, 'orders')}",
                   poll=0.1)
        return time.monotonic() - started

    def delete_namespaces(self) -> None:
        for namespace in (NOISY, QUIET):
            # Groups that never connected have nothing to clean up in ZooKeeper.
            self.kube.kubectl("annotate", "rg", "--all", "-n", namespace, "--overwrite",
                              "rebalanser.io/skip-zookeeper-cleanup=true", check=False)
            try:
                self.kube.kubectl("delete", "rg", "--all", "-n", namespace, "--wait=true", check=False, timeout=90)
            except KubeError:
                pass  # the finalizers go below
            if self.kube.maybe_json("get", "namespace", namespace) is not None:
                for rg in self.kube.json("get", "rg", "-n", namespace)["items"]:
                    self.kube.kubectl("patch", "rg", rg["metadata"]["name"], "-n", namespace, "--type=merge",
                                      "-p", '{"metadata":{"finalizers":null}}', check=False)
        if self.kube.helm("status", RELEASE, "-n", OPS, check=False).returncode == 0:
            self.kube.helm("uninstall", RELEASE, "-n", OPS, "--wait", "--timeout", "120s", check=False)
        for namespace in (NOISY, QUIET, OPS, ZK_NS):
            self.kube.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true", check=False,
                              timeout=180)


@pytest.fixture(scope="module")
def share(kube: Kube) -> Iterator[Share]:
    # the kube fixture brings the cluster up with this checkout's image loaded
    OUT.mkdir(parents=True, exist_ok=True)
    s = Share(kube)
    s.delete_namespaces()
    image = kube.kubectl("get", "statefulset", "zk", "-n", "zookeeper", "-o",
                         "jsonpath={.spec.template.spec.containers[0].image}").stdout.strip()
    s.apply(*zookeeper_manifests(image))
    kube.kubectl("rollout", "status", "statefulset/zk", "-n", ZK_NS, "--timeout=180s", timeout=200)
    for namespace in (OPS, QUIET, NOISY):
        s.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    kube.helm("upgrade", "--install", RELEASE, str(CHART), "-n", OPS,
              "--set", f"image.repository={IMAGE_REPOSITORY}", "--set", f"image.tag={IMAGE_TAG}",
              "--set", f"rbac.watchNamespaces={{{QUIET},{NOISY}}}",
              "--set-json", f"operator.allowedEnsembles={json.dumps([ZK_CONNECT, *NEVER])}",
              "--set", "operator.secretPollSeconds=1",
              "--set", "metrics.serviceMonitor.enabled=false",
              "--wait", "--timeout", "180s", timeout=240)
    try:
        yield s
    finally:
        log = kube.kubectl("logs", "-n", OPS, "-l", "app.kubernetes.io/name=rebalanser-operator", "--tail=-1",
                           check=False).stdout
        (OUT / "operator.log").write_text(log)
        s.delete_namespaces()


def test_the_zookeeper_has_the_default_connection_cap(share: Share) -> None:
    config = share.kube.kubectl("exec", "-n", ZK_NS, "zk-0", "--", "cat", "/data/zoo.cfg").stdout
    assert "clientPort=2181" in config and "maxClientCnxns" not in config, config


def test_unreachable_groups_do_not_delay_another_tenant(share: Share) -> None:
    s = share
    s.apply(resource_group(QUIET, "orders", {"connect": ZK_CONNECT}))
    wait_until(lambda: s.status(QUIET, "orders").get("resources") == 4, 120,
               lambda: f"the quiet group was never synced: {s.status(QUIET, 'orders')}", poll=0.5)
    load_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    quiet = [s.reconcile_seconds(5 + i) for i in range(SAMPLES)]
    s.apply(*(resource_group(NOISY, f"never-{i}", {"connect": NEVER[i % 2]}) for i in range(NOISY_GROUPS)))
    loaded = [s.reconcile_seconds(5 + SAMPLES + i) for i in range(SAMPLES)]
    load_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    reasons = {}
    for i in range(NOISY_GROUPS):
        synced = {c["type"]: c for c in s.status(NOISY, f"never-{i}").get("conditions", [])}.get("ResourcesSynced")
        reasons[f"never-{i}"] = synced.get("reason") if synced else None
    result = {"quiet_seconds": quiet, "loaded_seconds": loaded, "quiet_median": statistics.median(quiet),
              "loaded_median": statistics.median(loaded), "uptime": [load_before, load_after],
              "noisy_reasons": sorted(set(map(str, reasons.values())))}
    (OUT / "share.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nquiet reconcile {statistics.median(quiet):.2f}s (median of {SAMPLES}), with {NOISY_GROUPS} unreachable "
          f"groups {statistics.median(loaded):.2f}s; {load_after}")
    assert statistics.median(loaded) <= 2 * statistics.median(quiet), result


def test_a_hundred_tls_rotations_leave_only_the_live_content_and_a_large_key_is_refused(share: Share) -> None:
    s = share
    s.apply(tls_secret(NOISY, "rotating", ca_bundle(100_000, 0)),
            resource_group(NOISY, "rotating", {"connect": ZK_CONNECT, "tls": {"secret": "rotating"}}))
    for rotation in range(ROTATIONS):
        ca = ca_bundle(100_000, rotation)
        s.apply(tls_secret(NOISY, "rotating", ca))
        digest = TlsMaterial(ca=ca).digest

        def written(digest: str = digest) -> bool:
            return digest in s.store()[2]

        wait_until(written, 60, f"the operator never wrote rotation {rotation}'s content", poll=0.3)
    contents, size, _ = s.store()
    live = len(ca_bundle(100_000, ROTATIONS - 1))
    (OUT / "tls-store.json").write_text(json.dumps({"rotations": ROTATIONS, "contents": contents, "bytes": size,
                                                    "live_bytes": live}) + "\n")
    print(f"\nTLS store after {ROTATIONS} rotations: {contents} content(s), {size} bytes (live content {live})")
    assert contents == 1 and size == live, f"{contents} contents, {size} bytes after {ROTATIONS} rotations"

    s.create(tls_secret(NOISY, "big", ca_bundle(700_000, 0)))
    s.apply(resource_group(NOISY, "big", {"connect": ZK_CONNECT, "tls": {"secret": "big"}}))

    def refused() -> bool:
        synced = {c["type"]: c for c in s.status(NOISY, "big").get("conditions", [])}.get("ResourcesSynced") or {}
        return synced.get("reason") == "SecretKeyTooLarge"

    wait_until(refused, 60, lambda: f"the 700 KB key was not refused: {s.status(NOISY, 'big')}", poll=0.5)
    events = json.dumps(s.kube.json("get", "events", "-n", NOISY, "--field-selector", "involvedObject.name=big"))
    assert "SecretKeyTooLarge" in events
    assert s.store()[1] <= live, "the refused key was written"
