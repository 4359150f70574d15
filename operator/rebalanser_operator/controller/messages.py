"""What other threads hand a group's controller: immutable values (frozen dataclasses, JSON text).

The kopf handlers, the Secret poll, the workload and pod watches never touch a group's state; they
send one of these and, where kopf needs an outcome (retry or not), wait for the controller's answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rebalanser_operator.failover.choice import EndedInstance, PodRef


def _text(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True)


def _value(text: str | None) -> dict[str, Any] | None:
    return None if text is None else dict(json.loads(text))


@dataclass(frozen=True)
class DesiredSpec:
    """A spec to apply, as kopf handed it over (create, update, resume), with what the published status
    recorded of earlier reconciles."""

    spec_json: str
    generation: int | None
    body_json: str | None = None  # apiVersion, kind, metadata (for Events)
    retry: int = 0
    seed_interval: float | None = None
    recorded_path: str | None = None
    recorded_connect: str | None = None
    received: tuple[SecretSeen, ...] = ()  # Secrets as the poll received them: used, not read again

    @staticmethod
    def of(spec: Mapping[str, Any], *, generation: int | None, body: Mapping[str, Any] | None = None,
           retry: int = 0, seed_interval: float | None = None, recorded_path: str | None = None,
           recorded_connect: str | None = None, received: tuple[SecretSeen, ...] = ()) -> DesiredSpec:
        return DesiredSpec(json.dumps(spec, sort_keys=True), generation, _text(body), retry, seed_interval,
                           recorded_path, recorded_connect, received)

    def received_data(self, secret: str) -> dict[str, str] | None:
        """Secret ``secret``'s data as received with this message (None: not received, read it)."""
        for seen in self.received:
            if seen.secret == secret and seen.data is not None:
                return dict(seen.data)
        return None

    def spec(self) -> dict[str, Any]:
        return dict(json.loads(self.spec_json))

    def body(self) -> dict[str, Any] | None:
        return _value(self.body_json)


@dataclass(frozen=True)
class Deletion:
    """The object is being deleted (kopf's deletion handler, or its namespace's farewell)."""

    spec_json: str
    annotations: tuple[tuple[str, str], ...]
    body_json: str | None = None
    retry: int = 0
    elapsed: float = 0.0

    @staticmethod
    def of(spec: Mapping[str, Any], *, annotations: Mapping[str, str], body: Mapping[str, Any] | None = None,
           retry: int = 0, elapsed: float = 0.0) -> Deletion:
        return Deletion(json.dumps(spec, sort_keys=True), tuple(sorted(annotations.items())), _text(body),
                        retry, elapsed)


@dataclass(frozen=True)
class SecretSeen:
    """A referenced Secret as just read (base64 data as the API server returns it)."""

    secret: str
    data: tuple[tuple[str, str], ...] | None = field(repr=False)  # a Secret's content: never in a log line

    @staticmethod
    def of(secret: str, data: Mapping[str, str] | None) -> SecretSeen:
        return SecretSeen(secret, None if data is None else tuple(sorted(data.items())))


@dataclass(frozen=True)
class RolloutSeen:
    """The workload watch saw ``kind``/``name`` change."""

    kind: str
    name: str
    rolling: bool


@dataclass(frozen=True)
class PodEnded:
    """A pod reports terminated container instances (confirmed-death failover)."""

    pod: PodRef
    ended: tuple[EndedInstance, ...]


@dataclass(frozen=True)
class SyncResult:
    """What a sync of the group's znodes did (the answer to a :class:`DesiredSpec`)."""

    created: int
    deleted: int
    resources: int
    config_written: bool
    elapsed_seconds: float
    parents_not_taken: tuple[str, ...] = ()  # nodes above the group whose ACL refuses the operator
