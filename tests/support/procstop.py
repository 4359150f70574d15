"""Ending a test's child process the way a kubelet ends a container: SIGTERM, then SIGKILL after a grace."""

from __future__ import annotations

import signal
import subprocess


def stop_gracefully(proc: subprocess.Popen[bytes], grace: float = 60.0) -> None:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; nothing when the process has ended already."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
