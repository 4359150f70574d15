"""``rebalanser.admin`` and ``rebalanser group``: a group made, filled, configured and deleted without the
operator, on a real ZooKeeper, with and without digest credentials."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl
from rebalanser import Algorithm, GroupConfig
from rebalanser.admin import GroupAdmin, GroupBusyError, GroupManagedError, GroupNotFoundError, connect
from rebalanser.cli import main

from tests.support.workers import Group, wait_for

pytestmark = pytest.mark.zk


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_create_makes_the_layout_and_writes_a_config_only_when_a_setting_is_given(
    zk: KazooClient, zk_hosts: str, group_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, "group", "create", "--zk", zk_hosts, "--group", group_path)[:2] == (0, f"created {group_path}\n")
    for child in ("resources", "clients", "owners", "assignment", "stopped"):
        assert zk.exists(f"{group_path}/{child}") is not None, child
    assert zk.exists(f"{group_path}/config") is None
    code, out, _ = cli(capsys, "group", "create", "--zk", zk_hosts, "--group", group_path, "--algorithm",
                       "global-barrier")
    assert (code, out) == (0, f"exists {group_path}\n")
    assert json.loads(zk.get(f"{group_path}/config")[0])["algorithm"] == "GlobalBarrier"


def test_resources_add_remove_and_list_one_name_per_line(
    zk_hosts: str, group_path: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = ["--zk", zk_hosts, "--group", group_path]
    assert cli(capsys, "group", "create", *base)[0] == 0
    names = tmp_path / "names"
    names.write_text("r2\n\nr3\n")
    code, out, _ = cli(capsys, "group", "resources", "add", *base, "r0", "r1", "r1", "--from-file", str(names))
    assert (code, out) == (0, f"added 4 of 4 in {group_path}\n")
    assert cli(capsys, "group", "resources", "add", *base, "r0", "r9")[1] == f"added 1 of 2 in {group_path}\n"
    assert cli(capsys, "group", "resources", "remove", *base, "r1", "gone")[1] == f"removed 1 of 2 in {group_path}\n"
    assert cli(capsys, "group", "resources", "list", *base) == (0, "r0\nr2\nr3\nr9\n", "")


def test_a_bad_name_writes_nothing(zk_hosts: str, group_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--zk", zk_hosts, "--group", group_path]
    cli(capsys, "group", "create", *base)
    code, _, err = cli(capsys, "group", "resources", "add", *base, "ok", "not/ok")
    assert code == 2 and "not/ok" in err, err
    assert cli(capsys, "group", "resources", "list", *base)[1] == ""


def test_resources_of_a_missing_group_say_how_to_make_it(
    zk_hosts: str, group_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "group", "resources", "add", "--zk", zk_hosts, "--group", group_path, "r0")
    assert code == 5 and "does not exist" in err and "rebalanser group create" in err, err
    assert "Traceback" not in err


def test_config_changes_only_the_named_settings_and_clear_removes_it(
    zk: KazooClient, zk_hosts: str, group_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--zk", zk_hosts, "--group", group_path]
    cli(capsys, "group", "create", *base, "--algorithm", "global-barrier", "--departure-grace", "7")
    code, out, _ = cli(capsys, "group", "config", *base, "--min-interval", "5")
    written = json.loads(out)
    assert code == 0 and written == json.loads(zk.get(f"{group_path}/config")[0])
    assert (written["algorithm"], written["minIntervalSeconds"], written["departureGraceSeconds"]) == (
        "GlobalBarrier", 5.0, 7.0)
    code, _, err = cli(capsys, "group", "config", *base, "--min-interval", "99", "--max-interval", "10")
    assert code == 2 and "minIntervalSeconds" in err, err
    assert cli(capsys, "group", "config", *base, "--clear")[:2] == (0, "{}\n")
    assert zk.exists(f"{group_path}/config") is None


def test_delete_is_refused_while_members_live_then_removes_the_layout_only(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--zk", zk_hosts, "--group", group_path]
    cli(capsys, "group", "create", *base)
    cli(capsys, "group", "resources", "add", *base, *[f"r{i}" for i in range(4)])
    workers = Group(zk_hosts, group_path, tmp_path)
    try:
        workers.spawn("w1")
        workers.wait_settled({f"r{i}" for i in range(4)}, 60)
        code, _, err = cli(capsys, "group", "delete", *base)
        assert code == 1 and "live" in err and "w1" in err, err
        assert zk.exists(group_path) is not None
    finally:
        workers.stop_all()
    zk.create(f"{group_path}/someone-elses", b"keep")
    code, _, err = cli(capsys, "group", "delete", *base)
    assert code == 1 and "someone-elses" in err and "nothing was deleted" in err, err
    assert "someone-elses" in zk.get_children(group_path) and len(zk.get_children(f"{group_path}/resources")) == 4
    assert zk.get(group_path)[0] == b""  # not marked deleted: members may go on joining it
    zk.delete(f"{group_path}/someone-elses")
    code, out, _ = cli(capsys, "group", "delete", *base)
    assert code == 0 and out.startswith(f"deleted {group_path}"), out
    assert zk.exists(group_path) is None and zk.exists(group_path.rsplit("/", 1)[0]) is not None


def test_a_group_managed_by_a_resourcegroup_is_refused(zk: KazooClient, zk_hosts: str, group_path: str) -> None:
    marker = {"resourceGroup": {"namespace": "shop", "name": "orders", "uid": "u"}}
    zk.create(group_path, json.dumps(marker).encode(), makepath=True)
    with connect(zk_hosts) as client:
        group = GroupAdmin(client, group_path)
        for attempt in (group.create, lambda: group.add_resources(["r0"]), group.delete):
            with pytest.raises(GroupManagedError, match="shop/orders"):
                attempt()
            assert zk.exists(f"{group_path}/resources/r0") is None


def test_the_api_adds_resources_in_batches_and_reads_the_config(zk_hosts: str, group_path: str) -> None:
    with connect(zk_hosts) as client:
        group = GroupAdmin(client, group_path)
        with pytest.raises(GroupNotFoundError):
            group.resources()
        assert group.create(GroupConfig(algorithm=Algorithm.GLOBAL_BARRIER)) is True
        names = [f"res-{i:05d}" for i in range(2500)]
        assert group.add_resources(names) == names
        assert group.resources() == names
        assert group.remove_resources(names[::2]) == names[::2]
        assert len(group.resources()) == 1250
        config = group.config()
        assert config is not None and config.algorithm is Algorithm.GLOBAL_BARRIER
        assert group.delete().deleted == 1250 + len(("root", "resources", "clients", "sessions", "owners",
                                                     "assignment", "stopped", "config"))


def test_a_digest_protected_group_from_the_cli_alone(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Made with credentials, the group's nodes name that digest only: a client without them is refused
    with a clear error (no traceback), ``status`` and the workers with them work."""
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    base = ["--zk", zk_hosts, "--group", group_path]
    creds = ["--zk-user", "orders", "--zk-password-file", str(password)]
    workers = Group(zk_hosts, group_path, tmp_path, extra=creds)
    try:
        assert cli(capsys, "group", "create", *base, *creds)[0] == 0
        assert cli(capsys, "group", "resources", "add", *base, *creds, "r0", "r1")[0] == 0
        with connect(zk_hosts, credentials=("orders", "s3cret")) as client:
            acl, _ = client.get_acls(f"{group_path}/resources/r0")
        assert acl == [make_digest_acl("orders", "s3cret", all=True)]
        with pytest.raises(NoAuthError):
            zk.get_children(f"{group_path}/resources")
        for argv in (["group", "resources", "list"], ["group", "resources", "add", "r2"], ["status"]):
            code, _, err = cli(capsys, *argv, *base)
            assert code == 1 and "refused access" in err and "--zk-user" in err, (argv, err)
            assert "Traceback" not in err
        workers.spawn("w1")
        workers.wait_settled({"r0", "r1"}, 60)
        code, out, _ = cli(capsys, "status", *base, *creds, "--resource", "r0")
        assert (code, out) == (0, "r0\tw1\n")
        workers.stop_all()
        code, out, err = cli(capsys, "group", "delete", *base, *creds)
        assert code == 0, err
    finally:
        workers.stop_all()
        with connect(zk_hosts, credentials=("orders", "s3cret")) as client:
            GroupAdmin(client, group_path).delete(force=True)
    assert zk.exists(group_path) is None


def test_from_an_empty_zookeeper_to_a_working_worker_with_the_commands_alone(
    zk_hosts: str, tmp_path: Path
) -> None:
    """The README's five-minute path, as processes: ``group create``, ``resources add``, ``worker``."""
    path = f"/five-minutes-{tmp_path.name[-20:]}/orders"

    def run(*argv: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "rebalanser.cli", *argv, "--zk", zk_hosts, "--group", path],
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    run("group", "create")
    run("group", "resources", "add", "orders-0", "orders-1", "orders-2")
    workers = Group(zk_hosts, path, tmp_path)
    try:
        workers.spawn("w1")
        wait_for(lambda: {e["resource"] for e in workers.workers["w1"].of("tick")} == {"orders-0", "orders-1",
                                                                                        "orders-2"},
                 60, "the worker did not tick on every resource")
    finally:
        workers.stop_all()
    assert "deleted" in run("group", "delete")
    with connect(zk_hosts) as client:
        client.delete(path.rsplit("/", 1)[0])


def test_group_busy_error_names_the_members(zk_hosts: str, group_path: str, tmp_path: Path) -> None:
    with connect(zk_hosts) as client:
        group = GroupAdmin(client, group_path)
        group.create()
        group.add_resources(["r0"])
        workers = Group(zk_hosts, group_path, tmp_path)
        try:
            workers.spawn("busy-1")
            wait_for(lambda: group.members() == ["busy-1"], 60, "the member did not join")
            with pytest.raises(GroupBusyError, match="busy-1"):
                group.delete()
            assert group.resources() == ["r0"]
        finally:
            workers.stop_all()


def test_create_clears_the_mark_of_a_deletion_that_did_not_finish(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    """A deletion refused half-way (or interrupted) may leave the root marked deleted, which workers
    refuse; ``group create`` makes the group usable again."""
    from rebalanser import wire

    with connect(zk_hosts) as client:
        group = GroupAdmin(client, group_path)
        group.create()
        group.add_resources(["r0"])
    zk.set(group_path, wire.DELETION_MARK)
    proc = subprocess.run([sys.executable, "-m", "rebalanser.cli", "worker", "--zk", zk_hosts, "--group", group_path,
                           "--id", "w1"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 5 and "is being deleted" in proc.stderr, proc.stderr
    with connect(zk_hosts) as client:
        assert GroupAdmin(client, group_path).create() is True
    assert zk.get(group_path)[0] == b""
    workers = Group(zk_hosts, group_path, tmp_path, create_group=False)
    try:
        workers.spawn("w1")
        workers.wait_settled({"r0"}, 60)
    finally:
        workers.stop_all()
