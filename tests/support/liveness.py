"""An operator process's liveness, as its probe sees it (``/healthz`` on its liveness port)."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Callable


def healthy(proc: subprocess.Popen[bytes], port: int, who: str, log: Callable[[], str]) -> bool:
    """True once ``http://127.0.0.1:PORT/healthz`` answers 200; False while it does not answer yet. A process
    that has exited fails the test at once, with the tail of its ``log``."""
    assert proc.poll() is None, f"{who} exited ({proc.returncode}):\n{log()[-3000:]}"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
