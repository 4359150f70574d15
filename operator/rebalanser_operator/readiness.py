"""The readiness endpoint of an operator replica (``--replica-readiness``): 200 while the replica is a
member of the operator group in good standing (its share assigned or being assigned), 503 otherwise, with
the member's state in the body. A replica that cannot reach the operator group serves nothing
(its library's lease has run out) and says so here, so a rolling update waits for each new replica to
have joined before it stops an old one (docs/operator-replicas.md).

kopf's own endpoint (``--liveness``) stays the liveness probe: an unreachable operator group is no reason
to restart the pod.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Callable

from aiohttp import web

log = logging.getLogger(__name__)


def address(url: str) -> tuple[str, int, str]:
    """(host, port, path) of an ``http://host:port/path`` URL (ValueError otherwise)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or parts.port is None:
        raise ValueError(f"the readiness endpoint must be http://HOST:PORT/PATH, not {url!r}")
    return parts.hostname or "0.0.0.0", parts.port, parts.path or "/"


async def serve(url: str, check: Callable[[], tuple[bool, str]]) -> None:
    """Serves ``check()`` at ``url`` until cancelled: 200 or 503, and the text."""
    host, port, path = address(url)

    async def ready(_request: web.Request) -> web.Response:
        ok, text = check()
        return web.Response(status=200 if ok else 503, text=text)

    app = web.Application()
    app.add_routes([web.get(path, ready)])
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("readiness at http://%s:%d%s", host, port, path)
    try:
        await asyncio.Event().wait()
    finally:
        await asyncio.shield(runner.cleanup())
