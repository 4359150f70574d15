"""Bad data found in ZooKeeper is reported here (a metric and a log line), then ignored by the caller
or overwritten by the coordinator's next write; it never stops a member or a group."""

from __future__ import annotations

import logging

from rebalanser import metrics
from rebalanser.errors import CorruptDataError

log = logging.getLogger(__name__)


def report(error: CorruptDataError) -> None:
    metrics.BAD_DATA.labels(error.kind or "unknown").inc()
    log.warning("ignoring bad data in %s: %s", error.path or "(unknown znode)", error.reason)
