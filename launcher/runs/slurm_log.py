"""A Slurm job's log (`slurm-<job>.out` in its run directory) split into its attempts.

The batch script (templates/sbatch.sh.j2) opens every attempt with `megatron-launch: job J attempt N on …` and
closes it with `megatron-launch: attempt N ended: why`; an attempt killed before it could say so (a failed node)
gets its line from the next attempt. The log is appended to across requeues, so one file holds them all.
Plain Python (the standard library only): the batch script's requeue policy imports it with the node's python3.
The job's standard error (`slurm-<job>.err`: Python's tracebacks, torchrun's root cause, srun's errors) gets the
same opening line, so its lines are told apart by attempt too (`stderr_lines`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from launcher.runs import entries

_START = re.compile(r"^megatron-launch: job (?P<job>\d{1,18})(?!\d) attempt (?P<n>\d{1,18})(?!\d) on ")
_END = re.compile(r"^megatron-launch: attempt (?P<n>\d{1,18})(?!\d) ended: (?P<why>.*)$")


@dataclass
class SlurmAttempt:
    job: str
    number: int
    lines: list[str] = field(default_factory=list)
    ended: str | None = None  # None: no word on how it ended (still running, or the log was cut)

    def describe(self) -> str:
        return f"attempt {self.number} (job {self.job}): {self.ended or 'no end recorded (running, or cut off)'}"


def job_logs(run_dir: Path) -> list[Path]:
    """The run's Slurm logs, oldest job first (a chain or a resubmission adds jobs)."""
    def job_id(path: Path) -> int:
        digits = path.stem.removeprefix("slurm-")  # ASCII digits only, as untrusted.count reads a count
        return int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= 18 else 0

    return sorted(entries.listed(run_dir, "slurm-*.out", "files"), key=job_id)


def stderr_log(out_log: Path) -> Path:
    """The job's standard error file beside its `slurm-<job>.out` (the batch script's #SBATCH --error)."""
    return out_log.with_suffix(".err")


def stderr_lines(lines: Iterable[str], on_line: Callable[[str, int, str], None]) -> None:
    """Each line of a job's standard error after an attempt's opening line, with that attempt's job and number
    (lines before the first opening line, or in a file from before the batch script wrote one, belong to none)."""
    current: tuple[str, int] | None = None
    for line in lines:
        start = _START.match(line)
        if start:
            current = (start["job"], int(start["n"]))
        elif current is not None:
            on_line(current[0], current[1], line)


def attempt_start(line: str) -> int | None:
    """The attempt number an attempt's opening line names, else None."""
    start = _START.match(line)
    return int(start["n"]) if start else None


def attempt_of(line: str) -> tuple[str, int] | None:
    """The job and attempt number an attempt's opening line names, else None."""
    start = _START.match(line)
    return (start["job"], int(start["n"])) if start else None


def split_attempts(text: str) -> list[SlurmAttempt]:
    """The attempts in one job's log, each with its lines (output before the first start is dropped)."""
    return read_attempts(text.splitlines())


def read_attempts(lines: Iterable[str], on_start: Callable[[SlurmAttempt], None] | None = None,
                  on_line: Callable[[str], None] | None = None) -> list[SlurmAttempt]:
    """split_attempts on lines as they are read: with `on_line`, each line of an attempt goes there instead of
    into its SlurmAttempt.lines (a log of millions of lines is then not kept); `on_start` is told of each start."""
    attempts: list[SlurmAttempt] = []
    endings: dict[int, str] = {}
    for line in lines:
        start = _START.match(line)
        if start:
            attempts.append(SlurmAttempt(start["job"], int(start["n"])))
            if on_start is not None:
                on_start(attempts[-1])
            continue
        end = _END.match(line)
        if end:
            endings.setdefault(int(end["n"]), end["why"])
        elif attempts:
            if on_line is None:
                attempts[-1].lines.append(line)
            else:
                on_line(line)
    for attempt in attempts:
        attempt.ended = endings.get(attempt.number)
    return attempts
