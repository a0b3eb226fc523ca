"""What the batch script does after a failed attempt: requeue it, or stop the chain. Run by the batch script
(templates/sbatch.sh.j2) on the job's first node, with the launcher's root on PYTHONPATH:

    python3 -m launcher.runs.requeue_policy [--fewest-nodes N] RUN_DIR JOB_ID ATTEMPT EXIT_STATUS [SIGNAL]
    → three lines: DECISION, the hosts to leave out (comma-separated, may be empty), WHY

Each attempt of the job's log (slurm-JOB.out) is classified (runs/triage.py):
    infrastructure  requeue
    training, data  requeue once; the same class at the same iteration a second time stops the chain (a retry
                    gives the same failure: the budget would go to a bug)
    persistent      (out of memory, a start-up error, an import error, a missing data file, a full disk, Megatron's
                    failed result validation: exit code 17) stop at once, whatever the class: the next attempt meets
                    the same failure
    resume asked    Megatron's rerun state machine exited 16 to rerun the iteration from its checkpoint: requeue,
                    however often (its state machine decides when it is done)
    unclassified    requeue, as before there was a policy
Where the end blames a host (a GPU/ECC/Xid error, a node failure, the OOM killer, one machine's NCCL system error) or
Megatron asks to rerun away from one (exit code 16), and the log names it as one of the attempt's nodes, the requeue
leaves it out too, with every host left out before (Slurm's ExcNodeList), unless the partition's responding nodes
could then no longer hold the job's N nodes: then the chain stops, saying so.
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
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

from launcher import counts, slurm_names
from launcher.runs import slurm_log, tail_log, triage

REQUEUE, STOP = "requeue", "stop"
MAX_LOG_BYTES = 1 << 30
MAX_MANIFEST_BYTES = 8 << 20
MAX_COMMAND_OUTPUT = 4 << 20  # sinfo's and scontrol's answers: a node name per line
COMMAND_SECONDS = 30
# Slurm's own values (the job's environment): a hostlist expression and partition names, never text from a log
# (a first letter or digit: never read as an option)
_NODE_LIST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,\[\]-]{0,65535}")
_PARTITIONS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,-]{0,4095}")


@dataclass(frozen=True)
class Decision:
    action: str  # requeue | stop
    exclude: tuple[str, ...]  # every host the next attempt leaves out (Slurm's ExcNodeList: the list so far)
    rule: str  # the end and the rule that decided ("" where no rule did: an unclassified end)
    end: triage.Triage
    left_out: tuple[str, ...] = ()  # the hosts this end adds to `exclude`
    hosts: str = ""  # what was done about hosts, and why, in words

    @property
    def why(self) -> str:
        """The rule, and what was done about hosts where the end blames one (or Megatron asks for other hardware)."""
        said = self.hosts and (self.end.host_fault or self.end.resume_asked or self.left_out)
        return "; ".join(filter(None, [self.rule, self.hosts if said else ""]))

    def line(self) -> str:
        return "\n".join([self.action, ",".join(self.exclude), " ".join(self.why.split())])

    def as_record(self) -> dict:
        left_out = [{"host": host, "why": self.end.describe()} for host in self.left_out]
        return {"decision": self.action, "why": self.why, "exclude": list(self.exclude), "left_out": left_out,
                "hosts": self.hosts}


def decide(ends: list[triage.Triage], excluded: Iterable[str] = (),
           job_nodes: Iterable[str] | None = None) -> Decision:
    """The decision after the last of `ends` (every attempt's end so far, oldest first). `excluded`: the hosts left
    out so far; `job_nodes`: Slurm's names for the last attempt's nodes (None: not known), the only hosts a log may
    name for leaving out."""
    last = ends[-1]
    already = tuple(dict.fromkeys(h for h in excluded if slurm_names.node_name(h)))[:slurm_names.MAX_EXCLUDED]
    if last.cls is not None and last.persistent:  # out of memory, a start-up error, a full disk: it comes back
        return Decision(STOP, already, f"{last.describe()}; a retry meets the same failure", last,
                        hosts="every host kept: a retry anywhere meets the same failure")
    host, hosts = _host_to_leave_out(last, already, None if job_nodes is None else tuple(job_nodes))
    left_out = (host,) if host else ()
    exclude = (*already, *left_out)
    if last.cls == triage.INFRASTRUCTURE:
        return Decision(REQUEUE, exclude, last.describe(), last, left_out, hosts)
    if last.resume_asked:  # Megatron's own request: its rerun state machine bounds the reruns, not this rule
        return Decision(REQUEUE, exclude, f"{last.describe()}; requeued as Megatron asks", last, left_out, hosts)
    if last.cls in (triage.TRAINING, triage.DATA):
        same = [e for e in ends[:-1] if e.cls == last.cls and e.iteration == last.iteration]
        if same:
            at = f"iteration {last.iteration}" if last.iteration is not None else "the same point (no iteration)"
            return Decision(STOP, already, f"{last.describe()}; the same {last.cls} failure at {at} a "
                            "second time: a retry does not fix it", last,
                            hosts="every host kept: the chain stops")
        return Decision(REQUEUE, exclude, f"{last.describe()}; retried once", last, left_out, hosts)
    return Decision(REQUEUE, already, "", last, hosts=hosts)  # unclassified: requeued as without a policy


def _host_to_leave_out(end: triage.Triage, already: tuple[str, ...],
                       job_nodes: tuple[str, ...] | None) -> tuple[str | None, str]:
    """The host `end` blames that the next attempt should not get, and what was done about hosts, in words."""
    if end.resume_asked and not end.host_fault:  # every rank exits 16: the first task srun saw end is no culprit
        return None, "no host left out: the log does not name the machine the rerun must avoid"
    if not end.host_fault:
        # a time limit, a preemption, an NCCL timeout (seen on the rank that waited, not on the one that hung), a
        # killed rank, a Python error: nothing against a host
        return None, "every host kept: the end names no fault of a host"
    if end.host is None:
        return None, "no host left out: the log does not name the host that failed"
    node = slurm_names.job_node(end.host, job_nodes)
    if node is None:
        shown = end.host if slurm_names.host_name(end.host) else "a name that is no host name"
        nodes = f" ({_shown(job_nodes)})" if job_nodes is not None else ""
        return None, f"no host left out: {shown}, named by the log, is none of the attempt's nodes{nodes}"
    if node in already:
        return None, f"{node} was left out already"
    if len(already) >= slurm_names.MAX_EXCLUDED:
        return None, f"{node} kept: {slurm_names.MAX_EXCLUDED} hosts are left out already"
    return node, f"leaving out {node}" + (", where the rerun must not run again" if end.resume_asked else "")


def _shown(names: tuple[str, ...], most: int = 8) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def fit(decision: Decision, responding: set[str] | None, fewest_nodes: int | None) -> Decision:
    """`decision`, where the hosts it leaves out still leave the job room: the partition's responding nodes
    (`sinfo -r`) less every host left out must hold the fewest nodes the job starts with, else the job would wait
    in the queue for ever. No room: the chain stops, saying so. Not known (sinfo gave no answer): the hosts kept."""
    if not decision.left_out:
        return decision
    hosts = ", ".join(decision.left_out)
    kept = tuple(h for h in decision.exclude if h not in decision.left_out)
    if responding is None or fewest_nodes is None:
        unknown = "sinfo did not say which nodes respond" if responding is None else "the job's node count is unknown"
        return replace(decision, exclude=kept, left_out=(), hosts=f"not leaving out {hosts}: {unknown}")
    room = len(responding - set(decision.exclude))
    if room >= fewest_nodes:
        return decision
    before = f" and the {len(kept)} host(s) left out before" if kept else ""
    return replace(decision, action=STOP, exclude=kept, left_out=(),
                   hosts=f"not requeued without {hosts}: leaving it out{before} would leave {room} responding "
                         f"node(s) of the partition for a job of {fewest_nodes} node(s), which would wait in the "
                         "queue for ever")


def responding_nodes(partition: str | None) -> set[str] | None:
    """The partition's nodes that respond (`sinfo -h -N -r -o %N`), or None where sinfo gives no answer. Asked
    before the requeue: `scontrol requeue` has Slurm send SIGTERM to every process of the job, sinfo included."""
    argv = ["sinfo", "-h", "-N", "-r", "-o", "%N"]
    if partition:
        if not _PARTITIONS.fullmatch(partition):
            return None  # not Slurm's: every partition's nodes would be counted
        argv += ["-p", partition]
    out = _command(argv)
    return None if out is None else {name for name in out.split() if slurm_names.node_name(name)}


def attempt_nodes(node_list: str | None) -> list[str] | None:
    """Slurm's names for the attempt's nodes (`scontrol show hostnames $SLURM_JOB_NODELIST`), or None."""
    if not node_list or not _NODE_LIST.fullmatch(node_list):
        return None
    out = _command(["scontrol", "show", "hostnames", node_list])
    names = out.split() if out is not None else []
    return names if names and all(slurm_names.node_name(name) for name in names) else None


def _command(argv: list[str]) -> str | None:
    """A Slurm command's standard output (argv, no shell; bounded in time and size), or None where it failed."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=COMMAND_SECONDS, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0 or len(done.stdout) > MAX_COMMAND_OUTPUT:
        return None
    return done.stdout.decode("ascii", "replace")


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
    decisions.append({"job": job, "attempt": attempt, **decision.as_record(), **decision.end.as_dict()})
    manifest["requeue_decisions"] = decisions[-1000:]
    manifest["excluded_nodes"] = list(decision.exclude)
    # read back, it holds what anyone wrote there: written again by the one secret rule for records
    write_text_atomic(manifest_path, json.dumps(scrub_record(manifest), indent=2) + "\n")


def excluded_nodes(manifest_path: Path) -> tuple[list[str], str | None]:
    """The hosts left out so far (the manifest's excluded_nodes) and what of that list was not taken, in words."""
    try:
        manifest = _manifest(manifest_path)
    except Exception:  # noqa: BLE001 - no record yet: nothing left out
        return [], None
    return slurm_names.node_names(manifest.get("excluded_nodes"))


USAGE = ("usage: python3 -m launcher.runs.requeue_policy [--fewest-nodes N] RUN_DIR JOB_ID ATTEMPT EXIT_STATUS "
         "[SIGNAL]")


def main(argv: list[str], environ: dict[str, str] | None = None) -> int:
    environ = dict(os.environ) if environ is None else environ
    fewest: int | None = None
    if argv[:1] == ["--fewest-nodes"] and len(argv) > 1 and argv[1].isascii() and argv[1].isdigit() \
            and len(argv[1]) <= 6:
        fewest, argv = int(argv[1]), argv[2:]
    signalled = argv[4] if len(argv) == 5 else None
    if len(argv) not in (4, 5) or not (argv[1].isascii() and argv[1].isdigit()) or \
            any(counts.count(a.removeprefix("-")) is None for a in argv[2:4]) or (
            signalled is not None and not re.fullmatch(r"SIG[A-Z0-9]{1,10}", signalled)):
        print(USAGE, file=sys.stderr)
        return 2
    run_dir, job, attempt, status = Path(argv[0]), argv[1], int(argv[2]), int(argv[3])
    ends = attempt_ends(run_dir / f"slurm-{job}.out", attempt, status)
    if not ends:
        return 1
    if signalled is not None:  # the batch script got the time-limit warning: requeued whatever the log says
        ends[-1] = time_limit_end(ends[-1], signalled)
    excluded, not_taken = excluded_nodes(run_dir / "manifest.json")
    # Slurm is asked only where a host is to be left out
    blamed = ends[-1].host_fault and ends[-1].host is not None
    job_nodes = attempt_nodes(environ.get("SLURM_JOB_NODELIST")) if blamed else None
    decision = decide(ends, excluded, job_nodes)
    if decision.left_out:
        count = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or ""
        fewest = fewest if fewest is not None else counts.count(count, 6)
        decision = fit(decision, responding_nodes(environ.get("SLURM_JOB_PARTITION")), fewest)
    if not_taken:
        decision = replace(decision, hosts=f"{decision.hosts}; manifest.json's excluded_nodes: {not_taken}, "
                           "not taken")
    try:
        record(run_dir / "manifest.json", job, attempt, decision)
    except Exception as error:  # noqa: BLE001 - the decision stands; the record is best effort
        print(f"megatron-launch: could not record the decision in manifest.json: {error}", file=sys.stderr)
    print(decision.line())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
