"""Bad input: a clear error, or a logged rejection; never a crash loop, never a double assignment."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NotEmptyError
from rebalanser.client import Client
from rebalanser.errors import InvalidInputError
from rebalanser.options import Options

from tests.integration.conftest import add_resources
from tests.support.recorder import Recorder
from tests.support.workers import wait_for


@pytest.mark.parametrize("kwargs, fragment", [
    ({"group": "relative/path"}, "absolute"),
    ({"group": "/a//b"}, "invalid segment"),
    ({"group": "/a/b c"}, "must match"),
    ({"member_id": "has/slash"}, "member id"),
    ({"member_id": "ends-in-newline\n"}, "member id"),
    ({"session_timeout": 0}, "session_timeout"),
    ({"hosts": ""}, "connect string"),
    ({"lease_fraction": 1.5}, "lease_fraction"),
])
def test_invalid_options_fail_fast_with_a_clear_message(kwargs: dict[str, object], fragment: str) -> None:
    base: dict[str, object] = {"hosts": "127.0.0.1:2181", "group": "/g", "member_id": "m"}
    with pytest.raises(InvalidInputError, match=fragment):
        Options(**{**base, **kwargs})  # type: ignore[arg-type]


def test_the_cli_rejects_a_bad_group_path_with_exit_code_2() -> None:
    out = subprocess.run([sys.executable, "-m", "rebalanser.cli", "worker", "--zk", "127.0.0.1:1", "--group", "nope"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "group path must be an absolute znode path" in out.stderr


def start(hosts: str, group: str, member: str) -> tuple[Client, Recorder]:
    handler = Recorder()
    c = Client(Options(hosts, group, member_id=member, create_group=True, session_timeout=2, min_interval=0.1), handler)
    c.start()
    return c, handler


def test_garbage_config_is_rejected_and_the_group_keeps_working(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a"])
    c, h = start(zk_hosts, group_path, "m")
    try:
        wait_for(lambda: h.owned == {"a"}, 10, "never assigned")
        zk.create(f"{group_path}/config", b"{not json at all")
        zk.set(f"{group_path}/config", b'{"minIntervalSeconds": 50, "maxIntervalSeconds": 1}')
        add_resources(zk, group_path, ["b"])
        wait_for(lambda: h.owned == {"a", "b"}, 10, f"owned {h.owned}")
    finally:
        c.stop()


def test_garbage_in_an_assignment_znode_is_rejected_without_losing_ownership(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["a", "b"])
    c, h = start(zk_hosts, group_path, "m")
    try:
        wait_for(lambda: h.owned == {"a", "b"}, 10, "never assigned")
        node = c.member_node
        zk.set(f"{group_path}/assignment/{node}", b"\x00garbage")
        wait_for(lambda: bool(h.errors), 10, "garbage was not reported")
        assert h.owned == {"a", "b"} and c.owns("a")
    finally:
        c.stop()


def test_foreign_children_and_invalid_resource_names_are_ignored(
    zk_hosts: str, zk: KazooClient, group_path: str
) -> None:
    add_resources(zk, group_path, ["ok", "not valid name"])
    zk.create(f"{group_path}/clients/garbage", b"", makepath=True)
    c, h = start(zk_hosts, group_path, "m")
    try:
        wait_for(lambda: h.owned == {"ok"}, 10, f"owned {h.owned}")
        assert c.role == "coordinator"
    finally:
        c.stop()


def test_deleting_the_group_under_a_worker_stops_its_work(zk_hosts: str, zk: KazooClient, group_path: str) -> None:
    add_resources(zk, group_path, ["a"])
    c, h = start(zk_hosts, group_path, "m")
    try:
        wait_for(lambda: h.owned == {"a"}, 10, "never assigned")
        for _ in range(5):  # the worker re-creates its containers concurrently: an administrator retries
            try:
                zk.delete(group_path, recursive=True)
                break
            except (NotEmptyError, NoNodeError):
                continue
        wait_for(lambda: not c.owns("a") and h.owned == set(), 10, "still working on a deleted group")
        assert any("deleted externally" in str(e) for e in h.errors)
    finally:
        c.stop()
