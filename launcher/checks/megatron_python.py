"""Which interpreter runs Megatron for the launcher's checks (--check's verdict, the CPU rehearsal), and which
variables of the launcher's environment describe the job's target rather than this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import IO, Self

from launcher.megatron.pin import has_module

# Variables whose value in the launcher's own environment describes this machine, never the job's target: the
# checks take them from the job's environment instead.
TARGET_ENV_PREFIXES = ("CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_", "NVTE_", "TORCH_NCCL_")


def find_megatron_python() -> str | None:
    """The interpreter to run Megatron in: $MEGATRON_PYTHON, else this one if it has megatron-core and torch."""
    explicit = os.environ.get("MEGATRON_PYTHON")
    if explicit:
        return explicit
    return sys.executable if has_module("megatron.training") and has_module("torch") else None


class WorkerProcess:
    """A Megatron worker subprocess (`_proc`, reading requests on stdin) and its log (`_log`): closed by ending its
    input, killed if it does not stop within 30 s. A context manager."""

    _proc: subprocess.Popen
    _log: IO

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
