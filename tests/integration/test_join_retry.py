"""A join the server refuses for a while: a process whose password the group's ACL does not name yet (a
rotation whose new ACL is written after the pod started, an administrator mending an ACL) joins once
the server lets it, without a restart. Real ZooKeeper, real worker processes; evidence from their
JSON event streams."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, make_digest_acl
from rebalanser.admin import GroupAdmin, connect
from rebalanser.joining import JOIN_RETRY_CAP, join_retry_delay

from tests.support.invariants import overlaps
from tests.support.workers import Group, wait_for

RESOURCES = {"r0", "r1", "r2", "r3"}


def password_file(tmp_path: Path, name: str, password: str) -> Path:
    path = tmp_path / name
    path.write_text(password + "\n")
    return path


def grant(client: KazooClient, path: str, entry: ACL) -> int:
    """Adds ``entry``'s id, with the permissions the node gives the others, to the ACL of ``path`` and of
    everything under it that ``client`` may re-ACL (as the operator's rotation does); returns how many
    nodes changed. Nodes the client may not read or administer (a worker's own records) are left."""
    try:
        acl, stat = client.get_acls(path)
        children = client.get_children(path)
        if all(a.id != entry.id for a in acl):
            client.set_acls(path, [*acl, ACL(max(a.perms for a in acl), entry.id)], version=stat.aversion)
            changed = 1
        else:
            changed = 0
    except NoAuthError:
        return 0
    return changed + sum(grant(client, f"{path}/{child}", entry) for child in children)


def test_a_refused_join_is_taken_again_when_the_acl_lets_the_process_in(
    zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    new = ["--zk-user", "orders", "--zk-password-file", str(password_file(tmp_path, "new", "new-password"))]
    group = Group(zk_hosts, group_path, tmp_path, session_timeout=6.0)
    with connect(zk_hosts, credentials=("orders", "old-password")) as admin:
        try:
            group_with(admin, group_path)
            # w1 holds a password the group's nodes do not name: the server refuses its join.
            w1 = group.spawn("w1", *new)
            stderr = tmp_path / "w1.0.err"
            wait_for(lambda: stderr.exists() and "NoAuthError" in stderr.read_text(), 30,
                     "the refused join was not reported in w1's log")
            assert not w1.owned()

            # The ACL is mended (as the operator's rotation does): w1 joins, still the same process.
            pid = w1.proc.pid if w1.proc is not None else None
            assert grant(admin, group_path, make_digest_acl("orders", "new-password", all=True)) > 0
            group.wait_settled(RESOURCES, 60)
            assert w1.owned() == RESOURCES
            assert w1.alive and w1.proc is not None and w1.proc.pid == pid
            assert overlaps(group.events()) == []
        finally:
            group.stop_all()
            admin.add_auth("digest", "orders:new-password")  # the nodes w1 made name only its password
            admin.delete(group_path, recursive=True)


def group_with(client: KazooClient, path: str) -> None:
    """The group, made with the old password's credentials (its nodes name that digest only)."""
    admin = GroupAdmin(client, path)
    admin.create()
    admin.add_resources(sorted(RESOURCES))


@pytest.mark.parametrize(("failures", "expected"), [(1, 1.5), (2, 3.0), (3, 6.0), (4, 12.0), (5, 24.0), (9, 24.0)])
def test_the_join_retry_backs_off_to_a_cap(failures: int, expected: float) -> None:
    assert join_retry_delay(failures, 6.0) == pytest.approx(expected)
    assert join_retry_delay(failures, 6.0) <= JOIN_RETRY_CAP * 6.0
