"""The discovery file cache: the last known instances per service, in one JSON file."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

Instances = dict[str, dict[str, Any]]  # instance id -> config


class JsonFileCache:
    """Keeps ``{"services": {service: {"instances": {...}, "updated": t}}}`` in ``path``.

    The file is read once (lazily) and rewritten atomically (temporary file + rename) whenever a
    service's instances change, so readers never see a torn file. Several processes may share it; the
    last writer wins.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()
        self._services: dict[str, Any] | None = None

    @property
    def path(self) -> Path:
        return self._path

    def load(self, service: str) -> Instances | None:
        with self._lock:
            entry = self._loaded().get(service)
        return dict(entry["instances"]) if isinstance(entry, dict) else None

    def store(self, service: str, instances: Instances) -> None:
        with self._lock:
            services = self._loaded()
            entry = services.get(service)
            if isinstance(entry, dict) and entry.get("instances") == instances:
                return
            services[service] = {"instances": instances, "updated": time.time()}
            self._write(services)

    def _loaded(self) -> dict[str, Any]:
        if self._services is None:
            self._services = self._read()
        return self._services

    def _read(self) -> dict[str, Any]:
        try:
            document = json.loads(self._path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            log.warning("ignoring unreadable discovery cache %s", self._path, exc_info=True)
            return {}
        services = document.get("services") if isinstance(document, dict) else None
        return services if isinstance(services, dict) else {}

    def _write(self, services: dict[str, Any]) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=self._path.name + ".", dir=self._path.parent)
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump({"format": 1, "services": services}, handle, sort_keys=True, indent=1)
            os.replace(tmp, self._path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
