"""The operator's identity and the ACLs it gives (pure functions: issue 29, items 1 and 5)."""

from __future__ import annotations

from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions, make_acl, make_digest_acl
from rebalanser_operator.apply.reconcile import parent_nodes, retained_digests, retargeted
from rebalanser_operator.identity import WORKER_PERMS, OperatorIdentity, group_acl, parent_acl
from rebalanser_operator.zkpool import DigestCredentials

OPERATOR = OperatorIdentity.digest("op", "operator-password")
GROUP = DigestCredentials("orders", "group-password")
OLD = DigestCredentials("orders", "old-password")
WORLD_READ = make_acl("world", "anyone", read=True)


def test_the_identity_never_shows_its_password() -> None:
    assert "operator-password" not in repr(OPERATOR)
    assert OPERATOR.acl_id == f"digest:{OPERATOR.id.id}" and OPERATOR.acl_id.startswith("digest:op:")


def test_parents_are_the_operators_and_world_readable() -> None:
    assert parent_acl(OPERATOR) == [ACL(Permissions.ALL, OPERATOR.id), WORLD_READ]
    assert parent_acl(None) == list(OPEN_ACL_UNSAFE)


def test_a_group_gives_its_digest_what_workers_need_and_never_admin() -> None:
    acl = group_acl(OPERATOR, GROUP, [make_digest_acl(OLD.username, OLD.password, all=True)])
    own = make_digest_acl(GROUP.username, GROUP.password)
    old = make_digest_acl(OLD.username, OLD.password)
    assert acl == [ACL(Permissions.ALL, OPERATOR.id), ACL(WORKER_PERMS, own.id), ACL(WORKER_PERMS, old.id), WORLD_READ]
    assert group_acl(OPERATOR, None) == [ACL(Permissions.ALL, OPERATOR.id), ACL(WORKER_PERMS, Id("world", "anyone"))]
    assert group_acl(None, None) == list(OPEN_ACL_UNSAFE)  # the quick start: as before


def test_retargeting_keeps_what_a_node_was_given() -> None:
    """Before: every worker znode got the group's ACL, world read included, after a rotation."""
    new_acl = group_acl(None, GROUP, [make_digest_acl(OLD.username, OLD.password, all=True)])
    member = [make_digest_acl(OLD.username, OLD.password, all=True), ACL(Permissions.ALL, OPERATOR.id)]
    moved = retargeted(member, new_acl, OPERATOR.id)
    assert WORLD_READ not in moved and ACL(Permissions.ALL, OPERATOR.id) in moved
    assert {e.perms for e in moved} == {Permissions.ALL} and len(moved) == 3
    record = [make_acl("digest", make_digest_acl(OLD.username, OLD.password).id.id, read=True)]
    assert {e.perms for e in retargeted(record, new_acl)} == {Permissions.READ}
    container = [make_digest_acl(OLD.username, OLD.password, all=True), WORLD_READ]
    assert WORLD_READ in retargeted(container, new_acl)


def test_retained_digests_leave_the_operators_own_out() -> None:
    own = make_digest_acl(GROUP.username, GROUP.password, all=True)
    old = make_digest_acl(OLD.username, OLD.password, all=True)
    current = [ACL(Permissions.ALL, OPERATOR.id), ACL(WORKER_PERMS, own.id), ACL(WORKER_PERMS, old.id), WORLD_READ]
    assert retained_digests(current, GROUP, OPERATOR) == [old]
    assert retained_digests([old, WORLD_READ], GROUP, OPERATOR) == []  # not a grace period of theirs


def test_the_nodes_above_a_group() -> None:
    assert parent_nodes("/rebalanser/shop/orders", "/rebalanser/shop") == (["/rebalanser", "/rebalanser/shop"], [])
    assert parent_nodes("/rebalanser/shop/a/b/orders", "/rebalanser/shop") == (
        ["/rebalanser", "/rebalanser/shop"], ["/rebalanser/shop/a", "/rebalanser/shop/a/b"])
    assert parent_nodes("/orders", "") == ([], [])
