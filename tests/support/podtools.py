"""Moved to :mod:`e2e.lab.podtools` (``make demo`` uses it too, and product code imports nothing from tests/);
re-exported here for the tests and the benchmarks."""

from e2e.lab.podtools import *  # noqa: F403
