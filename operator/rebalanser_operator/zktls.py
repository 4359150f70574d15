"""The operator's TLS material for ZooKeeper: PEM contents read from a Secret, written to private files
for kazoo (which opens files, not bytes).

    material = TlsMaterial(ca=b"...", certificate=b"...", key=b"...")
    files = TlsFileStore()
    tls = files.materialise(material)          # rebalanser.tls.TlsOptions with paths under a 0700 dir
    files.close()                              # removes every file it wrote

Material is identified by :attr:`TlsMaterial.digest` (contents and options): a changed Secret gives a
new digest, hence new files and, in :class:`~rebalanser_operator.zkpool.ZooKeeperPool`, a new
connection. Files are never rewritten in place.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field

from rebalanser.tls import CA_FILE, CERTIFICATE_FILE, KEY_FILE, TlsOptions


@dataclass(frozen=True)
class TlsMaterial:
    """PEM contents of a TLS Secret (``ca.crt``, ``tls.crt``, ``tls.key``; each may be absent, a
    certificate only with its key) and whether server host names are verified."""

    ca: bytes | None = None
    certificate: bytes | None = None
    key: bytes | None = field(default=None, repr=False)
    verify_hostname: bool = False

    def __post_init__(self) -> None:
        if (self.certificate is None) != (self.key is None):
            raise ValueError(f"{CERTIFICATE_FILE} and {KEY_FILE} come together (mutual TLS) or not at all")

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for part in (self.ca, self.certificate, self.key):
            h.update(b"-" if part is None else hashlib.sha256(part).digest())
        h.update(b"v" if self.verify_hostname else b"n")
        return h.hexdigest()[:32]

    @property
    def mutual(self) -> bool:
        return self.certificate is not None


class TlsFileStore:
    """Writes material into ``<base>/<digest>/`` (directory 0700, files 0600), once per digest."""

    def __init__(self, base: str | None = None) -> None:
        self._base = base
        self._lock = threading.Lock()

    def materialise(self, material: TlsMaterial) -> TlsOptions:
        with self._lock:
            if self._base is None:
                self._base = tempfile.mkdtemp(prefix="rebalanser-zk-tls-")
            directory = os.path.join(self._base, material.digest)
            if not os.path.isdir(directory):
                staging = tempfile.mkdtemp(dir=self._base)
                for name, data in ((CA_FILE, material.ca), (CERTIFICATE_FILE, material.certificate),
                                   (KEY_FILE, material.key)):
                    if data is not None:
                        descriptor = os.open(os.path.join(staging, name), os.O_WRONLY | os.O_CREAT, 0o600)
                        with os.fdopen(descriptor, "wb") as out:
                            out.write(data)
                os.rename(staging, directory)
        return TlsOptions.from_directory(directory, verify_hostname=material.verify_hostname)

    def close(self) -> None:
        with self._lock:
            if self._base is not None:
                shutil.rmtree(self._base, ignore_errors=True)
                self._base = None
