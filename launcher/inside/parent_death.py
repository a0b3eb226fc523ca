"""Processes the launcher starts (the job's torchrun or its one rank, the checks' Megatron workers, the rehearsal's
torchrun and its ranks) end when the process that started them ends, however it ends. A check stopped by SIGKILL
(a `timeout -s KILL`, the out-of-memory killer), which no handler sees, otherwise left its worker running on: one
grew to 23 GB.

Linux's PR_SET_PDEATHSIG: the kernel sends SIGKILL to the child when the thread that started it exits; the
launcher starts these processes from its main thread. It survives exec; elsewhere (macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()  # looked up before any fork: the child only calls it


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> None:
    """In a child of `parent`: get `sig` when it ends (SIGKILL: be killed), or end now if it already has (it ended
    before this ran)."""
    if _PRCTL is None:
        return
    _PRCTL(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


class DieWithParent:
    """A Popen preexec_fn: the child dies with the process that starts it (made in that process, before the fork)."""

    def __init__(self, sig: int = signal.SIGKILL) -> None:
        self.parent = os.getpid()
        self.sig = sig

    def __call__(self) -> None:
        die_with_parent(self.parent, self.sig)
