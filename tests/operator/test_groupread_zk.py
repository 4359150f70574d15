"""The status loop's pipelined read of a group, against real ZooKeeper and real workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import WatchedEvent
from rebalanser.paths import GroupPaths
from rebalanser.status import read_group_status
from rebalanser.wire import decode_member
from rebalanser_operator.apply.reconcile import OwnerMarker, group_acl, reconcile_group
from rebalanser_operator.spec.models import ResourceGroupSpec
from rebalanser_operator.status.groupread import read_with_watches

from tests.operator.test_reconcile_zk import CountingClient

pytestmark = pytest.mark.zk

REBALANSER = Path(sys.executable).with_name("rebalanser")


def create_group(zk: KazooClient, path: str, resources: int) -> None:
    spec = ResourceGroupSpec.parse({"zookeeper": {"connect": "unused:2181"},
                                    "resourceSets": [{"prefix": "r", "count": resources}]})
    reconcile_group(zk, path, desired=spec.desired_resources(), config=spec.group_config(0.5), acl=group_acl(None),
                    owner=OwnerMarker("shop", "orders"))


@contextmanager
def workers(hosts: str, path: str, count: int, log_dir: Path) -> Iterator[None]:
    procs = []
    try:
        for i in range(count):
            with open(log_dir / f"w{i}.log", "wb") as log:
                procs.append(subprocess.Popen(
                    [str(REBALANSER), "worker", "--zk", hosts, "--group", path, "--id", f"w{i}", "--json"],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env={**os.environ, "POD_NAME": f"pod-{i}", "POD_UID": f"uid-{i}"}))
        yield
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        time.sleep(0.2)


def test_the_pipelined_read_equals_the_plain_read_and_only_pipelines(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    create_group(zk, group_path, 12)
    with workers(zk_hosts, group_path, 2, tmp_path):
        wait_until(lambda: len(read_group_status(zk, group_path).assigned) == 12
                   and len(read_group_status(zk, group_path).assignments) == 2, 60, "12 resources assigned to 2")
        counting = CountingClient(zk)
        snapshot = read_with_watches(counting, group_path, lambda _: None)  # type: ignore[arg-type]
        plain = read_group_status(zk, group_path)
    assert snapshot.group.to_dict() == plain.to_dict()
    assert snapshot.group.members == ["w0", "w1"] or snapshot.group.members == ["w1", "w0"]
    assert snapshot.config is not None and snapshot.config.effective_interval_seconds == 0.5
    assert snapshot.pods == {"w0": "pod-0", "w1": "pod-1"}  # from the downward API's POD_NAME
    # Every request went out without waiting for the one before (one round, then the assignments).
    assert counting.calls and all(call.endswith("_async") for call in counting.calls), counting.calls


def test_watches_fire_on_membership_resources_and_a_missing_group(zk: KazooClient, group_path: str) -> None:
    fired: list[str] = []
    event = threading.Event()

    def watcher(watched: WatchedEvent) -> None:
        fired.append(watched.path)
        event.set()

    snapshot = read_with_watches(zk, group_path, watcher)
    assert not snapshot.group.exists and snapshot.config is None
    create_group(zk, group_path, 2)
    assert event.wait(10), "creating the group fired no watch"
    paths = GroupPaths.of(group_path)
    for change in (lambda: zk.create(f"{paths.clients}/x-w9-", ephemeral=True, sequence=True),
                   lambda: zk.create(paths.resource("extra"))):
        event.clear()
        fired.clear()
        snapshot = read_with_watches(zk, group_path, watcher)
        assert snapshot.group.exists
        change()
        assert event.wait(10), "a change after the read fired no watch"
    zk.delete(paths.clients, recursive=True)
    event.clear()
    snapshot = read_with_watches(zk, group_path, watcher)  # G/clients missing: an existence watch instead
    assert snapshot.group.members == []
    zk.create(paths.clients)
    assert event.wait(10), "re-creating G/clients fired no watch"


def test_a_member_records_its_pod_name_and_uid(zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path) -> None:
    create_group(zk, group_path, 1)
    clients = GroupPaths.of(group_path).clients
    with workers(zk_hosts, group_path, 1, tmp_path):
        wait_until(lambda: bool(zk.get_children(clients)), 60, "the worker to join")
        record = decode_member(zk.get(f"{clients}/{zk.get_children(clients)[0]}")[0])
    assert (record.member_id, record.pod, record.pod_uid, record.instance) == ("w0", "pod-0", "uid-0", None)
