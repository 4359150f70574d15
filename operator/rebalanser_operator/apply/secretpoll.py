"""Rotated Secrets are noticed without listing or watching Secrets.

The operator's RBAC on Secrets is ``get`` only (docs/operator.md, "Security model"): it never streams the
Secrets of a namespace. Instead, every ``interval`` seconds each Secret that a served ResourceGroup names
(``spec.zookeeper.credentialsSecret``, ``spec.zookeeper.tls.secret``) is read by name, once per
namespace and name however many groups share it, and handed as it was read (a
:class:`~rebalanser_operator.controller.messages.SecretSeen`) to the controllers of the groups that name it
(:func:`note_secret`); each plans it (:func:`~rebalanser_operator.controller.rotation.plan_rotation`) and
marks itself for re-applying when the Secret changes its connection, keeping the data as received (the
re-apply uses it and never reads the Secret again). A Secret that cannot be read is skipped: open
connections keep what they have, and the next reconcile reports it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, TypeVar

from rebalanser_operator.controller.context import Context
from rebalanser_operator.controller.messages import SecretSeen
from rebalanser_operator.controller.plan import GroupView

log = logging.getLogger(__name__)

#: The chart's operator.secretPollSeconds default.
DEFAULT_INTERVAL = 30.0

SecretReader = Callable[[str, str], Mapping[str, str] | None]


class Controller(Protocol):
    """What the poll needs of a group's controller."""

    def view(self) -> GroupView: ...

    def secret_seen(self, seen: SecretSeen) -> bool: ...


C = TypeVar("C", bound=Controller)


def referenced(controllers: Iterable[C]) -> dict[tuple[str, str], list[C]]:
    """The controllers of the groups that name each (namespace, Secret name), in one pass over them."""
    naming: dict[tuple[str, str], list[C]] = {}
    for controller in controllers:
        view = controller.view()
        for secret in view.secrets:
            naming.setdefault((view.namespace, secret), []).append(controller)
    return naming


def poll_once(ctx: Context, read: SecretReader) -> int:
    """Reads every referenced Secret by name, once however many groups name it, in order; returns how many
    groups were marked for re-applying."""
    naming = referenced(ctx.controllers())
    marked = 0
    for namespace, secret in sorted(naming):
        data = read(namespace, secret)
        if data is not None:
            marked += hand_over(naming[(namespace, secret)], SecretSeen.of(secret, data))
    return marked


def hand_over(controllers: Iterable[Controller], seen: SecretSeen) -> int:
    """A Secret as read, handed to the controllers of the groups that name it: each marks itself for
    re-applying (its next refresh does it) when it changes its connection; returns how many did."""
    return sum(1 for controller in controllers if controller.secret_seen(seen))


def note_secret(ctx: Context, namespace: str, secret: str, data: Mapping[str, str] | None) -> int:
    """Secret ``namespace``/``secret`` read as ``data`` (None: unreadable), handed over (:func:`hand_over`)."""
    return hand_over(ctx.controllers_referencing(namespace, secret), SecretSeen.of(secret, data))


async def poll_forever(ctx: Context, read: SecretReader, interval: float) -> None:
    """:func:`poll_once` every ``interval`` seconds in the executor, until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(interval)
        try:
            marked = await loop.run_in_executor(None, poll_once, ctx, read)
        except Exception:
            log.exception("reading the referenced Secrets failed; next try in %.0fs", interval)
        else:
            if marked:
                log.info("a referenced Secret changed: %d group(s) will re-apply", marked)
