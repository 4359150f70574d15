"""The member's event queue: what watches, timers, kazoo's connection listener, the coordinator and the
public ``stop`` post (:mod:`member_events`), read by the member's thread only, in order.

Releases of other sessions' claims arrive in bursts: :meth:`Inbox.releases` takes every release
queued behind the first in one batch, so the member claims them in one round (re-trying every waiting
resource on every release made a member re-read hundreds of still-held claims per release: quadratic
in large groups). The first event of another kind stops the batch and is handed out next.
"""

from __future__ import annotations

import queue

from rebalanser import member_events as ev


class Inbox:
    def __init__(self) -> None:
        self._events: queue.Queue[ev.Event] = queue.Queue()
        self._pushback: ev.Event | None = None

    def post(self, event: ev.Event) -> None:
        """Any thread."""
        self._events.put(event)

    def next(self) -> ev.Event:
        """The next event (waits for one)."""
        if self._pushback is not None:
            event, self._pushback = self._pushback, None
            return event
        return self._events.get()

    def releases(self, first: str | None) -> set[str] | None:
        """The resources released by ``first`` and every release queued right behind it (None: every
        waiting resource, when any of them says so)."""
        names: set[str] | None = None if first is None else {first}
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                break
            if not isinstance(event, ev.ClaimReleased):
                self._pushback = event
                break
            if event.resource is None or names is None:
                names = None
            else:
                names.add(event.resource)
        return names
