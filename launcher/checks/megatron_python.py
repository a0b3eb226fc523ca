"""Which interpreter runs Megatron for the launcher's checks (--check's verdict, the CPU rehearsal), and which
variables of the launcher's environment describe the job's target rather than this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Self

from launcher.errors import UserError
from launcher.inside.parent_death import DieWithParent
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
    python: str

    def _start(self, worker: Path, env: dict[str, str], what: str, cwd: str | None = None) -> dict[str, Any]:
        """Start `worker` under self.python and return its hello; `what` names it in the errors ("the rehearsal")."""
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives as long as the worker
        try:
            self._proc = subprocess.Popen([self.python, str(worker)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=self._log, text=True, env=env, cwd=cwd,
                                          preexec_fn=DieWithParent())
        except OSError as exc:
            self._log.close()
            raise UserError(f"cannot start {self.python} for {what}: {exc}",
                            "set MEGATRON_PYTHON to a python that has megatron-core and torch") from None
        hello = self._read()
        if "ready" not in hello:
            self.close()
            raise UserError(f"{what} could not start: {hello.get('fatal', hello)}",
                            "run `launch doctor` to see what is missing")
        return hello

    def _read(self) -> dict[str, Any]:
        """One reply; a worker that exited answers with its exit code and the end of its log."""
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._log.seek(0)
            return {"fatal": f"the worker exited (code {self._proc.wait()}): {self._log.read()[-2000:].strip()}"}
        return json.loads(line)

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
