"""The hostile tenant's attacks and the evidence that they did nothing, shared by the e2e suite (own
API server, local ZooKeeper and workers: tests/e2e/test_hostile_tenant_e2e.py) and the pod suite (the
real cluster: tests/pods/test_hostile_tenant.py).

A snapshot is ``{path: {"data": base64, "czxid", "ephemeralOwner", "acl": [scheme:id:perms]}}`` for
every znode under the given roots; :func:`changed` says, in readable lines, what an attack changed.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

Snapshot = dict[str, dict[str, Any]]

#: Another application's tree (Kafka's, say), created before the operator ever saw it.
OTHER_APP_NODES = ["ids", "ids/0", "ids/1", "topics", "topics/payments"]


@dataclass(frozen=True)
class Victim:
    connect: str  # the allowed ensemble
    root: str  # /rebalanser/<victim namespace>
    group: str  # the victim's group path
    other_app: str  # another application's tree

    def attacks(self, elsewhere: str) -> dict[str, dict[str, Any]]:
        """The attacker's ResourceGroups, name -> ``spec.zookeeper`` (``elsewhere``: host:port of a
        server outside the allowed ensembles)."""
        return {
            "parent": {"connect": self.connect, "path": self.root},
            "owners": {"connect": self.connect, "path": f"{self.group}/owners"},
            "brokers": {"connect": self.connect, "path": self.other_app},
            "chroot": {"connect": f"{self.connect}{self.root}", "path": "/" + self.group.rsplit("/", 1)[1]},
            "elsewhere": {"connect": elsewhere, "credentialsSecret": "attacker-zk"},
        }

    def changed(self, before: Snapshot, after: Snapshot) -> list[str]:
        """Nodes gone, added (outside the group's working state) or re-created; data or ACL changed on
        the parent, root, config and resources and on the other application's tree; claims
        (``G/owners/*``) held by another session."""
        state = (f"{self.group}/state", f"{self.group}/assignment", f"{self.group}/barrier", f"{self.group}/epoch")
        lines = [f"gone: {p}" for p in sorted(before.keys() - after.keys())]
        lines += [f"added: {p}" for p in sorted(after.keys() - before.keys()) if not p.startswith(state)]
        watched = (self.root, self.group, f"{self.group}/config")
        for path in sorted(before.keys() & after.keys()):
            old, new = before[path], after[path]
            if old["czxid"] != new["czxid"]:
                lines.append(f"re-created: {path}")
            if path in watched or path.startswith((f"{self.group}/resources", self.other_app)):
                for key in ("data", "acl"):
                    if old[key] != new[key]:
                        lines.append(f"{key} of {path}: {old[key]} -> {new[key]}")
            if path.startswith(f"{self.group}/owners/") and old["ephemeralOwner"] != new["ephemeralOwner"]:
                lines.append(f"claim {path} now held by session {new['ephemeralOwner']:#x}")
        return lines


def snapshot(zk: KazooClient, *roots: str) -> Snapshot:
    out: Snapshot = {}

    def walk(path: str) -> None:
        try:
            data, stat = zk.get(path)
            acl, _ = zk.get_acls(path)
            children = zk.get_children(path)
        except NoNodeError:
            return
        out[path] = {"data": base64.b64encode(data or b"").decode(), "czxid": stat.czxid,
                     "ephemeralOwner": stat.ephemeralOwner,
                     "acl": sorted(f"{a.id.scheme}:{a.id.id}:{a.perms}" for a in acl)}
        for child in children:
            walk(path.rstrip("/") + "/" + child)

    for root in roots:
        walk(root)
    return out


def create_other_app(zk: KazooClient, root: str) -> None:
    zk.ensure_path(root)
    zk.set(root, b'{"app": "brokers"}')
    for node in OTHER_APP_NODES:
        zk.create(f"{root}/{node}", node.encode(), makepath=True)


def settle(predicate: Callable[[], Any], timeout: float, poll: float = 0.5) -> Any:
    """``predicate()`` once truthy, else None after ``timeout``: a bounded poll that does not fail (the
    caller reports what it found, so one run shows every effect of an attack)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value or None
        time.sleep(poll)
