"""secretpoll: referenced Secrets are read by name, once per namespace and name, unreadable ones skipped,
and handed to the groups that name them (the context their steps run in: test_secret_step_context.py).
(The rotation it leads to, on real ZooKeeper with real workers: tests/operator/test_rotation_zk.py.)"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import cast

from rebalanser_operator.apply.secretpoll import poll_forever, poll_once, referencing
from rebalanser_operator.controller.messages import SecretSeen
from rebalanser_operator.controller.plan import GroupView
from rebalanser_operator.runtime import OperatorContext


@dataclass
class Group:
    """A group's controller as the poll sees it: its view, and a step for a Secret (answered at once)."""

    namespace: str
    secrets: set[str]
    seen: list[str] = field(default_factory=list)  # the Secrets handed over
    looked: int = 0  # views taken

    def view(self) -> GroupView:
        self.looked += 1
        return GroupView(self.namespace, "g", "uid", secrets=frozenset(self.secrets))

    def secret_seen(self, seen: SecretSeen) -> Future[bool]:
        self.seen.append(seen.secret)
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
    assert [g.seen for g in groups] == [["zk"], ["zk"], ["zk"], []]
    assert all(g.looked == 1 for g in groups), "a group was looked at more than once per poll"



@dataclass
class Stuck(Group):
    """A group whose step never ends (a long re-key on a slow ensemble)."""

    pending: list[Future[bool]] = field(default_factory=list)

    def secret_seen(self, seen: SecretSeen) -> Future[bool]:
        self.seen.append(seen.secret)
        self.pending.append(Future())
        return self.pending[-1]

    def end(self) -> None:
        for step in self.pending:
            step.set_result(False)


def test_the_poll_never_waits_for_a_groups_step() -> None:
    """One tenant's step that does not end does not hold the next read of another tenant's Secret."""
    stuck, other = Stuck("slow", {"zk"}), Group("shop", {"zk"})
    reads: list[tuple[str, str]] = []

    def read(namespace: str, name: str) -> dict[str, str]:
        reads.append((namespace, name))
        return {"changed": "no"}

    async def main() -> None:
        poll = asyncio.create_task(poll_forever(cast(OperatorContext, Context([stuck, other])), read, 0.01))
        try:
            for _ in range(500):
                if reads.count(("shop", "zk")) >= 3:
                    return
                await asyncio.sleep(0.01)
        finally:
            poll.cancel()
            stuck.end()  # (a poll still waiting for it may end too)

    asyncio.run(main())
    assert reads.count(("shop", "zk")) >= 3, f"the poll waited for a step that never ended: {reads}"
    assert len(other.seen) >= 3
