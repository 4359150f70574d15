"""Rotated Secrets are noticed without listing or watching Secrets.

The operator's RBAC on Secrets is ``get`` only (docs/operator.md, "Security model"): it never streams the
Secrets of a namespace. Instead, every ``interval`` seconds each Secret that a served ResourceGroup names
(``spec.zookeeper.credentialsSecret``, ``spec.zookeeper.tls.secret``) is read by name, once per
namespace and name however many groups share it, and handed to :func:`actions.note_secret`, which tells
the groups' controllers; each marks itself for re-applying when the Secret changes its connection. A
Secret that cannot be read is skipped: open
connections keep what they have, and the next reconcile reports it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping

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
    """Reads every referenced Secret by name; returns how many groups were marked for re-applying."""
    marked = 0
    for namespace, secret in referenced(ctx.views()):
        data = read(namespace, secret)
        if data is not None:
            marked += note_secret(ctx, namespace, secret, data)
    return marked


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
