"""`launch runs` (`launch ls`): the run directories under a run root, each with its preset, start, state, last
iteration and throughput, read from what the run directory holds:

    summary.json  written at the end of a run here (and by `launch report`): succeeded / failed / preempted
    running.json  the launcher's pid and host while it runs a job here: running, or failed when that process is gone
    job.sbatch, jobset.yaml  a cluster job without a summary yet: written or submitted (runs/cluster_job.py)

Everything is read bounded, so a run root of 10,000 runs lists in about a second however large their files are:
at most MANIFEST_HEAD_BYTES of manifest.json (its first members; a longer one, after many resumes, is read that
far and the row says so), the small records whole up to their caps, the end of metrics.jsonl only
(RUN_READ_BYTES in all per run).
"""

from __future__ import annotations

import heapq
import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from launcher import untrusted
from launcher.errors import UserError
from launcher.runs import cluster_job, triage
from launcher.runs.entries import within as entries_within
from launcher.runs.monitor import METRICS_FILE, SUMMARY_FILE
from launcher.runs.rundir import MANIFEST, RUNNING_FILE

MAX_RUNS = 10_000  # a run root holding more is listed up to here (newest names first)
MAX_ROOT_ENTRIES = 1_000_000  # entries read from the run root: past this it is not a run root
# a manifest is ≈ 4 KB and grows by an attempt's argv and environment (a few KB) per resume; the members the
# listing shows (preset, created) come first, the attempts last
MANIFEST_HEAD_BYTES = 64 << 10
MAX_SUMMARY_BYTES = 64 << 10  # summary.json is one or two KB
MAX_RUNNING_BYTES = 4 << 10  # running.json: a pid, a host, a time
METRICS_TAIL_BYTES = (4 << 10, 64 << 10)  # the last iteration line is near the end: the last 4 KiB, else 64 KiB
HEAD_MEMBERS = frozenset({"preset", "created"})  # what an overlong manifest's head is read for
RUN_READ_BYTES = MANIFEST_HEAD_BYTES + MAX_SUMMARY_BYTES + MAX_RUNNING_BYTES + sum(METRICS_TAIL_BYTES)
# RunSummary.outcome → the state a user asks about ("stopped": exited early, resumable; at a time limit or a signal)
STATES = {"success": "succeeded", "failed": "failed", "stopped": "preempted"}


@dataclass(frozen=True)
class RunRow:
    run_dir: str
    preset: str | None
    started: str | None
    state: str  # running, succeeded, failed, preempted, submitted, written, unknown
    last_iteration: int | None
    train_iters: int | None
    tokens_per_s: float | None
    why: str = ""  # how the state was judged, when not from summary.json
    failure: dict | None = None  # how a failed or stopped run's last attempt ended (summary.json, runs/triage.py)


def _json(path: str | Path, limit: int = untrusted.MAX_FILE_BYTES) -> dict[str, Any] | None:
    """A record (regular file, bounded, strict JSON); None when missing, too large or damaged (the row says what
    it can)."""
    if not os.path.lexists(path):  # the common case for running.json: cheaper than the refusal's message
        return None
    try:
        value = untrusted.read_json(path, os.path.basename(path), limit)
    except (UserError, OSError):  # a missing file is a UserError too
        return None
    return value if isinstance(value, dict) else None


def _manifest(path: str) -> tuple[dict[str, Any], str]:
    """manifest.json's members, read at most MANIFEST_HEAD_BYTES far; and, when it is longer, what was not read."""
    try:
        head, size = untrusted.read_head(path, MANIFEST, MANIFEST_HEAD_BYTES)
        if size <= len(head):
            value = untrusted.loads_json(head.decode("utf-8", errors="replace"), MANIFEST)
            return (value if isinstance(value, dict) else {}), ""
        text = head.decode("utf-8", errors="replace")
        return untrusted.json_object_head(text, MANIFEST, HEAD_MEMBERS), f"{MANIFEST} is {size:,} bytes; its first " \
                                                            f"{MANIFEST_HEAD_BYTES >> 10} KiB were read"
    except (UserError, OSError):
        return {}, ""


def _last_metrics(path: str) -> dict[str, Any] | None:
    """The last iteration record of metrics.jsonl, reading only its end (a FIFO there is not waited on)."""
    for size in METRICS_TAIL_BYTES:
        try:
            tail = untrusted.read_tail(path, "metrics file", size)
        except (UserError, OSError):
            return None
        lines = tail.decode("utf-8", errors="replace").splitlines()
        for line in reversed(lines[1:] if len(tail) == size else lines):  # the first may be cut
            if '"iteration"' not in line:  # most lines are iteration records; others are skipped unparsed
                continue
            try:
                record = untrusted.loads_json(line, "metrics line")
            except UserError:
                continue
            if isinstance(record, dict) and record.get("kind") == "iteration":
                return record
        if len(tail) < size:  # the whole file was read
            return None
    return None


MAX_PID = 1 << 22  # Linux's largest pid_max


def is_pid(value: Any) -> bool:
    """Whether `value` can be a process id: kill(0) and kill(-1) signal groups, not one process."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_PID


def process_alive(pid: int, host: str | None) -> bool | None:
    """Whether the launcher that wrote running.json still runs; None when it ran on another host."""
    if host and host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    except OSError:
        return False
    try:  # a reused pid belongs to some other program (an empty command line says nothing: a process mid-exec)
        command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return not command_line or b"launch" in command_line


def _number(value: Any) -> int | float | None:
    """A finite number of a record (strictly read already; a float beyond int64 is kept as it is)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _written_after(base: str, later: str, earlier: str) -> bool:
    """Whether the file `later` was written after `earlier` (both in `base`; False where either is gone)."""
    try:
        return os.stat(os.path.join(base, later)).st_mtime_ns >= os.stat(os.path.join(base, earlier)).st_mtime_ns
    except OSError:
        return False


def describe(run_dir: Path) -> RunRow:
    base = str(run_dir)
    manifest, unread = _manifest(os.path.join(base, MANIFEST))
    summary = _json(os.path.join(base, SUMMARY_FILE), MAX_SUMMARY_BYTES)
    running = _json(os.path.join(base, RUNNING_FILE), MAX_RUNNING_BYTES)
    attempts = manifest.get("attempts") if isinstance(manifest.get("attempts"), list) else []
    started = attempts[-1].get("started") if attempts and isinstance(attempts[-1], dict) else None
    started = started or manifest.get("created")
    last = total = speed = None
    why = ""
    pid = running.get("pid") if running is not None else None
    alive = process_alive(pid, running.get("host")) if running is not None and isinstance(pid, int) and is_pid(pid) \
        else False
    if running is not None and alive is not False:  # a resumed run's old summary.json says nothing of this attempt
        state = "running"
        why = f"on {running.get('host')}, not checked from here" if alive is None else ""
    elif running is not None and summary is not None and not _written_after(base, SUMMARY_FILE, RUNNING_FILE):
        # the last attempt ended (killed, or its summary could not be written: a full disk) without a summary:
        # summary.json is an earlier attempt's and says nothing of how this one ended
        state, why = "failed", (f"the launcher (pid {running.get('pid')}) is gone without a summary of its attempt; "
                                "summary.json is an earlier attempt's")
        summary = None
    elif summary is not None:
        state = STATES.get(str(summary.get("outcome")), "unknown")
        last = _number(summary.get("last_iteration"))
        total = _number(summary.get("train_iters")) or None
        speed = _number(summary.get("steady_tokens_per_s")) or None
    elif running is not None:
        state, why = "failed", f"the launcher (pid {running.get('pid')}) is gone without a summary"
    elif (cluster := cluster_job.state_before_summary(run_dir)) is not None:
        state, why = cluster  # the word `launch report` says too
    elif os.path.lexists(os.path.join(base, SUMMARY_FILE)):
        state, why = "unknown", f"summary.json is damaged or larger than {MAX_SUMMARY_BYTES >> 10} KiB"
    else:
        state, why = "unknown", "no summary.json: never started, or stopped without one"
    if last is None or total is None or speed is None:  # a finished run's summary says all three: no metrics read
        metrics = _last_metrics(os.path.join(base, METRICS_FILE)) or {}
        last = last if last is not None else _number(metrics.get("iteration"))
        total = total or _number(metrics.get("train_iters"))
        speed = speed or _number(metrics.get("tokens_per_s"))
    preset = manifest.get("preset") if isinstance(manifest.get("preset"), str) else None
    failure = _failure(summary.get("failure")) if summary is not None and state != "running" else None
    decisions = manifest.get("requeue_decisions")  # a Slurm job's batch script records each failed attempt's
    if failure is None and isinstance(decisions, list) and decisions and isinstance(decisions[-1], dict):
        failure = _failure(decisions[-1])
        if failure is not None and decisions[-1].get("decision") == "stop":
            failure["reason"] = f"chain stopped: {failure['reason']}"[:200]
    if unread:
        why = f"{why}; {unread}" if why else unread
    return RunRow(str(run_dir), preset, started if isinstance(started, str) else None, state,
                  int(last) if last is not None else None, int(total) if total is not None else None,
                  float(speed) if speed is not None else None, why, failure)


def _failure(record: Any) -> dict | None:
    """summary.json's failure record with the types triage wrote, when it names a class; else None."""
    failure = triage.failure_record(record)
    return failure if failure is not None and failure["class"] is not None else None


def failure_text(failure: dict | None) -> str:
    """The failure column: class, first failing rank and host (`launch report RUN_DIR` says the whole reason)."""
    if not failure:
        return ""
    where = "".join([f" rank {failure['rank']}" if failure.get("rank") is not None else "",
                     f" on {failure['host']}" if failure.get("host") else ""])
    return f"{failure['class']}{where}: {failure.get('reason', '')}"[:80]


def list_runs(run_root: Path) -> list[RunRow]:
    """Every run directory (one holding manifest.json) directly under `run_root`, newest first."""
    if not run_root.is_dir():
        raise UserError(f"no run directory root at {run_root}",
                        "runs go under ./runs by default; give another with --run-root DIR")
    rows = []
    try:
        with os.scandir(run_root) as entries:
            # the newest MAX_RUNS names kept while reading: memory bounded by them, not by the root's size
            bounded = entries_within(entries, run_root, "any run root",
                                     "give the directory that holds the run directories with --run-root DIR",
                                     MAX_ROOT_ENTRIES)
            names = heapq.nlargest(MAX_RUNS, (e.name for e in bounded
                                              if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)))
    except OSError as error:
        raise UserError(f"cannot list the run root {run_root}: {error.strerror or error}",
                        "give a readable directory with --run-root DIR") from None
    root = str(run_root)
    for name in names:
        if os.path.isfile(os.path.join(root, name, MANIFEST)):  # False, not an error, for a directory it cannot enter
            rows.append(describe(run_root / name))
    return sorted(rows, key=lambda row: row.started or "", reverse=True)


def render(rows: list[RunRow]) -> str:
    if not rows:
        return "no runs\n"
    failures = any(row.failure for row in rows)  # the column only where a run has one
    table = [("run", "preset", "started", "state", "iteration", "tokens/s", *(("failure",) if failures else ()))]
    for row in rows:
        progress = "-" if row.last_iteration is None else (
            f"{row.last_iteration}/{row.train_iters}" if row.train_iters else str(row.last_iteration))
        table.append((Path(row.run_dir).name, row.preset or "?", row.started or "?", row.state, progress,
                      f"{row.tokens_per_s:,.0f}" if row.tokens_per_s is not None else "-",
                      *((failure_text(row.failure) or "-",) if failures else ())))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() + "\n" for r in table)


def as_json(rows: list[RunRow]) -> str:
    return json.dumps([asdict(row) for row in rows], indent=2, allow_nan=False) + "\n"
