"""A recording stand-in for the Kubernetes side (the ZooKeeper side in these tests is always real)."""

from __future__ import annotations

import asyncio
import base64
import copy
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rebalanser_operator.apply.actions import resync_secrets
from rebalanser_operator.apply.secretpoll import referencing
from rebalanser_operator.controller.messages import SecretSeen
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.kube import TLS_KEYS, CredentialsError, credentials_from, tls_from
from rebalanser_operator.runtime import GroupRuntime, OperatorContext
from rebalanser_operator.statusloop import StatusLoop
from rebalanser_operator.tenancy import PathRoots, Tenancy
from rebalanser_operator.zktls import TlsMaterial

from tests.support.workers import wait_for

#: The tests' groups live under /rebalanser-test (the ``group_path`` fixture), a root shared by every
#: namespace; /another-ensemble stands for a second ensemble (a chroot on the same server).
#: the longest a test waits for one of a group's steps
STEP_WAIT = 60.0

TEST_TENANCY = Tenancy(path_roots=PathRoots.parse(["/rebalanser-test", "/another-ensemble"]))


def apply_merge_patch(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            apply_merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


@dataclass
class RecordingKube:
    """Keeps the object's status as the API server would after each merge patch."""

    secrets: dict[str, DigestCredentials] = field(default_factory=dict)
    tls_secrets: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> a TLS Secret's data (base64)
    rolling_out: bool | None = None
    status: dict[str, Any] = field(default_factory=dict)
    patches: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    gone: bool = False
    terminating: set[str] = field(default_factory=set)  # namespaces being deleted
    groups: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # namespace -> ResourceGroup bodies
    config_maps: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    config_stamps: dict[tuple[str, str], tuple[int, int] | None] = field(default_factory=dict)
    lock: threading.Condition = field(default_factory=threading.Condition)

    def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> bool:
        with self.lock:
            if self.gone:
                return False
            apply_merge_patch(self.status, patch)
            self.patches.append((time.monotonic(), copy.deepcopy(dict(patch))))
            self.lock.notify_all()
        return True

    def post_event(self, body: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        with self.lock:
            self.events.append((type, reason, message))
            self.lock.notify_all()

    def read_credentials(self, namespace: str, secret: str, *, username_key: str = "username",
                         password_key: str = "password") -> DigestCredentials:
        data = self.secret_data(namespace, secret)  # the Secret's data, read under the keys asked for
        if data is None:
            raise CredentialsError(f"cannot read Secret {namespace}/{secret}: 404 Not Found")
        return credentials_from(data, f"{namespace}/{secret}", username_key=username_key, password_key=password_key)

    def read_tls(self, namespace: str, secret: str, *, verify_hostname: bool = False,
                 keys: tuple[str, str, str] = TLS_KEYS) -> TlsMaterial:
        if secret not in self.tls_secrets:
            raise CredentialsError(f"cannot read Secret {namespace}/{secret}: 404 Not Found")
        return tls_from(self.tls_secrets[secret], f"{namespace}/{secret}", verify_hostname=verify_hostname, keys=keys)

    def secret_data(self, namespace: str, secret: str) -> dict[str, str] | None:
        if secret in self.secrets:
            creds = self.secrets[secret]
            return {key: base64.b64encode(value.encode()).decode()
                    for key, value in (("username", creds.username), ("password", creds.password))}
        return dict(self.tls_secrets[secret]) if secret in self.tls_secrets else None

    def publish_config(
        self, namespace: str, name: str, data: Mapping[str, str], owner: Mapping[str, Any] | None,
        stamp: tuple[int, int] | None = None,
    ) -> None:
        with self.lock:
            self.config_maps[(namespace, name)] = dict(data)
            self.config_stamps[(namespace, name)] = stamp

    def workload_rolling_out(self, namespace: str, kind: str, name: str) -> bool | None:
        return self.rolling_out

    def namespace_terminating(self, namespace: str) -> bool:
        return namespace in self.terminating

    def list_groups(self, namespace: str) -> list[Mapping[str, Any]]:
        return copy.deepcopy(self.groups.get(namespace, []))

    def get_group(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        found = [b for b in self.groups.get(namespace, []) if b["metadata"]["name"] == name]
        return copy.deepcopy(found[0]) if found else None

    def remove_finalizer(self, namespace: str, name: str, finalizer: str) -> bool:
        for body in self.groups.get(namespace, []):
            if body["metadata"]["name"] == name:
                body["metadata"]["finalizers"] = [f for f in body["metadata"]["finalizers"] if f != finalizer]
                return True
        return False

    def reasons(self) -> list[str]:
        with self.lock:
            return [reason for _, reason, _ in self.events]

    def wait_status(self, predicate: Any, timeout: float, what: str) -> dict[str, Any]:
        """Waits until ``predicate(status)`` holds; fails with the last status otherwise."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                snapshot = copy.deepcopy(self.status)
                try:
                    if predicate(snapshot):
                        return snapshot
                except (KeyError, TypeError, IndexError):
                    pass
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last status: {snapshot}")
                self.lock.wait(min(left, 0.05))


def conditions(status: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions", [])}


@contextmanager
def status_loop(ctx: OperatorContext, rt: GroupRuntime) -> Iterator[StatusLoop]:
    """The group's status loop, as the operator runs it, on a thread of its own (it re-applies a changed
    Secret, keeps a rotation's grace period and sweeps after it); stopped on exit."""
    stop = threading.Event()
    loop = StatusLoop(ctx, rt, initial_status={})
    thread = threading.Thread(target=lambda: asyncio.run(loop.run(should_stop=stop.is_set)), daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        stop.set()
        rt.wake()
        thread.join(15)
        assert not thread.is_alive(), "the status loop did not stop"


def secret_seen(ctx: OperatorContext, namespace: str, secret: str, data: Mapping[str, str] | None) -> int:
    """A Secret handed to the groups of ``namespace`` that name it, as the poll hands it, then their steps
    awaited: how many groups it changed (each of those re-applied it in that step)."""
    groups = referencing(ctx.controllers()).get((namespace, secret), [])
    steps = [group.secret_seen(SecretSeen.of(secret, data)) for group in groups]
    return sum(1 for step in steps if step.result(STEP_WAIT))


def resync(ctx: OperatorContext, rt: GroupRuntime, connect_wait: float = 15.0) -> None:
    """What a group's status refreshes do for a rotation: the re-apply as one of the group's steps, and,
    when it met its session still connecting (the group left marked, its connection pending), once more
    after that session has connected (a refresh's ``connected_late``)."""
    ctx.controller_of(rt).run(lambda: resync_secrets(ctx, rt), STEP_WAIT)
    settle(ctx, rt, connect_wait)


def settle(ctx: OperatorContext, rt: GroupRuntime, connect_wait: float = 15.0) -> None:
    """A re-apply that met its session still connecting is run again once the session has connected (what
    the refresh does); nothing when it went through."""
    if not rt.connect_pending:
        return
    connect, tls, credentials = rt.connect, rt.tls, rt.session_credentials()
    assert connect is not None
    wait_for(lambda: ctx.pool.is_connected(connect, tls, credentials), connect_wait,
             f"the session {rt.user}'s re-apply met connecting to connect")
    ctx.controller_of(rt).run(lambda: resync_secrets(ctx, rt), STEP_WAIT)
