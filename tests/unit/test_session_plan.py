"""Which ZooKeeper session a group's step uses, as a table of the pure plan (controller/plan.py, plan_session): a
session is reused, joined or opened because the plan says so, never as a side effect of a lookup. No
ZooKeeper."""

from __future__ import annotations

import pytest
from rebalanser_operator.controller.plan import (
    Join,
    Open,
    Reuse,
    SessionEffect,
    SessionFacts,
    credentials_only,
    plan_session,
)
from rebalanser_operator.identity import DigestCredentials

OLD = ("zk:2181", "", frozenset({DigestCredentials("op", "old")}), False)
BOTH = ("zk:2181", "", frozenset({DigestCredentials("op", "old"), DigestCredentials("op", "new")}), False)
OPERATOR = ("zk:2181", "", frozenset(), True)  # the operator's identity: whatever the group's credentials
TLS = ("zk:2281", "sha256-of-the-material", frozenset(), True)


@pytest.mark.parametrize(("what", "facts", "effect"), [
    ("the session the group holds: reused", SessionFacts(OLD, OLD, open=True, shared=False), Reuse(OLD)),
    ("a rotation without the operator's identity: a new session holding both passwords, the old one left",
     SessionFacts(BOTH, OLD, open=False, shared=False), Open(BOTH, leave=OLD)),
    ("a rotation with the operator's identity: the same session", SessionFacts(OPERATOR, OPERATOR, open=True,
                                                                               shared=True), Reuse(OPERATOR)),
    ("new TLS material: a new session, the old one left", SessionFacts(TLS, OPERATOR, open=False, shared=False),
     Open(TLS, leave=OPERATOR)),
    ("another group's session: joined", SessionFacts(OPERATOR, None, open=True, shared=True), Join(OPERATOR)),
    ("another group's session, leaving one's own", SessionFacts(OPERATOR, OLD, open=True, shared=True),
     Join(OPERATOR, leave=OLD)),
    ("a first session", SessionFacts(OLD, None, open=False, shared=False), Open(OLD)),
    ("a new session past the namespace's limit: refused",
     SessionFacts(OLD, None, open=False, shared=False, namespace_sessions=2, limit=2), None),
    ("a rotation's new session past the limit: refused (retried when one closes)",
     SessionFacts(BOTH, OLD, open=False, shared=False, namespace_sessions=2, limit=2), None),
    ("joining at the limit: never refused",
     SessionFacts(OPERATOR, None, open=True, shared=True, namespace_sessions=2, limit=2), Join(OPERATOR)),
    ("reusing at the limit: never refused",
     SessionFacts(OLD, OLD, open=True, shared=False, namespace_sessions=5, limit=2), Reuse(OLD)),
    ("under the limit: opened", SessionFacts(OLD, None, open=False, shared=False, namespace_sessions=1, limit=2),
     Open(OLD)),
])
def test_which_session_a_step_uses(what: str, facts: SessionFacts, effect: SessionEffect | None) -> None:
    assert plan_session(facts) == effect, what


def test_a_session_plan_shows_no_password() -> None:
    assert "new" not in repr(Open(BOTH, leave=OLD)).replace("username='op'", "")


def test_a_session_that_differs_only_in_its_credentials() -> None:
    assert credentials_only(Open(BOTH, leave=OLD)), "a digest rotation: the same ensemble and TLS material"
    assert credentials_only(Join(BOTH, leave=OLD))
    assert not credentials_only(Open(TLS, leave=OPERATOR)), "new TLS material: a connection of its own"
    assert not credentials_only(Open(OLD)) and not credentials_only(Reuse(OLD)), "nothing left"
    assert not credentials_only(Open(("zk-2:2181", "", OLD[2], False), leave=OLD)), "another ensemble"
