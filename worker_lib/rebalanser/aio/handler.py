"""What asyncio user code implements to take part in a group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class Handler:
    """Callbacks of a :class:`rebalanser.aio.Client`, all run on the event loop the client started on.

    ``on_assigned`` is awaited once this member exclusively holds the resources (name -> fencing
    token): start working on them (typically by creating tasks) and return. ``on_revoked`` is awaited
    after :meth:`Client.owns` has started returning False for the resources: return once all work on
    them has stopped. Only then are they released to their next owner.

    Each call is awaited at most ``Options.start_timeout`` (``on_assigned``) or ``Options.stop_timeout``
    (``on_revoked``). A call still running then is cancelled, reported through ``on_error`` as a
    :class:`~rebalanser.StopTimeoutError`, and awaited a little longer (the client's ``cancel_grace``)
    so that its cleanup can finish; after ``on_revoked`` the resources are then released either way.
    Calls never overlap one another and keep the order the member decided them in, unless a call
    ignores its cancellation (it then goes on alone, and later calls about its resources wait for it).

    The rules of :class:`rebalanser.Handler` hold here too: each call carries a delta (only what starts
    or stops with it), a token belongs to the claim (a Global Barrier round, or a lease lapse that the
    session survives, revokes and re-assigns a resource with the same token), and ``G/config`` decides
    the algorithm when present, else the coordinator's own options.

    ``on_error``, ``on_role`` and ``on_session`` are plain (not ``async``) notifications, called on the
    loop in the order they happened; keep them short. An exception raised by ``on_assigned`` or
    ``on_revoked`` is reported through ``on_error``; it never stops the member.
    """

    async def on_assigned(self, resources: Mapping[str, int]) -> None:
        """Start working on these resources (name -> fencing token)."""

    async def on_revoked(self, resources: Sequence[str]) -> None:
        """Stop working on these resources; return when stopped."""

    def on_error(self, error: Exception) -> None:
        """Something went wrong that the library handled (or, for SessionExpiredError, ended on)."""

    def on_role(self, role: str, epoch: int) -> None:
        """This member became the ``coordinator`` (with its epoch) or a ``follower``."""

    def on_session(self, state: str) -> None:
        """ZooKeeper session: connected, suspended, reconnected, lost, expired, closed."""
