"""The operator's grace period after a credentials rotation, as pure logic: the group ACL naming the
previous credentials too, what a restarted operator recognises as an unfinished grace period in a
group root's ACL, and when the grace period ends."""

from __future__ import annotations

from kazoo.security import make_acl, make_digest_acl
from rebalanser_operator.apply.actions import end_grace
from rebalanser_operator.apply.reconcile import group_acl, retained_digests
from rebalanser_operator.controller.rotation import Rotation
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.runtime import GroupRuntime

NEW = DigestCredentials("op", "new")
OLD_ACL = make_digest_acl("op", "old", all=True)
NEW_ACL = make_digest_acl("op", "new", all=True)
READ = make_acl("world", "anyone", read=True)


def test_the_group_acl_names_the_previous_credentials_during_the_grace() -> None:
    assert group_acl(NEW) == [NEW_ACL, READ]
    assert group_acl(NEW, [OLD_ACL]) == [NEW_ACL, OLD_ACL, READ]
    assert group_acl(NEW, [NEW_ACL]) == [NEW_ACL, READ]  # never twice


def test_a_root_acl_naming_the_current_and_other_digests_is_an_unfinished_grace() -> None:
    assert retained_digests([NEW_ACL, OLD_ACL, READ], NEW) == [OLD_ACL]
    assert retained_digests([NEW_ACL, READ], NEW) == []  # no rotation in progress
    # The Secret changed while no operator ran: the ACL does not name the current credentials at all.
    assert retained_digests([OLD_ACL, READ], NEW) == []
    # A different permission set for the same identity is still the identity's own entry.
    assert retained_digests([make_digest_acl("op", "new", read=True), OLD_ACL], NEW) == [OLD_ACL]


def test_the_grace_ends_at_its_deadline_and_marks_the_group_for_re_applying() -> None:
    rt = GroupRuntime("shop", "orders", "uid")
    assert not end_grace(rt, 1000.0)
    rt.rotation = Rotation(previous_acl=(OLD_ACL,), grace_until=100.0)
    assert not end_grace(rt, 99.9) and rt.previous_acl == [OLD_ACL] and not rt.secrets_changed
    assert end_grace(rt, 100.0)
    assert rt.previous_acl is None and rt.grace_until is None and rt.secrets_changed
