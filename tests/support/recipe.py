"""The install recipe, docs/getting-started.md, as the tests read and run it.

:func:`steps` cuts the page into its numbered sections and their ``sh`` blocks (the commands a user
types, in order); :func:`for_the_local_cluster` makes the one substitution the page documents for the
local cluster of ``make cluster-up`` (it has no registry: the image is loaded into the node instead of
pushed); :class:`Shell` runs blocks one after the other in one ``bash`` process, so the variables of
the first block reach the last, and keeps a transcript of every block and its output.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "getting-started.md"
#: The page's push, and what takes its place on the local cluster (the page says so in step 3).
PUSH = 'docker push "$IMAGE"'
LOAD = 'scripts/cluster.sh load "$IMAGE"'
#: The command that applies a chart's CRD before ``helm upgrade``: the same on every page that gives it.
CRD_UPGRADE = "| kubectl apply --server-side --force-conflicts -f -"

_HEADING = re.compile(r"^## (?:(?P<number>\d+)\. )?(?P<title>.+)$")
_FENCE = re.compile(r"^```(?P<lang>\S*)\s*$")


@dataclass(frozen=True)
class Step:
    """A numbered section of the page: its number, its title and its ``sh`` blocks, in order."""

    number: int
    title: str
    blocks: tuple[str, ...]

    @property
    def script(self) -> str:
        return "\n".join(self.blocks)


def steps(text: str) -> list[Step]:
    """The numbered sections that hold ``sh`` blocks, in the page's order (other fences are examples
    of output, never run)."""
    found: list[Step] = []
    number, title, blocks = 0, "", []
    lang: str | None = None
    lines: list[str] = []

    def close() -> None:
        if number and blocks:
            found.append(Step(number, title, tuple(blocks)))

    for line in text.splitlines():
        fence = _FENCE.match(line)
        if lang is not None:
            if fence and not fence["lang"]:
                if lang == "sh":
                    blocks.append("\n".join(lines) + "\n")
                lang, lines = None, []
            else:
                lines.append(line)
            continue
        if fence:
            lang = fence["lang"]
            continue
        heading = _HEADING.match(line)
        if heading:
            close()
            number, title, blocks = int(heading["number"] or 0), heading["title"], []
    close()
    return found


def page_steps() -> list[Step]:
    return steps(PAGE.read_text())


def for_the_local_cluster(recipe: list[Step]) -> list[Step]:
    """The page's steps with ``docker push "$IMAGE"`` replaced by the node load (exactly one push)."""
    pushes = [s.number for s in recipe for b in s.blocks for line in b.splitlines() if line.strip() == PUSH]
    assert len(pushes) == 1, f"the page should push the image once, as {PUSH!r}: found in steps {pushes}"
    return [replace(s, blocks=tuple(b.replace(PUSH, LOAD) for b in s.blocks)) for s in recipe]


class ShellExited(AssertionError):
    """A block failed: ``bash -e`` stopped (the message holds the block's output)."""


@dataclass
class Shell:
    """One ``bash`` (errexit, pipefail) that runs blocks in turn; each block's stdin is /dev/null and
    its stdout and stderr together are its output."""

    cwd: Path
    env: dict[str, str] = field(repr=False)
    scratch: Path
    transcript: list[tuple[str, str, str, float]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.scratch.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=self.cwd, env=self.env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, bufsize=1)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._send("set -eo pipefail\n")
        self._count = 0

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _send(self, text: str) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.write(text)
        self._proc.stdin.flush()

    def run(self, block: str, timeout: float, title: str = "") -> str:
        """Runs ``block`` and returns its output; :class:`ShellExited` when a command in it failed."""
        self._count += 1
        path = self.scratch / f"block-{self._count}.sh"
        path.write_text(block)
        mark = f"::block {self._count} done::"
        started = time.monotonic()
        self._send(f"source {path} </dev/null\necho '{mark}'\n")
        out: list[str] = []
        while True:
            left = started + timeout - time.monotonic()
            try:
                line = self._lines.get(timeout=max(left, 0.01))
            except queue.Empty:
                self.transcript.append((title, block, "".join(out) + f"\n[timed out after {timeout:.0f} s]\n", timeout))
                raise AssertionError(f"timed out after {timeout:.0f}s in:\n{block}\noutput:\n{''.join(out)}") from None
            if line is None:
                rc = self._proc.wait()
                self.transcript.append((title, block, "".join(out) + f"[exit {rc}]\n", time.monotonic() - started))
                raise ShellExited(f"exit {rc} in:\n{block}\noutput:\n{''.join(out)[-6000:]}")
            if line.rstrip("\n") == mark:
                self.transcript.append((title, block, "".join(out), time.monotonic() - started))
                return "".join(out)
            out.append(line)

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._send("exit 0\n")
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()

    def markdown(self, title: str) -> str:
        """The transcript: each block as typed, then its output and how long it took."""
        parts = [f"# {title}", ""]
        for heading, block, output, seconds in self.transcript:
            parts += [f"## {heading}", ""] if heading else []
            parts += ["```sh", block.rstrip("\n"), "```", "", f"({seconds:.1f} s)", "", "```",
                      output.rstrip("\n") or "(no output)", "```", ""]
        return "\n".join(parts)


def shell_env(base: dict[str, str]) -> dict[str, str]:
    """The environment the page assumes: kubectl and helm on PATH and pointed at the cluster (``base``,
    e.g. :meth:`Kube.env`), nothing of the test's own virtualenv."""
    env = dict(base)
    env.pop("VIRTUAL_ENV", None)
    env.setdefault("HOME", os.environ.get("HOME", "/root"))
    return env
