"""The operator's TLS material for ZooKeeper: PEM contents read from a Secret, written to private files
for kazoo (which opens files, not bytes).

    material = TlsMaterial(ca=b"...", certificate=b"...", key=b"...")
    files = TlsFileStore(max_bytes=8 << 20)
    tls = files.acquire(material)              # rebalanser.tls.TlsOptions with paths under a 0700 dir
    files.release(material)                    # the last user gone: its files are deleted
    files.close()                              # removes every file it wrote

Material is identified by :attr:`TlsMaterial.digest` (contents and options): a changed Secret gives a
new digest, hence new files and, in :class:`~rebalanser_operator.zkpool.ZooKeeperPool`, a new
connection. Files are never rewritten in place.

Guarantees: a content's files exist while it has a user (each :meth:`TlsFileStore.acquire` counts one,
each :meth:`TlsFileStore.release` ends one) and are deleted with its last user, so the store holds the
live contents only, however often a Secret rotates. With ``max_bytes``, a content that would take the
store past it is refused (:class:`TlsStoreFull`) and nothing is written.
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

    def parts(self) -> tuple[tuple[str, bytes], ...]:
        """The files this material is written as: (file name, content), the absent ones left out."""
        named = ((CA_FILE, self.ca), (CERTIFICATE_FILE, self.certificate), (KEY_FILE, self.key))
        return tuple((name, data) for name, data in named if data is not None)

    @property
    def size(self) -> int:
        """Bytes on disk once written."""
        return sum(len(data) for _, data in self.parts())


class TlsStoreFull(OSError):
    """Writing a content would take the store past its ``max_bytes``."""


@dataclass
class _Stored:
    users: int
    size: int


class TlsFileStore:
    """Writes material into ``<base>/<digest>/`` (directory 0700, files 0600), once per digest, and
    deletes it when its last user releases it. ``max_bytes`` (0: no limit) bounds the live contents."""

    def __init__(self, base: str | None = None, *, max_bytes: int = 0) -> None:
        self._base = base
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._stored: dict[str, _Stored] = {}

    def acquire(self, material: TlsMaterial) -> TlsOptions:
        """The files of ``material`` (written if no live user has them), counted as one more user.
        Raises :class:`TlsStoreFull` when a new content does not fit."""
        with self._lock:
            if self._base is None:
                self._base = tempfile.mkdtemp(prefix="rebalanser-zk-tls-")
            directory = os.path.join(self._base, material.digest)
            stored = self._stored.get(material.digest)
            if stored is None:
                used = self._bytes_used()
                if self._max_bytes and used + material.size > self._max_bytes:
                    raise TlsStoreFull(
                        f"the operator's TLS store holds {used} bytes of other Secrets' contents; this one "
                        f"({material.size} bytes) would take it past its limit of {self._max_bytes} bytes")
                self._write(directory, material)
                stored = self._stored[material.digest] = _Stored(0, material.size)
            stored.users += 1
        return TlsOptions.from_directory(directory, verify_hostname=material.verify_hostname)

    def release(self, material: TlsMaterial) -> None:
        """One user of ``material`` is gone; the last one's leaving deletes its files."""
        with self._lock:
            stored = self._stored.get(material.digest)
            if stored is None:
                return
            stored.users -= 1
            if stored.users > 0:
                return
            del self._stored[material.digest]
            if self._base is not None:
                shutil.rmtree(os.path.join(self._base, material.digest), ignore_errors=True)

    def bytes_used(self) -> int:
        """Bytes of the live contents."""
        with self._lock:
            return self._bytes_used()

    def _bytes_used(self) -> int:
        return sum(stored.size for stored in self._stored.values())

    def contents(self) -> int:
        """How many contents are stored (each with at least one user)."""
        with self._lock:
            return len(self._stored)

    def close(self) -> None:
        with self._lock:
            self._stored.clear()
            if self._base is not None:
                shutil.rmtree(self._base, ignore_errors=True)
                self._base = None

    def _write(self, directory: str, material: TlsMaterial) -> None:
        assert self._base is not None
        if os.path.isdir(directory):  # left by a release that raced a crash: written again, whole
            shutil.rmtree(directory, ignore_errors=True)
        staging = tempfile.mkdtemp(dir=self._base)
        for name, data in material.parts():
            descriptor = os.open(os.path.join(staging, name), os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(descriptor, "wb") as out:
                out.write(data)
        os.rename(staging, directory)
