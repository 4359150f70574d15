"""Workers over TLS to a real ZooKeeper (Netty, ``secureClientPort``, PEM stores), with certificates
made at test time: joining over mutual TLS, the clients mutual TLS refuses, server-only TLS, and a
rotation of the files on disk that the worker uses on its next connection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rebalanser.tls import TlsOptions

from tests.integration.conftest import add_resources
from tests.support.tls import Pki, bundle, connects, server_log
from tests.support.workers import Group, wait_for
from tests.support.zk import ZkCluster, admin_client, serving_cluster

pytestmark = pytest.mark.zk


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.create(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mtls_server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZkCluster]:
    """Mutual TLS: only clients with a certificate signed by the trusted CA get in."""
    base = tmp_path_factory.mktemp("zk-mtls")
    with serving_cluster(base, tls=pki.server_tls(base / "stores")) as cluster:
        yield cluster


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
        assert "Authenticated Id 'CN=worker-1' for scheme 'x509'" in server_log(mtls_server)

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
    assert connects(hosts, good), "control: a client with a trusted certificate connects"

    without_certificate = TlsOptions(ca=good.ca)
    assert not connects(hosts, without_certificate), "a client without a certificate got a session"
    assert "Empty client certificate chain" in server_log(mtls_server)

    untrusted = TlsOptions.from_directory(str(pki.client_dir("probe-untrusted", pki.other)))
    assert not connects(hosts, untrusted), "a client certificate from an untrusted CA got a session"

    # The other way round: a client that does not trust the server's CA refuses the server.
    distrustful = TlsOptions(ca=str(pki.other.certificate), certificate=good.certificate, key=good.key)
    assert not connects(hosts, distrustful), "a client accepted a server certificate it cannot verify"
    assert not connects(hosts, None), "a plain TCP client got a session on the TLS port"


def test_server_only_tls_with_hostname_verification(pki: Pki, tmp_path: Path, group_path: str) -> None:
    with serving_cluster(tmp_path / "zk", tls=pki.server_tls(tmp_path / "stores", client_auth="none")) as cluster:
        ca_only = TlsOptions(ca=str(pki.trusted.certificate))
        assert connects(cluster.secure_hosts, ca_only), "server-only TLS: the CA alone suffices"
        by_name = cluster.secure_hosts.replace("127.0.0.1", "localhost")
        assert connects(by_name, TlsOptions(ca=ca_only.ca, verify_hostname=True)), "the certificate names localhost"
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
    tls = pki.server_tls(stores, pki.trusted, pki.other)  # trusts both during the rotation
    with serving_cluster(tmp_path / "zk", tls=tls) as cluster:
        with admin_client(cluster.hosts) as zk:
            add_resources(zk, group_path, ["r0", "r1"])
        tls_dir = pki.client_dir("rotating-old")
        group = Group(cluster.secure_hosts, group_path, tmp_path, session_timeout=10.0)
        try:
            worker = group.spawn("w1", "--zk-tls-dir", str(tls_dir))
            group.wait_settled({"r0", "r1"}, 60)
            assert "Authenticated Id 'CN=rotating-old'" in server_log(cluster)

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
            assert "Authenticated Id 'CN=rotating-new'" in server_log(cluster)
            group.wait_settled({"r0", "r1"}, 60)
            assert worker.alive
        finally:
            group.stop_all()
