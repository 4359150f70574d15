"""What a group's step asks the I/O around it to do, as values: the plans return them, the thin I/O steps
carry them out (:func:`rebalanser_operator.apply.actions.carry_out`) after the step's ZooKeeper work.

    outcome, effects = plan_synced(outcome, result, path, ...)
    # (Emit("Normal", "ResourcesSynced", ...), PublishConfig(...), Wake())
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Wake:
    """Ask the group's status loop to refresh soon."""


@dataclass(frozen=True)
class Note:
    """Log a line about the group."""

    message: str


@dataclass(frozen=True)
class Emit:
    """Post a Kubernetes Event on the ResourceGroup."""

    type: str  # Normal, Warning
    reason: str
    message: str


@dataclass(frozen=True)
class PublishConfig:
    """Publish the workers' ConfigMap with ``data`` (it differs from what was last published)."""

    data: tuple[tuple[str, str], ...]

    @staticmethod
    def of(data: Mapping[str, str]) -> PublishConfig:
        return PublishConfig(tuple(sorted(data.items())))

    def mapping(self) -> dict[str, str]:
        return dict(self.data)


StepEffect = Wake | Note | Emit | PublishConfig
