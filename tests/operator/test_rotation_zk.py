"""Rotating digest credentials under running workers, against a real ZooKeeper and real worker
processes: the password file changes as the kubelet changes a mounted Secret (a symlink swap), the
operator re-applies the changed Secret, and the same processes keep working and writing through the
grace period and after it. Evidence comes from the workers' JSON event streams and their logs."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from rebalanser.paths import GroupPaths
from rebalanser_operator.apply.actions import apply_spec
from rebalanser_operator.apply.secretpoll import poll_once
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.runtime import LoopOptions, OperatorContext

from tests.operator.support import TEST_TENANCY, RecordingKube, status_loop
from tests.support.invariants import overlaps, token_regressions
from tests.support.workers import Group, Worker, wait_for
from tests.support.zk import admin_client, purge

pytestmark = pytest.mark.zk

RESOURCES = {f"r{i}" for i in range(6)}
GRACE = 8.0  # the operator's grace period here (300 s by default)
ROTATED = "ZooKeeper digest credentials of op rotated"


class MountedSecret:
    """A Secret volume as the kubelet lays it out: ``password -> ..data/password`` and
    ``..data -> ..<version>``; an update writes a new version directory and swaps ``..data``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir()
        self._version = 0
        (directory / "password").symlink_to("..data/password")

    @property
    def path(self) -> str:
        return str(self.directory / "password")

    def write(self, password: str) -> None:
        self._version += 1
        version = self.directory / f"..v{self._version}"
        version.mkdir()
        (version / "password").write_text(password)
        staging = self.directory / "..data_tmp"
        staging.symlink_to(version.name)
        os.replace(staging, self.directory / "..data")


@pytest.fixture
def kube() -> RecordingKube:
    return RecordingKube()


@pytest.fixture
def ctx(kube: RecordingKube) -> Iterator[OperatorContext]:
    options = LoopOptions(connect_wait=5.0, period=1.0, credentials_grace=GRACE)
    context = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=options)
    yield context
    context.close()



def stderr_of(worker: Worker, tmp_path: Path) -> str:
    return (tmp_path / f"{worker.member_id}.0.err").read_text()


def coordinators(group: Group) -> set[str]:
    """Members that reported taking the coordinator role (their own ``role`` events)."""
    return {w.member_id for w in group.all_workers() if any(e.get("role") == "coordinator" for e in w.of("role"))}


def may_write(hosts: str, group_path: str, password: str) -> list[str]:
    """What a session holding only ``password`` may write of the group's persistent nodes (a probe child
    in the containers workers create in, the coordinator's records, a resource node)."""
    paths = GroupPaths.of(group_path)
    allowed = []
    with admin_client(hosts, auth_data=[("digest", f"op:{password}")]) as client:
        for container in (paths.clients, paths.owners, paths.assignment):
            try:
                client.create(f"{container}/probe", ephemeral=True)
                client.delete(f"{container}/probe")
                allowed.append(container)
            except NoAuthError:
                pass
        for record in (paths.epoch, paths.state, paths.resource(min(RESOURCES))):
            try:
                data, stat = client.get(record)
                client.set(record, data, version=stat.version)
                allowed.append(record)
            except NoAuthError:
                pass
    return allowed


def test_workers_move_to_a_rotated_password_without_a_restart(
    ctx: OperatorContext, kube: RecordingKube, zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    kube.secrets["zk-digest"] = DigestCredentials("op", "old-password")
    spec = {"zookeeper": {"connect": zk_hosts, "path": group_path, "credentialsSecret": "zk-digest"},
            "resources": sorted(RESOURCES)}
    rt = ctx.group("shop", "orders", "uid-orders")
    apply_spec(ctx, rt, spec, generation=1)
    secret = MountedSecret(tmp_path / "secret")
    secret.write("old-password")
    group = Group(zk_hosts, group_path, tmp_path, session_timeout=6.0, extra=[
        "--zk-user", "op", "--zk-password-file", secret.path, "--zk-password-poll", "0.2",
        "--zk-previous-password-grace", "2"])
    try:
        with status_loop(ctx, rt):
            w1 = group.spawn("w1")
            wait_for(lambda: coordinators(group) == {"w1"}, 20, lambda: f"coordinators: {coordinators(group)}")
            w2 = group.spawn("w2")
            group.wait_settled(RESOURCES, 20)
            pids = {w.member_id: w.proc.pid for w in (w1, w2) if w.proc is not None}

            # The Secret changes: the operator's Secret poll (a read by name) hands it to the group, whose
            # step re-applies it (and keeps the grace period); the kubelet updates the mounted file.
            assert poll_once(ctx, kube.secret_data) == 0, "an unchanged Secret marked the group"
            kube.secrets["zk-digest"] = DigestCredentials("op", "new-password")
            assert poll_once(ctx, kube.secret_data) == 1
            wait_for(lambda: rt.grace_until is not None, 10, "the status loop did not apply the new Secret")
            rotated_at = time.monotonic()
            secret.write("new-password")
            wait_for(lambda: all(ROTATED in stderr_of(w, tmp_path) for w in (w1, w2)), 15,
                     lambda: "a worker did not report the rotation: " + stderr_of(w1, tmp_path)[-500:])
            assert len(may_write(zk_hosts, group_path, "old-password")) == 6, "the old password lost access early"
            assert time.monotonic() - rotated_at < GRACE, "too slow to have checked inside the grace period"

            # A member holding only the new password joins; the old processes' coordinator rebalances.
            w3 = group.spawn("w3")
            group.wait_settled(RESOURCES, 20)
            assert w3.owned(), "the new member got nothing"
            assert coordinators(group) == {"w1"}, f"the coordinator changed: {coordinators(group)}"

            # The grace period ends: the status loop's sweep leaves the new password alone with write access.
            wait_for(lambda: may_write(zk_hosts, group_path, "old-password") == [], GRACE + 15,
                     lambda: f"the old password may still write {may_write(zk_hosts, group_path, 'old-password')}",
                     poll=0.5)
            assert rt.grace_until is None
            assert len(may_write(zk_hosts, group_path, "new-password")) == 6

            # The same processes still write with the new password alone: w3 leaves, w1 reassigns.
            w3.terminate()
            group.wait_settled(RESOURCES, 20)
            assert w1.owned() and w2.owned()
            assert {w.member_id: w.proc.pid for w in (w1, w2) if w.proc is not None} == pids
            assert w1.alive and w2.alive, "a worker ended"
            assert coordinators(group) == {"w1"}
            events = group.events()
            assert [e for e in events if e["event"] == "error"] == []
            assert overlaps(events) == [] and token_regressions(events) == []
    finally:
        group.stop_all()
        with admin_client(zk_hosts, auth_data=[("digest", "op:new-password")]) as client:
            purge(client, group_path)


def test_an_emptied_password_file_is_reported_and_the_worker_keeps_its_credentials(
    zk: KazooClient, zk_hosts: str, group_path: str, tmp_path: Path
) -> None:
    paths = GroupPaths.of(group_path)
    for name in ("a", "b"):
        zk.create(paths.resource(name), makepath=True)
    secret = MountedSecret(tmp_path / "secret")
    secret.write("pw")
    group = Group(zk_hosts, group_path, tmp_path, extra=[
        "--zk-user", "op", "--zk-password-file", secret.path, "--zk-password-poll", "0.2"])
    try:
        w1 = group.spawn("w1")
        group.wait_settled({"a", "b"}, 20)
        secret.write("")
        wait_for(lambda: "is empty; keeping the credentials in use" in stderr_of(w1, tmp_path), 10,
                 lambda: "the empty file was not reported: " + stderr_of(w1, tmp_path)[-500:])
        (tmp_path / "fixed").write_text("pw")
        group.spawn("w2", "--zk-password-file", str(tmp_path / "fixed"))  # the password w1 kept
        group.wait_settled({"a", "b"}, 20)  # w1 (coordinator) still writes with the password it had
        assert w1.alive and ROTATED not in stderr_of(w1, tmp_path)
        assert stderr_of(w1, tmp_path).count("is empty") == 1, "the same problem was reported more than once"
        assert overlaps(group.events()) == []
    finally:
        group.stop_all()
        with admin_client(zk_hosts, auth_data=[("digest", "op:pw")]) as client:
            purge(client, group_path)
