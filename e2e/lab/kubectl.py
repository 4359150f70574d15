"""kubectl and helm against a real cluster, for the pod end-to-end tests and the pod demo.

    kube = Kube(kubeconfig=Path(".cluster/kubeconfig"), bin_dir=Path(".cluster/bin"))
    kube.kubectl("get", "nodes")                      # CompletedProcess; raises KubeError on failure
    pod = kube.json("get", "pod", "x", "-n", "ns")     # parsed -o json
    with kube.watch_json("get", "rg", "orders", "-n", "ns") as stream:   # every version, as it comes
        ...
    with kube.transcript(path, "get", "rg", "-n", "ns", "-w") as t:       # lines stamped with seconds

Nothing here talks to the API server except through the ``kubectl`` and ``helm`` binaries.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO


class KubeError(RuntimeError):
    """kubectl or helm exited non-zero; the message carries the command and its stderr."""


def wait_until(predicate: Callable[[], Any], timeout: float, message: str | Callable[[], str],
               poll: float = 0.5) -> Any:
    """Polls ``predicate`` until it returns something truthy (returned); a bounded wait with a clear message."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s: {message() if callable(message) else message}")
        time.sleep(poll)


@dataclass(frozen=True)
class Kube:
    kubeconfig: Path
    bin_dir: Path

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def command(self, tool: str, *args: str) -> list[str]:
        if tool == "helm":
            return [str(self.bin_dir / "helm"), "--kubeconfig", str(self.kubeconfig), *args]
        return [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args]

    def run(self, tool: str, *args: str, input: str | None = None, check: bool = True,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        cmd = self.command(tool, *args)
        try:
            proc = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False,
                                  env=self.env(), stdin=None if input is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise KubeError(f"{tool} {' '.join(args)} timed out after {timeout:.0f}s") from exc
        if check and proc.returncode != 0:
            raise KubeError(f"{tool} {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return proc

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", *args, input=input, check=check, timeout=timeout)

    def helm(self, *args: str, check: bool = True, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        return self.run("helm", *args, check=check, timeout=timeout)

    def json(self, *args: str, timeout: float = 30.0) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json", timeout=timeout).stdout)

    def maybe_json(self, *args: str, timeout: float = 30.0) -> Any | None:
        """Like :meth:`json`, None when the object does not exist."""
        proc = self.kubectl(*args, "-o", "json", check=False, timeout=timeout)
        if proc.returncode != 0:
            if "NotFound" in proc.stderr or "not found" in proc.stderr:
                return None
            raise KubeError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return json.loads(proc.stdout)

    def popen(self, *args: str, stdout: int | TextIO = subprocess.PIPE) -> subprocess.Popen[str]:
        return subprocess.Popen(self.command("kubectl", *args), stdout=stdout, stderr=subprocess.PIPE, text=True,
                                env=self.env(), stdin=subprocess.DEVNULL, bufsize=1)

    @contextmanager
    def watch_json(self, *args: str) -> Iterator[JsonStream]:
        """``kubectl ARGS -o json -w`` in the background: every version of the object, stamped on arrival."""
        stream = JsonStream(self.popen(*args, "-o", "json", "-w"))
        stream.start()
        try:
            yield stream
        finally:
            stream.stop()

    @contextmanager
    def transcript(self, path: Path, *args: str) -> Iterator[Transcript]:
        """``kubectl ARGS`` (a ``-w`` watch) with each line written to ``path`` as it comes, stamped
        with the seconds since the transcript began."""
        transcript = Transcript(self.popen(*args), path)
        transcript.start()
        try:
            yield transcript
        finally:
            transcript.stop()


class _Reader:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.lock = threading.Lock()

    def start(self) -> None:
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.line(line)

    def line(self, line: str) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.thread.join(10)


@dataclass
class Version:
    at: float  # time.monotonic() on arrival
    obj: dict[str, Any]


class JsonStream(_Reader):
    """Concatenated pretty-printed JSON documents from ``kubectl -o json -w``, decoded as they complete."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        super().__init__(proc)
        self._buffer = ""
        self._decoder = json.JSONDecoder()
        self.versions: list[Version] = []

    def line(self, line: str) -> None:
        self._buffer += line
        if not line.startswith("}"):  # kubectl closes each document with "}" at column 0
            return
        try:
            obj, _ = self._decoder.raw_decode(self._buffer.strip())
        except ValueError:
            return
        self._buffer = ""
        with self.lock:
            self.versions.append(Version(time.monotonic(), obj))

    def snapshot(self) -> list[Version]:
        with self.lock:
            return list(self.versions)

    def latest(self) -> dict[str, Any] | None:
        with self.lock:
            return self.versions[-1].obj if self.versions else None


class Transcript(_Reader):
    def __init__(self, proc: subprocess.Popen[str], path: Path) -> None:
        super().__init__(proc)
        self.path = path
        self.started = time.monotonic()
        self.lines: list[str] = []
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def line(self, line: str) -> None:
        stamped = f"+{time.monotonic() - self.started:6.1f}s  {line.rstrip()}"
        with self.lock:
            self.lines.append(stamped)
            with open(self.path, "a") as out:
                out.write(stamped + "\n")

    def text(self) -> str:
        with self.lock:
            return "\n".join(self.lines)
