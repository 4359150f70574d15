"""The password watcher on a live session against a real ZooKeeper: after the file changes, the
session holds the new password too and the nodes it creates name both passwords, then the new one
alone; an unusable file changes nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl
from rebalanser.credentials import PasswordFile, PasswordWatcher
from rebalanser.errors import InvalidInputError
from rebalanser.options import Options
from rebalanser.session import make_client, password_watcher

from tests.support.zk import admin_client, purge

pytestmark = pytest.mark.zk


def test_a_changed_password_file_moves_the_live_session_and_new_nodes(
    zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    secret = tmp_path / "password"
    secret.write_text("old\n")
    options = Options(hosts=zk_hosts, group=group_path,
                      credentials=PasswordFile("op", str(secret), poll_interval=60, previous_grace=1.0))
    zk = make_client(options)
    watcher = password_watcher(zk)
    assert isinstance(watcher, PasswordWatcher)
    zk.start(timeout=15)
    try:
        zk.create(f"{group_path}/before", makepath=True)
        assert zk.get_acls(f"{group_path}/before")[0] == [make_digest_acl("op", "old", all=True)]
        assert not watcher.check_once(), "an unchanged file counted as a rotation"

        secret.write_text("new\n")
        assert watcher.check_once()
        zk.create(f"{group_path}/during")
        assert set(zk.get_acls(f"{group_path}/during")[0]) == {
            make_digest_acl("op", "new", all=True), make_digest_acl("op", "old", all=True)}
        with admin_client(zk_hosts, auth_data=[("digest", "op:new")]) as only_new:
            only_new.set(f"{group_path}/during", b"x")  # what a member with only the new password may do
        zk.set(f"{group_path}/before", b"x")  # the session still holds the old password too

        secret.write_text("")  # an emptied file: reported, the credentials in use kept
        assert not watcher.check_once()
        time.sleep(1.0)  # the previous password's grace (1 s) runs out
        assert not watcher.check_once()
        zk.create(f"{group_path}/after")
        assert zk.get_acls(f"{group_path}/after")[0] == [make_digest_acl("op", "new", all=True)]
        with admin_client(zk_hosts, auth_data=[("digest", "op:old")]) as only_old, pytest.raises(NoAuthError):
            only_old.set(f"{group_path}/after", b"x")

        zk.restart()  # a new connection: kazoo re-sends both passwords
        zk.set(f"{group_path}/after", b"y")
        zk.set(f"{group_path}/before", b"y")
    finally:
        zk.stop()
        zk.close()
        with admin_client(zk_hosts, auth_data=[("digest", "op:old"), ("digest", "op:new")]) as client:
            purge(client, group_path)


def test_the_operators_identity_is_named_by_every_node_before_and_after_a_rotation(
    zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    """Options.operator_id (REBALANSER_ZK_OPERATOR_ID): the operator's identity keeps every permission on
    the nodes a member creates, whichever password they name; a malformed id is refused at once."""
    operator = make_digest_acl("rebalanser-operator", "operator-password", all=True)
    secret = tmp_path / "password"
    secret.write_text("old\n")
    options = Options(hosts=zk_hosts, group=group_path, operator_id=f"digest:{operator.id.id}",
                      credentials=PasswordFile("op", str(secret), poll_interval=60, previous_grace=0.0))
    with pytest.raises(InvalidInputError, match="digest:<user>:<hash>"):
        Options(hosts=zk_hosts, group=group_path, operator_id="rebalanser-operator")
    zk = make_client(options)
    watcher = password_watcher(zk)
    assert isinstance(watcher, PasswordWatcher)
    zk.start(timeout=15)
    try:
        zk.create(f"{group_path}/before", makepath=True)
        secret.write_text("new\n")
        assert watcher.check_once()
        zk.create(f"{group_path}/after")
        assert set(zk.get_acls(f"{group_path}/before")[0]) == {make_digest_acl("op", "old", all=True), operator}
        assert set(zk.get_acls(f"{group_path}/after")[0]) == {make_digest_acl("op", "new", all=True), operator}
        with admin_client(zk_hosts, auth_data=[("digest", "rebalanser-operator:operator-password")]) as as_operator:
            assert as_operator.get(f"{group_path}/before")[0] == b""
    finally:
        zk.stop()
        zk.close()
        with admin_client(zk_hosts, auth_data=[("digest", "op:old"), ("digest", "op:new")]) as client:
            purge(client, group_path)
