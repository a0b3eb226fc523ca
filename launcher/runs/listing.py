"""`launch runs` (`launch ls`): the run directories under a run root, each with its preset, start, state, last
iteration and throughput, read from what the run directory holds:

    summary.json  written at the end of a run here (and by `launch report`): succeeded / failed / preempted
    running.json  the launcher's pid and host while it runs a job here: running, or failed when that process is gone
    job.sbatch, jobset.yaml  a cluster job without a summary yet: written or submitted (runs/cluster_job.py)

Everything is read bounded: a few KB of each file, the end of metrics.jsonl only.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from launcher import untrusted
from launcher.errors import UserError
from launcher.runs import cluster_job
from launcher.runs.monitor import METRICS_FILE, SUMMARY_FILE
from launcher.runs.rundir import MANIFEST, RUNNING_FILE

MAX_RUNS = 10_000  # a run root holding more is listed up to here (newest names first)
MAX_RECORD_BYTES = 1 << 20  # a manifest grows by an attempt's argv and environment (a few KB) per resume
MAX_SMALL_RECORD_BYTES = 64 << 10  # summary.json and running.json are a few hundred bytes
METRICS_TAIL_BYTES = 64 << 10  # the last iteration line is near the end
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


def _json(path: Path, limit: int = MAX_RECORD_BYTES) -> dict[str, Any] | None:
    """A record (regular file, bounded, strict JSON); None when missing or damaged (the row says what it can)."""
    if not os.path.lexists(path):
        return None
    try:
        value = untrusted.read_json(path, path.name, limit)
    except (UserError, OSError):
        return None
    return value if isinstance(value, dict) else None


def _last_metrics(path: Path) -> dict[str, Any] | None:
    """The last iteration record of metrics.jsonl, reading only its end (a FIFO there is not waited on)."""
    if not os.path.lexists(path):
        return None
    try:
        tail = untrusted.read_tail(path, "metrics file", METRICS_TAIL_BYTES).decode("utf-8", errors="replace")
    except (UserError, OSError):
        return None
    for line in reversed(tail.splitlines()[-1000:]):  # the last iteration line is among the last few
        try:
            record = untrusted.loads_json(line, "metrics line")
        except UserError:
            continue
        if isinstance(record, dict) and record.get("kind") == "iteration":
            return record
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


def describe(run_dir: Path) -> RunRow:
    manifest = _json(run_dir / MANIFEST) or {}
    summary = _json(run_dir / SUMMARY_FILE, MAX_SMALL_RECORD_BYTES)
    running = _json(run_dir / RUNNING_FILE, MAX_SMALL_RECORD_BYTES)
    metrics = _last_metrics(run_dir / METRICS_FILE) or {}
    attempts = manifest.get("attempts") if isinstance(manifest.get("attempts"), list) else []
    started = attempts[-1].get("started") if attempts and isinstance(attempts[-1], dict) else None
    started = started or manifest.get("created")
    last = _number(metrics.get("iteration"))
    total = _number(metrics.get("train_iters"))
    speed = _number(metrics.get("tokens_per_s"))
    why = ""
    pid = running.get("pid") if running is not None else None
    alive = process_alive(pid, running.get("host")) if running is not None and isinstance(pid, int) and is_pid(pid) \
        else False
    if running is not None and alive is not False:  # a resumed run's old summary.json says nothing of this attempt
        state = "running"
        why = f"on {running.get('host')}, not checked from here" if alive is None else ""
    elif summary is not None:
        state = STATES.get(str(summary.get("outcome")), "unknown")
        last = _number(summary.get("last_iteration")) if summary.get("last_iteration") is not None else last
        total = _number(summary.get("train_iters")) or total
        speed = _number(summary.get("steady_tokens_per_s")) or speed
    elif running is not None:
        state, why = "failed", f"the launcher (pid {running.get('pid')}) is gone without a summary"
    elif (cluster := cluster_job.state_before_summary(run_dir)) is not None:
        state, why = cluster  # the word `launch report` says too
    else:
        state, why = "unknown", "no summary.json: never started, or stopped without one"
    preset = manifest.get("preset") if isinstance(manifest.get("preset"), str) else None
    failure = _failure(summary.get("failure")) if summary is not None and state != "running" else None
    decisions = manifest.get("requeue_decisions")  # a Slurm job's batch script records each failed attempt's
    if failure is None and isinstance(decisions, list) and decisions and isinstance(decisions[-1], dict):
        failure = _failure(decisions[-1])
        if failure is not None and decisions[-1].get("decision") == "stop":
            failure["reason"] = f"chain stopped: {failure['reason']}"[:200]
    return RunRow(str(run_dir), preset, started if isinstance(started, str) else None, state,
                  int(last) if last is not None else None, int(total) if total is not None else None,
                  float(speed) if speed is not None else None, why, failure)


def _failure(record: Any) -> dict | None:
    """summary.json's failure record with the types triage wrote (class, reason, iteration, rank, host), or None."""
    if not isinstance(record, dict) or not isinstance(record.get("class"), str):
        return None
    texts = {k: str(record[k])[:200] for k in ("class", "reason", "host") if isinstance(record.get(k), str)}
    numbers = {k: record[k] for k in ("iteration", "rank") if _number(record.get(k)) is not None}
    return {"class": texts["class"], "reason": texts.get("reason", ""), "iteration": numbers.get("iteration"),
            "rank": numbers.get("rank"), "host": texts.get("host")}


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
            names = sorted((e.name for e in entries if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)),
                           reverse=True)
    except OSError as error:
        raise UserError(f"cannot list the run root {run_root}: {error.strerror or error}",
                        "give a readable directory with --run-root DIR") from None
    for name in names[:MAX_RUNS]:
        if os.path.isfile(run_root / name / MANIFEST):  # False, not an error, for a directory it cannot enter
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
