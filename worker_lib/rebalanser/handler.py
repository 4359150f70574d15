"""What user code implements to take part in a group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class Handler:
    """Callbacks of a :class:`~rebalanser.client.Client`. Override what you need.

    They run on the member's own thread, one at a time, never on a ZooKeeper thread.
    ``on_assigned`` is called once this member exclusively holds the resources (each with its
    fencing token). ``on_revoked`` is called after :meth:`Client.owns` has started returning False for
    the resources; return once all work on them has stopped: only then are they released to their
    next owner (or after ``Options.stop_timeout``, reported through ``on_error``).
    """

    def on_assigned(self, resources: Mapping[str, int]) -> None:
        """Start working on these resources (name -> fencing token)."""

    def on_revoked(self, resources: Sequence[str]) -> None:
        """Stop working on these resources; return when stopped."""

    def on_error(self, error: Exception) -> None:
        """Something went wrong that the library handled (or, for SessionExpiredError, ended on)."""

    def on_role(self, role: str, epoch: int) -> None:
        """This member became the ``coordinator`` (with its epoch) or a ``follower``."""

    def on_session(self, state: str) -> None:
        """ZooKeeper session: connected, suspended, reconnected, lost, expired, closed."""
