"""What user code implements to take part in a group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class Handler:
    """Callbacks of a :class:`~rebalanser.client.Client`. Override what you need.

    ``on_assigned`` is called once this member exclusively holds the resources (each with its
    fencing token). ``on_revoked`` is called after :meth:`Client.owns` has started returning False for
    the resources; return once all work on them has stopped: only then are they released to their
    next owner (or after ``Options.stop_timeout``, reported through ``on_error``).

    Threads and order. ``on_assigned`` and ``on_revoked`` run on a dedicated callback thread, one at a
    time, in the order the member decided them. The member waits for each, for ``on_assigned`` at most
    ``Options.start_timeout`` and for ``on_revoked`` at most ``Options.stop_timeout``. A callback still
    running then has overrun: it is reported through ``on_error``
    (:class:`~rebalanser.StopTimeoutError`) and no longer waited for (after ``on_revoked`` the
    member releases the resources anyway; ``owns`` is already False for them). It goes on running on
    its own thread; every later callback that concerns any of its resources starts only after it has
    returned, while callbacks for other resources go on, on a new callback thread. So callbacks for one
    resource never overlap and keep their order (``on_revoked`` never runs alongside the ``on_assigned``
    that granted the resource), and callbacks overlap at all only after one has overrun. An
    ``on_assigned`` that has to wait like that is not waited for: the member owns the resources and goes
    on, and the call runs once the overrunning one returns (``owns`` tells whether they are still ours).
    An ``on_revoked`` that has to wait is waited for as usual, at most ``Options.stop_timeout``.

    Deltas. Each ``on_assigned`` names only the resources this member starts on with that call, and each
    ``on_revoked`` only those it stops: a rebalance that adds ``b`` to a member holding ``a`` calls
    ``on_assigned({"b": ...})``, not ``{"a": ..., "b": ...}``. The union of what was assigned and not
    revoked since is what :meth:`Client.owned` returns (while the member is not stopping).

    Tokens belong to claims. A resource's fencing token is fixed when this member claims it in
    ZooKeeper and changes only with a new claim. Some rounds revoke a resource and assign it back to
    the same member without releasing the claim: a Global Barrier round (every member stops
    everything, then starts its new share), or a lease lapse while ZooKeeper was unreachable and the
    session survived. Then ``on_revoked`` is followed by ``on_assigned`` with the same token. A
    downstream store that fences on the token accepts the same token again, and refuses only smaller
    ones.

    Which algorithm runs. ``G/config``, when the group has one (written by the operator or by
    ``rebalanser group config``), decides for every member. Without it the coordinator's own
    ``Options.algorithm`` decides (the coordinator runs the rebalance), so workers whose options
    disagree follow whichever of them is coordinator at the time.

    ``on_error``, ``on_role`` and ``on_session`` are notifications. They run one at a time, in order,
    never on a ZooKeeper thread: on the member's own thread, except ``on_session("suspended")``, run on
    a short thread of its own as soon as ZooKeeper's client reports the disconnection (even while the
    member is busy in a callback). They may run while an overrunning ``on_assigned`` or ``on_revoked``
    is still going: keep them short and non-blocking. An exception raised by any
    callback is logged and reported through ``on_error`` (one raised by ``on_error`` is only logged); it
    never stops the member.
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
        """ZooKeeper session: connected (once per session), suspended, reconnected, lost, expired, closed;
        and ``waiting`` when :meth:`Client.start` found a node of an earlier incarnation with this
        member id and waits (at most 2T + 5 s) for ZooKeeper to expire that session before joining."""
