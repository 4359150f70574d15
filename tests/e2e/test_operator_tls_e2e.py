"""The operator over TLS against a real kube-apiserver and a real ZooKeeper with a mutual-TLS port: the
chart installed in a namespace of its own, the operator as a subprocess with the chart's ServiceAccount,
TLS material from a Secret, and a rotation of that Secret taking effect with no operator restart.

Tests run in file order and share one ZooKeeper and one operator (module state).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.exceptions import NoAuthError, NoNodeError
from rebalanser.paths import GroupPaths

from tests.e2e.test_operator_e2e import (
    OperatorProcess,
    children,
    condition,
    install_chart,
    service_account_kubeconfig,
    wait_for,
)
from tests.support.cluster import UP_TIMEOUT, Cluster
from tests.support.tls import CertificateAuthority, Pki, bundle, server_log
from tests.support.zk import ServerTls, ZkCluster, admin_client, serving_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(UP_TIMEOUT)]

NS = "rebalanser-tls"
RELEASE = "rbo-tls"
SERVICE_ACCOUNT = f"{RELEASE}-rebalanser-operator"
GROUP = "payments"
GROUP_PATH = f"/rebalanser/{NS}/{GROUP}"
SECRET = "zk-client-tls"
CREDENTIALS_GRACE = 3  # seconds the old password keeps its access after the Secret changes (300 by default)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.create(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def stores(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> ServerTls:
    """The server trusts both CAs to begin with; the rotation test revokes the first."""
    return pki.server_tls(tmp_path_factory.mktemp("stores"), pki.trusted, pki.other)


@pytest.fixture(scope="module")
def zookeeper(stores: ServerTls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    with serving_cluster(tmp_path_factory.mktemp("tls-zk"), tls=stores) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def installed(kube: Cluster) -> Cluster:
    return install_chart(kube, NS, RELEASE)


@pytest.fixture(scope="module")
def operator(
    installed: Cluster, zookeeper: ZkCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    base = tmp_path_factory.mktemp("operator")
    kubeconfig = service_account_kubeconfig(installed, base / "kubeconfig", NS, SERVICE_ACCOUNT)
    running = OperatorProcess(kubeconfig, installed.env(), base / "operator.log", namespace=NS,
                              args=("--credentials-grace", str(CREDENTIALS_GRACE), "--secret-poll", "2", "--debug"),
                              allowed_ensembles=zookeeper.secure_hosts)
    running.start()
    try:
        yield running
    finally:
        running.stop()


#: Every secret this module gives the operator (TLS keys, passwords): none may reach its log.
SECRETS_GIVEN: list[bytes] = []


def apply_secret(kube: Cluster, data: dict[str, str]) -> None:
    SECRETS_GIVEN.extend(base64.b64decode(value) for key, value in data.items() if key == "tls.key")
    body = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": SECRET, "namespace": NS}, "data": data}
    kube.run_kubectl("apply", "-f", "-", input=json.dumps(body))


def apply_group(kube: Cluster, hosts: str, **spec: Any) -> None:
    body = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
            "metadata": {"name": GROUP, "namespace": NS},
            "spec": {"zookeeper": {"connect": hosts, "tls": {"secret": SECRET}}, **spec}}
    kube.run_kubectl("apply", "-f", "-", input=json.dumps(body))


def wait_status(kube: Cluster, predicate: Any, what: str, timeout: float = 60) -> dict[str, Any]:
    last: dict[str, Any] = {}

    def check() -> dict[str, Any] | None:
        nonlocal last
        proc = kube.run_kubectl("get", "resourcegroup", GROUP, "-n", NS, "-o", "json", check=False)
        last = json.loads(proc.stdout).get("status", {}) if proc.returncode == 0 else {}
        return last if predicate(last) else None

    result: dict[str, Any] = wait_for(check, timeout, lambda: f"{what}; last status: {json.dumps(last)[:3000]}", 0.3)
    return result


def client_certificate(pki: Pki, ca: CertificateAuthority, name: str) -> dict[str, str]:
    return ca.issue(name).secret_data(pki.trusted)


def test_kubectl_explain_describes_the_tls_fields(installed: Cluster) -> None:
    text = installed.run_kubectl("explain", "resourcegroups.spec.zookeeper.tls.secret").stdout
    assert "ca.crt" in text and "tls.key" in text, text
    text = installed.run_kubectl("explain", "resourcegroups.spec.zookeeper.tls.verifyHostname").stdout
    assert "name the hosts" in text, text


def test_the_operator_reconciles_a_group_over_mutual_tls(
    pki: Pki, installed: Cluster, operator: OperatorProcess, zookeeper: ZkCluster
) -> None:
    kube = installed
    apply_secret(kube, client_certificate(pki, pki.trusted, "operator-before"))
    apply_group(kube, zookeeper.secure_hosts, resourceSets=[{"prefix": "pay-", "count": 4}])
    paths = GroupPaths.of(GROUP_PATH)
    with admin_client(zookeeper.hosts) as zk:
        wait_for(lambda: children(zk, paths.resources) == [f"pay-{i}" for i in range(4)], 60,
                 lambda: f"resource znodes over TLS; operator log:\n{operator.text()[-3000:]}")
    st = wait_status(kube, lambda s: condition(s, "ZooKeeperConnected").get("status") == "True",
                     "ZooKeeperConnected over TLS")
    assert condition(st, "ResourcesSynced")["status"] == "True"
    assert "Authenticated Id 'CN=operator-before'" in server_log(zookeeper)
    config = json.loads(kube.run_kubectl("get", "configmap", f"{GROUP}-rebalanser", "-n", NS, "-o", "json").stdout)
    assert config["data"]["REBALANSER_ZK_TLS_SECRET"] == SECRET
    assert config["data"]["REBALANSER_ZK_TLS_DIR"] == "/etc/rebalanser/zookeeper-tls"
    assert not any("BEGIN" in value for value in config["data"].values()), "key material in the ConfigMap"


def test_a_rotated_tls_secret_is_used_without_restarting_the_operator(
    pki: Pki, installed: Cluster, operator: OperatorProcess, zookeeper: ZkCluster, stores: ServerTls
) -> None:
    kube = installed
    assert operator.proc is not None
    pid = operator.proc.pid
    apply_secret(kube, client_certificate(pki, pki.other, "operator-after"))
    wait_for(lambda: "Authenticated Id 'CN=operator-after'" in server_log(zookeeper), 60,
             lambda: f"the operator to connect with the rotated certificate; log:\n{operator.text()[-3000:]}")

    bundle(stores.trust_store, pki.other)  # the first CA is revoked from the server's trust store
    server = zookeeper.servers[0]
    server.stop()
    server.start()
    zookeeper.wait_serving()
    apply_group(kube, zookeeper.secure_hosts, resourceSets=[{"prefix": "pay-", "count": 5}])
    paths = GroupPaths.of(GROUP_PATH)
    with admin_client(zookeeper.hosts) as zk:
        wait_for(lambda: "pay-4" in children(zk, paths.resources), 60,
                 lambda: f"the operator's next write with the new certificate; log:\n{operator.text()[-3000:]}")
    wait_status(kube, lambda s: condition(s, "ZooKeeperConnected").get("status") == "True"
                and s.get("resources") == 5, "connected with 5 resources after the rotation")
    assert operator.proc.pid == pid and operator.proc.poll() is None, "the operator was restarted"


def test_a_rotated_credentials_secret_becomes_the_groups_acl_without_a_restart(
    installed: Cluster, operator: OperatorProcess, zookeeper: ZkCluster
) -> None:
    """A group over TLS with digest credentials: the Secret's new password may write the group at once
    (with a ``SecretApplied`` Event), the old one until the operator's grace period is over, with no spec
    change and no restart."""
    kube = installed
    assert operator.proc is not None
    pid = operator.proc.pid

    def credentials(password: str) -> None:
        SECRETS_GIVEN.append(password.encode())
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "zk-digest", "namespace": NS},
                "stringData": {"username": "ledger-op", "password": password}}
        kube.run_kubectl("apply", "-f", "-", input=json.dumps(body))

    credentials("old-password")
    body = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup",
            "metadata": {"name": "ledger", "namespace": NS},
            "spec": {"zookeeper": {"connect": zookeeper.secure_hosts, "tls": {"secret": SECRET},
                                   "credentialsSecret": "zk-digest"}, "resources": ["l-0"]}}
    kube.run_kubectl("apply", "-f", "-", input=json.dumps(body))
    paths = GroupPaths.of(f"/rebalanser/{NS}/ledger")

    def may_write(password: str) -> bool:
        with admin_client(zookeeper.hosts, auth_data=[("digest", f"ledger-op:{password}")]) as client:
            try:
                client.create(f"{paths.resources}/probe")
            except (NoAuthError, NoNodeError):
                return False
            try:
                client.delete(f"{paths.resources}/probe")
            except NoNodeError:
                pass
            return True

    wait_for(lambda: may_write("old-password") and not may_write("new-password"), 60,
             lambda: f"the group protected by the first password; log:\n{operator.text()[-3000:]}")
    credentials("new-password")
    wait_for(lambda: may_write("new-password"), 60,
             lambda: f"the group's ACL to name the new password; log:\n{operator.text()[-3000:]}")

    def reasons() -> list[str]:
        events = kube.run_kubectl("get", "events", "-n", NS, "--field-selector", "involvedObject.name=ledger",
                                  "-o", "json").stdout
        return [event["reason"] for event in json.loads(events)["items"]]

    # Posted through kopf by the re-apply that went through (the Secret's own step, or the refresh's retry
    # once the new password's session connected).
    wait_for(lambda: "SecretApplied" in reasons(), 30, lambda: f"a SecretApplied Event; Events: {reasons()}")
    wait_for(lambda: not may_write("old-password"), 60,
             lambda: f"the old password's grace period to end; log:\n{operator.text()[-3000:]}")
    assert operator.proc.pid == pid and operator.proc.poll() is None, "the operator was restarted"
    kube.run_kubectl("delete", "resourcegroup", "ledger", "-n", NS, "--wait=true", "--timeout=60s")
    with admin_client(zookeeper.hosts) as zk:
        wait_for(lambda: zk.exists(paths.root) is None, 60, "the ledger group deleted with the new credentials")


def test_the_tls_group_is_deleted_over_tls(installed: Cluster, operator: OperatorProcess, zookeeper: ZkCluster) -> None:
    installed.run_kubectl("delete", "resourcegroup", GROUP, "-n", NS, "--wait=true", "--timeout=60s")
    with admin_client(zookeeper.hosts) as zk:
        wait_for(lambda: zk.exists(GROUP_PATH) is None, 60, f"{GROUP_PATH} deleted")


def test_no_secret_reaches_the_operators_debug_log(operator: OperatorProcess) -> None:
    """The operator ran with --debug: kazoo logged every request it sent (the Auth packets too), kopf
    every event. Before: kazoo's lines showed ``Auth(... auth='ledger-op:old-password')``."""
    text = operator.log.read_bytes()
    assert len(SECRETS_GIVEN) >= 4, "the tests above gave the operator no secrets to look for"
    assert b"Sending request" in text, "the log is not at debug level: the check below would prove nothing"
    for secret in SECRETS_GIVEN:
        body = b"".join(line for line in secret.splitlines() if line and not line.startswith(b"-----"))
        for form in {secret.strip(), body[:64], base64.b64encode(secret)[:64]}:
            assert form not in text, f"a secret ({form[:12]!r}...) is in the operator's log"
    assert b"ledger-op:<redacted>" in text, "no redacted Auth line: the digest credentials were never sent?"


def test_rbac_was_sufficient(operator: OperatorProcess) -> None:
    text = operator.text()
    denied = re.search(r"APIForbiddenError|\b[Ff]orbidden\b|Not enough permissions", text)
    assert denied is None, f"the operator hit an RBAC limit ({denied.group(0) if denied else ''}):\n{text[-3000:]}"


