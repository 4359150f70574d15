"""TLS options of the worker library and the CLI (flags, environment, a mounted Secret's directory)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rebalanser.cli import parser, tls_options
from rebalanser.errors import InvalidInputError
from rebalanser.options import Options
from rebalanser.tls import TlsOptions

ENV = ("REBALANSER_ZK_TLS", "REBALANSER_ZK_TLS_DIR", "REBALANSER_ZK_TLS_CA", "REBALANSER_ZK_TLS_CERT",
       "REBALANSER_ZK_TLS_KEY", "REBALANSER_ZK_TLS_VERIFY_HOSTNAME")


@pytest.fixture
def secret_dir(tmp_path: Path) -> Path:
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / name).write_text(f"{name}\n")
    return tmp_path


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def args(*extra: str) -> object:
    return parser().parse_args(["worker", "--zk", "127.0.0.1:1", "--group", "/g", *extra])


def test_no_tls_option_means_plain_tcp() -> None:
    assert tls_options(args()) is None  # type: ignore[arg-type]


def test_a_directory_gives_the_three_files_and_kazoo_arguments(secret_dir: Path) -> None:
    tls = tls_options(args("--zk-tls-dir", str(secret_dir)))  # type: ignore[arg-type]
    assert tls == TlsOptions(str(secret_dir / "ca.crt"), str(secret_dir / "tls.crt"), str(secret_dir / "tls.key"))
    assert tls.mutual
    assert tls.kazoo_arguments() == {
        "use_ssl": True, "verify_certs": True, "ca": str(secret_dir / "ca.crt"),
        "certfile": str(secret_dir / "tls.crt"), "keyfile": str(secret_dir / "tls.key"), "check_hostname": False,
    }


def test_the_environment_wires_it_and_single_files_override_the_directory(
    secret_dir: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    other_ca = tmp_path_factory.mktemp("other") / "bundle.pem"
    other_ca.write_text("ca\n")
    monkeypatch.setenv("REBALANSER_ZK_TLS_DIR", str(secret_dir))
    monkeypatch.setenv("REBALANSER_ZK_TLS_CA", str(other_ca))
    monkeypatch.setenv("REBALANSER_ZK_TLS_VERIFY_HOSTNAME", "true")
    tls = tls_options(args())  # type: ignore[arg-type]
    assert tls is not None
    assert (tls.ca, tls.certificate, tls.verify_hostname) == (str(other_ca), str(secret_dir / "tls.crt"), True)


def test_server_only_tls_and_the_system_trust_store(secret_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (secret_dir / "tls.crt").unlink()
    (secret_dir / "tls.key").unlink()
    tls = TlsOptions.from_directory(str(secret_dir))
    assert not tls.mutual and tls.ca == str(secret_dir / "ca.crt")
    monkeypatch.setenv("REBALANSER_ZK_TLS", "1")
    assert tls_options(args()) == TlsOptions()  # type: ignore[arg-type]


def test_invalid_tls_options_fail_at_construction(secret_dir: Path) -> None:
    with pytest.raises(InvalidInputError, match="needs its key"):
        TlsOptions(certificate=str(secret_dir / "tls.crt"))
    with pytest.raises(InvalidInputError, match="does not exist"):
        TlsOptions(ca=str(secret_dir / "missing.crt"))
    with pytest.raises(InvalidInputError, match="directory"):
        TlsOptions.from_directory(str(secret_dir / "missing"))
    with pytest.raises(InvalidInputError, match="TlsOptions"):
        Options(hosts="h:1", group="/g", tls="yes")  # type: ignore[arg-type]


def test_a_certificate_id_is_an_x509_identity_of_a_member_with_its_own_certificate_and_no_credentials(
    secret_dir: Path,
) -> None:
    mutual = TlsOptions.from_directory(str(secret_dir))
    ok = Options(hosts="zk:2281", group="/g", member_id="m", tls=mutual, certificate_id="x509:CN=operator")
    assert ok.certificate_id == "x509:CN=operator"
    for bad, reason in (
        ({"tls": mutual, "certificate_id": "digest:u:h"}, "is not x509:<subject>"),
        ({"tls": mutual, "certificate_id": "x509: "}, "is not x509:<subject>"),
        ({"certificate_id": "x509:CN=operator"}, "needs tls with a client certificate"),
        ({"tls": TlsOptions(ca=str(secret_dir / "ca.crt")), "certificate_id": "x509:CN=operator"},
         "needs tls with a client certificate"),
        ({"tls": mutual, "certificate_id": "x509:CN=operator", "credentials": ("u", "p")}, "without credentials"),
    ):
        with pytest.raises(InvalidInputError, match=reason):
            Options(hosts="zk:2281", group="/g", member_id="m", **bad)  # type: ignore[arg-type]
