"""A Kubernetes JobSet's logs in its run directory, for `launch report RUN_DIR`.

Every pod tees its torchrun's output into logs/k8s/node-N-attempt-M.log (the entry script of backends/k8s.py;
M counts the JobSet's restarts from 1). Megatron prints its iteration lines from the last rank, whichever pod
that is, so each attempt is read from the pod log that holds them (node 0's when none does yet).
"""

from __future__ import annotations

import re
from pathlib import Path

from launcher import untrusted
from launcher.errors import UserError
from launcher.runs import entries
from launcher.runs.logparse import clean_line, parse_iteration_line

LOG_DIR = Path("logs") / "k8s"
_NAME = re.compile(r"node-(?P<node>[0-9]{1,9})-attempt-(?P<attempt>[0-9]{1,9})\.log")
MAX_POD_LOG_BYTES = 1 << 30  # as launch report reads a log
MAX_SCANNED_LINES = 1_000_000  # a pod log with no iteration line in its first million lines is not the last rank's


def _has_iterations(path: Path) -> bool:
    try:  # bounded lines of a regular file: a FIFO named like a pod log is not waited on
        for number, line in enumerate(untrusted.Lines(path, "pod log", MAX_POD_LOG_BYTES)):
            if number >= MAX_SCANNED_LINES:
                return False
            if "iteration" in line and parse_iteration_line(clean_line(line)) is not None:
                return True
    except UserError:
        return False
    return False


def attempt_logs(run_dir: Path) -> list[Path]:
    """One log per attempt, oldest first: the pod log with the training's iteration lines."""
    attempts: dict[int, list[tuple[int, Path]]] = {}
    for path in entries.listed(Path(run_dir) / LOG_DIR, "node-*-attempt-*.log", "pod logs"):
        match = _NAME.fullmatch(path.name)
        if match and path.is_file():
            attempts.setdefault(int(match["attempt"]), []).append((int(match["node"]), path))
    chosen = []
    for attempt in sorted(attempts):
        pods = [path for _, path in sorted(attempts[attempt])]
        chosen.append(next((path for path in reversed(pods) if _has_iterations(path)), pods[0]))
    return chosen
