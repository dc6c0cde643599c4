"""The garbage collector paused while a command starts.

CPython's cyclic collector runs whenever allocations of container objects outnumber
deallocations by 700, and every tenth young run scans an older generation. A process that is
importing its modules allocates hundreds of thousands of functions, classes, dicts and
tuples, none of them garbage, so the collector keeps scanning them for nothing: in a fresh
``serve`` process, about 150 ms of the 1 s its imports take here (``python -c`` of the same
imports, five runs alternated with and without ``gc.disable()``:
bench/bench_extender_cold_start.py times the start as a whole).

:func:`~.main.main` pauses it before a command's imports; a command whose start is what
somebody waits for resumes it once started (``serve``: when it answers, docs/extender.md,
cold start), every other command before it runs. Resuming first freezes what the start made
(:func:`gc.freeze`: moved to a permanent generation the collector no longer scans), so the
long-running service's later full collections skip the modules' objects as well; reference
counting still frees them.
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_paused = False


def pause_collection() -> None:
    """Stop the cyclic collector until :func:`resume_collection` (a no-op when it is
    already off: what turned it off keeps it)."""
    global _paused
    with _lock:
        if gc.isenabled():
            gc.disable()
            _paused = True


def resume_collection() -> None:
    """Freeze what exists and turn the collector back on, if :func:`pause_collection` had
    turned it off (otherwise nothing: safe to call from every place a start can end)."""
    global _paused
    with _lock:
        if _paused:
            gc.freeze()
            gc.enable()
            _paused = False
