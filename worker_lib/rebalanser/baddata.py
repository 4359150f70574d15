"""Bad data found in ZooKeeper is reported here (to the member's :class:`~rebalanser.metrics.Metrics`
and a log line), then ignored by the caller or overwritten by the coordinator's next write; it never
stops a member or a group."""

from __future__ import annotations

import logging

from rebalanser.errors import CorruptDataError
from rebalanser.metrics import Metrics

log = logging.getLogger(__name__)


def report(error: CorruptDataError, metrics: Metrics) -> None:
    metrics.bad_data(error.kind or "unknown")
    log.warning("ignoring bad data in %s: %s", error.path or "(unknown znode)", error.reason)
