"""TLS to ZooKeeper: which files a client presents and trusts.

    tls = TlsOptions.from_directory("/etc/rebalanser/zookeeper-tls")   # ca.crt, tls.crt, tls.key
    KazooClient(hosts=..., **tls.kazoo_arguments())

The file names in a directory are those of a Kubernetes TLS Secret (``ca.crt``, ``tls.crt``,
``tls.key``), so such a Secret mounted as a volume is a valid directory as it is. ``ca`` verifies the
servers (the system's trust store when absent); ``certificate`` with ``key`` is the client's own
certificate, for servers that require one (mutual TLS).

Only paths are kept: kazoo opens the files on every connection attempt, so files replaced on disk (a
rotated Secret volume) are used from the next connection on, with no restart.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rebalanser.errors import InvalidInputError

#: The keys of a TLS Secret, and the file names in a TLS directory.
CA_FILE = "ca.crt"
CERTIFICATE_FILE = "tls.crt"
KEY_FILE = "tls.key"


@dataclass(frozen=True)
class TlsOptions:
    """Paths of the PEM files for one client; validated on construction.

    ``verify_hostname``: the server's certificate must also name the host of the connect string
    (off by default: any certificate signed by ``ca`` is accepted, the usual setup for a private CA).
    The servers' certificates are always verified.
    """

    ca: str | None = None
    certificate: str | None = None
    key: str | None = None
    verify_hostname: bool = False

    def __post_init__(self) -> None:
        if (self.certificate is None) != (self.key is None):
            raise InvalidInputError("a TLS client certificate needs its key, and a key its certificate")
        for what, path in (("CA", self.ca), ("certificate", self.certificate), ("key", self.key)):
            if path is not None and not os.path.isfile(path):
                raise InvalidInputError(f"TLS {what} file {path!r} does not exist")

    @staticmethod
    def from_directory(directory: str, *, verify_hostname: bool = False) -> TlsOptions:
        """``ca.crt``, ``tls.crt`` and ``tls.key`` from ``directory``, each where present."""
        if not os.path.isdir(directory):
            raise InvalidInputError(f"TLS directory {directory!r} does not exist")

        def present(name: str) -> str | None:
            path = os.path.join(directory, name)
            return path if os.path.isfile(path) else None

        return TlsOptions(present(CA_FILE), present(CERTIFICATE_FILE), present(KEY_FILE), verify_hostname)

    @property
    def mutual(self) -> bool:
        """Whether the client presents a certificate of its own."""
        return self.certificate is not None

    def kazoo_arguments(self) -> dict[str, object]:
        """Keyword arguments for :class:`kazoo.client.KazooClient`."""
        return {
            "use_ssl": True,
            "verify_certs": True,
            "ca": self.ca,
            "certfile": self.certificate,
            "keyfile": self.key,
            "check_hostname": self.verify_hostname,
        }
