"""No password or TLS key in any log line or repr: the operator's code (in-process, every logger at its
lowest level) and a worker process at DEBUG, with digest credentials, against real ZooKeeper.
(tests/e2e/test_operator_tls_e2e.py::test_no_secret_reaches_the_operators_debug_log checks the
operator process itself, run with --debug, over TLS.)"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import rebalanser
from kazoo.client import KazooClient
from rebalanser.credentials import DigestState
from rebalanser_operator.apply.actions import apply_spec, delete_znodes
from rebalanser_operator.identity import DigestCredentials
from rebalanser_operator.runtime import LoopOptions, OperatorContext
from rebalanser_operator.tenancy import AllowedEnsembles, PathRoots, Tenancy
from rebalanser_operator.zktls import TlsMaterial

from tests.operator.support import RecordingKube, status_loop
from tests.support.cluster import REPO

pytestmark = pytest.mark.zk

PASSWORD = "s3cret-" + uuid.uuid4().hex[:8]
ROTATED = "r0tated-" + uuid.uuid4().hex[:8]
KEY = b"-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC-not-a-real-key\n-----END PRIVATE KEY-----\n"
BODY = {"apiVersion": "rebalanser.io/v1alpha1", "kind": "ResourceGroup", "metadata": {"name": "orders"}}


class Everything(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=1)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def every_log_line() -> Iterator[Everything]:
    handler = Everything()
    root = logging.getLogger()
    levels = {name: logging.getLogger(name).level for name in ("", "kazoo", "kazoo.client", "rebalanser_operator")}
    root.addHandler(handler)
    for name in levels:
        logging.getLogger(name).setLevel(1)  # below DEBUG: kazoo's BLATHER too
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def assert_clean(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text, f"{secret!r} found in:\n" + "\n".join(
            line for line in text.splitlines() if secret in line)[:3000]


def test_the_operator_logs_and_shows_no_password(
    every_log_line: Everything, zk: KazooClient, zk_hosts: str, group_path: str
) -> None:
    """Before: kazoo's debug line for every connect read ``Auth(... scheme='digest', auth='op:<password>')``."""
    kube = RecordingKube(secrets={"zk-digest": DigestCredentials("op", PASSWORD)})
    tenancy = Tenancy(path_roots=PathRoots.parse(["/rebalanser-test"]), ensembles=AllowedEnsembles.parse([zk_hosts]))
    ctx = OperatorContext(kube=kube, options=LoopOptions(connect_wait=5.0), tenancy=tenancy)
    raw = {"zookeeper": {"connect": zk_hosts, "path": group_path, "credentialsSecret": "zk-digest"},
           "resources": ["a"]}
    try:
        rt = ctx.group("shop", "orders", "uid-1")
        with status_loop(ctx, rt):
            apply_spec(ctx, rt, raw, generation=1, body=BODY)
            kube.wait_status(lambda s: s.get("resources") == 1, 30, "the group read by the status loop")
            kube.secrets["zk-digest"] = DigestCredentials("op", ROTATED)  # a rotation: both in one session
            apply_spec(ctx, rt, raw, generation=1, body=BODY)
            assert {auth for _, auth in ctx.client(rt).auth_data} == {f"op:{PASSWORD}", f"op:{ROTATED}"}
        text = "\n".join(every_log_line.lines)
        assert "Sending request" in text and "Auth(" in text, "kazoo's debug lines were not captured"
        assert_clean(text, PASSWORD, ROTATED)
        assert "op:<redacted>" in text
        with_tls = replace(rt, _state=replace(rt.state, rotation=replace(rt.rotation,
                                                                     tls=TlsMaterial(b"ca", b"cert", KEY))))
        shown = repr(with_tls) + str(rt) + repr(ctx.tenancy) + repr(kube.secrets) + repr(rt.session_credentials())
        assert "op" in shown
        delete_znodes(ctx, rt, raw, annotations={}, body=BODY)
    finally:
        ctx.close()
    assert_clean("\n".join(every_log_line.lines) + shown + repr(kube.events), PASSWORD, ROTATED, "not-a-real-key")


def test_library_reprs_show_no_password(tmp_path: Path) -> None:
    """Before: ``repr(rebalanser.Options(credentials=(user, password)))`` printed the password, and so did
    DigestState."""
    options = rebalanser.Options(hosts="zk:2181", group="/g", member_id="m", credentials=("user", PASSWORD))
    state = DigestState("user", PASSWORD, ROTATED, 1.0)
    text = repr(options) + str(options) + repr(state) + repr(DigestCredentials("user", PASSWORD))
    assert "user" in text
    assert_clean(text, PASSWORD, ROTATED)


def test_a_worker_at_debug_level_logs_no_password(zk: KazooClient, zk_hosts: str, group_path: str,
                                                  tmp_path: Path) -> None:
    """Before: ``rebalanser worker --log-level DEBUG`` logged kazoo's Auth packet with the password."""
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD)
    stderr = tmp_path / "worker.err"
    with open(stderr, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rebalanser.cli", "worker", "--zk", zk_hosts, "--group", group_path, "--id", "w1",
             "--json", "--zk-user", "user", "--zk-password-file", str(password_file), "--zk-password-poll", "0.2",
             "--log-level", "DEBUG", "--verbose", "--create-group"],
            stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True, cwd=REPO)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        joined: dict[str, Any] | None = None
        while joined is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            event = json.loads(line)
            joined = event if event.get("event") == "role" else None
        assert joined is not None, f"the worker never joined:\n{stderr.read_text()[-3000:]}"
        password_file.write_text(ROTATED)  # the worker adds the new password to its session (logged)

        def auths() -> int:
            return stderr.read_text().count("scheme='digest'")

        deadline = time.monotonic() + 30
        while auths() < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert auths() >= 2, f"no second Auth packet logged:\n{stderr.read_text()[-3000:]}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    admin = KazooClient(hosts=zk_hosts, auth_data=[("digest", f"user:{PASSWORD}"), ("digest", f"user:{ROTATED}")])
    admin.start()
    try:
        admin.delete(group_path, recursive=True)
    finally:
        admin.stop()
        admin.close()
    text = stderr.read_text()
    assert "Sending request" in text, "the worker's log is not at debug level"
    assert_clean(text, PASSWORD, ROTATED)
