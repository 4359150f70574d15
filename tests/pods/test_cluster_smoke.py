"""The local cluster itself, seen from a pod of the repository image: cluster DNS, the ``kubernetes``
Service with in-cluster configuration, the 3-server ZooKeeper ensemble, Pod Security admission,
controllers (a Job), ``kubectl logs``/``exec``, namespace deletion, and the image's entrypoints on a
read-only root filesystem.
"""

from __future__ import annotations

import json
import textwrap
import time
import uuid
from collections.abc import Iterator

import pytest
import yaml

from tests.support.kube import IMAGE, KubeCluster

pytestmark = [pytest.mark.pods, pytest.mark.timeout(3900)]

ZK_SERVICE = "zk.zookeeper.svc.cluster.local"
ZK_SERVERS = [f"zk-{i}.zk-hs.zookeeper.svc.cluster.local" for i in range(3)]
NAMESPACE_GONE_WITHIN = 120.0

# Runs in the pod: prints one JSON line of what it saw.
PROBE = textwrap.dedent(
    """
    import json, os, socket, sys
    from kazoo.client import KazooClient
    from kubernetes import client, config

    seen = {"resolved": {}}
    for name in sys.argv[1:3]:
        seen["resolved"][name] = socket.gethostbyname(name)
    config.load_incluster_config()
    seen["api_host"] = client.Configuration.get_default_copy().host
    seen["api_version"] = client.VersionApi().get_code().git_version
    path = "/smoke/" + sys.argv[3]
    zk = KazooClient(hosts=sys.argv[2] + ":2181")
    zk.start(timeout=60)
    zk.create(path, sys.argv[3].encode(), makepath=True)
    seen["zk_servers"] = sorted(
        line.split("=", 1)[0] for line in zk.get("/zookeeper/config")[0].decode().splitlines()
        if line.startswith("server.")
    )
    zk.stop()
    seen["read_back"] = {}
    for server in sys.argv[4:]:
        one = KazooClient(hosts=server + ":2181")
        one.start(timeout=60)
        one.sync(path)
        seen["read_back"][server] = one.get(path)[0].decode()
        one.stop()
    print(json.dumps(seen), flush=True)
    """
)

RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


@pytest.fixture
def namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    """A fresh namespace enforcing the restricted Pod Security level; deleted (and awaited) afterwards."""
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    kube_cluster.run_kubectl("create", "namespace", name)
    kube_cluster.run_kubectl("label", "namespace", name, "pod-security.kubernetes.io/enforce=restricted")
    yield name
    delete_namespace(kube_cluster, name)


def delete_namespace(kube: KubeCluster, name: str) -> None:
    kube.run_kubectl("delete", "namespace", name, "--wait=false")
    deadline = time.monotonic() + NAMESPACE_GONE_WITHIN
    while time.monotonic() < deadline:
        if kube.run_kubectl("get", "namespace", name, check=False).returncode != 0:
            return
        time.sleep(1)
    state = kube.run_kubectl("get", "namespace", name, "-o", "yaml", check=False).stdout
    pytest.fail(f"namespace {name} still exists {NAMESPACE_GONE_WITHIN:.0f}s after deletion:\n{state}")


def job(name: str, args: list[str]) -> str:
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "securityContext": RESTRICTED_POD,
                    "containers": [{
                        "name": "probe",
                        "image": IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["python3", "-c", PROBE],
                        "args": args,
                        "securityContext": RESTRICTED_CONTAINER,
                    }],
                }
            },
        },
    }
    return yaml.safe_dump(manifest)


def test_a_pod_reaches_dns_the_api_server_and_the_zookeeper_ensemble(kube_cluster: KubeCluster, namespace: str) -> None:
    kube = kube_cluster
    marker = uuid.uuid4().hex
    kube.run_kubectl("-n", namespace, "apply", "-f", "-",
                     input=job("probe", ["kubernetes.default.svc.cluster.local", ZK_SERVICE, marker, *ZK_SERVERS]))
    done = kube.run_kubectl("-n", namespace, "wait", "--for=condition=Complete", "job/probe", "--timeout=300s",
                            check=False, timeout=330)
    logs = kube.run_kubectl("-n", namespace, "logs", "job/probe", check=False).stdout
    assert done.returncode == 0, f"the probe job did not complete: {done.stderr}\npod log:\n{logs}"
    seen = json.loads(logs.strip().splitlines()[-1])

    service_ip = kube.run_kubectl("-n", "default", "get", "service", "kubernetes",
                                  "-o", "jsonpath={.spec.clusterIP}").stdout
    zk_ip = kube.run_kubectl("-n", "zookeeper", "get", "service", "zk", "-o", "jsonpath={.spec.clusterIP}").stdout
    assert seen["resolved"] == {"kubernetes.default.svc.cluster.local": service_ip, ZK_SERVICE: zk_ip}
    assert seen["api_host"] == f"https://{service_ip}:443"  # in-cluster config: through the Service
    server_version = kube.run_kubectl("version", "-o", "json").stdout
    assert seen["api_version"] == json.loads(server_version)["serverVersion"]["gitVersion"]
    assert seen["zk_servers"] == ["server.1", "server.2", "server.3"]
    assert seen["read_back"] == dict.fromkeys(ZK_SERVERS, marker)  # written once, replicated to all three


def test_restricted_pod_security_is_enforced(kube_cluster: KubeCluster, namespace: str) -> None:
    bare = yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"},
        "spec": {"containers": [{"name": "c", "image": IMAGE, "imagePullPolicy": "Never"}]},
    })
    proc = kube_cluster.run_kubectl("-n", namespace, "apply", "-f", "-", input=bare, check=False)
    assert proc.returncode != 0
    assert 'violates PodSecurity "restricted' in proc.stderr


def test_image_entrypoints_run_read_only_as_non_root(kube_cluster: KubeCluster, namespace: str) -> None:
    """Both console scripts of the one image start on a read-only root filesystem; exec and logs work."""
    pod = yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "entrypoints"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "securityContext": RESTRICTED_POD,
            "containers": [{
                "name": "c", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["sh", "-c", "rebalanser --help >/dev/null && echo worker-cli-ok && exec sleep 600"],
                "securityContext": RESTRICTED_CONTAINER,
            }],
        },
    })
    kube = kube_cluster
    kube.run_kubectl("-n", namespace, "apply", "-f", "-", input=pod)
    kube.run_kubectl("-n", namespace, "wait", "--for=condition=Ready", "pod/entrypoints", "--timeout=180s", timeout=200)
    operator_help = kube.run_kubectl("-n", namespace, "exec", "entrypoints", "--", "rebalanser-operator", "--help")
    assert "usage: rebalanser-operator" in operator_help.stdout
    ident = kube.run_kubectl("-n", namespace, "exec", "entrypoints", "--", "id", "-u").stdout.strip()
    assert ident == "10001"
    write = kube.run_kubectl("-n", namespace, "exec", "entrypoints", "--", "touch", "/opt/venv/x", check=False)
    assert write.returncode != 0 and "Read-only file system" in write.stderr
    deadline = time.monotonic() + 60
    while "worker-cli-ok" not in (logs := kube.run_kubectl("-n", namespace, "logs", "entrypoints").stdout):
        assert time.monotonic() < deadline, f"no worker-cli-ok in the pod log within 60s: {logs!r}"
        time.sleep(1)
