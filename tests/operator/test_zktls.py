"""The operator's TLS material: parsed from a Secret's data, written to private files once per content."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from rebalanser_operator.kube import CredentialsError, tls_from
from rebalanser_operator.zktls import TlsFileStore, TlsMaterial


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
    first = store.materialise(TlsMaterial(b"CA", b"CERT", b"KEY"))
    assert first.ca is not None and first.certificate is not None and first.key is not None
    assert Path(first.key).read_bytes() == b"KEY"
    assert stat.S_IMODE(os.stat(first.key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(Path(first.key).parent).st_mode) == 0o700
    assert store.materialise(TlsMaterial(b"CA", b"CERT", b"KEY")) == first
    rotated = store.materialise(TlsMaterial(b"CA", b"CERT2", b"KEY2"))
    assert rotated.certificate != first.certificate and Path(first.certificate).read_bytes() == b"CERT"
    server_only = store.materialise(TlsMaterial(ca=b"CA", verify_hostname=True))
    assert server_only.certificate is None and server_only.verify_hostname
    store.close()
    assert not (tmp_path / "store").exists()
