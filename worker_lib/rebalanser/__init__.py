"""Rebalanser: share named resources among worker processes through ZooKeeper.

Start with :class:`Client`, configured by :class:`Options`, reporting to your :class:`Handler`.
"""

__version__ = "0.1.0"  # the one version source: the package, the image label and the chart follow it

from rebalanser.client import Client, State, StopTimeoutError
from rebalanser.config import Algorithm, GroupConfig
from rebalanser.errors import (
    CorruptDataError,
    GroupDeletedError,
    GroupNotFoundError,
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
    "GroupDeletedError",
    "GroupNotFoundError",
    "Handler",
    "InvalidInputError",
    "NotCoordinatorError",
    "Options",
    "RebalanserError",
    "SessionExpiredError",
    "State",
    "StopTimeoutError",
]
