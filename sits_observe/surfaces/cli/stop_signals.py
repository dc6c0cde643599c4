"""SIGTERM / SIGINT as a :class:`threading.Event`, without a lock in the signal handler.

The long-running commands (``agent``, ``controller``, ``demo``) wait on a stop event in the
main thread and want a signal to set it. Setting it from the handler itself can deadlock:
Python runs the handler in the main thread between two bytecodes, possibly inside that
thread's own ``Event.wait`` while it holds the event's internal lock, and ``Event.set`` then
waits for that lock forever (the ``signal`` module's docs warn against locks in handlers).
CI saw it as an agent that ignored SIGTERM for 30 s on Python 3.12 (2026-12-03).

:func:`stop_on_signals` installs handlers that only write the signal's number to a pipe; a
watcher thread reads it and sets the event, so the main thread is never asked for a lock it
may already hold.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType

log = logging.getLogger(__name__)

#: What stops a long-running command: ``kubectl delete`` / systemd, and Ctrl-C.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals(stop: threading.Event, what: str = "stopping") -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT set ``stop`` (logged at INFO with ``what``);
    the previous handlers come back on exit. Off the main thread (where Python cannot
    install handlers, e.g. the demo's controller thread) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        # A full pipe holds earlier signals: the stop is on its way already.
        with suppress(BlockingIOError):
            os.write(write_fd, bytes([signum]))

    def watch() -> None:
        while data := os.read(read_fd, 64):
            for signum in data:
                log.info("received %s; %s", signal.Signals(signum).name, what)
            stop.set()

    watcher = threading.Thread(target=watch, name="stop-signals", daemon=True)
    watcher.start()
    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.close(write_fd)  # the watcher reads end-of-file and returns
        watcher.join()
        os.close(read_fd)
