"""Rebalanser for asyncio programs: ``async with rebalanser.aio.Client(options, handler) as client:``.

The same member as :class:`rebalanser.Client` (one protocol implementation), with a :class:`Handler`
whose ``on_assigned`` and ``on_revoked`` are coroutines awaited on your event loop, and async
iterators of assignment and state changes. Nothing the library does blocks the loop.
"""

from rebalanser.aio.client import AssignmentChange, Client
from rebalanser.aio.feeds import Feed
from rebalanser.aio.handler import Handler
from rebalanser.client import State

__all__ = ["AssignmentChange", "Client", "Feed", "Handler", "State"]
