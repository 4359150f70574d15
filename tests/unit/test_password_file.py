"""Digest credentials from a password file (rebalanser.credentials): what a rotation does to the
credentials a member holds and to the ACL of the nodes it creates, and what an unusable file does."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from kazoo.security import make_digest_acl
from rebalanser.cli import _credentials
from rebalanser.credentials import DigestState, PasswordFile, PasswordFileError, read_password
from rebalanser.errors import InvalidInputError
from rebalanser.options import Options


def test_a_rotation_names_both_passwords_until_the_grace_ends_then_the_new_one_only() -> None:
    state = DigestState("op", "old")
    assert state.acl(0.0) == [make_digest_acl("op", "old", all=True)]
    rotated = state.rotated("new", now=100.0, grace=30.0)
    assert rotated.auth() == "op:new"
    both = [make_digest_acl("op", "new", all=True), make_digest_acl("op", "old", all=True)]
    assert rotated.acl(100.0) == both and rotated.acl(129.9) == both
    assert rotated.acl(130.0) == [make_digest_acl("op", "new", all=True)]


def test_the_same_password_again_changes_nothing_and_a_second_rotation_forgets_the_first() -> None:
    state = DigestState("op", "a").rotated("b", now=0.0, grace=60.0)
    assert state.rotated("b", now=10.0, grace=60.0) is state
    third = state.rotated("c", now=10.0, grace=60.0)
    assert third.previous == "b"
    assert make_digest_acl("op", "a", all=True) not in third.acl(10.0)


def test_no_grace_means_the_new_password_alone_at_once() -> None:
    assert DigestState("op", "old").rotated("new", now=5.0, grace=0.0).acl(5.0) == [
        make_digest_acl("op", "new", all=True)]


def test_the_password_is_read_stripped_and_an_unusable_file_is_an_error(tmp_path: Path) -> None:
    good = tmp_path / "password"
    good.write_text("  s3cret\n")
    assert read_password(str(good)) == "s3cret"
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(PasswordFileError, match="empty"):
        read_password(str(empty))
    with pytest.raises(PasswordFileError, match="cannot read"):
        read_password(str(tmp_path / "missing"))
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(PasswordFileError):
        read_password(str(binary))


@pytest.mark.parametrize("kwargs", [
    {"username": "", "path": "/p"}, {"username": "op", "path": ""},
    {"username": "op", "path": "/p", "poll_interval": 0}, {"username": "op", "path": "/p", "previous_grace": -1},
])
def test_a_bad_password_file_source_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidInputError):
        PasswordFile(**kwargs)  # type: ignore[arg-type]


def test_options_take_a_password_file_or_a_pair() -> None:
    source = PasswordFile("op", "/run/secret/password")
    assert Options(hosts="h:1", group="/g", credentials=source).credentials is source
    assert Options(hosts="h:1", group="/g", credentials=("op", "pw")).credentials == ("op", "pw")
    with pytest.raises(InvalidInputError):
        Options(hosts="h:1", group="/g", credentials=("op", ""))


def _args(**overrides: object) -> argparse.Namespace:
    values: dict[str, object] = {"zk_user": "op", "zk_password_file": None, "zk_password_poll": 5.0,
                                 "zk_previous_password_grace": 120.0}
    return argparse.Namespace(**{**values, **overrides})


def test_the_cli_turns_a_password_file_into_a_source_it_re_reads(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REBALANSER_ZK_USERNAME", raising=False)
    monkeypatch.delenv("REBALANSER_ZK_PASSWORD_FILE", raising=False)
    monkeypatch.setenv("REBALANSER_ZK_PASSWORD", "from-env")
    path = tmp_path / "password"
    path.write_text("pw\n")
    source = _credentials(_args(zk_password_file=str(path), zk_password_poll=0.5, zk_previous_password_grace=7.0))
    assert source == PasswordFile("op", str(path), poll_interval=0.5, previous_grace=7.0)
    assert _credentials(_args()) == ("op", "from-env")  # an environment password stays fixed
    path.write_text("")
    with pytest.raises(InvalidInputError, match="empty"):
        _credentials(_args(zk_password_file=str(path)))
    with pytest.raises(InvalidInputError, match="needs a user"):
        _credentials(_args(zk_user=None, zk_password_file=str(path)))
    path.write_text("pw")
    monkeypatch.setenv("REBALANSER_ZK_PASSWORD_FILE", str(path))  # envFrom-wired workers
    assert _credentials(_args()) == PasswordFile("op", str(path))
