"""The step a Secret is handed to runs where kopf posts the group's Events: in the context the group was
last applied or introduced from (a kopf handler, its status daemon), not the Secret poll's thread's, which
has no object's context (kopf keeps its Event poster per object task). A real controller and strand; its
I/O steps are stand-ins that record the context they ran in."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from rebalanser_operator.controller.core import GroupController, GroupSteps
from rebalanser_operator.controller.messages import DesiredSpec, SecretSeen, SyncResult
from rebalanser_operator.controller.plan import RefreshFacts
from rebalanser_operator.controller.state import GroupRuntime
from rebalanser_operator.zkpool import ZooKeeperPool

#: stands for kopf's per-object Event poster (its event queue context variables)
POSTER: contextvars.ContextVar[str] = contextvars.ContextVar("test_poster", default="no object's context")
SEEN = SecretSeen.of("zk-digest", {"password": "bmV3"})


class Recorded:
    def __init__(self) -> None:
        self.reapplied: list[str] = []  # the poster each re-apply saw

    def steps(self) -> GroupSteps:
        return GroupSteps(
            apply=lambda rt, desired: SyncResult(0, 0, 0, False, 0.0),
            delete=lambda rt, deletion: "",
            secret_seen=self.seen,
            refresh_facts=lambda rt, now: RefreshFacts(terminating=False, current=True, grace_over=False,
                                                       secrets_changed=False),
            end_grace=lambda rt, now: False,
            reapply=lambda rt: None,
        )

    def seen(self, rt: GroupRuntime, seen: SecretSeen, reapply: bool) -> bool:
        """Every Secret changes the group here; a re-apply records the poster it saw."""
        if reapply:
            self.reapplied.append(POSTER.get())
        return True


@pytest.fixture
def recorded() -> Recorded:
    return Recorded()


@pytest.fixture
def controller(recorded: Recorded) -> Iterator[GroupController]:
    executor, pool = ThreadPoolExecutor(4), ZooKeeperPool()
    yield GroupController(GroupRuntime("shop", "orders", "uid"), executor, pool=pool, connect_wait=1.0,
                          steps=recorded.steps())
    executor.shutdown(wait=True)
    pool.close()


def handed_over_from_the_polls_thread(controller: GroupController) -> bool:
    """The poll's thread: a context of its own, without the object's Event poster."""
    return contextvars.Context().run(lambda: controller.secret_seen(SEEN).result(10))


def test_before_any_apply_the_step_only_marks(controller: GroupController, recorded: Recorded) -> None:
    assert handed_over_from_the_polls_thread(controller)
    assert recorded.reapplied == [], "re-applied with no object's context to post its Events in"


def test_the_step_re_applies_in_the_context_of_the_groups_last_apply(
    controller: GroupController, recorded: Recorded
) -> None:
    def kopfs_handler() -> None:
        POSTER.set("the handler's")
        controller.apply(DesiredSpec.of({"resources": ["a"]}, generation=1))

    contextvars.copy_context().run(kopfs_handler)
    assert handed_over_from_the_polls_thread(controller)
    assert recorded.reapplied == ["the handler's"]


def test_the_status_daemon_introducing_itself_gives_its_context(
    controller: GroupController, recorded: Recorded
) -> None:
    async def daemon() -> None:
        POSTER.set("the daemon's")
        controller.introduce({"metadata": {"name": "orders", "namespace": "shop"}}).result(10)

    asyncio.run(daemon())
    assert handed_over_from_the_polls_thread(controller)
    assert recorded.reapplied == ["the daemon's"]
