"""The one check of a ZooKeeper connect string, before any client is made.

``host[:port][,host[:port]...][/chroot]``: hosts are names or IPv4 addresses, or IPv6 addresses in
brackets (``[::1]:2181``); a port is 1 to 65535 (2181 when left out); the chroot, when given, is an
absolute path of non-empty segments. Everything kazoo would reject later (with a traceback, or only
once it tries to connect) is rejected here with :class:`~rebalanser.errors.InvalidInputError` naming
the part that is wrong; a few things kazoo would take silently are rejected too (port 0, which it
reads as 2181; an empty entry between two commas; a chroot of ``.`` or ``..`` segments).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from rebalanser.errors import InvalidInputError

__all__ = ["ConnectString", "parse_connect_string"]

DEFAULT_PORT = 2181
_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")
_PORT = re.compile(r"[0-9]{1,5}")


@dataclass(frozen=True)
class ConnectString:
    """A parsed connect string: ``(host, port)`` pairs and the chroot ("" for none)."""

    hosts: tuple[tuple[str, int], ...]
    chroot: str = ""


def parse_connect_string(text: str) -> ConnectString:
    """Parses ``text``, or raises :class:`InvalidInputError` saying what is wrong with it."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError("the ZooKeeper connect string is empty (expected host:port[,host:port...][/chroot])")
    host_part, slash, chroot = text.strip().partition("/")
    hosts = tuple(_host_port(entry.strip(), text) for entry in host_part.split(","))
    return ConnectString(hosts, _chroot(chroot, text) if slash else "")


def _host_port(entry: str, text: str) -> tuple[str, int]:
    if not entry:
        raise InvalidInputError(f"connect string {text!r}: an empty host entry (two commas, or a comma at an end)")
    if entry.startswith("["):
        address, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest not in ("",) and not rest.startswith(":")):
            raise InvalidInputError(f"connect string {text!r}: {entry!r} is not [IPv6 address]:port")
        _ipv6(address, entry, text)
        return address, _port(rest[1:], entry, text) if rest else DEFAULT_PORT
    host, colon, port = entry.rpartition(":") if ":" in entry else (entry, "", "")
    if not _HOSTNAME.fullmatch(host):
        raise InvalidInputError(
            f"connect string {text!r}: {host!r} is not a host name or address "
            "(hosts are separated by ',', IPv6 addresses go in brackets)")
    return host, _port(port, entry, text) if colon else DEFAULT_PORT


def _ipv6(address: str, entry: str, text: str) -> None:
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        raise InvalidInputError(f"connect string {text!r}: {entry!r} holds no IPv6 address") from None


def _port(port: str, entry: str, text: str) -> int:
    if not port.isdigit():
        raise InvalidInputError(f"connect string {text!r}: the port of {entry!r} is not a number "
                                "(hosts are separated by ',')")
    if not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535:
        raise InvalidInputError(f"connect string {text!r}: the port of {entry!r} must be a number from 1 to 65535")
    return int(port)


def _chroot(chroot: str, text: str) -> str:
    """The chroot without its leading or a trailing ``/`` given; "" for a bare trailing ``/``."""
    chroot = chroot[:-1] if chroot.endswith("/") else chroot
    if not chroot:
        return ""
    segments = chroot.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        raise InvalidInputError(f"connect string {text!r}: the chroot /{chroot} has an empty, '.' or '..' segment")
    return "/" + chroot
