"""Rotated Secrets are noticed without listing or watching Secrets.

The operator's RBAC on Secrets is ``get`` only (docs/operator.md, "Security model"): it never streams the
Secrets of a namespace. Instead, every ``interval`` seconds each Secret that a served ResourceGroup names
(``spec.zookeeper.credentialsSecret``, ``spec.zookeeper.tls.secret``) is read by name, once per
namespace and name however many groups share it, and handed to the controllers of the groups that name
it; each, in one step, keeps the Secret as read and re-applies the group with it when it changes the
group's connection. A Secret that cannot be read is skipped: open connections keep
what they have, and the next reconcile reports it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from typing import Protocol, TypeVar

from rebalanser_operator.controller.context import Context
from rebalanser_operator.controller.messages import SecretSeen
from rebalanser_operator.controller.plan import GroupView

log = logging.getLogger(__name__)

#: The chart's operator.secretPollSeconds default.
DEFAULT_INTERVAL = 30.0

SecretReader = Callable[[str, str], Mapping[str, str] | None]


class Group(Protocol):
    """A group's controller as the poll sees it."""

    def view(self) -> GroupView: ...

    def secret_seen(self, seen: SecretSeen) -> Future[bool]: ...


G = TypeVar("G", bound=Group)


def referencing(groups: Iterable[G]) -> dict[tuple[str, str], list[G]]:
    """The groups by the (namespace, Secret name) pairs they reference, sorted: one look at each group."""
    named: dict[tuple[str, str], list[G]] = {}
    for group in groups:
        view = group.view()
        for secret in sorted(view.secrets):
            named.setdefault((view.namespace, secret), []).append(group)
    return dict(sorted(named.items()))


def hand_over(ctx: Context, read: SecretReader) -> list[Future[bool]]:
    """Reads every referenced Secret by name, once however many groups name it, and hands it to those
    groups (a changed Secret is re-applied in its group's step: :meth:`GroupController.secret_seen`);
    never waits for their steps, which run side by side. Each future says whether its group changed."""
    steps: list[Future[bool]] = []
    for (namespace, secret), groups in referencing(ctx.controllers()).items():
        data = read(namespace, secret)
        if data is not None:
            seen = SecretSeen.of(secret, data)
            steps.extend(group.secret_seen(seen) for group in groups)
    return steps


def poll_once(ctx: Context, read: SecretReader) -> int:
    """:func:`hand_over`, then its steps awaited: how many groups the Secrets changed (none waits for a
    session)."""
    return sum(1 for step in hand_over(ctx, read) if _changed(step))


def _changed(step: Future[bool]) -> bool:
    try:
        return step.result()
    except Exception:  # that group's step failed; the others' count
        log.exception("a group's step for a changed Secret failed")
        return False


async def poll_forever(ctx: Context, read: SecretReader, interval: float) -> None:
    """:func:`hand_over` every ``interval`` seconds on a thread, until cancelled. The poll does not wait
    for the groups' steps: one tenant's slow re-key (a large re-ACL, a slow ensemble) never delays the
    next read of another tenant's Secrets. (The steps run in their group's own context, where kopf
    posts its Events: :meth:`GroupController.secret_seen`.)"""
    while True:
        await asyncio.sleep(interval)
        try:
            steps = await asyncio.to_thread(hand_over, ctx, read)
        except Exception:
            log.exception("reading the referenced Secrets failed; next try in %.0fs", interval)
        else:
            for step in steps:
                step.add_done_callback(_changed)  # a failed step is logged
