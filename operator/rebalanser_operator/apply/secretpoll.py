"""Rotated Secrets are noticed without listing or watching Secrets.

The operator's RBAC on Secrets is ``get`` only (docs/operator.md, "Security model"): it never streams the
Secrets of a namespace. Instead, every ``interval`` seconds each Secret that a served ResourceGroup names
(``spec.zookeeper.credentialsSecret``, ``spec.zookeeper.tls.secret``) is read by name, once per
namespace and name however many groups share it, and handed to :func:`actions.note_secret`, which tells
the groups' controllers; each, in one step, keeps the Secret as read and re-applies the group with it
when it changes the group's connection. A Secret that cannot be read is skipped: open connections keep
what they have, and the next reconcile reports it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future

from rebalanser_operator.apply.actions import note_secret
from rebalanser_operator.controller.context import Context
from rebalanser_operator.controller.plan import GroupView

log = logging.getLogger(__name__)

#: The chart's operator.secretPollSeconds default.
DEFAULT_INTERVAL = 30.0

SecretReader = Callable[[str, str], Mapping[str, str] | None]


def referenced(groups: Iterable[GroupView]) -> list[tuple[str, str]]:
    """(namespace, Secret name) pairs the groups reference, each once, sorted."""
    return sorted({(view.namespace, secret) for view in groups for secret in view.secrets})


def poll_once(ctx: Context, read: SecretReader) -> int:
    """Reads every referenced Secret by name and hands it to the groups that name it, whose steps run side
    by side (a changed Secret is re-applied in its group's step: :meth:`GroupController.secret_seen`);
    returns how many groups it changed, once their steps are over (none waits for a session)."""
    steps: list[Future[bool]] = []
    for namespace, secret in referenced(ctx.views()):
        data = read(namespace, secret)
        if data is not None:
            steps.extend(note_secret(ctx, namespace, secret, data))
    return sum(1 for step in steps if _changed(step))


def _changed(step: Future[bool]) -> bool:
    try:
        return step.result()
    except Exception:  # that group's step failed; the others' count
        log.exception("a group's step for a changed Secret failed")
        return False


async def poll_forever(ctx: Context, read: SecretReader, interval: float) -> None:
    """:func:`poll_once` every ``interval`` seconds on a thread, until cancelled. The thread runs in a copy
    of this task's context (kopf's Event poster), and so do the steps it hands over."""
    while True:
        await asyncio.sleep(interval)
        try:
            changed = await asyncio.to_thread(poll_once, ctx, read)
        except Exception:
            log.exception("reading the referenced Secrets failed; next try in %.0fs", interval)
        else:
            if changed:
                log.info("a referenced Secret changed: %d group(s) re-applied it", changed)
