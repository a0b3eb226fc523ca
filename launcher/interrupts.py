"""Signals that end the launcher's own work (not a child's): SIGTERM and SIGHUP behave like Ctrl-C.

A scheduler stops a job with SIGTERM and a closed terminal sends SIGHUP; both kill Python outright, so
`finally` blocks (temporary files, workers) never run. Inside `signals_interrupt()` they raise `Interrupted`,
a KeyboardInterrupt that remembers its signal, and the CLI exits 128 + signal number (130, 143, 129).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signal_of(interrupt: KeyboardInterrupt) -> int:
    return getattr(interrupt, "signum", signal.SIGINT)


def exit_status(interrupt: KeyboardInterrupt) -> int:
    return 128 + signal_of(interrupt)


def describe(interrupt: KeyboardInterrupt) -> str:
    signum = signal_of(interrupt)
    return "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name


def _raise(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Interrupted here (main thread only: Python delivers signals there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise) for sig in STOPPING_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP back for a few steps that must happen together; delivered after."""
    held = {signal.SIGINT, *STOPPING_SIGNALS}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
