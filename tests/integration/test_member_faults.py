"""A member meets an error it does not expect (issue 28, 3): a read of its resync that fails, a claim
transaction the server refuses. Neither stops it for good nor sets it spinning.

Evidence: what the member reports (``on_error``, ``on_assigned``) and the requests it sends, counted by
the proxy between it and the server."""

from __future__ import annotations

import threading

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Permissions
from rebalanser.client import Client
from rebalanser.follower import Effect
from rebalanser.member_state import State
from rebalanser.options import Options
from rebalanser.paths import GroupPaths

from tests.chaos.proxy import FaultProxy, RequestTap
from tests.integration.conftest import add_resources
from tests.support.recorder import Recorder
from tests.support.workers import wait_for

ANYONE_READ_DELETE = [ACL(Permissions.READ | Permissions.DELETE | Permissions.ADMIN, OPEN_ACL_UNSAFE[0].id)]



@pytest.mark.parametrize("failure", [NoAuthError, RuntimeError])
def test_a_resync_goes_on_past_a_read_that_fails(
    zk: KazooClient, group_path: str, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch, failure: type[Exception]
) -> None:
    """After a reconnection the member reads the barrier, then its assignment (arming its watch), then
    claims again. The barrier's read fails once (the error is made in the member's own reader, as the
    server's NoAuth or a bug would raise it): the rest of the resync still runs, so a resource added
    afterwards is still seen (it was never seen again before: the assignment's watch was not armed;
    with an exception of another kind the member aborted)."""
    add_resources(zk, group_path, ["a"])
    recorder = Recorder()
    client = Client(Options(proxy.hosts, group_path, member_id="m", session_timeout=4, min_interval=0.1,
                            create_group=True), recorder)
    client.start()
    try:
        wait_for(lambda: client.owns("a"), 15, "never owned a")
        failed = threading.Event()
        read_barrier = client._loop._follower.read_barrier

        def fails_once() -> list[Effect]:
            if not failed.is_set():
                failed.set()
                raise failure("the barrier could not be read")
            return read_barrier()

        monkeypatch.setattr(client._loop._follower, "read_barrier", fails_once)
        assert proxy.cut() >= 1
        wait_for(failed.is_set, 15, "the resync never read the barrier")
        add_resources(zk, group_path, ["b"])
        wait_for(lambda: client.owns("b"), 15,
                 lambda: f"b was never owned (state {client.state}, errors {recorder.errors})")
        assert client.state is not State.ABORTED
        assert any(isinstance(e, failure) for e in recorder.errors), recorder.errors
    finally:
        client.stop()


def test_a_claim_the_server_refuses_is_tried_again_after_a_growing_pause(
    zk: KazooClient, group_path: str, proxy: FaultProxy
) -> None:
    """An ACL on G/owners refuses the member's claims (NoAuth). The claim round reports the error and
    tries again after a pause that doubles (T/10, T/5, ...): it once took the refused transaction for a
    success whose claims had gone at once, and claimed again at once, without end. Once the ACL allows
    it the resource is claimed."""
    paths = GroupPaths.of(group_path)
    recorder = Recorder()
    client = Client(Options(proxy.hosts, group_path, member_id="m", session_timeout=2, min_interval=0.1,
                            create_group=True), recorder)
    client.start()
    try:
        zk.set_acls(paths.owners, ANYONE_READ_DELETE)
        tap = proxy.tap(RequestTap())
        assert tap is not None
        add_resources(zk, group_path, ["a"])
        wait_for(lambda: len(recorder.errors) >= 4, 15,
                 lambda: f"{len(recorder.errors)} errors reported, {tap.seen.count('multi')} transactions sent")
        reported, sent = len(recorder.errors), tap.seen.count("multi")
        # one transaction per failed round, besides the coordinator's own writes of the assignment
        assert sent <= reported + 4, f"{sent} transactions for {reported} failed claim rounds"
        assert "NoAuth" in str(recorder.errors[0]) and not client.owns("a")
        zk.set_acls(paths.owners, OPEN_ACL_UNSAFE)
        wait_for(lambda: client.owns("a"), 15, "a was never claimed once the ACL allowed it")
    finally:
        client.stop()
