"""secretpoll: referenced Secrets are read by name, once per namespace and name, unreadable ones skipped,
and handed to the groups that name them in the poll task's context.
(The rotation it leads to, on real ZooKeeper with real workers: tests/operator/test_rotation_zk.py.)"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import cast

from rebalanser_operator.apply.secretpoll import poll_forever, poll_once, referencing
from rebalanser_operator.controller.messages import SecretSeen
from rebalanser_operator.controller.plan import GroupView
from rebalanser_operator.runtime import OperatorContext

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("test_secretpoll_mark", default="none")


@dataclass
class Group:
    """A group's controller as the poll sees it: its view, and a step for a Secret (answered at once)."""

    namespace: str
    secrets: set[str]
    seen: list[tuple[str, str]] = field(default_factory=list)  # (Secret, the context's mark)
    handed: threading.Event = field(default_factory=threading.Event)
    looked: int = 0  # views taken

    def view(self) -> GroupView:
        self.looked += 1
        return GroupView(self.namespace, "g", "uid", secrets=frozenset(self.secrets))

    def secret_seen(self, seen: SecretSeen) -> Future[bool]:
        self.seen.append((seen.secret, MARK.get()))
        self.handed.set()
        done: Future[bool] = Future()
        done.set_result(dict(seen.data or {}) == {"changed": "yes"})
        return done


@dataclass
class Context:
    groups: list[Group]

    def controllers(self) -> list[Group]:
        return self.groups


def test_each_referenced_secret_is_read_once_by_name_and_handed_to_the_groups_naming_it() -> None:
    groups = [Group("shop", {"zk", "tls"}), Group("shop", {"zk"}), Group("pay", {"zk"}), Group("pay", set())]
    assert list(referencing(groups)) == [("pay", "zk"), ("shop", "tls"), ("shop", "zk")]
    assert referencing(groups)[("shop", "zk")] == groups[:2]
    asked: list[tuple[str, str]] = []
    for group in groups:
        group.looked = 0

    def read(namespace: str, name: str) -> dict[str, str] | None:
        asked.append((namespace, name))
        return None if name == "tls" else {"changed": "yes" if namespace == "shop" else "no"}  # tls: unreadable

    assert poll_once(cast(OperatorContext, Context(groups)), read) == 2  # the two groups of shop/zk changed
    assert asked == [("pay", "zk"), ("shop", "tls"), ("shop", "zk")]
    assert [g.seen for g in groups] == [[("zk", "none")], [("zk", "none")], [("zk", "none")], []]
    assert all(g.looked == 1 for g in groups), "a group was looked at more than once per poll"


def test_the_poll_hands_secrets_over_in_its_tasks_context() -> None:
    """The poll's thread runs in a copy of its task's context (kopf's Event poster lives there), so the
    groups' steps it hands a Secret to post their Events (a ``SecretApplied``) as the handlers' do."""
    group = Group("shop", {"zk"})

    async def main() -> None:
        MARK.set("the operator's task")
        poll = asyncio.create_task(poll_forever(cast(OperatorContext, Context([group])),
                                                lambda ns, name: {"k": "v"}, 0.01))
        try:
            assert await asyncio.to_thread(group.handed.wait, 10), "the poll handed nothing over"
        finally:
            poll.cancel()

    asyncio.run(main())
    assert group.seen[0] == ("zk", "the operator's task")
