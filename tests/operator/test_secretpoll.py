"""secretpoll: referenced Secrets are read by name, once per namespace and name, unreadable ones skipped.
(The rotation it leads to, on real ZooKeeper with real workers: tests/operator/test_rotation_zk.py.)"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from rebalanser_operator.apply.secretpoll import poll_once, referenced
from rebalanser_operator.controller.messages import SecretSeen
from rebalanser_operator.controller.plan import GroupView
from rebalanser_operator.runtime import OperatorContext


def Group(namespace: str, names: set[str]) -> Controller:
    return Controller(GroupView(namespace, "g", "uid", secrets=frozenset(names)))


@dataclass
class Controller:
    group: GroupView
    seen: list[SecretSeen] = field(default_factory=list)

    def view(self) -> GroupView:
        return self.group

    def secret_seen(self, seen: SecretSeen) -> bool:
        self.seen.append(seen)
        return True


@dataclass
class Context:
    members: list[Controller]
    asked: list[tuple[str, str]] = field(default_factory=list)

    def controllers(self) -> list[Controller]:
        return self.members


def test_each_referenced_secret_is_read_once_by_name() -> None:
    groups = [Group("shop", {"zk", "tls"}), Group("shop", {"zk"}), Group("pay", {"zk"}), Group("pay", set())]
    naming = referenced(groups)
    assert sorted(naming) == [("pay", "zk"), ("shop", "tls"), ("shop", "zk")]
    assert naming[("shop", "zk")] == groups[:2] and naming[("pay", "zk")] == [groups[2]]
    ctx = Context(groups)

    def read(namespace: str, name: str) -> None:
        ctx.asked.append((namespace, name))
        return None  # unreadable: skipped, nothing is marked

    assert poll_once(cast(OperatorContext, ctx), read) == 0
    assert ctx.asked == [("pay", "zk"), ("shop", "tls"), ("shop", "zk")]
    assert not any(group.seen for group in groups)


def test_a_secret_read_is_handed_to_each_group_naming_it() -> None:
    groups = [Group("shop", {"zk", "tls"}), Group("shop", {"zk"}), Group("pay", {"zk"})]
    data = {"password": "cGFzcw=="}
    assert poll_once(cast(OperatorContext, Context(groups)), lambda namespace, name: data) == 4
    assert [[seen.secret for seen in group.seen] for group in groups] == [["tls", "zk"], ["zk"], ["zk"]]
