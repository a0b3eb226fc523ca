"""What the batch script does after a failed attempt: requeue it, or stop the chain. Run by the batch script
(templates/sbatch.sh.j2) on the job's first node, with the launcher's root on PYTHONPATH:

    python3 -m launcher.runs.requeue_policy RUN_DIR JOB_ID ATTEMPT EXIT_STATUS [SIGNAL]
    → three lines: DECISION, the hosts to leave out (comma-separated, may be empty), WHY

Each attempt of the job's log (slurm-JOB.out) is classified (runs/triage.py):
    infrastructure  requeue; a node failure or a GPU error also leaves its host out of the next attempt
    training, data  requeue once; the same class at the same iteration a second time stops the chain (a retry
                    gives the same failure: the budget would go to a bug)
    persistent      (out of memory, a start-up error, an import error, a missing data file, a full disk, Megatron's
                    failed result validation: exit code 17) stop at once, whatever the class: the next attempt meets
                    the same failure
    resume asked    Megatron's rerun state machine exited 16 to rerun the iteration from its checkpoint: requeue,
                    however often (its state machine decides when it is done)
    unclassified    requeue, as before there was a policy
With SIGNAL the batch script stopped the attempt at Slurm's time-limit warning and requeues it; the policy only
records that end (infrastructure: time limit near).
Each decision, the class and the hosts left out are recorded in the run's manifest.json ("requeue_decisions",
"excluded_nodes"), so `launch runs`, `launch report` and the next submission see them. Reading is bounded as in
`launch report`; a failure of this program itself leaves the batch script to its plain requeue.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from launcher.runs import slurm_log, tail_log, triage

REQUEUE, STOP = "requeue", "stop"
MAX_LOG_BYTES = 1 << 30
MAX_MANIFEST_BYTES = 8 << 20
HOST_FAILURES = ("node failure", "node failed", "GPU error")  # triage reasons that blame the host
HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_EXCLUDED = 64  # hosts left out at most; a job that loses more has a cluster problem, not a node problem


@dataclass(frozen=True)
class Decision:
    action: str  # requeue | stop
    exclude: tuple[str, ...]  # hosts to leave out of the next attempt
    why: str
    end: triage.Triage

    def line(self) -> str:
        return "\n".join([self.action, ",".join(self.exclude), " ".join(self.why.split())])


def host_name(text: str | None) -> str | None:
    """A node name as Slurm writes one, or None (a log line is not trusted to name anything else)."""
    return text if text and len(text) <= 255 and HOST.fullmatch(text) else None


def decide(ends: list[triage.Triage], excluded: Iterable[str] = ()) -> Decision:
    """The decision after the last of `ends` (every attempt's end so far, oldest first)."""
    last = ends[-1]
    already = [h for h in dict.fromkeys(excluded) if host_name(h)]
    if last.cls is not None and last.persistent:  # out of memory, a start-up error, a full disk: it comes back
        return Decision(STOP, tuple(already), f"{last.describe()}; a retry meets the same failure", last)
    if last.cls == triage.INFRASTRUCTURE:
        # only a failure of the host itself leaves it out: a time limit, a preemption, an NCCL timeout (seen on the
        # rank that waited, not on the one that hung) or a killed rank says nothing against the node
        own = last.host if last.reason.startswith(HOST_FAILURES) else None
        hosts = [h for h in [host_name(own)] if h and h not in already]
        left_out = f"; leaving out {', '.join(hosts)}" if hosts else ""
        return Decision(REQUEUE, tuple([*already, *hosts][:MAX_EXCLUDED]), f"{last.describe()}{left_out}", last)
    if last.resume_asked:  # Megatron's own request: its rerun state machine bounds the reruns, not this rule
        return Decision(REQUEUE, tuple(already), f"{last.describe()}; requeued as Megatron asks", last)
    if last.cls in (triage.TRAINING, triage.DATA):
        same = [e for e in ends[:-1] if e.cls == last.cls and e.iteration == last.iteration]
        if same:
            at = f"iteration {last.iteration}" if last.iteration is not None else "the same point (no iteration)"
            return Decision(STOP, tuple(already), f"{last.describe()}; the same {last.cls} failure at {at} a "
                            "second time: a retry does not fix it", last)
        return Decision(REQUEUE, tuple(already), f"{last.describe()}; retried once", last)
    return Decision(REQUEUE, tuple(already), "", last)  # unclassified: requeued as without a policy


def time_limit_end(end: triage.Triage, signal_name: str) -> triage.Triage:
    """An attempt the batch script stopped at Slurm's warning before the time limit (#SBATCH --signal): an
    infrastructure end that says nothing against the host, at the iteration the log reached."""
    return triage.Triage(triage.INFRASTRUCTURE, f"time limit near ({signal_name} before the limit)", end.iteration)


def attempt_ends(log: Path, attempt: int, exit_status: int | None) -> list[triage.Triage]:
    """Every attempt's end in the job's log up to `attempt` (its exit status: the batch script's srun's)."""
    readers: list[tuple[int, triage.AttemptReader]] = []

    def start(found: slurm_log.SlurmAttempt) -> None:
        readers.append((found.number, triage.AttemptReader()))

    def take(line: str) -> None:
        if readers:
            readers[-1][1].feed(line)

    slurm_log.read_attempts(_lines(log, attempt), start, take)
    # the tracebacks, torchrun's root cause and srun's errors are in the job's standard error file
    by_number = dict(readers)
    slurm_log.stderr_lines(_lines(slurm_log.stderr_log(log), attempt),
                           lambda _job, number, line: by_number[number].feed(line) if number in by_number else None)
    kept = [(number, reader) for number, reader in readers if number <= attempt]
    return [reader.verdict(exit_status if number == attempt else None) for number, reader in kept]


def _open_regular(path: Path) -> BinaryIO | None:
    """`path` opened for reading when it is a regular file that opens, else None: O_NONBLOCK, so a FIFO planted as
    the log or the manifest is never waited on (untrusted.py's rule, in plain Python: the node's python3 may lack the
    launcher's dependencies)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # missing, a dangling or looping link, a name too long, unreadable: nothing to read
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _lines(path: Path, attempt: int) -> Iterator[str]:
    """The lines of a regular file, at most its last MAX_LOG_BYTES (runs/tail_log.py): a failure is at the end of
    its attempt, so a longer log is read from its tail, opened by an attempt line for the attempt the cut runs
    through (or `attempt`), so its lines keep their attempt."""
    handle = _open_regular(path)
    if handle is None:
        return
    with handle:
        for line in tail_log.TailLines(handle, MAX_LOG_BYTES, slurm_job="0", attempt=attempt):
            yield from line.splitlines() or [""]


def _manifest(path: Path) -> dict:
    handle = _open_regular(path)
    if handle is None:
        raise ValueError("manifest.json is not a regular file")
    with handle:
        value = json.loads(handle.read(MAX_MANIFEST_BYTES + 1)[:MAX_MANIFEST_BYTES], parse_constant=_no_constant)
    if not isinstance(value, dict):
        raise ValueError("manifest.json is not a mapping")
    return value


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")  # the manifest is written again: it must stay valid JSON


def record(manifest_path: Path, job: str, attempt: int, decision: Decision) -> None:
    """The decision and the hosts left out, in the run's manifest.json (replaced atomically)."""
    from launcher.redaction import scrub_record
    from launcher.runs.atomic import write_text_atomic

    manifest = _manifest(manifest_path)
    decisions = manifest.get("requeue_decisions")
    decisions = decisions if isinstance(decisions, list) else []
    decisions.append({"job": job, "attempt": attempt, "decision": decision.action, "why": decision.why,
                      "exclude": list(decision.exclude), **decision.end.as_dict()})
    manifest["requeue_decisions"] = decisions[-1000:]
    manifest["excluded_nodes"] = list(decision.exclude)
    # read back, it holds what anyone wrote there: written again by the one secret rule for records
    write_text_atomic(manifest_path, json.dumps(scrub_record(manifest), indent=2) + "\n")


def excluded_nodes(manifest_path: Path) -> list[str]:
    try:
        manifest = _manifest(manifest_path)
    except Exception:  # noqa: BLE001 - no record yet: nothing left out
        return []
    hosts = manifest.get("excluded_nodes")
    return [h for h in hosts if isinstance(h, str) and host_name(h)] if isinstance(hosts, list) else []


def main(argv: list[str]) -> int:
    signalled = argv[4] if len(argv) == 5 else None
    if len(argv) not in (4, 5) or not all(a.lstrip("-").isdigit() for a in argv[1:4]) or (
            signalled is not None and not re.fullmatch(r"SIG[A-Z0-9]{1,10}", signalled)):
        print("usage: python3 -m launcher.runs.requeue_policy RUN_DIR JOB_ID ATTEMPT EXIT_STATUS [SIGNAL]",
              file=sys.stderr)
        return 2
    run_dir, job, attempt, status = Path(argv[0]), argv[1], int(argv[2]), int(argv[3])
    ends = attempt_ends(run_dir / f"slurm-{job}.out", attempt, status)
    if not ends:
        return 1
    if signalled is not None:  # the batch script got the time-limit warning: requeued whatever the log says
        ends[-1] = time_limit_end(ends[-1], signalled)
    decision = decide(ends, excluded_nodes(run_dir / "manifest.json"))
    try:
        record(run_dir / "manifest.json", job, attempt, decision)
    except Exception as error:  # noqa: BLE001 - the decision stands; the record is best effort
        print(f"megatron-launch: could not record the decision in manifest.json: {error}", file=sys.stderr)
    print(decision.line())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
