"""The operator's x509 identity (issue 29, item 1): the subject of its TLS client certificate spelled
as ZooKeeper's x509 authentication names it, and the ACLs and sessions that follow. The expected
strings are what the real server answered for the same subjects (tests/operator/test_x509_identity_zk.py
checks it again on every run)."""

from __future__ import annotations

import pytest
from kazoo.security import ACL, Id, Permissions
from rebalanser.credentials import operator_acl
from rebalanser.errors import InvalidInputError
from rebalanser_operator.identity import WORKER_PERMS, OperatorIdentity, group_acl, parent_acl
from rebalanser_operator.x509name import CertificateError, escape, subject_dn
from rebalanser_operator.zkpool import DigestCredentials
from rebalanser_operator.zktls import TlsMaterial

from tests.support.tls import CertificateAuthority

#: openssl's subject -> the server's x509 id (ZooKeeper 3.9's X509AuthenticationProvider)
SUBJECTS = {
    "/CN=rebalanser-operator": "CN=rebalanser-operator",
    "/C=DE/ST=Berlin/L=Berlin/O=Example, Inc./OU=Platform+OU=Ops/CN=op \"one\"/emailAddress=ops@example.com"
    "/DC=example/UID=u1":
        'UID=u1,DC=example,1.2.840.113549.1.9.1=#160f6f7073406578616d706c652e636f6d,CN=op \\"one\\",'
        "OU=Ops+OU=Platform,O=Example\\, Inc.,L=Berlin,ST=Berlin,C=DE",
    "/O=M\u00fcller;<x>/CN= #lead trail /serialNumber=42":
        "2.5.4.5=#13023432,CN=\\ \\#lead trail\\ ,O=Müller\\;\\<x\\>",
    "/CN=a#b=c d/O=x\\\\y/OU=\u00e9\u4e2d": "OU=é中,O=x\\\\y,CN=a\\#b\\=c d",
}


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority.create(tmp_path_factory.mktemp("ca"), "ca-x509")


def material(ca: CertificateAuthority, name: str, subject: str | None = None) -> TlsMaterial:
    issued = ca.issue(name, subject=subject)
    return TlsMaterial(ca=ca.certificate.read_bytes(), certificate=issued.certificate.read_bytes(),
                       key=issued.key.read_bytes())


@pytest.mark.parametrize("subject", list(SUBJECTS))
def test_the_subject_is_spelled_as_the_server_names_it(ca: CertificateAuthority, subject: str) -> None:
    issued = ca.issue(f"s{list(SUBJECTS).index(subject)}", subject=subject)
    assert subject_dn(issued.certificate.read_bytes()) == SUBJECTS[subject]


def test_the_first_certificate_of_a_chain_is_the_one_named(ca: CertificateAuthority) -> None:
    issued = ca.issue("leaf")
    chain = issued.certificate.read_bytes() + ca.certificate.read_bytes()
    assert subject_dn(chain) == "CN=leaf"


@pytest.mark.parametrize("pem", [b"", b"not a certificate",
                                 b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                                 b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n"])
def test_a_certificate_that_does_not_parse_is_refused(pem: bytes) -> None:
    with pytest.raises(CertificateError):
        subject_dn(pem)


def test_escaping_of_leading_and_trailing_spaces() -> None:
    assert escape("   ") == "\\ \\ \\ "
    assert escape(" a b ") == "\\ a b\\ "
    assert escape("a,b+c") == "a\\,b\\+c"


def test_an_x509_identity_names_its_subject_in_every_acl_and_sends_no_digest(ca: CertificateAuthority) -> None:
    own = material(ca, "rebalanser-operator")
    identity = OperatorIdentity.x509(own)
    assert identity.scheme == "x509" and identity.id == Id("x509", "CN=rebalanser-operator")
    assert identity.acl_id == "x509:CN=rebalanser-operator" and identity.auth is None
    assert "PRIVATE KEY" not in repr(identity)
    assert parent_acl(identity)[0] == ACL(Permissions.ALL, identity.id)
    group = DigestCredentials("orders", "group-password")
    acl = group_acl(identity, group)
    assert acl[0] == ACL(Permissions.ALL, identity.id) and acl[1].perms == WORKER_PERMS
    assert identity.names(acl) and not OperatorIdentity.digest("op", "pw").names(acl)
    # the workers name the operator by the id the ConfigMap gives them
    assert operator_acl(identity.acl_id) == ACL(Permissions.ALL, identity.id)


def test_the_operators_sessions_use_its_own_material_whatever_the_group_names(ca: CertificateAuthority) -> None:
    own = material(ca, "operator-sessions")
    tenant = material(ca, "tenant-worker")
    identity = OperatorIdentity.x509(own)
    assert identity.session_tls(None) == own
    assert identity.session_tls(tenant) == own
    verified = identity.session_tls(TlsMaterial(ca=tenant.ca, verify_hostname=True))
    assert verified is not None and verified.certificate == own.certificate and verified.verify_hostname
    digest = OperatorIdentity.digest("op", "pw")
    assert digest.session_tls(tenant) is tenant and digest.auth == ("digest", "op:pw")


def test_an_x509_identity_needs_a_certificate_its_key_and_a_ca(ca: CertificateAuthority) -> None:
    own = material(ca, "incomplete")
    with pytest.raises(ValueError, match="CA"):
        OperatorIdentity.x509(TlsMaterial(certificate=own.certificate, key=own.key))
    with pytest.raises(ValueError, match="client certificate"):
        OperatorIdentity.x509(TlsMaterial(ca=own.ca))
    with pytest.raises(ValueError, match="does not parse"):
        OperatorIdentity.x509(TlsMaterial(ca=own.ca, certificate=b"-----BEGIN CERTIFICATE-----\nAAAA\n"
                                          b"-----END CERTIFICATE-----\n", key=own.key))


def test_workers_accept_an_x509_operator_id_and_refuse_garbage() -> None:
    assert operator_acl("x509:CN=op,O=Example\\, Inc.").id == Id("x509", "CN=op,O=Example\\, Inc.")
    for bad in ("x509:", "x509: ", "ip:10.0.0.1", "digest:op"):
        with pytest.raises(InvalidInputError):
            operator_acl(bad)

