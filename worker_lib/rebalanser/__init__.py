"""Rebalanser: share named resources among worker processes through ZooKeeper.

Start with :class:`Client`, configured by :class:`Options`, reporting to your :class:`Handler`.
"""

from rebalanser.client import Client, State, StopTimeoutError
from rebalanser.config import Algorithm, GroupConfig
from rebalanser.errors import (
    CorruptDataError,
    InvalidInputError,
    NotCoordinatorError,
    RebalanserError,
    SessionExpiredError,
)
from rebalanser.handler import Handler
from rebalanser.options import ExpiryPolicy, Options

__all__ = [
    "Algorithm",
    "Client",
    "CorruptDataError",
    "ExpiryPolicy",
    "GroupConfig",
    "Handler",
    "InvalidInputError",
    "NotCoordinatorError",
    "Options",
    "RebalanserError",
    "SessionExpiredError",
    "State",
    "StopTimeoutError",
]
