"""The subject of a PEM certificate as ZooKeeper's x509 authentication names it in ACLs.

    subject_dn(pem)    # 'CN=rebalanser-operator,O=Example\\, Inc.'  -> the ACL id x509:<that>

ZooKeeper's ``X509AuthenticationProvider`` gives a TLS session the identity ``x509:<subject>``, the
subject being the Java platform's RFC 2253 string of the client certificate's subject. This module
writes the same string from the certificate alone, so that the operator can name itself in ACLs before
it connects:

- the relative names from last to first, separated by ``,``; the attributes of a multi-valued one in
  their encoded order, separated by ``+``;
- ``CN``, ``C``, ``L``, ``ST``, ``O``, ``OU``, ``STREET``, ``DC`` and ``UID`` by keyword with their
  text; any other attribute (``emailAddress``, ``serialNumber``) as its dotted OID, ``=#`` and the
  hexadecimal of its DER encoding; a keyword attribute whose value is not a string type likewise;
- in the text, each of ``, = + < > # ; " \\`` behind a backslash, and so are leading and trailing
  spaces; anything else (non-ASCII letters too) as it is.

Checked against the real server (tests/operator/test_x509_identity_zk.py). Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import re

from pyasn1.codec.der import decoder, encoder
from pyasn1.error import PyAsn1Error
from pyasn1_modules import rfc5280

#: The attribute types the subject names by keyword (RFC 2253's list).
KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
    "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID",
}
#: DER string tags read as text, and how their bytes decode (as the Java platform reads them).
STRING_TAGS = {12: "utf-8", 19: "latin-1", 20: "latin-1", 22: "latin-1", 27: "latin-1", 28: "utf-32-be",
               30: "utf-16-be"}
ESCAPED = ',=+<>#;"\\'
_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\s*(.+?)\s*-----END CERTIFICATE-----", re.S)


class CertificateError(ValueError):
    """Not a PEM certificate this module can read."""


def subject_dn(pem: bytes) -> str:
    """The subject of the first certificate in ``pem``, as ZooKeeper spells it (see the module)."""
    return name_string(subject_der(pem))


def subject_der(pem: bytes) -> bytes:
    """The DER encoding of the first certificate's subject in ``pem``; :class:`CertificateError`."""
    match = _PEM.search(pem)
    if match is None:
        raise CertificateError("no PEM certificate (-----BEGIN CERTIFICATE-----) found")
    try:
        der = base64.b64decode(b"".join(match.group(1).split()), validate=True)
        certificate, rest = decoder.decode(der, asn1Spec=rfc5280.Certificate())
    except (binascii.Error, PyAsn1Error) as exc:
        raise CertificateError(f"the certificate does not parse: {exc}") from exc
    if rest:
        raise CertificateError("the certificate does not parse: trailing bytes after it")
    return bytes(encoder.encode(certificate["tbsCertificate"]["subject"]))


def name_string(der: bytes) -> str:
    """An encoded X.501 ``Name`` as an RFC 2253 string in the Java platform's spelling."""
    try:
        name, _ = decoder.decode(der, asn1Spec=rfc5280.Name())
    except PyAsn1Error as exc:
        raise CertificateError(f"the subject does not parse: {exc}") from exc
    rdns = name.getComponent()
    if not len(rdns):
        raise CertificateError("the certificate has an empty subject")
    return ",".join("+".join(_attribute(atv) for atv in rdn) for rdn in reversed(list(rdns)))


def _attribute(atv: rfc5280.AttributeTypeAndValue) -> str:
    oid = str(atv["type"])
    value = bytes(atv["value"])  # an Any: the value's whole DER encoding (tag, length, contents)
    keyword = KEYWORDS.get(oid)
    text = _text(value) if keyword is not None else None
    if keyword is None or text is None:
        return f"{oid}=#{value.hex()}"
    return f"{keyword}={escape(text)}"


def _text(value: bytes) -> str | None:
    """The text of a DER string value, or None for a value of another type (written as hex)."""
    encoding = STRING_TAGS.get(value[0]) if value else None
    if encoding is None:
        return None
    try:
        decoded, rest = decoder.decode(value)
        return bytes(decoded.asOctets()).decode(encoding) if not rest else None
    except (PyAsn1Error, UnicodeDecodeError, AttributeError):
        return None


def escape(text: str) -> str:
    """``text`` with the special characters, leading and trailing spaces behind a backslash."""
    body = "".join(f"\\{c}" if c in ESCAPED else c for c in text)
    stripped = body.lstrip(" ")
    lead = len(body) - len(stripped)
    core = stripped.rstrip(" ")
    trail = len(stripped) - len(core)
    return "\\ " * lead + core + "\\ " * trail
