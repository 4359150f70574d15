"""The shared ZooKeeper layer's pure parts: path rules, session ownership, retries, protected names."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, NoNodeError, SessionExpiredError
from rebalanser import zk
from rebalanser.errors import InvalidInputError
from rebalanser.paths import validate_group_path


@pytest.mark.parametrize("name", ["a", "job-7", "x.y", "ünïcode", "..."])
def test_valid_names_pass_unchanged(name: str) -> None:
    assert zk.validate_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "nul\x00", "bell\x07", "del\x7f", "\ud800", "\ufff0"])
def test_names_zookeeper_refuses_are_refused(name: str) -> None:
    with pytest.raises(InvalidInputError):
        zk.validate_name(name)


def test_invalid_input_stays_a_value_error() -> None:
    with pytest.raises(ValueError, match="item id"):
        zk.validate_name("a/b", "item id")


@pytest.mark.parametrize("path", ["/a", "/a/b", "/ok/zookeeper", "/zookeeperish"])
def test_valid_paths_pass_unchanged(path: str) -> None:
    assert zk.validate_path(path) == path


@pytest.mark.parametrize(
    "path", ["", "/", "a", "a/b", "/a/", "//", "/a//b", "/a/./b", "/a/../b", "/zookeeper", "/zookeeper/x"]
)
def test_invalid_paths_are_refused(path: str) -> None:
    with pytest.raises(InvalidInputError):
        zk.validate_path(path)


def test_group_paths_add_their_own_rules_on_top() -> None:
    assert validate_group_path("/groups/g1/") == "/groups/g1"  # a trailing '/' is trimmed first
    with pytest.raises(InvalidInputError):
        validate_group_path("/zookeeper/g")  # ZooKeeper's rule
    with pytest.raises(InvalidInputError):
        validate_group_path("/groups/with space")  # the group path's narrower character set
    assert zk.validate_path("/groups/with space") == "/groups/with space"


def test_join_and_basename() -> None:
    assert zk.join("/a/b", "c") == "/a/b/c"
    assert zk.basename("/a/b/c") == "c"


# -- sessions ---------------------------------------------------------------------------------------


def _client(session: int | None) -> Any:
    return SimpleNamespace(client_id=None if session is None else (session, b"password"))


def test_session_id_is_zero_without_a_session() -> None:
    assert zk.session_id(_client(None)) == 0
    assert zk.session_id(_client(0x1234)) == 0x1234


@pytest.mark.parametrize(
    ("owner", "session", "expected"),
    [(7, 7, True), (8, 7, False), (0, 7, False), (0, None, False), (7, None, False)],
)
def test_owned_by_session(owner: int, session: int | None, expected: bool) -> None:
    # A persistent node (owner 0) is never ours, not even while we have no session (id 0).
    assert zk.owned_by_session(SimpleNamespace(ephemeralOwner=owner), _client(session)) is expected
    assert zk.owned_by_session(None, _client(session)) is False


# -- retries ----------------------------------------------------------------------------------------


class Flaky:
    """Raises ``errors`` one per call, then returns ``value``."""

    def __init__(self, errors: list[Exception], value: str = "done") -> None:
        self.errors, self.value, self.calls = list(errors), value, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.value


def test_retry_goes_through_transient_errors() -> None:
    op = Flaky([ConnectionLoss(), SessionExpiredError(), ConnectionLoss()])
    assert zk.retry(op, timeout=30) == "done"
    assert op.calls == 4


def test_retry_raises_the_last_transient_error_at_the_deadline() -> None:
    op = Flaky([ConnectionLoss()] * 10_000)
    with pytest.raises(ConnectionLoss):
        zk.retry(op, timeout=0.3)
    assert 1 < op.calls < 10_000


def test_retry_does_not_retry_other_errors() -> None:
    for error in (NoNodeError(), ConnectionClosedError(), ValueError("bug")):
        op = Flaky([error])
        with pytest.raises(type(error)):
            zk.retry(op, timeout=30)
        assert op.calls == 1


def test_retry_without_expire_gives_up_on_session_expiry() -> None:
    op = Flaky([SessionExpiredError()])
    with pytest.raises(SessionExpiredError):
        zk.retry(op, timeout=30, expire=False)
    assert op.calls == 1


# -- protected names --------------------------------------------------------------------------------


def test_protected_names_are_found_by_their_guid() -> None:
    a, b = zk.new_guid(), zk.new_guid()
    assert a != b and len(a) == 32
    children = [f"c-{b}-0000000001", f"c-{a}-0000000002", "foreign"]
    assert zk.find_child(children, f"c-{a}-") == f"c-{a}-0000000002"
    assert zk.find_child(children, f"c-{zk.new_guid()}-") is None


@pytest.mark.parametrize(("owner", "session", "expected"), [(7, 7, True), (8, 7, False), (0, 0, False), (7, 0, False)])
def test_ephemeral_of_a_given_session(owner: int, session: int, expected: bool) -> None:
    assert zk.ephemeral_of(SimpleNamespace(ephemeralOwner=owner), session) is expected
    assert zk.ephemeral_of(None, session) is False
