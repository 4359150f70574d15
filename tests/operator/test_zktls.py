"""The operator's TLS material: parsed from a Secret's data, written to private files once per content."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from rebalanser_operator.kube import CredentialsError, tls_from
from rebalanser_operator.zktls import TlsFileStore, TlsMaterial, TlsStoreFull


def encoded(**values: bytes) -> dict[str, str]:
    return {key.replace("_", "."): base64.b64encode(value).decode() for key, value in values.items()}


def test_a_secret_s_data_becomes_material_and_bad_data_is_refused() -> None:
    material = tls_from(encoded(ca_crt=b"CA", tls_crt=b"CERT", tls_key=b"KEY"), "ns/s")
    assert material == TlsMaterial(b"CA", b"CERT", b"KEY") and material.mutual
    assert tls_from(encoded(ca_crt=b"CA"), "ns/s") == TlsMaterial(ca=b"CA")
    with pytest.raises(CredentialsError, match="come together"):
        tls_from(encoded(tls_crt=b"CERT"), "ns/s")
    with pytest.raises(CredentialsError, match="ns/s"):
        tls_from({"ca.crt": "not base64!"}, "ns/s")
    assert "KEY" not in repr(material), "the key must not show in logs"


def test_the_digest_follows_content_and_options() -> None:
    base = TlsMaterial(b"CA", b"CERT", b"KEY")
    assert base.digest == TlsMaterial(b"CA", b"CERT", b"KEY").digest
    others = [TlsMaterial(b"CA2", b"CERT", b"KEY"), TlsMaterial(b"CA", b"CERT", b"KEY2"),
              TlsMaterial(b"CA", b"CERT", b"KEY", verify_hostname=True), TlsMaterial(ca=b"CA")]
    assert len({base.digest, *(m.digest for m in others)}) == 1 + len(others)


def test_files_are_private_written_once_per_digest_and_removed_on_close(tmp_path: Path) -> None:
    store = TlsFileStore(str(tmp_path / "store"))
    (tmp_path / "store").mkdir(mode=0o700)
    first = store.acquire(TlsMaterial(b"CA", b"CERT", b"KEY"))
    assert first.ca is not None and first.certificate is not None and first.key is not None
    assert Path(first.key).read_bytes() == b"KEY"
    assert stat.S_IMODE(os.stat(first.key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(Path(first.key).parent).st_mode) == 0o700
    assert store.acquire(TlsMaterial(b"CA", b"CERT", b"KEY")) == first
    rotated = store.acquire(TlsMaterial(b"CA", b"CERT2", b"KEY2"))
    assert rotated.certificate != first.certificate and Path(first.certificate).read_bytes() == b"CERT"
    server_only = store.acquire(TlsMaterial(ca=b"CA", verify_hostname=True))
    assert server_only.certificate is None and server_only.verify_hostname
    store.close()
    assert not (tmp_path / "store").exists()


def stored_bytes(base: Path) -> int:
    return sum(f.stat().st_size for f in base.rglob("*") if f.is_file())


def test_a_content_s_files_go_with_its_last_user_and_rotations_leave_only_the_live_one(tmp_path: Path) -> None:
    base = tmp_path / "store"
    base.mkdir(mode=0o700)
    store = TlsFileStore(str(base))
    ca = b"C" * 700_000  # the size of the CA bundle that filled the operator's /tmp
    current = TlsMaterial(ca=ca + b"0")
    first = store.acquire(current)
    shared = store.acquire(current)  # a second user of the same content
    store.release(current)
    assert first == shared and Path(first.ca or "").exists(), "another user still needs the files"
    for rotation in range(1, 101):
        rotated = TlsMaterial(ca=ca + str(rotation).encode())
        store.acquire(rotated)  # the new session starts with the new content, then the old one closes
        store.release(current)
        current = rotated
    assert store.contents() == 1 and sorted(p.name for p in base.iterdir()) == [current.digest]
    assert stored_bytes(base) == current.size == store.bytes_used()
    store.release(current)
    assert list(base.iterdir()) == [] and store.bytes_used() == 0
    store.release(current)  # one release too many changes nothing


def test_a_content_that_does_not_fit_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    base = tmp_path / "store"
    base.mkdir(mode=0o700)
    store = TlsFileStore(str(base), max_bytes=1000)
    store.acquire(TlsMaterial(ca=b"A" * 600))
    with pytest.raises(TlsStoreFull, match=r"600 bytes.* 1000"):
        store.acquire(TlsMaterial(ca=b"B" * 600))
    assert len(list(base.iterdir())) == 1
    store.acquire(TlsMaterial(ca=b"A" * 600))  # a live content costs nothing more
    store.release(TlsMaterial(ca=b"A" * 600))
    store.release(TlsMaterial(ca=b"A" * 600))
    store.acquire(TlsMaterial(ca=b"B" * 600))  # room again once the other is gone
