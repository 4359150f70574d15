"""Bad values for the znodes a member reads: *garbage* (bytes no writer of this project produces) and
*stale* records (well-formed, but older than what is stored, or meant for someone else).

Pure: every choice comes from the caller's ``random.Random``, so a step's seed replays the same bytes.
The harness encodes the group's record formats itself (docs/protocol.md), independently of the
library, so that a bug in the library's encoder cannot hide in its own test data.

Targets (the znodes of a group whose data the library reads or may read):

===============  ==========================================================================
``barrier``      ``G/barrier``: ``{"phase", "generation", "epoch"}``
``state``        ``G/state``: the last rebalance's summary (read by a coordinator taking office)
``config``       ``G/config``: the operator's settings
``assignment``   ``G/assignment/<member node>``: ``RB1I`` + zlib-compressed JSON
``member``       ``G/clients/<member node>`` data: ``{"id", "joined"}``
``claim``        ``G/owners/<resource>`` data: ``{"member"}``
===============  ==========================================================================
"""

from __future__ import annotations

import functools
import json
import random
import zlib
from typing import Any

TARGETS = ("barrier", "state", "config", "assignment", "member", "claim")
RECIPES = ("1e999", "deep", "zbomb", "random", "wrong-type", "huge-int", "empty")
MAGIC_INLINE = b"RB1I"
BOMB_BYTES = 128 << 20  # inflates to twice what a bounded reader should accept (64 MiB)
_HUGE = "9" * 4000  # within Python's default int-parsing limit (4300 digits): parses, then overflows uses


def blob(value: Any) -> bytes:
    """An inline assignment blob: ``RB1I`` + zlib-compressed compact JSON."""
    return MAGIC_INLINE + zlib.compress(json.dumps(value, separators=(",", ":")).encode(), 6)


def unblob(data: bytes, limit: int = 1 << 20) -> Any | None:
    """The JSON value of an inline blob, or None for anything else (bounded: never inflates past
    ``limit`` bytes)."""
    if not data.startswith(MAGIC_INLINE):
        return None
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(data[len(MAGIC_INLINE):], limit)
        if inflater.unconsumed_tail:
            return None
        return json.loads(raw)
    except (zlib.error, ValueError, RecursionError):
        return None


@functools.lru_cache(maxsize=2)
def zlib_bomb(inflated: int = BOMB_BYTES) -> bytes:
    """``inflated`` bytes of ``0`` compressed at level 9: about a thousandth of that in size."""
    inflater = zlib.compressobj(9)
    chunk = b"0" * (1 << 20)
    parts = [inflater.compress(chunk) for _ in range(inflated // len(chunk))]
    return b"".join([*parts, inflater.flush()])


def _deep(rng: random.Random) -> bytes:
    depth = rng.randint(2_000, 20_000)  # far beyond any parser's recursion limit, still small
    return b"[" * depth + b"]" * depth


def _record(target: str, number: str, nested: bytes | None = None) -> bytes:
    """A record of ``target``'s shape whose numeric fields are ``number`` (raw JSON text), or whose
    main field is ``nested`` (raw JSON text)."""
    field = nested.decode() if nested is not None else number
    if target == "barrier":
        return f'{{"phase":"stop","generation":{field},"epoch":{number}}}'.encode()
    if target == "state":
        return f'{{"generation":{field},"epoch":{number},"coordinator":"w0","moved":{number}}}'.encode()
    if target == "config":
        return (f'{{"algorithm":"ResourceBarrier","minIntervalSeconds":{field},'
                f'"maxIntervalSeconds":{number},"effectiveIntervalSeconds":{number}}}').encode()
    if target == "assignment":
        return f'{{"epoch":{number},"generation":{field},"algorithm":"ResourceBarrier","resources":[]}}'.encode()
    if target == "member":
        return f'{{"id":{field},"joined":{number}}}'.encode()
    if target == "claim":
        return f'{{"member":{field},"token":{number}}}'.encode()
    raise ValueError(f"unknown target {target!r}: one of {TARGETS}")


_WRONG_TYPES = {
    "barrier": [b"[]", b"null", b'"stop"', b"42", b'{"phase":["stop"],"generation":{"g":1}}',
                b'{"phase":"stop","generation":"1"}', b'{"phase":"halt","generation":3}',
                b'{"phase":"stop","generation":-5,"epoch":true}'],
    "state": [b"[]", b"null", b'{"generation":"x"}', b'{"generation":-1,"epoch":[]}', b'"done"'],
    "config": [b"[]", b"null", b'{"algorithm":"FastestBarrier"}', b'{"minIntervalSeconds":-3}',
               b'{"minIntervalSeconds":"soon"}', b'{"minIntervalSeconds":9,"maxIntervalSeconds":1}'],
    "assignment": [b'{"resources":"r00"}', b'{"epoch":1,"generation":1,"resources":[1,2,3]}', b"[]", b"null",
                   b'{"epoch":"one","generation":1,"resources":[]}',
                   b'{"epoch":1,"generation":1,"resources":["../x"]}'],
    "member": [b"[]", b"null", b'{"id":7}', b'"w0"'],
    "claim": [b"[]", b"null", b'{"member":[]}', b'"w0"', b"7"],
}


def garbage(target: str, recipe: str, rng: random.Random) -> bytes:
    """A value no writer of this project produces, shaped for ``target``.

    Recipes: ``1e999`` (numbers that overflow to infinity), ``deep`` (nesting beyond any recursion
    limit), ``zbomb`` (a small value that inflates to 128 MiB), ``random`` (random bytes),
    ``wrong-type`` (JSON of the wrong shape or range), ``huge-int`` (a 4,000-digit integer), ``empty``.
    Assignments get the blob header around JSON recipes, so that the garbage reaches the JSON decoder.
    """
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}: one of {TARGETS}")
    if recipe == "empty":
        return b""
    if recipe == "random":
        return rng.randbytes(rng.randint(1, 4096))
    if recipe == "zbomb":
        return (MAGIC_INLINE if target == "assignment" else b"") + zlib_bomb()
    if recipe == "1e999":
        raw = _record(target, "1e999")
    elif recipe == "huge-int":
        raw = _record(target, _HUGE)
    elif recipe == "deep":
        raw = _record(target, "1", nested=_deep(rng)) if rng.random() < 0.7 else _deep(rng)
    elif recipe == "wrong-type":
        raw = rng.choice(_WRONG_TYPES[target])
    else:
        raise ValueError(f"unknown recipe {recipe!r}: one of {RECIPES}")
    if target == "assignment":
        return MAGIC_INLINE + zlib.compress(raw, 6)
    return raw


# -- stale records ---------------------------------------------------------------------------------


def _json(data: bytes | None) -> dict[str, Any] | None:
    if not data:
        return None
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def stale(
    target: str, current: bytes | None, seen: list[bytes], rng: random.Random, members: list[str], how: str = "",
) -> tuple[bytes, str]:
    """A well-formed record for ``target`` that is not the current one, and how it was made.

    An earlier value of the same kind, really written before (``seen``, oldest first), is preferred;
    otherwise one is derived from ``current``: an older generation and epoch, and for an assignment
    the resources of another member. ``members`` are live member ids (a claim or member record may
    name one that is not its holder). ``how``: ``stop1`` asks for a barrier's stop order of generation 1.
    """
    earlier = [value for value in seen if value != current]
    if target in ("barrier", "state", "assignment") and earlier and not how and rng.random() < 0.6:
        return rng.choice(earlier), "an earlier value"
    if target == "barrier":
        record = _json(current) or {}
        generation, epoch = _int(record.get("generation")), _int(record.get("epoch"))
        if how == "stop1" or rng.random() < 0.5 or generation <= 1:
            made = {"phase": "stop", "generation": 1, "epoch": max(0, epoch - 1)}
            return json.dumps(made).encode(), "a stop order of generation 1"
        made = {"phase": rng.choice(["stop", "assigned"]), "generation": rng.randint(1, generation - 1),
                "epoch": max(0, epoch - rng.randint(0, 2))}
        return json.dumps(made).encode(), f"an older {made['phase']} of generation {made['generation']}"
    if target == "state":
        record = _json(current) or {"coordinator": "w0", "moved": 0}
        generation = _int(record.get("generation"))
        record["generation"] = rng.randint(0, max(0, generation - 1))
        record["epoch"] = max(0, _int(record.get("epoch")) - 1)
        return json.dumps(record).encode(), f"generation {record['generation']}"
    if target == "assignment":
        decoded = unblob(current or b"")
        record = decoded if isinstance(decoded, dict) else {"epoch": 1, "generation": 1, "resources": []}
        others = [value for value in (unblob(v) for v in seen) if isinstance(value, dict)]
        if others:
            record["resources"] = rng.choice(others).get("resources", [])
        record["generation"] = max(0, _int(record.get("generation")) - rng.randint(1, 3))
        record["epoch"] = max(0, _int(record.get("epoch")) - rng.randint(0, 1))
        return blob(record), f"generation {record['generation']}, {len(record.get('resources', []))} resources"
    if target == "member":
        who = rng.choice(members) if members else "w0"
        return json.dumps({"id": who, "joined": rng.uniform(1e9, 1.7e9)}).encode(), f"naming {who}"
    if target == "claim":
        who = rng.choice(members) if members else "w0"
        return json.dumps({"member": who}).encode(), f"naming {who}"
    if target == "config":
        raise ValueError("a stale config is a switch of algorithm: see config_switch")
    raise ValueError(f"unknown target {target!r}: one of {TARGETS}")


def config_switch(algorithm: str, interval: float) -> bytes:
    """A valid ``G/config`` that switches the group to ``algorithm`` (``ResourceBarrier`` or
    ``GlobalBarrier``) and keeps the rebalance interval."""
    return json.dumps({"algorithm": algorithm, "minIntervalSeconds": interval, "maxIntervalSeconds": max(interval, 30),
                       "effectiveIntervalSeconds": interval, "departureGraceSeconds": 0}).encode()
