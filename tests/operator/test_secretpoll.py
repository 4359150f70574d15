"""secretpoll: referenced Secrets are read by name, once per namespace and name, unreadable ones skipped.
(The rotation it leads to, on real ZooKeeper with real workers: tests/operator/test_rotation_zk.py.)"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import cast

from rebalanser_operator.apply.secretpoll import poll_forever, poll_once, referenced
from rebalanser_operator.controller.messages import SecretSeen
from rebalanser_operator.controller.plan import GroupView
from rebalanser_operator.runtime import OperatorContext


def Group(namespace: str, names: set[str]) -> GroupView:
    return GroupView(namespace, "g", "uid", secrets=frozenset(names))


@dataclass
class Context:
    members: list[GroupView]
    asked: list[tuple[str, str]] = field(default_factory=list)

    def views(self) -> list[GroupView]:
        return self.members


def test_each_referenced_secret_is_read_once_by_name() -> None:
    groups = [Group("shop", {"zk", "tls"}), Group("shop", {"zk"}), Group("pay", {"zk"}), Group("pay", set())]
    assert referenced(groups) == [("pay", "zk"), ("shop", "tls"), ("shop", "zk")]
    ctx = Context(groups)

    def read(namespace: str, name: str) -> None:
        ctx.asked.append((namespace, name))
        return None  # unreadable: skipped, nothing is marked

    assert poll_once(cast(OperatorContext, ctx), read) == 0
    assert ctx.asked == [("pay", "zk"), ("shop", "tls"), ("shop", "zk")]


MARK: contextvars.ContextVar[str] = contextvars.ContextVar("test_secretpoll_mark", default="none")


@dataclass
class Controller:
    """A group's controller as the poll sees it: takes a Secret, answers with a future."""

    seen: list[tuple[str, str]] = field(default_factory=list)  # (Secret, the context's mark)
    handed: threading.Event = field(default_factory=threading.Event)

    def secret_seen(self, seen: SecretSeen) -> Future[bool]:
        self.seen.append((seen.secret, MARK.get()))
        self.handed.set()
        done: Future[bool] = Future()
        done.set_result(True)
        return done


@dataclass
class Referencing(Context):
    controller: Controller = field(default_factory=Controller)

    def controllers_referencing(self, namespace: str, secret: str) -> list[Controller]:
        return [self.controller]


def test_the_poll_hands_secrets_over_in_its_tasks_context() -> None:
    """The poll's thread runs in a copy of its task's context (kopf's Event poster lives there), so the
    groups' steps it hands a Secret to post their Events (a ``SecretApplied``) as the handlers' do."""
    ctx = Referencing([Group("shop", {"zk"})])

    async def main() -> None:
        MARK.set("the operator's task")
        poll = asyncio.create_task(poll_forever(cast(OperatorContext, ctx), lambda ns, name: {"k": "v"}, 0.01))
        try:
            assert await asyncio.to_thread(ctx.controller.handed.wait, 10), "the poll handed nothing over"
        finally:
            poll.cancel()

    asyncio.run(main())
    assert ctx.controller.seen[0] == ("zk", "the operator's task")
