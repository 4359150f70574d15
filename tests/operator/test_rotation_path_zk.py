"""A rotation's re-apply is cut to what a Secret can change (controller/rotation.py, plan_reapply): a group
in place is re-keyed (its session, its ACL, the workers' config) without its spec being parsed, admitted,
adopted or synced again; a group that is not as its last sync left it is applied whole (a real
ZooKeeper; the API server is the recording fake; a profiler records the package's functions entered)."""

from __future__ import annotations

import logging
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from kazoo.security import make_digest_acl
from rebalanser.paths import GroupPaths
from rebalanser_operator.apply.actions import apply_spec, end_grace, resync_secrets
from rebalanser_operator.apply.secretpoll import poll_once
from rebalanser_operator.identity import DigestCredentials, OperatorIdentity
from rebalanser_operator.runtime import GroupRuntime, LoopOptions, OperatorContext
from rebalanser_operator.status.view import SyncState
from rebalanser_operator.tenancy import PathRoots, Tenancy

from tests.operator.support import TEST_TENANCY, RecordingKube, conditions, resync, settle, status_loop
from tests.support.relay import Relay
from tests.support.workers import wait_for
from tests.support.zk import admin_client, purge

pytestmark = pytest.mark.zk

PACKAGE = str(Path(sys.modules["rebalanser_operator"].__file__ or "").parent)
#: what a re-apply of a group in place need not do again: parse and admit the spec, adopt it, sync the group
WHOLE_APPLY = {"apply_desired", "ResourceGroupSpec.parse", "plan_admission", "placement_of", "reconcile_group",
               "spec_notices", "ensure_group", "sync_resources", "write_config"}
PASSWORDS = ("old-password", "new-password", "newer-password")


class Entered:
    """The package's functions entered on any thread while ``on`` (qualified names)."""

    def __init__(self) -> None:
        self.on = False
        self.names: set[str] = set()

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if self.on and event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
            self.names.add(getattr(frame.f_code, "co_qualname", frame.f_code.co_name))


@pytest.fixture
def entered() -> Iterator[Entered]:
    record = Entered()
    threading.setprofile(record.profile)  # before the context starts its threads
    try:
        yield record
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
        sys.setprofile(None)


@pytest.fixture
def kube() -> RecordingKube:
    return RecordingKube()


@pytest.fixture
def ctx(kube: RecordingKube, entered: Entered) -> Iterator[OperatorContext]:
    context = OperatorContext(tenancy=TEST_TENANCY, kube=kube, options=LoopOptions(connect_wait=10.0))
    yield context
    context.close()


@pytest.fixture
def applied(ctx: OperatorContext, kube: RecordingKube, zk_hosts: str, group_path: str) -> Iterator[GroupRuntime]:
    kube.secrets["zk-digest"] = DigestCredentials("op", "old-password")
    spec = {"zookeeper": {"connect": zk_hosts, "path": group_path, "credentialsSecret": "zk-digest"},
            "resources": ["a", "b"]}
    rt = ctx.group("shop", "orders", "uid-orders")
    apply_spec(ctx, rt, spec, generation=1, body={"metadata": {"name": "orders", "namespace": "shop"}})
    yield rt
    with admin_client(zk_hosts, auth_data=[("digest", f"op:{password}") for password in PASSWORDS]) as client:
        purge(client, group_path)


def rotate_to(ctx: OperatorContext, kube: RecordingKube, entered: Entered, rt: GroupRuntime, password: str) -> None:
    """The Secret poll reads a new password, and the group's step re-applies it (recorded; a first re-apply
    that met its new session connecting is run again once it has connected, as the refresh does)."""
    kube.secrets["zk-digest"] = DigestCredentials("op", password)
    entered.names.clear()
    entered.on = True
    try:
        assert poll_once(ctx, kube.secret_data) == 1
        settle(ctx, rt)
    finally:
        entered.on = False
    assert not rt.secrets_changed and rt.sync is not None and rt.sync.ok, rt.sync
    assert rt.credentials == DigestCredentials("op", password)


def test_a_rotation_of_a_group_in_place_only_re_keys_it(
    ctx: OperatorContext, kube: RecordingKube, entered: Entered, applied: GroupRuntime, zk_hosts: str,
    group_path: str,
) -> None:
    paths = GroupPaths.of(group_path)
    # A worker still on the old password created a node of its own (its ACL names the old password only).
    with admin_client(zk_hosts, auth_data=[("digest", "op:old-password")],
                      default_acl=[make_digest_acl("op", "old-password", all=True)]) as worker:
        worker.create(paths.epoch, b"{}")
    events = len(kube.events)

    rotate_to(ctx, kube, entered, applied, "new-password")

    assert not WHOLE_APPLY & entered.names, f"the re-apply ran the whole apply: {sorted(WHOLE_APPLY & entered.names)}"
    assert "rekey" in entered.names, sorted(entered.names)
    new = make_digest_acl("op", "new-password", all=True)
    old = make_digest_acl("op", "old-password", all=True)
    with admin_client(zk_hosts, auth_data=[("digest", "op:new-password")]) as client:
        for node in (paths.root, paths.resources, paths.config, paths.resource("a"), paths.epoch):
            acl = set(client.get_acls(node)[0])
            assert {new, old} <= acl, (node, acl)  # the grace: both passwords everywhere
    assert [reason for _, reason, _ in kube.events[events:]] == ["SecretApplied"]

    # The grace ends: the new password alone, again without the whole apply.
    assert applied.grace_until is not None and end_grace(applied, applied.grace_until)
    entered.names.clear()
    entered.on = True
    try:
        resync(ctx, applied)  # what the refresh does once the grace is over
    finally:
        entered.on = False
    assert "rekey" in entered.names and not WHOLE_APPLY & entered.names, sorted(entered.names)
    with admin_client(zk_hosts, auth_data=[("digest", "op:new-password")]) as client:
        for node in (paths.root, paths.resources, paths.config, paths.resource("a"), paths.epoch):
            acl = set(client.get_acls(node)[0])
            assert new in acl and old not in acl, (node, acl)


def test_a_group_not_as_its_last_sync_left_it_is_applied_whole(
    ctx: OperatorContext, kube: RecordingKube, entered: Entered, applied: GroupRuntime, zk_hosts: str,
    group_path: str,
) -> None:
    """Its root was deleted behind the operator's back: the re-apply finds no marker of this object's and
    applies the spec whole, which creates the group again with the new password."""
    with admin_client(zk_hosts, auth_data=[("digest", "op:old-password")]) as client:
        purge(client, group_path)

    rotate_to(ctx, kube, entered, applied, "new-password")

    assert {"rekey", "apply_desired", "reconcile_group"} <= entered.names, sorted(entered.names)
    with admin_client(zk_hosts, auth_data=[("digest", "op:new-password")]) as client:
        assert sorted(client.get_children(GroupPaths.of(group_path).resources)) == ["a", "b"]


def test_a_re_key_after_one_that_met_its_session_connecting_shows_the_group_synced_again(
    ctx: OperatorContext, kube: RecordingKube, entered: Entered, applied: GroupRuntime
) -> None:
    """The refresh's re-key never waits for a session: one that met its new session still connecting
    ended ZooKeeperUnreachable (the status loop retries it once the session connects). The retry that
    goes through shows the group Synced again, not the earlier failure."""

    def met_its_session_connecting() -> None:
        rt = applied
        rt.outcome = replace(rt.outcome, connect_pending=True,
                             sync=SyncState(False, "ZooKeeperUnreachable", "cannot connect; retried when it connects"))

    ctx.controller_of(applied).run(met_its_session_connecting)

    rotate_to(ctx, kube, entered, applied, "new-password")  # asserts the sync is ok

    assert "rekey" in entered.names and not WHOLE_APPLY & entered.names, sorted(entered.names)
    assert applied.sync is not None and applied.sync.reason == "Synced" and not applied.connect_pending


def test_a_re_key_waits_for_its_new_credentials_session_without_failing_the_group(
    ctx: OperatorContext, kube: RecordingKube, zk_hosts: str, group_path: str
) -> None:
    """A digest rotation without the operator's identity moves the group to a session of its new
    credentials, on the ensemble and TLS material its old session reached. The Secret's step never waits
    for it: while it connects (here: held by a relay), the group stays Synced with no Warning, and the
    refresh's re-key goes through once it has connected."""
    host, port = zk_hosts.split(",")[0].rsplit(":", 1)
    relay = Relay((host, int(port)))
    kube.secrets["zk-digest"] = DigestCredentials("op", "old-password")
    spec = {"zookeeper": {"connect": relay.address, "path": group_path, "credentialsSecret": "zk-digest"},
            "resources": ["a"]}
    orders = ctx.group("shop", "orders", "uid-orders")
    invoices = ctx.group("shop", "invoices", "uid-invoices")  # keeps the old session open meanwhile
    body = {"metadata": {"name": "orders", "namespace": "shop"}}
    try:
        apply_spec(ctx, orders, spec, generation=1, body=body)
        apply_spec(ctx, invoices, {**spec, "zookeeper": {**spec["zookeeper"], "path": f"{group_path}-2"}},
                   generation=1, body={"metadata": {"name": "invoices", "namespace": "shop"}})
        kube.secrets["zk-digest"] = DigestCredentials("op", "new-password")
        events = len(kube.events)

        relay.hold()  # the new session cannot connect yet
        assert poll_once(ctx, kube.secret_data) == 2  # each group's step: kept, and a first re-key
        assert orders.sync is not None and orders.sync.ok, orders.sync
        assert kube.events[events:] == [], "a Warning while the new session connected"
        assert orders.secrets_changed and orders.connect_pending, "the re-key is not retried"

        relay.release()
        wait_for(lambda: ctx.pool.is_connected(relay.address, None, orders.session_credentials()), 15,
                 "the session of the new credentials to connect")
        ctx.controller_of(orders).run(lambda: resync_secrets(ctx, orders))
        assert orders.sync is not None and orders.sync.ok and not orders.secrets_changed
        assert not orders.connect_pending and orders.credentials == DigestCredentials("op", "new-password")
        assert [reason for _, reason, _ in kube.events[events:]] == ["SecretApplied"]
    finally:
        relay.close()
        with admin_client(zk_hosts, auth_data=[("digest", f"op:{password}") for password in PASSWORDS]) as client:
            purge(client, group_path)
            purge(client, f"{group_path}-2")


def test_the_status_loop_calls_a_rotations_new_session_connecting_not_disconnected(
    ctx: OperatorContext, kube: RecordingKube, zk_hosts: str, group_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The same rotation with the group's status loop running, as the operator runs it: while the session
    of the new credentials connects, its refreshes neither fail the group nor call it disconnected (no
    Warning, ZooKeeperConnected stays True and says so); the re-key goes through once it has connected."""
    host, port = zk_hosts.split(",")[0].rsplit(":", 1)
    relay = Relay((host, int(port)))
    kube.secrets["zk-digest"] = DigestCredentials("op", "old-password")
    spec = {"zookeeper": {"connect": relay.address, "path": group_path, "credentialsSecret": "zk-digest"},
            "resources": ["a"]}
    orders = ctx.group("shop", "orders", "uid-orders")
    caplog.set_level(logging.INFO, logger="rebalanser_operator")
    try:
        apply_spec(ctx, orders, spec, generation=1, body={"metadata": {"name": "orders", "namespace": "shop"}})
        with status_loop(ctx, orders) as loop:
            wait_for(lambda: loop.patches > 0 and conditions(kube.status).get("ZooKeeperConnected", {})
                     .get("status") == "True", 10, "the group read by its status loop")
            events = len(kube.events)
            relay.hold()  # the new session cannot connect yet
            kube.secrets["zk-digest"] = DigestCredentials("op", "new-password")
            assert poll_once(ctx, kube.secret_data) == 1
            wait_for(lambda: "new credentials is connecting" in conditions(kube.status)
                     .get("ZooKeeperConnected", {}).get("message", ""), 10,
                     "the status loop to show the session of the new credentials connecting")
            assert conditions(kube.status)["ZooKeeperConnected"]["status"] == "True"
            wait_for(lambda: sum("re-keyed once it has" in r.getMessage() for r in caplog.records) >= 2,
                     10, "a second re-key while the session connects (it reuses the session the first opened)")
            assert orders.sync is not None and orders.sync.ok and orders.connect_pending
            warnings = [(reason, message) for kind, reason, message in kube.events[events:] if kind == "Warning"]
            assert warnings == [], warnings
            relay.release()
            wait_for(lambda: not orders.secrets_changed and not orders.connect_pending, 15,
                     "the re-key once the new session connected")
            assert orders.sync is not None and orders.sync.ok
            assert orders.credentials == DigestCredentials("op", "new-password")
            # (after the release the relay may cut the new session once more: the loop reports that as usual)
            assert "ZooKeeperUnreachable" not in [reason for _, reason, _ in kube.events[events:]]
    finally:
        relay.close()
        with admin_client(zk_hosts, auth_data=[("digest", f"op:{password}") for password in PASSWORDS]) as client:
            purge(client, group_path)


#: the operator's own identity (its session does not change with a group's credentials)
OPERATOR = ("rebalanser-operator", "a-long-random-operator-password-0123456789")


def test_the_secrets_own_step_re_keys_the_group_with_no_status_loop_running(
    kube: RecordingKube, entered: Entered, zk_hosts: str
) -> None:
    """The re-apply starts in the step the poll hands the Secret to, not in the status loop: with no
    status loop running, the poll alone re-keys a group in place (the operator's identity: its session
    stays, so the step goes through at once), posts ``SecretApplied``, and leaves nothing marked; the
    refresh's step (``refresh_step``) never runs."""
    top = f"/rotation-{uuid.uuid4().hex[:10]}"
    ctx = OperatorContext(tenancy=Tenancy(path_roots=PathRoots.parse([f"{top}/{{namespace}}"])), kube=kube,
                          options=LoopOptions(connect_wait=10.0), identity=OperatorIdentity.digest(*OPERATOR))
    try:
        kube.secrets["zk-digest"] = DigestCredentials("op", "old-password")
        rt = ctx.group("shop", "orders", "uid-orders")
        spec = {"zookeeper": {"connect": zk_hosts, "credentialsSecret": "zk-digest"}, "resources": ["a"]}
        apply_spec(ctx, rt, spec, generation=1, body={"metadata": {"name": "orders", "namespace": "shop"}})
        events = len(kube.events)
        kube.secrets["zk-digest"] = DigestCredentials("op", "new-password")
        entered.names.clear()
        entered.on = True
        try:
            assert poll_once(ctx, kube.secret_data) == 1
        finally:
            entered.on = False
        assert rt.credentials == DigestCredentials("op", "new-password") and not rt.secrets_changed
        assert rt.sync is not None and rt.sync.ok, rt.sync
        assert [reason for _, reason, _ in kube.events[events:]] == ["SecretApplied"]
        assert "rekey" in entered.names and "GroupController.refresh_step" not in entered.names
        assert rt.path is not None
        with admin_client(zk_hosts, auth_data=[("digest", "op:new-password")]) as client:
            client.create(f"{GroupPaths.of(rt.path).resources}/probe")  # the group's ACL names the new password
    finally:
        ctx.close()
        with admin_client(zk_hosts, auth_data=[("digest", ":".join(OPERATOR))]) as client:
            client.delete(top, recursive=True)
