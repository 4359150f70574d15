"""What an apply records of its outcome, as pure plans: (the group's :class:`Outcome`, what happened) ->
(the next Outcome, the effects to carry out).

    outcome, effects = plan_temporary(outcome, "ZooKeeperUnreachable", "cannot connect ...")
    # the sync is not ok; a Warning Event when the reason is new; the status loop woken

The apply step (:func:`rebalanser_operator.apply.actions.apply_desired`) replaces the group's Outcome
with the first value and returns the effects; nothing here posts, publishes or wakes
(tests/unit/test_apply_record.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from rebalanser_operator.controller.effects import Emit, PublishConfig, StepEffect, Wake
from rebalanser_operator.controller.messages import SyncResult
from rebalanser_operator.controller.state import Outcome
from rebalanser_operator.status.view import SyncState
from rebalanser_operator.tenancy import Refusal

Planned = tuple[Outcome, tuple[StepEffect, ...]]

#: Appended to a Synced group's status message when the operator runs without its own identity.
NO_IDENTITY_NOTE = ("; the operator has no ZooKeeper identity of its own: the parents of the groups are open "
                    "to any client (docs/operator.md, Security model)")


def plan_temporary(outcome: Outcome, reason: str, message: str) -> Planned:
    """A temporary failure (retried): the sync is not ok, a Warning Event when the reason is new."""
    changed = outcome.sync is None or outcome.sync.reason != reason
    event = (Emit("Warning", reason, message),) if changed else ()
    return replace(outcome, sync=SyncState(False, reason, message)), (*event, Wake())


def plan_refusal(outcome: Outcome, refusal: Refusal) -> Planned:
    """A refused group: an Error status with the refusal's reason, a Warning Event when it is new; the
    group is not this object's to read or act on."""
    changed = outcome.sync is None or (outcome.sync.reason, outcome.sync.message) != (refusal.reason, refusal.message)
    event = (Emit("Warning", refusal.reason, refusal.message),) if changed else ()
    return (replace(outcome, owned=False, spec_error=None, in_place=False,
                    sync=SyncState(False, refusal.reason, refusal.message, permanent=True)), (*event, Wake()))


def plan_invalid(outcome: Outcome, generation: int | None, message: str) -> Planned:
    """A spec that can never be reconciled as written."""
    return replace(outcome, generation=generation, spec_error=message), (Wake(),)


def plan_notices(outcome: Outcome, notices: tuple[str, ...]) -> Planned:
    """The spec's older forms: in the SpecCurrent condition, a Warning Event each time the set changes."""
    event = (Emit("Warning", "DeprecatedFields", "; ".join(notices)),) if notices and notices != outcome.notices else ()
    return replace(outcome, notices=notices), event


def plan_synced(outcome: Outcome, result: SyncResult, path: str, *, identity: bool,
                config: Mapping[str, str], published: Mapping[str, str] | None) -> Planned:
    """A sync that went through: the Synced status, an Event when resources were created or deleted, the
    workers' ConfigMap when it differs from the one last published."""
    note = "" if identity else NO_IDENTITY_NOTE
    synced = replace(outcome, in_place=True,
                     sync=SyncState(True, "Synced", f"{result.resources} resources in {path}{note}"))
    effects: list[StepEffect] = []
    if result.created or result.deleted:
        effects.append(Emit("Normal", "ResourcesSynced", f"created {result.created}, deleted {result.deleted}; "
                                                         f"{result.resources} resources in {path}"))
    if published != config:
        effects.append(PublishConfig.of(config))
    return synced, (*effects, Wake())
