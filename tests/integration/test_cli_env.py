"""The worker CLI wired by the environment alone (``envFrom`` in a pod): REBALANSER_ZK, REBALANSER_GROUP,
and the member id from POD_NAME."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from kazoo.client import KazooClient
from rebalanser.cli import parser

from tests.integration.conftest import add_resources
from tests.support.workers import wait_for


def test_without_the_environment_the_connection_arguments_are_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REBALANSER_ZK", raising=False)
    monkeypatch.delenv("REBALANSER_GROUP", raising=False)
    with pytest.raises(SystemExit):
        parser().parse_args(["worker"])


def test_a_worker_and_status_from_the_environment_alone(zk: KazooClient, zk_hosts: str, group_path: str) -> None:
    add_resources(zk, group_path, ["r0", "r1"])
    env = {**os.environ, "REBALANSER_ZK": zk_hosts, "REBALANSER_GROUP": group_path, "POD_NAME": "orders-7c9d-abcde"}
    worker = subprocess.Popen([sys.executable, "-m", "rebalanser.cli", "worker", "--json", "--session-timeout", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert worker.stdout is not None
        first = json.loads(worker.stdout.readline())
        assert first["id"] == "orders-7c9d-abcde", first

        def owner() -> object:
            out = subprocess.run([sys.executable, "-m", "rebalanser.cli", "status", "--json", "--resource", "r0"],
                                 capture_output=True, text=True, env=env, timeout=60, check=False)
            return json.loads(out.stdout)["owners"]["r0"] if out.stdout else None

        wait_for(lambda: owner() == "orders-7c9d-abcde", 30, "r0 owned by the pod-named member")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
