"""Test certificates, made at test time with the ``openssl`` command (EC P-256, valid for two days).

    ca = CertificateAuthority.create(tmp_path / "ca-a", "ca-a")
    server = ca.issue("zookeeper", server=True)        # SAN localhost, 127.0.0.1
    client = ca.issue("worker-1")
    client.write_directory(tmp_path / "tls", ca)       # ca.crt, tls.crt, tls.key (a TLS Secret's keys)
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry
from rebalanser.tls import CA_FILE, CERTIFICATE_FILE, KEY_FILE, TlsOptions

from tests.support.workers import wait_for
from tests.support.zk import ServerTls, ZkCluster

DAYS = "2"


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the TLS tests need the openssl command (Debian package openssl)")
    proc = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {proc.stderr}")


@dataclass(frozen=True)
class Issued:
    """A certificate and its unencrypted PKCS#8 key, as PEM files."""

    name: str
    certificate: Path
    key: Path

    def pem_bundle(self, path: Path) -> Path:
        """Certificate and key in one PEM file (a ZooKeeper PEM key store)."""
        path.write_bytes(self.certificate.read_bytes() + self.key.read_bytes())
        return path

    def write_directory(self, directory: Path, ca: CertificateAuthority | None) -> Path:
        """The files a mounted TLS Secret holds, replaced atomically (each file renamed into place)."""
        directory.mkdir(parents=True, exist_ok=True)
        contents = {CERTIFICATE_FILE: self.certificate.read_bytes(), KEY_FILE: self.key.read_bytes()}
        if ca is not None:
            contents[CA_FILE] = ca.certificate.read_bytes()
        for name, data in contents.items():
            staged = directory / f".{name}.new"
            staged.write_bytes(data)
            os.replace(staged, directory / name)
        return directory

    def secret_data(self, ca: CertificateAuthority | None) -> dict[str, str]:
        """The ``data`` of a Kubernetes TLS Secret (base64 values)."""
        data = {CERTIFICATE_FILE: self.certificate.read_bytes(), KEY_FILE: self.key.read_bytes()}
        if ca is not None:
            data[CA_FILE] = ca.certificate.read_bytes()
        return {key: base64.b64encode(value).decode() for key, value in data.items()}


@dataclass(frozen=True)
class CertificateAuthority:
    name: str
    directory: Path
    certificate: Path
    key: Path

    @staticmethod
    def create(directory: Path, name: str) -> CertificateAuthority:
        directory.mkdir(parents=True, exist_ok=True)
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", "ca.key", "-out", "ca.crt", "-days", DAYS, "-subj", f"/CN={name}",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
                 cwd=directory)
        return CertificateAuthority(name, directory, directory / "ca.crt", directory / "ca.key")

    def issue(self, name: str, *, server: bool = False, subject: str | None = None) -> Issued:
        """A certificate for ``name`` (CN, or ``subject`` in openssl's ``/C=../O=../CN=..`` form, with
        ``+`` joining a multi-valued name); a server's also names localhost and 127.0.0.1."""
        out = self.directory / name
        out.mkdir(exist_ok=True)
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-utf8", "-multivalue-rdn",
                 "-keyout", "tls.key", "-out", "tls.csr", "-subj", subject or f"/CN={name}", cwd=out)
        extensions = ["extendedKeyUsage=serverAuth,clientAuth" if server else "extendedKeyUsage=clientAuth"]
        if server:
            extensions.append("subjectAltName=DNS:localhost,IP:127.0.0.1")
        (out / "ext.cnf").write_text("\n".join(extensions) + "\n")
        _openssl("x509", "-req", "-in", "tls.csr", "-CA", str(self.certificate), "-CAkey", str(self.key),
                 "-CAcreateserial", "-out", "tls.crt", "-days", DAYS, "-extfile", "ext.cnf", cwd=out)
        return Issued(name, out / "tls.crt", out / "tls.key")


def bundle(path: Path, *authorities: CertificateAuthority) -> Path:
    """Several CA certificates in one PEM file (a trust store)."""
    path.write_bytes(b"".join(ca.certificate.read_bytes() for ca in authorities))
    return path


@dataclass(frozen=True)
class Pki:
    """Two CAs: ``trusted`` signs the servers' certificate and the clients the servers accept; ``other``
    is one the servers do not trust (until a rotation makes them)."""

    trusted: CertificateAuthority
    other: CertificateAuthority
    server: Issued
    base: Path

    @staticmethod
    def create(base: Path) -> Pki:
        trusted = CertificateAuthority.create(base / "ca-a", "ca-a")
        other = CertificateAuthority.create(base / "ca-b", "ca-b")
        return Pki(trusted, other, trusted.issue("zookeeper", server=True), base)

    def client_dir(self, name: str, ca: CertificateAuthority | None = None, subject: str | None = None) -> Path:
        """A TLS directory (ca.crt, tls.crt, tls.key) for a client certificate signed by ``ca``."""
        issued = (ca or self.trusted).issue(name, subject=subject)
        return issued.write_directory(self.base / "clients" / name, self.trusted)

    def server_tls(self, directory: Path, *trusted: CertificateAuthority, client_auth: str = "need") -> ServerTls:
        """The server's stores under ``directory``, trusting ``trusted`` (default: the trusted CA)."""
        directory.mkdir(parents=True, exist_ok=True)
        return ServerTls(self.server.pem_bundle(directory / "server.pem"),
                         bundle(directory / "trust.pem", *(trusted or (self.trusted,))), client_auth)


def server_log(cluster: ZkCluster) -> str:
    """The first server's log (with ServerTls it names every certificate subject it authenticated)."""
    path = cluster.servers[0].data_dir / "zookeeper.log"
    return path.read_text(errors="replace") if path.exists() else ""


def connects(hosts: str, tls: TlsOptions | None, timeout: float = 60.0) -> bool:
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
