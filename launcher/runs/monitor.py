"""Watch a training run's output: log it, record metrics, show progress, and judge the end.

The local backend pipes the child's combined stdout/stderr through `Monitor.feed(line)`:
- every line goes to `<run_dir>/logs/<attempt>.log` unchanged;
- iteration and memory lines become records in `<run_dir>/metrics.jsonl` (one JSON object per line);
- on a TTY, Megatron's iteration lines are replaced by one live tqdm progress line with ETA and the other lines
  are printed above it; elsewhere (CI, nohup, Slurm) all lines pass through and each iteration adds one plain
  `[launch] …` progress line;
- `Monitor.close(exit_code)` writes `summary.json`, prints the summary and returns it.

Writing the log or metrics can fail (a full disk): that error goes to the caller, which stops training. Printing
can fail too (the terminal was closed: SIGHUP): then the monitor goes on quietly, recording everything.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from launcher import nofollow, redaction, untrusted
from launcher.errors import UserError, shown
from launcher.runs import entries, triage
from launcher.runs import logparse as lp
from launcher.runs.atomic import write_text_atomic
from launcher.runs.timing import StartupClock
from launcher.runs.verdict import RunLog, RunSummary, json_safe

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
LOGS_DIR = "logs"
MAX_ATTEMPT_LOG_BYTES = 1 << 30  # as `launch report` reads a log
ETA_REFRESH_S = 1.0  # the progress line's ETA: its median step time recomputed at most this often


def next_log_path(run_dir: Path) -> Path:
    """logs/attempt-1.log for a fresh run, attempt-2.log for its first resume, …"""
    logs = nofollow.real_dir(run_dir / LOGS_DIR, "the run's logs directory")
    n = 1
    while os.path.lexists(logs / f"attempt-{n}.log"):  # a dangling link is taken too: never written through
        n += 1
    return logs / f"attempt-{n}.log"


def attempt_number(path: Path) -> int:
    """N of logs/attempt-N.log (the order of a run's attempts); 0 for any other file name."""
    return untrusted.count(path.stem.removeprefix("attempt-"), 9) or 0  # "attempt-².log" is no attempt


def format_eta(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return "?"
    return str(timedelta(seconds=round(seconds)))


class Monitor:
    """Feed it the child's output line by line; close it with the child's exit code."""

    def __init__(self, run_dir: Path, *, checkpoint_dir: Path | None = None, seq_length: int | None = None,
                 out: IO[str] | None = None, tty: bool | None = None, rank_status: bool = False) -> None:
        """`rank_status`: the exit code `close` gets is the one rank's own (started without torchrun)."""
        self.run_dir = Path(run_dir)
        self.rank_status = rank_status
        self.checkpoint_dir = checkpoint_dir
        self.unread = ""  # the first log line the monitor failed to read, and why (the run is then not proven)
        self.out = out if out is not None else sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self.log_path = next_log_path(self.run_dir)
        self._log = nofollow.open_file(self.log_path, "x", what="attempt log", errors="replace", buffering=1)
        # unbuffered bytes: each record is written whole or cut back (a full disk never leaves half a line)
        self._metrics = nofollow.open_file(self.run_dir / METRICS_FILE, "ab", what="metrics file", buffering=0)
        self.runlog = RunLog(seq_length=seq_length)
        self._replay_earlier_attempts()
        self.runlog.start_attempt()
        self._parser = lp.LogParser()
        self._triage = triage.AttemptReader()  # this attempt's failure class, if it fails
        self._bar: Any = None  # tqdm bar, created at the first iteration line (so start-up is not in its rate)
        self._steady_ms: float | None = None  # the ETA's step time, and when it was worked out
        self._steady_ms_at = -math.inf
        self.clock = StartupClock()

    def _replay_earlier_attempts(self) -> None:
        """A resumed run's summary covers the whole run: read the earlier attempts' logs first."""
        earlier_logs = entries.listed(self.log_path.parent, "attempt-*.log", "attempt logs")
        for earlier in sorted(earlier_logs, key=attempt_number):
            if earlier == self.log_path:
                continue
            if earlier.is_symlink():  # a run's logs are its own files; a link leads elsewhere
                raise UserError(f"earlier attempt log {shown(str(earlier))} is a symbolic link",
                                "a run directory's logs are files; remove the link, then resume again")
            # streamed, from a regular file only: a FIFO or /dev/zero named attempt-1.log is refused, not read
            self.runlog.feed_attempt(untrusted.Lines(earlier, "earlier attempt log", MAX_ATTEMPT_LOG_BYTES))

    def feed(self, line: str) -> None:
        """One line of the run's output: logged, then read. A line the launcher fails to read (a bug of its own,
        never the run's) is logged and shown as it is; it never stops training and never counts as progress."""
        text = line.rstrip("\r\n")
        self._log.write(redaction.for_file(text) + "\n")  # a program printing its argv prints no secret to disk
        try:
            self._read(text)
        except OSError:
            raise
        except Exception as error:  # noqa: BLE001 - a line the monitor cannot read is shown, not fatal
            self.unread = self.unread or f"the launcher could not read the log line {shown(text, 80)}: {error!r}"
            self._echo(text)

    def _append_metrics(self, line: bytes) -> None:
        """One metrics record, whole: on a failed write (a full disk) the file is cut back to where it was."""
        fd = self._metrics.fileno()
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            done = 0
            while done < len(line):
                done += os.write(fd, line[done:])
        except OSError:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            raise

    def _read(self, text: str) -> None:
        event = self._parser.feed(text)
        self._triage.feed(text)
        record = self.runlog.feed(event)
        self.clock.observe(text, isinstance(event, lp.IterationLine))
        if record is not None:
            self._append_metrics((json.dumps(json_safe(record), allow_nan=False) + "\n").encode())
        if isinstance(event, lp.IterationLine) and self.tty and self.out is not None and _have_tqdm():
            try:
                self._update_bar(event, record or {})
            except OSError:
                self._lost_output()
            return
        self._echo(text)
        if isinstance(event, lp.IterationLine):
            pct = 100.0 * event.iteration / event.train_iters if event.train_iters else 0.0
            status = self._status(event, record or {})
            self._echo(f"[launch] {event.iteration}/{event.train_iters} ({pct:.0f}%) | {status}"
                       f" | ETA {format_eta(self._eta_seconds(event))}")

    def _echo(self, text: str) -> None:
        if self.out is None:
            return
        try:
            if self._bar is not None:
                self._bar.write(text, file=self.out)
            else:
                print(text, file=self.out, flush=True)
        except OSError:
            self._lost_output()

    def _lost_output(self) -> None:
        """The terminal is gone (EIO after a hangup, EPIPE): stop printing, keep recording."""
        stream, self.out, self._bar = self.out, None, None
        try:  # later writes to it elsewhere (and Python's own flush at exit) must not fail either
            if stream is not None and any(stream is std for std in (sys.stdout, sys.__stdout__)):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
        except (OSError, ValueError):
            pass

    def _eta_seconds(self, event: lp.IterationLine) -> float | None:
        # The median is worked out again at most once a second: a log of many short lines stays linear.
        now = time.monotonic()
        if self._steady_ms is None or now - self._steady_ms_at >= ETA_REFRESH_S:
            self._steady_ms = self.runlog.steady_ms_per_iter()  # None while only start-up lines are known
            self._steady_ms_at = now
        ms = self._steady_ms
        return None if ms is None else (event.train_iters - event.iteration) * ms / 1000.0

    def _status(self, event: lp.IterationLine, record: dict) -> str:
        parts = []
        if event.lm_loss is not None:
            parts.append(f"loss {event.lm_loss:.4f}")
        if record.get("tokens_per_s"):
            parts.append(f"{record['tokens_per_s']:,.0f} tok/s")
        if event.tflops_per_gpu is not None:
            parts.append(f"{event.tflops_per_gpu:.1f} TFLOP/s/GPU")
        if event.skipped_iterations:
            parts.append(f"skipped {event.skipped_iterations}")
        if event.nan_iterations:
            parts.append(f"NaN {event.nan_iterations}")
        return " | ".join(parts)

    def _update_bar(self, event: lp.IterationLine, record: dict) -> None:
        from tqdm import tqdm  # only needed on a TTY

        if self._bar is None:
            self._bar = tqdm(total=event.train_iters, initial=event.iteration, file=self.out, unit="it",
                             dynamic_ncols=True,
                             bar_format="{l_bar}{bar}| {n}/{total} [{elapsed}<{remaining}{postfix}]")
        self._bar.total = event.train_iters
        self._bar.update(max(0, event.iteration - self._bar.n))
        self._bar.set_postfix_str(self._status(event, record), refresh=True)

    def close(self, exit_code: int | None = None) -> RunSummary:
        """Write summary.json and print the summary; every step is tried even when one fails (a full disk),
        then the first file error is raised."""
        failures: list[OSError] = []
        if self._bar is not None:
            try:
                self._bar.close()
            except OSError:
                self._lost_output()
            self._bar = None
        for handle in (self._log, self._metrics):
            try:
                handle.close()
            except OSError as error:
                failures.append(error)
        summary = self.runlog.summary(checkpoint_dir=self.checkpoint_dir, exit_code=exit_code)
        if exit_code is None:  # the run was stopped by the launcher (its records failed): never a success
            summary = _not_a_success(summary, "the launcher stopped the run before it ended (see the error above)")
        if self.unread:
            summary = _not_a_success(summary, self.unread)
        summary.startup = self.clock.as_dict()
        if not summary.ok:
            summary.failure = self._triage.verdict(exit_code, rank_status=self.rank_status).as_dict()
        try:
            text = json.dumps(summary.to_dict(), indent=2, allow_nan=False) + "\n"
            write_text_atomic(self.run_dir / SUMMARY_FILE, text)
        except OSError as error:
            failures.append(error)
        self._echo("\n" + summary.render())
        if failures:
            raise failures[0]
        return summary


def _not_a_success(summary: RunSummary, why: str) -> RunSummary:
    """The summary, failed with `why` when it says success: what the launcher could not see is not proven."""
    if summary.outcome != "success":
        return summary
    return dataclasses.replace(summary, outcome="failed", reasons=[*summary.reasons, why])


def _have_tqdm() -> bool:
    """The live bar needs tqdm; without it the plain progress lines are used."""
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True
