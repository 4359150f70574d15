"""The operator's context as the handlers and ``main`` use it: :class:`OperatorContext`, the controllers'
:class:`~rebalanser_operator.controller.context.Context` with the I/O steps of
:mod:`rebalanser_operator.apply.actions` bound to it.

The state of one group (:class:`GroupRuntime`) and the timing options (:class:`LoopOptions`) live in
:mod:`rebalanser_operator.controller.state`; they are named here too for the modules above.
"""

from __future__ import annotations

from functools import partial

from rebalanser_operator.apply.actions import (
    apply_step,
    delete_desired,
    end_grace,
    refresh_facts,
    resync_secrets,
    take_secret,
)
from rebalanser_operator.controller.context import Context
from rebalanser_operator.controller.core import GroupSteps
from rebalanser_operator.controller.state import DEFAULT_CREDENTIALS_GRACE as DEFAULT_CREDENTIALS_GRACE
from rebalanser_operator.controller.state import EXECUTOR_THREADS as EXECUTOR_THREADS
from rebalanser_operator.controller.state import GroupRuntime as GroupRuntime
from rebalanser_operator.controller.state import LoopOptions as LoopOptions
from rebalanser_operator.controller.state import Waker as Waker


class OperatorContext(Context):
    """The shared context, whose groups' controllers carry their messages out with the steps of
    :mod:`rebalanser_operator.apply.actions` (apply, delete, a Secret seen, a refresh's facts, the end of
    a grace period, a re-apply)."""

    def group_steps(self) -> GroupSteps:
        return GroupSteps(apply=partial(apply_step, self), delete=partial(delete_desired, self),
                          secret_seen=partial(take_secret, self), refresh_facts=partial(refresh_facts, self),
                          end_grace=end_grace, reapply=partial(resync_secrets, self))
