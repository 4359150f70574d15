"""Znode path helpers for the recipes (kept inside ``recipes`` so the recipes depend on nothing else)."""

from __future__ import annotations


def _bad_char(ch: str) -> bool:
    code = ord(ch)
    return (
        code == 0
        or 0x01 <= code <= 0x1F
        or 0x7F <= code <= 0x9F
        or 0xD800 <= code <= 0xF8FF
        or 0xFFF0 <= code <= 0xFFFF
    )


def validate_name(name: str, what: str = "name") -> str:
    """Returns ``name`` if it is usable as one znode path segment, else raises ``ValueError``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} must be a non-empty string, got {name!r}")
    if name in (".", "..") or "/" in name:
        raise ValueError(f"{what} {name!r} must be a single znode name (no '/', not '.' or '..')")
    if any(_bad_char(ch) for ch in name):
        raise ValueError(f"{what} {name!r} contains characters ZooKeeper does not allow in paths")
    return name


def validate_base_path(path: str) -> str:
    """Returns ``path`` if it is an absolute znode path below the root (not ``/zookeeper``)."""
    if not isinstance(path, str) or not path.startswith("/") or path == "/" or path.endswith("/"):
        raise ValueError(f"base path must look like '/a/b' (absolute, no trailing '/'), got {path!r}")
    segments = path[1:].split("/")
    for segment in segments:
        validate_name(segment, "path segment")
    if segments[0] == "zookeeper":
        raise ValueError("paths under /zookeeper are reserved by ZooKeeper")
    return path


def join(base: str, name: str) -> str:
    """``base/name`` for a validated base and a single segment."""
    return f"{base}/{name}"


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]
