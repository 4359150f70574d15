"""Compressed, chunked JSON values, so that no single znode write nears ZooKeeper's 1 MiB limit.

A value is serialised as compact JSON, zlib-compressed and cut into parts of at most
:data:`PART_BYTES`. A small value is stored inline in its header znode; a large one stores the
header (generation, part count, digest) in the znode and the parts in children named after the
generation, so a reader never mixes parts of two generations.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Any

from rebalanser.errors import CorruptDataError

PART_BYTES = 400 * 1024
MAGIC = b"RB1"


@dataclass(frozen=True)
class Blob:
    header: bytes
    parts: list[bytes]


def encode(value: Any, generation: int, part_bytes: int = PART_BYTES) -> Blob:
    raw = zlib.compress(json.dumps(value, separators=(",", ":")).encode(), 6)
    if len(raw) <= part_bytes:
        return Blob(MAGIC + b"I" + raw, [])
    parts = [raw[i : i + part_bytes] for i in range(0, len(raw), part_bytes)]
    meta = {"generation": generation, "parts": len(parts), "sha256": hashlib.sha256(raw).hexdigest()}
    return Blob(MAGIC + b"P" + json.dumps(meta).encode(), parts)


def part_name(generation: int, index: int) -> str:
    return f"p{generation:012d}-{index:05d}"


@dataclass(frozen=True)
class Header:
    inline: Any | None
    generation: int
    parts: int
    sha256: str


def decode_header(data: bytes) -> Header:
    if not data.startswith(MAGIC) or len(data) < 4:
        raise CorruptDataError("not a Rebalanser blob (foreign or garbage data)")
    kind, body = data[3:4], data[4:]
    try:
        if kind == b"I":
            return Header(json.loads(zlib.decompress(body)), 0, 0, "")
        if kind == b"P":
            meta = json.loads(body)
            return Header(None, int(meta["generation"]), int(meta["parts"]), str(meta["sha256"]))
    except (ValueError, KeyError, TypeError, zlib.error) as exc:
        raise CorruptDataError(f"corrupt blob header: {exc}") from exc
    raise CorruptDataError(f"unknown blob kind {kind!r}")


def join_parts(header: Header, parts: list[bytes]) -> Any:
    raw = b"".join(parts)
    if len(parts) != header.parts or hashlib.sha256(raw).hexdigest() != header.sha256:
        raise CorruptDataError("blob parts do not match their header (partial or foreign write)")
    try:
        return json.loads(zlib.decompress(raw))
    except (ValueError, zlib.error) as exc:
        raise CorruptDataError(f"corrupt blob body: {exc}") from exc
