"""What a Megatron log says about a run: metrics per logged iteration and a verdict at the end.

`RunLog` accumulates parsed events (launcher.runs.logparse) for one or more attempts (a resume is a new attempt:
its first logged iteration again includes start-up time). `RunLog.summary()` gives the end-of-run facts:
final loss, steady throughput, peak memory, checkpoints, and success judged from the log and the checkpoint
tracker file — never from the exit code alone, since Megatron exits 0 on several failures (reference §0.8).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from launcher import untrusted
from launcher.runs import logparse as lp
from launcher.runs import timing

TRACKER_FILE = "latest_checkpointed_iteration.txt"
MAX_TRACKER_BYTES = 4096  # Megatron writes the iteration number (or "release") and nothing else


@dataclass
class Attempt:
    """One process start: the iteration lines it logged, in order."""

    lines: list[lp.IterationLine] = field(default_factory=list)
    loaded_iteration: int | None = None
    # Iterations proven done by a checkpoint save or memory report (lines come only every log_interval).
    finished: list[int] = field(default_factory=list)


def _timed_lines(attempt: Attempt) -> list[tuple[int, float]]:
    """(iteration, ms per iteration) of the attempt's lines that report a time."""
    return [(line.iteration, line.elapsed_ms) for line in attempt.lines if line.elapsed_ms is not None]


def metrics_record(line: lp.IterationLine, seq_length: int | None, attempt: int, first: bool) -> dict:
    """The metrics.jsonl record of one iteration line."""
    tokens_per_s = None
    if seq_length and line.global_batch_size and line.elapsed_ms:
        tokens_per_s = round(line.global_batch_size * seq_length / (line.elapsed_ms / 1000.0), 1)
    return {
        "kind": "iteration",
        "attempt": attempt,
        "iteration": line.iteration,
        "train_iters": line.train_iters,
        "time": line.timestamp.isoformat() if line.timestamp else None,
        "loss": line.lm_loss,
        "losses": line.losses,
        "lr": line.learning_rate,
        "grad_norm": line.grad_norm,
        "loss_scale": line.loss_scale,
        "ms_per_iter": line.elapsed_ms,
        "tokens_per_s": tokens_per_s,
        "tflops_per_gpu": line.tflops_per_gpu,
        "global_batch_size": line.global_batch_size,
        "consumed_samples": line.consumed_samples,
        "skipped_iterations": line.skipped_iterations,
        "nan_iterations": line.nan_iterations,
        # The first line of an attempt includes start-up/compile time, and the second still averages it in.
        "warmup": first,
        "complete": line.complete,
    }


@dataclass
class RunSummary:
    outcome: str  # "success", "stopped" (exited early but resumable), "failed"
    reasons: list[str]
    last_iteration: int | None
    train_iters: int | None
    final_loss: float | None
    steady_ms_per_iter: float | None
    steady_tokens_per_s: float | None
    steady_tflops_per_gpu: float | None
    peak_memory_mb: float | None  # max allocated over ranks and reports
    theoretical_memory_mb: float | None
    checkpoints_saved: list[int]
    tracker_iteration: str | None  # content of latest_checkpointed_iteration.txt, if there is one
    skipped_iterations: int
    nan_iterations: int
    validation: dict[str, float]
    attempts: int
    exit_code: int | None
    startup: dict | None = None  # timing.StartupClock.as_dict() of the last attempt (the monitor fills it in)

    @property
    def ok(self) -> bool:
        return self.outcome == "success"

    def to_dict(self) -> dict:
        """As JSON wants it: a NaN or infinite number (a diverged loss) is null, never a bare NaN."""
        return json_safe(asdict(self))

    def render(self) -> str:
        def num(value: float | None, fmt: str, unit: str = "") -> str:
            return "n/a" if value is None else f"{value:{fmt}}{unit}"

        progress = f"{self.last_iteration}/{self.train_iters}" if self.last_iteration is not None else "none"
        lines = [
            f"outcome:            {self.outcome}" + (f" ({'; '.join(self.reasons)})" if self.reasons else ""),
            f"iterations:         {progress}" + (f" in {self.attempts} attempts" if self.attempts > 1 else ""),
            f"final loss:         {num(self.final_loss, '.4f')}",
            (f"steady throughput:  {num(self.steady_tokens_per_s, ',.0f', ' tokens/s')}, "
             f"{num(self.steady_ms_per_iter, '.1f', ' ms/iter')}, "
             f"{num(self.steady_tflops_per_gpu, '.1f', ' TFLOP/s/GPU')}"),
            f"peak memory:        {num(self.peak_memory_mb, ',.1f', ' MB allocated')}"
            + (f" (theory: {self.theoretical_memory_mb:,.1f} MB)" if self.theoretical_memory_mb is not None else ""),
            f"skipped / NaN:      {self.skipped_iterations} / {self.nan_iterations} iterations",
            "checkpoint:         "
            + (f"iteration {self.tracker_iteration} (latest_checkpointed_iteration.txt)" if self.tracker_iteration
               else f"saved at {self.checkpoints_saved[-1]}" if self.checkpoints_saved else "none saved"),
        ]
        lines += timing.render(self.startup)
        if self.validation:
            lines.append("validation:         " + ", ".join(f"{k} {v:.4f}" for k, v in self.validation.items()))
        return "\n".join(lines)


def json_safe(value):
    """`value` with every NaN/infinite float as None, for strict JSON (json.dumps(..., allow_nan=False))."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


class RunLog:
    """Accumulates events of a run; `feed` returns a metrics record for each iteration line."""

    def __init__(self, seq_length: int | None = None) -> None:
        self.seq_length = seq_length
        self.arguments: dict[str, str] = {}
        self.attempts: list[Attempt] = []
        self.memory: list[lp.MemoryReport] = []
        self.theoretical: lp.TheoreticalMemory | None = None
        self.saved: list[int] = []
        self.loaded: list[int] = []
        self.validation: dict[str, float] = {}
        self.validation_points: list[lp.Validation] = []
        self.exits: list[lp.ExitLine] = []
        self.errors: list[str] = []
        self.result_failures: list[lp.ResultValidationFailure] = []
        self.training_done = False
        self._traceback_seen = False
        self._new_attempt_pending = True

    def start_attempt(self) -> None:
        """Call before feeding the log of a new process start (each log file of a resumed run).

        Numbers (iterations, memory, checkpoints) span all attempts; the verdict is the last attempt's, so an
        error that a resume got past does not fail the run."""
        self._new_attempt_pending = True
        self.exits, self.errors, self.result_failures = [], [], []
        self.training_done = False
        self._traceback_seen = False

    def feed_attempt(self, lines: Iterable[str]) -> None:
        """The whole log of one process start (one file of a resumed run)."""
        self.start_attempt()
        for event in lp.parse_lines(lines):
            self.feed(event)

    @property
    def iteration_lines(self) -> list[lp.IterationLine]:
        return [line for attempt in self.attempts for line in attempt.lines]

    @property
    def train_iters(self) -> int | None:
        lines = self.iteration_lines
        if lines:
            return lines[-1].train_iters
        value = lp.argument_value(self.arguments.get("train_iters", "None"))
        return value if isinstance(value, int) else None

    @property
    def reached_iteration(self) -> int | None:
        """The furthest iteration the run is known to have finished: logged lines come every log_interval,
        but a checkpoint or memory report after a later iteration proves it was reached too."""
        attempt = next((a for a in reversed(self.attempts) if a.lines), None)
        if attempt is None:
            return None
        return max([attempt.lines[-1].iteration, *attempt.finished])

    @property
    def peak_memory_mb(self) -> float | None:
        return max((m.max_allocated_mb for m in self.memory), default=None)

    def _attempt(self) -> Attempt:
        if self._new_attempt_pending or not self.attempts:
            self.attempts.append(Attempt())
            self._new_attempt_pending = False
        return self.attempts[-1]

    def feed(self, event: lp.Event | None) -> dict | None:
        match event:
            case lp.IterationLine():
                attempt = self._attempt()
                if attempt.lines and event.iteration == attempt.lines[-1].iteration:
                    return None  # the same iteration printed by another rank (the simple loop: every rank)
                if attempt.lines and event.iteration < attempt.lines[-1].iteration:
                    # Iterations went backwards inside one stream: a restart from a checkpoint.
                    self.attempts.append(Attempt())
                    attempt = self.attempts[-1]
                first = len(attempt.lines) < 2
                attempt.lines.append(event)
                return metrics_record(event, self._seq_length(), len(self.attempts), first)
            case lp.Argument(name=name, value=value):
                self.arguments[name] = value
            case lp.MemoryReport():
                self.memory.append(event)
                if self.attempts:
                    self.attempts[-1].finished.append(event.after_iterations)
                return {"kind": "memory", **asdict(event)}
            case lp.TheoreticalMemory():
                self.theoretical = event
            case lp.CheckpointSaved():
                self.saved.append(event.iteration)
                if self.attempts:
                    self.attempts[-1].finished.append(event.iteration)
            case lp.CheckpointLoaded():
                self.loaded.append(event.iteration)
                self.start_attempt()
                self._attempt().loaded_iteration = event.iteration
            case lp.Validation():
                self.validation_points.append(event)
                name = "test" if event.split == "test" else "validation"
                for metric, amount in event.values.items():
                    self.validation[f"{name} {metric}"] = amount
            case lp.ExitLine():
                self.exits.append(event)
            case lp.Milestone(name="after training is done"):
                self.training_done = True
            case lp.ResultValidationFailure():
                self.result_failures.append(event)
            case lp.ErrorLine(kind="traceback"):
                self._traceback_seen = True
            case lp.ErrorLine(text=text, kind=kind):
                # An exception line alone may be a logged, handled one; after a traceback it is a crash.
                if kind == "fatal" or self._traceback_seen:
                    self.errors.append(text)
        return None

    def _seq_length(self) -> int | None:
        if self.seq_length is None:
            value = lp.argument_value(self.arguments.get("seq_length", "None"))
            if isinstance(value, int):
                self.seq_length = value
        return self.seq_length

    # ------------------------------------------------------------------------------------------ summary

    def steady_ms_per_iter(self) -> float | None:
        """Median ms/iter over lines that exclude start-up (3rd and later of each attempt, reference §4).

        With only two lines in an attempt, the second line's average still contains iteration 1, so subtract it:
        line 2 covers iterations a..b (n = b-a+1) at mean t2, line 1 is iteration a alone at t1.
        """
        steady: list[float] = []
        for attempt in self.attempts:
            steady += [ms for _, ms in _timed_lines(attempt)][2:]
        if steady:
            return statistics.median(steady)
        for attempt in reversed(self.attempts):
            timed = _timed_lines(attempt)
            if len(timed) == 2:
                (first_iteration, first_ms), (second_iteration, second_ms) = timed
                n = second_iteration - first_iteration + 1
                if n > 1:
                    estimate = (n * second_ms - first_ms) / (n - 1)
                    if estimate > 0:
                        return estimate
        return None

    def _steady_tflops(self) -> float | None:
        values = [line.tflops_per_gpu for a in self.attempts for line in a.lines[2:] if line.tflops_per_gpu]
        return statistics.median(values) if values else None

    def _interval_total(self, attribute: str) -> int:
        """Sum per-interval counts; the first line of an attempt is not reset, so the next line repeats it."""
        total = 0
        for attempt in self.attempts:
            counts = [getattr(line, attribute) or 0 for line in attempt.lines]
            total += sum(counts[1:]) if len(counts) > 1 else sum(counts)
        return total

    def summary(self, checkpoint_dir: Path | None = None, exit_code: int | None = None) -> RunSummary:
        lines = self.iteration_lines
        last = lines[-1] if lines else None
        train_iters = self.train_iters
        tracker = read_tracker(checkpoint_dir) if checkpoint_dir else None
        final_loss = next((line.lm_loss for line in reversed(lines) if line.lm_loss is not None), None)
        ms = self.steady_ms_per_iter()
        gbs = last.global_batch_size if last else None
        seq = self._seq_length()
        tokens = gbs * seq / (ms / 1000.0) if (ms and gbs and seq) else None
        outcome, reasons = self._verdict(last, train_iters, checkpoint_dir, tracker, exit_code)
        return RunSummary(
            outcome=outcome, reasons=reasons,
            last_iteration=self.reached_iteration, train_iters=train_iters,
            final_loss=final_loss, steady_ms_per_iter=ms, steady_tokens_per_s=tokens,
            steady_tflops_per_gpu=self._steady_tflops(), peak_memory_mb=self.peak_memory_mb,
            theoretical_memory_mb=self.theoretical.total_mb if self.theoretical else None,
            checkpoints_saved=list(self.saved), tracker_iteration=tracker,
            skipped_iterations=self._interval_total("skipped_iterations"),
            nan_iterations=self._interval_total("nan_iterations"),
            validation=dict(self.validation), attempts=len(self.attempts), exit_code=exit_code,
        )

    def _last_loss(self) -> float | None:
        return next((line.lm_loss for line in reversed(self.iteration_lines) if line.lm_loss is not None), None)

    def _checkpoint_failures(self, reached_end: bool, checkpoint_dir: Path | None, tracker: str | None) -> list[str]:
        save_configured = self.arguments.get("save", "None") != "None"
        return checkpoint_failures(self.saved, save_configured, reached_end, checkpoint_dir, tracker)

    def _verdict(self, last: lp.IterationLine | None, train_iters: int | None, checkpoint_dir: Path | None,
                 tracker: str | None, exit_code: int | None) -> tuple[str, list[str]]:
        failures: list[str] = []
        # A signal passed on to torchrun: Megatron's handler saves and exits 0, but torchrun itself then raises
        # SignalException and exits 1. That exit code and traceback are the signal's, not a failure.
        by_signal = bool(self.exits) and self.exits[-1].reason == "signal" and bool(self.saved)
        errors = [e for e in self.errors if not (by_signal and "SignalException" in e)]
        if exit_code not in (None, 0) and not (by_signal and not errors):
            failures.append(f"exit code {exit_code}")
        if errors:
            failures.append(f"error in log: {errors[0][:160]}")
        if self.result_failures:
            failure = self.result_failures[0]
            where = f" at iteration {failure.iteration}" if failure.iteration else ""
            failures.append(f"result validation failed{where}: {failure.message[:120]}")
        if last is None:
            failures.append("no iteration was logged")
        elif last.nan_iterations and last.lm_loss is None:
            failures.append(f"loss is NaN: {last.nan_iterations} NaN iteration(s) in the last logged interval")
        elif (loss := self._last_loss()) is not None and not math.isfinite(loss):
            failures.append(f"loss is {loss}: the last logged lm loss is not a number")
        reached = self.reached_iteration
        reached_end = self.training_done or (reached is not None and train_iters is not None
                                             and reached >= train_iters)
        failures += self._checkpoint_failures(reached_end, checkpoint_dir, tracker)
        if failures:
            return "failed", failures
        if reached_end:
            return "success", []
        if self.exits:
            how = self.exits[-1]
            saved = f"checkpoint at {self.saved[-1]}" if self.saved else "no checkpoint saved"
            return "stopped", [f"exited on {how.reason} ({how.detail}), {saved}"]
        return "failed", [f"the log ends at iteration {last.iteration} of {train_iters} without an exit line"
                          if last else "the log ends before training"]


def checkpoint_failures(saved: list[int], save_configured: bool, reached_end: bool,
                              checkpoint_dir: Path | None, tracker: str | None) -> list[str]:
    """A save the log reports must show in the tracker file, which rank 0 writes only once it is on disk."""
    if reached_end and save_configured and not saved:
        return ["training ended with --save set, but the log shows no successful checkpoint save"]
    if not saved or checkpoint_dir is None or not checkpoint_dir.is_dir():
        return []  # nothing saved, or the directory is not visible from here (another machine): not checked
    if tracker is None:
        return [f"the log reports a checkpoint at iteration {saved[-1]}, but {checkpoint_dir / TRACKER_FILE} "
                "does not exist"]
    if tracker.isdigit() and int(tracker) < saved[-1]:
        return [f"the last save ({saved[-1]}) never reached {TRACKER_FILE} (it says {tracker})"]
    return []


def read_tracker(checkpoint_dir: Path) -> str | None:
    """The iteration in <save>/latest_checkpointed_iteration.txt (or "release"), None without one."""
    path = checkpoint_dir / TRACKER_FILE
    if not path.exists():
        return None
    # a few bytes of a regular file: a FIFO or /dev/zero planted there is refused, never read forever
    text = untrusted.read_bytes(path, "checkpoint tracker", MAX_TRACKER_BYTES).decode("utf-8", "replace").strip()
    return text or None
