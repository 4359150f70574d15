"""secretpoll: referenced Secrets are read by name, once per namespace and name, unreadable ones skipped.
(The rotation it leads to, on real ZooKeeper with real workers: tests/operator/test_rotation_zk.py.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from rebalanser_operator.apply.secretpoll import poll_once, referenced
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
