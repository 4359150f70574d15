"""The worker's life as a new user meets it, as real processes against a real ZooKeeper: interrupted
while connecting, its output piped into ``head``, its terminal output, and its group deleted under it."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from kazoo.client import KazooClient
from rebalanser import Client, Handler, Options
from rebalanser.admin import GroupAdmin, connect
from rebalanser.errors import GroupDeletedError

from tests.integration.conftest import add_resources
from tests.support.relay import Relay
from tests.support.workers import REPO, Group, wait_for

pytestmark = pytest.mark.zk


def spawn(*argv: str, stdout: int | None = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "rebalanser.cli", *argv], stdout=stdout,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=REPO)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers: a worker stays connecting on it."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


@pytest.mark.parametrize("api", ["threads", "asyncio"])
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_connecting_ends_the_worker_at_once_and_quietly(
    sig: signal.Signals, code: int, api: str, silent_server: int
) -> None:
    """Before: Ctrl-C while connecting printed a traceback (threads), or waited for the whole connect
    timeout (asyncio)."""
    proc = spawn("worker", "--zk", f"127.0.0.1:{silent_server}", "--group", "/g", "--id", "w1", "--api", api,
                 "--connect-timeout", "60", "-v", "--log-level", "INFO")
    assert proc.stderr is not None
    first = proc.stderr.readline()  # kazoo's "Connecting to ..." (-v): the worker is connecting
    assert "Connecting to" in first, first
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=20)  # well within the 60 s connect timeout
    assert proc.returncode == code
    assert "Traceback" not in err and "rebalanser:" not in err, err
    assert out == ""


@pytest.mark.parametrize("api", ["threads", "asyncio"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_once_joined_is_a_graceful_stop_even_before_the_start_returned(
    sig: signal.Signals, api: str, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """The signal lands after the member joined, while ``start()`` still reads the group's state: a relay
    holds the worker's first request that names its own member node (which it knows only once its
    join's ``multi`` was answered) until the worker has logged the signal. Before: it exited 143/130
    with no ``stopped`` event, as if it had never joined."""
    add_resources(zk, group_path, ["r0", "r1"])
    relay = _held_at_own_node(zk_hosts, "w1")
    try:
        proc = spawn("worker", "--zk", relay.address, "--group", group_path, "--id", "w1", "--api", api, "--json",
                     "--session-timeout", "30", "--log-level", "INFO")
        assert relay.tripped.wait(60), f"the worker never read its own member node: {_ended(proc)}"
        proc.send_signal(sig)
        assert proc.stderr is not None
        said = _read_until(proc.stderr, f"{sig.name}: stopping the resources and leaving the group", 30)
        assert said, f"the worker did not log the signal: {_ended(proc)}"
        relay.release()
        out, err = proc.communicate(timeout=60)
    finally:
        relay.close()
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["event"] == "stopped", events
    assigned = {r for e in events if e["event"] == "assigned" for r in e["resources"]}
    revoked = {r for e in events if e["event"] == "revoked" for r in e["resources"]}
    assert assigned == revoked, events
    assert zk.get_children(f"{group_path}/clients") == []  # it left: not after the 30 s session timeout
    assert zk.get_children(f"{group_path}/owners") == []


@pytest.mark.parametrize("api", ["threads", "asyncio"])
def test_a_group_deleted_while_the_start_still_runs_ends_the_stream_with_stopped(
    api: str, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """``group delete --force`` marks the root after the member joined and before its start read the
    root (held by the relay as above): the worker leaves and exits 5, and, having joined, its stream
    ends with ``stopped`` as every joined worker's does."""
    add_resources(zk, group_path, ["r0"])
    relay = _held_at_own_node(zk_hosts, "w1")
    unmarked, _ = zk.get(group_path)
    deleting = threading.Thread(target=lambda: GroupAdmin(zk, group_path).delete(force=True, wait=60), daemon=True)
    try:
        proc = spawn("worker", "--zk", relay.address, "--group", group_path, "--id", "w1", "--api", api, "--json",
                     "--session-timeout", "30")
        assert relay.tripped.wait(60), f"the worker never read its own member node: {_ended(proc)}"
        deleting.start()
        wait_for(lambda: zk.get(group_path)[0] != unmarked, 30, "the group's root was never marked deleted")
        relay.release()
        out, err = proc.communicate(timeout=60)
    finally:
        relay.close()
    deleting.join(60)
    assert proc.returncode == 5, err
    assert f"rebalanser: group {group_path} is being deleted" in err, err
    assert "Traceback" not in err, err
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["event"] == "stopped", events
    assert zk.exists(group_path) is None


def _held_at_own_node(zk_hosts: str, member_id: str) -> Relay:
    """A relay to the first server that holds the first request naming member ``member_id``'s own node by
    its full sequential name, which the member knows only once its join was answered."""
    host, port = zk_hosts.split(",")[0].rsplit(":", 1)
    own_node = re.compile(rb"/clients/[0-9a-f]{32}-" + re.escape(member_id.encode()) + rb"-[0-9]{10}")
    return Relay((host, int(port)), hold_on=lambda data: own_node.search(data) is not None)


def _read_until(stream: IO[str], text: str, timeout: float) -> bool:
    """Reads lines from ``stream`` (on a thread of its own) until one contains ``text``; False after ``timeout``."""
    found = threading.Event()

    def read() -> None:
        for line in stream:
            if text in line:
                found.set()
                return

    threading.Thread(target=read, daemon=True).start()
    return found.wait(timeout)


def _ended(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate(timeout=30)
    return f"exit {proc.returncode}; stdout {out!r}; stderr {err!r}"


def test_a_closed_stdout_has_the_worker_leave_and_leave_nothing_behind(
    zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """``rebalanser worker --json | head``. Before: a BrokenPipe traceback, and the dead member kept its
    resources until its session expired."""
    add_resources(zk, group_path, ["r0", "r1"])
    proc = spawn("worker", "--zk", zk_hosts, "--group", group_path, "--id", "w1", "--json", "--tick", "0.05",
                 "--session-timeout", "30")
    assert proc.stdout is not None
    while '"assigned"' not in proc.stdout.readline():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    proc.stdout.close()  # as head does after its lines
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert err == "", err
    assert zk.get_children(f"{group_path}/clients") == []  # at once: not after the 30 s session timeout
    assert zk.get_children(f"{group_path}/owners") == []


def test_the_terminal_output_is_a_line_per_change_and_a_periodic_summary_never_a_line_per_tick(
    zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """Before: the default 0.1 s tick printed ~40 lines a second with the README's two workers."""
    add_resources(zk, group_path, ["r0", "r1", "r2"])
    proc = spawn("worker", "--zk", zk_hosts, "--group", group_path, "--id", "w1", "--tick", "0.01",
                 "--summary-interval", "1")
    assert proc.stdout is not None
    lines: list[str] = []
    while sum("working on" in line for line in lines) < 3:
        lines.append(proc.stdout.readline())
        assert proc.poll() is None
    proc.terminate()
    out, _ = proc.communicate(timeout=60)
    lines += out.splitlines()
    assert not [line for line in lines if " tick " in line], lines
    assert len(lines) <= 12, lines
    summaries = [line for line in lines if "working on" in line]
    assert "[w1] working on 3 resources: r0, r1, r2; " in summaries[-1], summaries


def test_group_delete_refuses_while_members_are_live_and_names_them(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    add_resources(zk, group_path, ["r0"])
    workers = Group(zk_hosts, group_path, tmp_path)
    try:
        workers.spawn("w1")
        workers.spawn("w2")
        workers.wait_settled({"r0"}, 60)
        proc = subprocess.run([sys.executable, "-m", "rebalanser.cli", "group", "delete", "--zk", zk_hosts,
                               "--group", group_path], capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 1
        assert proc.stderr.splitlines() in ([
            f"rebalanser: 2 members are live in {group_path}: {members}; stop them first, or delete it with --force "
            "(they leave the group and end)"] for members in ("w1, w2", "w2, w1")), proc.stderr  # election order
        assert zk.get_children(f"{group_path}/resources") == ["r0"]
    finally:
        workers.stop_all()


@pytest.mark.parametrize("api", ["threads", "asyncio"])
def test_group_delete_force_stops_the_live_workers_first_and_leaves_no_group_behind(
    api: str, zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    """Before: ``--force`` deleted under the workers, which re-created the group at once; it exited 1,
    calling the group's own containers "children that are not the group's"."""
    resources = {f"r{i}" for i in range(6)}
    add_resources(zk, group_path, sorted(resources))
    workers = Group(zk_hosts, group_path, tmp_path)
    try:
        for name in ("w1", "w2", "w3"):
            workers.spawn(name, "--api", api)
        workers.wait_settled(resources, 60)
        proc = subprocess.run([sys.executable, "-m", "rebalanser.cli", "group", "delete", "--force", "--zk",
                               zk_hosts, "--group", group_path], capture_output=True, text=True, timeout=120,
                              check=False)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"deleted {group_path} (") and proc.stdout.endswith(
            "; 3 of 3 members left it first\n"), proc.stdout
        for worker in workers.workers.values():
            assert worker.wait(60) == 5
            assert worker.snapshot()[-1]["event"] == "stopped"
            assert worker.owned() == set()
            err = (tmp_path / f"{worker.member_id}.0.err").read_text()
            assert f"rebalanser: group {group_path} is being deleted: left it" in err.splitlines(), err
            assert "Traceback" not in err
        assert zk.exists(group_path) is None  # nothing re-created it: every worker has ended
    finally:
        workers.stop_all()


class Ended(Handler):
    def __init__(self) -> None:
        self.errors: list[Exception] = []

    def on_error(self, error: Exception) -> None:
        self.errors.append(error)


def test_a_client_whose_group_is_deleted_leaves_and_ends_with_group_deleted_error(
    zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    with connect(zk_hosts) as admin_zk:
        GroupAdmin(admin_zk, group_path).create()
        GroupAdmin(admin_zk, group_path).add_resources(["r0"])
        handler = Ended()
        client = Client(Options(zk_hosts, group_path, member_id="m", session_timeout=2, min_interval=0.1), handler)
        client.start()
        wait_for(lambda: client.owns("r0"), 30, "r0 never owned")
        deletion = GroupAdmin(admin_zk, group_path).delete(force=True, wait=30)
        assert deletion.members == ("m",) and deletion.stayed == ()
        assert client.wait(30)
        assert [type(e) for e in handler.errors] == [GroupDeletedError]
        assert zk.exists(group_path) is None


def test_a_client_refuses_a_missing_group_unless_asked_to_create_it(zk: KazooClient, zk_hosts: str,
                                                                    group_path: str) -> None:
    from rebalanser.errors import GroupNotFoundError

    client = Client(Options(zk_hosts, group_path, member_id="m", session_timeout=2))
    with pytest.raises(GroupNotFoundError, match="does not exist"):
        client.start()
    assert client.wait(10) and zk.exists(group_path) is None
    client = Client(Options(zk_hosts, group_path, member_id="m", session_timeout=2, create_group=True))
    client.start()
    try:
        assert zk.exists(f"{group_path}/resources") is not None
    finally:
        client.stop()


def test_status_of_an_empty_group_says_there_is_no_coordinator(zk_hosts: str, group_path: str) -> None:
    """Before: ``coordinator None``."""
    with connect(zk_hosts) as admin_zk:
        GroupAdmin(admin_zk, group_path).create()
    proc = subprocess.run([sys.executable, "-m", "rebalanser.cli", "status", "--zk", zk_hosts, "--group", group_path],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"group {group_path}: 0 members, coordinator (none), epoch 0, generation 0"
    assert json.loads(subprocess.run(
        [sys.executable, "-m", "rebalanser.cli", "status", "--json", "--zk", zk_hosts, "--group", group_path],
        capture_output=True, text=True, timeout=60, check=False).stdout)["coordinator"] is None
