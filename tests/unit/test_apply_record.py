"""What an apply records of its outcome, as a table of pure plans (controller/plan.py): the next
Outcome and the effects the step asks for (Events, the workers' ConfigMap, a wake-up), none carried out
here. No ZooKeeper, no API server."""

from __future__ import annotations

from dataclasses import replace

import pytest
from rebalanser_operator.controller.effects import Emit, PublishConfig, StepEffect, Wake
from rebalanser_operator.controller.messages import SyncResult
from rebalanser_operator.controller.plan import (
    NO_IDENTITY_NOTE,
    Planned,
    plan_invalid,
    plan_notices,
    plan_refusal,
    plan_synced,
    plan_temporary,
)
from rebalanser_operator.controller.state import Outcome
from rebalanser_operator.status.view import SyncState
from rebalanser_operator.tenancy import Refusal

PATH = "/rebalanser/shop/orders"
SYNCED = Outcome(generation=3, sync=SyncState(True, "Synced", f"2 resources in {PATH}"), owned=True, in_place=True)
UNREACHABLE = replace(SYNCED, sync=SyncState(False, "ZooKeeperUnreachable", "cannot connect"))
IN_USE = Refusal("PathInUse", f"znode {PATH} is managed by shop/other")
REFUSED = replace(SYNCED, owned=False, in_place=False,
                  sync=SyncState(False, "PathInUse", IN_USE.message, permanent=True))
CONFIG = {"REBALANSER_ZK": "zk:2181", "REBALANSER_GROUP": PATH}


def result(created: int = 0, deleted: int = 0) -> SyncResult:
    return SyncResult(created, deleted, 2, False, 0.01)


@pytest.mark.parametrize(("what", "planned", "outcome", "effects"), [
    ("a new temporary failure: a Warning Event, a wake-up",
     plan_temporary(SYNCED, "ZooKeeperUnreachable", "cannot connect"), UNREACHABLE,
     (Emit("Warning", "ZooKeeperUnreachable", "cannot connect"), Wake())),
    ("the same failure again: no second Event",
     plan_temporary(UNREACHABLE, "ZooKeeperUnreachable", "still cannot connect"),
     replace(UNREACHABLE, sync=SyncState(False, "ZooKeeperUnreachable", "still cannot connect")), (Wake(),)),
    ("a refusal: not owned, not in place, permanent, a Warning Event",
     plan_refusal(SYNCED, IN_USE), REFUSED, (Emit("Warning", "PathInUse", IN_USE.message), Wake())),
    ("the same refusal again: no second Event", plan_refusal(REFUSED, IN_USE), REFUSED, (Wake(),)),
    ("an invalid spec: its generation and error, a wake-up", plan_invalid(SYNCED, 4, "bad"),
     replace(SYNCED, generation=4, spec_error="bad"), (Wake(),)),
    ("older forms of the spec: a Warning Event", plan_notices(SYNCED, ("a", "b")),
     replace(SYNCED, notices=("a", "b")), (Emit("Warning", "DeprecatedFields", "a; b"),)),
    ("the same older forms: no Event", plan_notices(replace(SYNCED, notices=("a",)), ("a",)),
     replace(SYNCED, notices=("a",)), ()),
    ("no older forms any more: no Event", plan_notices(replace(SYNCED, notices=("a",)), ()), SYNCED, ()),
    ("a first sync: resources created, the ConfigMap published, a wake-up",
     plan_synced(Outcome(generation=3), result(created=2), PATH, identity=True, config=CONFIG, published=None),
     Outcome(generation=3, sync=SyncState(True, "Synced", f"2 resources in {PATH}"), in_place=True),
     (Emit("Normal", "ResourcesSynced", f"created 2, deleted 0; 2 resources in {PATH}"), PublishConfig.of(CONFIG),
      Wake())),
    ("a sync that changed nothing: only the wake-up",
     plan_synced(UNREACHABLE, result(), PATH, identity=True, config=CONFIG, published=CONFIG), SYNCED, (Wake(),)),
    ("without the operator's identity the status says so",
     plan_synced(SYNCED, result(), PATH, identity=False, config=CONFIG, published=CONFIG),
     replace(SYNCED, sync=SyncState(True, "Synced", f"2 resources in {PATH}{NO_IDENTITY_NOTE}")), (Wake(),)),
])
def test_what_an_apply_records(what: str, planned: Planned, outcome: Outcome, effects: tuple[StepEffect, ...]) -> None:
    assert planned == (outcome, effects), what


def test_the_published_config_is_kept_as_a_value() -> None:
    effect = PublishConfig.of({"b": "2", "a": "1"})
    assert effect == PublishConfig.of({"a": "1", "b": "2"}) and effect.mapping() == {"a": "1", "b": "2"}
