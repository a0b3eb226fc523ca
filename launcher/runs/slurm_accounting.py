"""A Slurm job's states as Slurm's accounting records them (`sacct`), for `launch report`.

The job's log says how each attempt ended in the batch script's words; Slurm's accounting says it in Slurm's:
one record per attempt (`sacct --duplicates`), e.g. NODE_FAIL or REQUEUED for an attempt that was requeued and
COMPLETED for the last one. Where there is no sacct, or the cluster keeps no accounting, the report says so and
goes by the log alone.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

SACCT_SECONDS = 15  # a slurmdbd that does not answer must not hold up a report
MAX_RECORDS = 10_000  # a job with more attempts than this is not one the launcher made
FIELDS = ("JobIDRaw", "State", "ExitCode", "Start", "End", "NodeList")


@dataclass(frozen=True)
class JobRecord:
    """One attempt of a job as sacct has it."""

    job: str
    state: str  # COMPLETED, NODE_FAIL, REQUEUED, PREEMPTED, ... ("CANCELLED by 0" is CANCELLED)
    exit_code: str  # "status:signal", e.g. 0:0
    start: str  # ISO time, or Unknown/None for an attempt that has not started
    end: str
    nodes: str

    def describe(self) -> str:
        return f"Slurm: {self.state}, exit code {self.exit_code}, on {self.nodes}"


@dataclass
class Accounting:
    records: dict[str, list[JobRecord]] = field(default_factory=dict)  # job id -> its attempts, oldest first
    unavailable: str | None = None  # why sacct could not say; None when it did

    def attempt(self, job: str, number: int) -> JobRecord | None:
        """The record of a job's attempt `number` (1: the first run, 2: after the first requeue, ...)."""
        attempts = self.records.get(job, [])
        return attempts[number - 1] if 0 < number <= len(attempts) else None

    def describe(self) -> str:
        if self.unavailable:
            return f"from the job log only ({self.unavailable})"
        return "from Slurm's accounting (sacct) and the job log"


def job_accounting(job_ids: Sequence[str]) -> Accounting:
    """Every attempt's record of the given jobs (digits only: the ids from slurm-<id>.out names)."""
    ids = [job for job in job_ids if job.isascii() and job.isdigit()]
    if not ids:
        return Accounting(unavailable="no Slurm job id")
    sacct = shutil.which("sacct")
    if sacct is None:
        return Accounting(unavailable="sacct is not installed here")
    command = [sacct, "--jobs=" + ",".join(ids), "--duplicates", "--allocations", "--noheader", "--parsable2",
               "--format=" + ",".join(FIELDS)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=SACCT_SECONDS,
                              check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Accounting(unavailable=f"sacct did not answer within {SACCT_SECONDS} s")
    except OSError as error:
        return Accounting(unavailable=f"sacct could not run: {error.strerror or error}")
    if done.returncode != 0:
        message = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return Accounting(unavailable=f"sacct: {message.removeprefix('sacct: ')[:200]}")
    accounting = Accounting()
    for line in done.stdout.splitlines()[:MAX_RECORDS]:
        parts = line.split("|")
        if len(parts) != len(FIELDS) or parts[0] not in ids:
            continue
        job, state, exit_code, start, end, nodes = parts
        words = state.split()
        accounting.records.setdefault(job, []).append(
            JobRecord(job, words[0] if words else "UNKNOWN", exit_code, start, end, nodes))
    for records in accounting.records.values():
        records.sort(key=_started)
    if not accounting.records:
        return Accounting(unavailable=f"sacct has no record of job {', '.join(ids)}")
    return accounting


def _started(record: JobRecord) -> tuple[int, str]:
    """Attempts in the order they ran; one not started yet (Start Unknown/None) last."""
    started = record.start[:1].isdigit()
    return (0 if started else 1, record.start if started else "")
