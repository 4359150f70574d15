"""Workers over TLS to a real ZooKeeper (Netty, ``secureClientPort``, PEM stores), with certificates
made at test time: joining over mutual TLS, the clients mutual TLS refuses, server-only TLS, and a
rotation of the files on disk that the worker uses on its next connection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.retry import KazooRetry
from rebalanser.tls import TlsOptions

from tests.integration.conftest import add_resources
from tests.support.tls import CertificateAuthority, Issued, bundle
from tests.support.workers import Group, wait_for
from tests.support.zk import ServerTls, ZkCluster, admin_client, serving_cluster

pytestmark = pytest.mark.zk


@dataclass(frozen=True)
class Pki:
    trusted: CertificateAuthority  # signs the servers' certificates and the accepted clients'
    other: CertificateAuthority  # a CA the servers do not trust (until a rotation makes them)
    server: Issued
    base: Path

    def client_dir(self, name: str, ca: CertificateAuthority | None = None) -> Path:
        """A TLS directory (ca.crt, tls.crt, tls.key) for a client certificate signed by ``ca``."""
        issued = (ca or self.trusted).issue(name)
        return issued.write_directory(self.base / "clients" / name, self.trusted)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    base = tmp_path_factory.mktemp("pki")
    trusted = CertificateAuthority.create(base / "ca-a", "ca-a")
    other = CertificateAuthority.create(base / "ca-b", "ca-b")
    return Pki(trusted, other, trusted.issue("zookeeper", server=True), base)


def _server_tls(pki: Pki, directory: Path, *trusted: CertificateAuthority, client_auth: str = "need") -> ServerTls:
    directory.mkdir(parents=True, exist_ok=True)
    return ServerTls(pki.server.pem_bundle(directory / "server.pem"),
                     bundle(directory / "trust.pem", *(trusted or (pki.trusted,))), client_auth)


@pytest.fixture(scope="module")
def mtls_server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    """Mutual TLS: only clients with a certificate signed by the trusted CA get in."""
    base = tmp_path_factory.mktemp("zk-mtls")
    with serving_cluster(base, tls=_server_tls(pki, base / "stores")) as cluster:
        yield cluster


def _server_log(cluster: ZkCluster) -> str:
    path = cluster.servers[0].data_dir / "zookeeper.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _connects(hosts: str, tls: TlsOptions | None, timeout: float = 60.0) -> bool:
    """Whether a kazoo client gets a session within three connection attempts (its connection loop
    stops once they have failed: a refused handshake is known at once, not after a timeout)."""
    client = KazooClient(hosts=hosts, timeout=5, connection_retry=KazooRetry(max_tries=2, delay=0.2),
                         **(tls.kazoo_arguments() if tls is not None else {}))
    try:
        client.start_async()
        stopped = client._connection.connection_stopped
        wait_for(lambda: client.connected or stopped.is_set(), timeout, f"a verdict on a connection to {hosts}")
        return bool(client.connected)
    finally:
        client.stop()
        client.close()


def test_a_worker_joins_over_mutual_tls_and_status_reads_over_tls(
    pki: Pki, mtls_server: ZkCluster, group_path: str, tmp_path: Path
) -> None:
    with admin_client(mtls_server.hosts) as zk:
        add_resources(zk, group_path, ["r0", "r1", "r2"])
    tls_dir = pki.client_dir("worker-1")
    group = Group(mtls_server.secure_hosts, group_path, tmp_path)
    try:
        group.spawn("w1", "--zk-tls-dir", str(tls_dir))
        group.wait_settled({"r0", "r1", "r2"}, 60)
        worker = group.workers["w1"]
        wait_for(lambda: {e.get("resource") for e in worker.of("tick")} >= {"r0", "r1", "r2"}, 60,
                 "the worker to work on every resource it owns")
        # The server authenticated the worker by its certificate (its own log, not the worker's word).
        assert "Authenticated Id 'CN=worker-1' for scheme 'x509'" in _server_log(mtls_server)

        # `rebalanser status` over TLS, wired by the environment with single files.
        env = {**os.environ, "REBALANSER_ZK": mtls_server.secure_hosts, "REBALANSER_GROUP": group_path,
               "REBALANSER_ZK_TLS_CA": str(tls_dir / "ca.crt"), "REBALANSER_ZK_TLS_CERT": str(tls_dir / "tls.crt"),
               "REBALANSER_ZK_TLS_KEY": str(tls_dir / "tls.key")}
        out = subprocess.run([sys.executable, "-m", "rebalanser.cli", "status", "--json", "--resource", "r1"],
                             capture_output=True, text=True, env=env, timeout=120, check=False)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["owners"] == {"r1": "w1"}
    finally:
        group.stop_all()


def test_mutual_tls_refuses_clients_without_a_trusted_certificate(pki: Pki, mtls_server: ZkCluster) -> None:
    hosts = mtls_server.secure_hosts
    good = TlsOptions.from_directory(str(pki.client_dir("probe-good")))
    assert _connects(hosts, good), "control: a client with a trusted certificate connects"

    without_certificate = TlsOptions(ca=good.ca)
    assert not _connects(hosts, without_certificate), "a client without a certificate got a session"
    assert "Empty client certificate chain" in _server_log(mtls_server)

    untrusted = TlsOptions.from_directory(str(pki.client_dir("probe-untrusted", pki.other)))
    assert not _connects(hosts, untrusted), "a client certificate from an untrusted CA got a session"

    # The other way round: a client that does not trust the server's CA refuses the server.
    distrustful = TlsOptions(ca=str(pki.other.certificate), certificate=good.certificate, key=good.key)
    assert not _connects(hosts, distrustful), "a client accepted a server certificate it cannot verify"
    assert not _connects(hosts, None), "a plain TCP client got a session on the TLS port"


def test_server_only_tls_with_hostname_verification(pki: Pki, tmp_path: Path, group_path: str) -> None:
    with serving_cluster(tmp_path / "zk", tls=_server_tls(pki, tmp_path / "stores", client_auth="none")) as cluster:
        ca_only = TlsOptions(ca=str(pki.trusted.certificate))
        assert _connects(cluster.secure_hosts, ca_only), "server-only TLS: the CA alone suffices"
        by_name = cluster.secure_hosts.replace("127.0.0.1", "localhost")
        assert _connects(by_name, TlsOptions(ca=ca_only.ca, verify_hostname=True)), "the certificate names localhost"
        with admin_client(cluster.hosts) as zk:
            add_resources(zk, group_path, ["a", "b"])
        group = Group(cluster.secure_hosts, group_path, tmp_path)
        try:
            group.spawn("w1", "--zk-tls-ca", str(pki.trusted.certificate))
            group.wait_settled({"a", "b"}, 60)
        finally:
            group.stop_all()


def test_a_worker_uses_rotated_certificate_files_on_its_next_connection(
    pki: Pki, tmp_path: Path, group_path: str
) -> None:
    """The worker keeps running while its files are replaced (as a rotated Secret volume is) and the
    server stops trusting the old certificate: it reconnects with the new files, no restart."""
    stores = tmp_path / "stores"
    tls = _server_tls(pki, stores, pki.trusted, pki.other)  # trusts both during the rotation
    with serving_cluster(tmp_path / "zk", tls=tls) as cluster:
        with admin_client(cluster.hosts) as zk:
            add_resources(zk, group_path, ["r0", "r1"])
        tls_dir = pki.client_dir("rotating-old")
        group = Group(cluster.secure_hosts, group_path, tmp_path, session_timeout=10.0)
        try:
            worker = group.spawn("w1", "--zk-tls-dir", str(tls_dir))
            group.wait_settled({"r0", "r1"}, 60)
            assert "Authenticated Id 'CN=rotating-old'" in _server_log(cluster)

            pki.other.issue("rotating-new").write_directory(tls_dir, pki.trusted)  # the new certificate
            bundle(tls.trust_store, pki.other)  # the old CA is revoked from the server's trust store
            before = len(worker.snapshot())
            server = cluster.servers[0]
            server.stop()
            server.start()
            cluster.wait_serving()

            def reconnected() -> bool:
                events = worker.snapshot()[before:]
                return any(e["event"] == "session" and e["state"] in ("connected", "reconnected") for e in events)

            wait_for(reconnected, 60, lambda: f"the worker to reconnect; events {worker.snapshot()[before:]}")
            assert "Authenticated Id 'CN=rotating-new'" in _server_log(cluster)
            group.wait_settled({"r0", "r1"}, 60)
            assert worker.alive
        finally:
            group.stop_all()
