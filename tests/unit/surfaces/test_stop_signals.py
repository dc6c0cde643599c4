"""stop_on_signals: SIGTERM / SIGINT set the stop event without a lock in the handler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from sits_observe.surfaces.cli.stop_signals import stop_on_signals


def watchers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "stop-signals"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_sets_the_event_and_the_old_handler_comes_back(signum: int) -> None:
    before = signal.getsignal(signum)
    stop = threading.Event()
    with stop_on_signals(stop):
        assert signal.getsignal(signum) is not before
        os.kill(os.getpid(), signum)
        assert stop.wait(5.0), "the signal did not set the stop event"
        os.kill(os.getpid(), signum)  # a second one while stopping is harmless
    assert signal.getsignal(signum) is before
    assert watchers() == []


def test_without_a_signal_the_event_stays_clear_and_nothing_is_left_running() -> None:
    stop = threading.Event()
    with stop_on_signals(stop):
        assert watchers()
    assert not stop.is_set()
    assert watchers() == []


def test_off_the_main_thread_it_installs_nothing() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def body() -> None:
        with stop_on_signals(threading.Event()):
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]


def test_a_signal_while_the_main_thread_holds_the_events_lock_does_not_deadlock() -> None:
    """The CI failure of 2026-12-03: the handler runs in the main thread at the next
    bytecode, here inside the lock Event.wait holds at its start and end. A handler that
    called ``stop.set()`` itself would wait for that lock forever; run in a child process
    so that a regression fails on the timeout instead of hanging the suite."""
    script = textwrap.dedent(
        """
        import os, signal, threading
        from sits_observe.surfaces.cli.stop_signals import stop_on_signals

        stop = threading.Event()
        with stop_on_signals(stop):
            with stop._cond:  # the lock Event.wait and Event.set take
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(10_000):  # the handler runs here, under the lock
                    pass
            assert stop.wait(5.0), "stop not set"
        print("stopped")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped"
