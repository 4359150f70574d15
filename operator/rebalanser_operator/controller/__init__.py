"""One controller per ResourceGroup: the only writer of its znodes, its status and its state.

``strand`` (one step at a time on a shared pool), ``messages`` (the immutable values other threads
send), ``plan`` (the pure decisions), ``core`` (:class:`~rebalanser_operator.controller.core.GroupController`).
"""
