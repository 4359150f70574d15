"""Which ZooKeeper session a group's step uses, as a pure plan: (what the group needs, what it holds,
what the pool holds) -> reuse it, join another group's, open a new one, or refused.

    effect = plan_session(ctx.session_facts(rt))
    # Open(key, leave=old): the credentials or TLS material changed; the old session is left (and closed
    # with its last user)
    zk = ctx.session(rt, effect)

A session is never a side effect of looking a client up: the step asks the plan, and the I/O
(:meth:`~rebalanser_operator.controller.context.Context.session`, the pool's
:meth:`~rebalanser_operator.zkpool.ZooKeeperPool.enter`) carries out exactly what it says
(tests/unit/test_session_plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from rebalanser_operator.zkpool import Key


@dataclass(frozen=True)
class SessionFacts:
    """What a step knows of the sessions when it plans one (no I/O)."""

    key: Key  # the session the group needs: its ensemble, TLS material, credentials or the operator's identity
    held: Key | None  # the session the group holds now (None: none)
    open: bool  # a session with ``key`` is open
    shared: bool  # ... and another user holds it (another group, a check)
    namespace_sessions: int = 0  # sessions the namespace's other groups hold
    limit: int = 0  # Limits.sessions_per_namespace (0: no limit)


@dataclass(frozen=True)
class Reuse:
    """The session the group holds is the one it needs."""

    key: Key


@dataclass(frozen=True)
class Join:
    """Another group's open session is the one it needs (``leave``: the one it held, if another)."""

    key: Key
    leave: Key | None = None


@dataclass(frozen=True)
class Open:
    """A new session (``leave``: the one it held, left for it, e.g. after a rotation)."""

    key: Key
    leave: Key | None = None


SessionEffect = Reuse | Join | Open


def plan_session(facts: SessionFacts) -> SessionEffect | None:
    """The session to use; None when it would be a new one past the namespace's limit (refused, retried
    when one closes). Reusing or joining an open session is never refused."""
    if facts.held == facts.key and facts.open:
        return Reuse(facts.key)
    leave = facts.held if facts.held is not None and facts.held != facts.key else None
    if facts.open:
        return Join(facts.key, leave)
    if facts.limit and facts.namespace_sessions >= facts.limit:
        return None
    return Open(facts.key, leave)


def credentials_only(effect: SessionEffect) -> bool:
    """Whether ``effect`` moves the group to a session that differs from the one it held only in its
    credentials (a digest rotation without the operator's identity): the same ensemble and TLS material,
    so it connects as the one before did, and a moment's wait for it is no failure of the group."""
    if isinstance(effect, Reuse) or effect.leave is None:
        return False
    new, old = effect.key, effect.leave
    return (new[0], new[1], new[3]) == (old[0], old[1], old[3])
