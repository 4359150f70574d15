"""One controller per ResourceGroup: the only writer of its znodes, its status and its state.

``state`` (a group's state), ``messages`` (the immutable values other threads send), ``plan`` (the
pure decisions), ``rotation`` (a credentials rotation's pure plan), ``strand`` (one step at a time on
a shared pool), ``share`` (each namespace's share), ``connectwait`` (no step waits for a session),
``core`` (:class:`~rebalanser_operator.controller.core.GroupController`, which runs the I/O steps it
is given) and ``context`` (the shared context). Nothing here imports :mod:`rebalanser_operator.apply`.
"""
