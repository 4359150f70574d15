"""The worker's SIGTERM/SIGINT handler must not wait for the lock of the code it interrupted: Python runs
a handler on the main thread between two bytecodes, which may be inside ``stop.wait()`` right after its
Condition re-took the Event's lock. A handler calling ``stop.set()`` there hangs the worker for good (a
chaos run's worker never exited after SIGTERM; its stacks showed the handler inside ``Event.set``)."""

from __future__ import annotations

import signal
import threading

from rebalanser.cli import stop_on_signal


def test_the_stop_handler_returns_while_the_interrupted_code_holds_the_events_lock() -> None:
    stop = threading.Event()
    handler = stop_on_signal(stop)
    returned = threading.Event()

    def main_thread_inside_wait() -> None:
        with stop._cond:  # where the signal landed: inside Event.wait, its lock held
            handler(signal.SIGTERM, None)
            returned.set()

    threading.Thread(target=main_thread_inside_wait, daemon=True).start()
    assert returned.wait(5), "the handler waited for the Event's lock held by the code it interrupted"
    assert stop.wait(5), "the handler did not set stop once the lock was free"
