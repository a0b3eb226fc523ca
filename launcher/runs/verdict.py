"""What a Megatron log says about a run: metrics per logged iteration and a verdict at the end.

`RunLog` accumulates parsed events (launcher.runs.logparse) for one or more attempts (a resume is a new attempt:
its first logged iteration again includes start-up time). `RunLog.summary()` gives the end-of-run facts:
final loss, steady throughput, peak memory, checkpoints, and success judged from the log and the checkpoint
tracker file — never from the exit code alone, since Megatron exits 0 on several failures (reference §0.8).
"""

from __future__ import annotations

import heapq
import itertools
import math
import statistics
from array import array
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple, cast

from launcher import untrusted
from launcher.errors import UserError
from launcher.pipeline.load_rules import MAX_TRACKER_BYTES, TRACKER, tracker_iteration
from launcher.runs import logparse as lp
from launcher.runs import timing
from launcher.runs.triage import failure_record

TRACKER_FILE = TRACKER  # the one name and byte cap of Megatron's tracker (pipeline/load_rules.py)
UNREADABLE_TRACKER = "a tracker Megatron cannot load"


# The settings of Megatron's argument dump that the verdict and the report read.
KEPT_ARGUMENTS = frozenset({"save", "seq_length", "train_iters", "train_samples", "global_batch_size"})

# What the plots keep of a run's iteration lines: at most this many, evenly spread, and always the last one.
PLOT_POINTS = 4096
PLOT_RESTARTS = 1024  # restart markers kept the same way (a log that restarts at every line would draw a wall)


class Thinned[T]:
    """At most `cap` of the items added, evenly spread: every `stride`-th, the stride doubling (and every other
    item kept dropped) when `cap` is reached; the last item added is always in `items()`. Memory does not grow
    with the number of items, so a log of millions of lines costs what one of a few thousand does."""

    def __init__(self, cap: int) -> None:
        self.cap = max(2, cap)
        self.stride = 1
        self.seen = 0
        self._kept: list[T] = []
        self._last: T | None = None

    def add(self, item: T) -> None:
        if self.seen % self.stride == 0:
            self._kept.append(item)
            if len(self._kept) >= self.cap:
                self._kept = self._kept[::2]
                self.stride *= 2
        self._last = item
        self.seen += 1

    def items(self) -> list[T]:
        """The kept items in the order added; the last one added too, if its index was not kept."""
        if self.seen and (self.seen - 1) % self.stride != 0:
            return [*self._kept, cast(T, self._last)]
        return list(self._kept)


class Median:
    """statistics.median of the numbers added, exactly, without keeping each: a count per distinct value (Megatron
    prints times and rates with a digit or two after the point, so a long log holds few). Past MAX_DISTINCT
    distinct values (a hostile log), the numbers themselves, 8 bytes each (and as much again while the median is
    worked out). Numbers are not NaN (logparse leaves a NaN time or rate out)."""

    MAX_DISTINCT = 1 << 16
    SORT_CHUNK = 1 << 16  # numbers sorted at a time, past MAX_DISTINCT

    def __init__(self) -> None:
        self.count = 0
        self._counts: dict[float, int] | None = {}
        # 0.0 and -0.0 are one dict key but print differently; sorted() keeps them in the order added, so do we
        self._zeros = array("d")
        self._numbers = array("d")  # every number, once there are too many distinct ones

    def __bool__(self) -> bool:
        return self.count > 0

    def add(self, value: float) -> None:
        self.count += 1
        counts = self._counts
        if counts is None:
            self._numbers.append(value)
        elif value == 0:
            self._zeros.append(value)
        else:
            counts[value] = counts.get(value, 0) + 1
            if len(counts) > self.MAX_DISTINCT:
                self._numbers = array("d", self._zeros)
                for number, times in counts.items():
                    self._numbers.extend([number] * times)
                self._counts, self._zeros = None, array("d")

    def median(self) -> float:
        if self._counts is None:
            return self._merged_median()
        if not self.count:
            raise statistics.StatisticsError("no median for empty data")
        half = self.count // 2
        if self.count % 2:
            return self._nth(half)
        return (self._nth(half - 1) + self._nth(half)) / 2

    def _merged_median(self) -> float:
        """statistics.median of the numbers kept, without its list of them all (32 bytes a number): sorted a chunk
        at a time, then merged as needed. heapq.merge takes equal numbers in chunk order, so the order is sorted()'s
        (0.0 and -0.0 as added)."""
        numbers, chunk = self._numbers, self.SORT_CHUNK
        merged = heapq.merge(*(array("d", sorted(numbers[i:i + chunk])) for i in range(0, len(numbers), chunk)))
        half = len(numbers) // 2
        if len(numbers) % 2:
            return next(itertools.islice(merged, half, None))
        below = next(itertools.islice(merged, half - 1, None))
        return (below + next(merged)) / 2

    def _nth(self, index: int) -> float:
        """The number at `index` of the numbers sorted (sorted() is stable: the zeros in the order added)."""
        counts = cast(dict[float, int], self._counts)
        position = 0
        zeros_placed = False
        for value in sorted(counts):
            if value > 0 and not zeros_placed:
                if index < position + len(self._zeros):
                    return self._zeros[index - position]
                position += len(self._zeros)
                zeros_placed = True
            position += counts[value]
            if index < position:
                return value
        return self._zeros[index - position]  # no positive number: the zeros come last


class PlotPoint(NamedTuple):
    """What the plots need of one iteration line (tokens/s is worked out when the series is made)."""

    iteration: int
    attempt: int
    warmup: bool
    loss: float | None
    lr: float | None
    global_batch_size: int | None
    ms_per_iter: float | None
    tflops_per_gpu: float | None


@dataclass(slots=True)
class Attempt:
    """One process start: what the verdict needs of its iteration lines, not the lines (a log may hold millions).

    The lines' other numbers are folded into RunLog as they come (medians, sums, the last loss), and a bounded
    sample of them is kept for the plots (RunLog.points)."""

    number: int  # 1 for the first process start
    loaded_iteration: int | None = None
    line_count: int = 0
    last_iteration: int | None = None
    # The furthest iteration proven done by a checkpoint save or memory report (lines come only every log_interval).
    finished: int | None = None
    timed_count: int = 0  # lines that report a time
    first_timed: list[tuple[int, float]] = field(default_factory=list)  # the first two: (iteration, ms per iteration)
    first_skipped: int = 0  # the first line's counts, which the second line repeats (see RunLog._interval_total)
    first_nan: int = 0

    def two_line_estimate(self) -> float | None:
        """With only two timed lines, the second line's average still contains iteration 1, so subtract it:
        line 2 covers iterations a..b (n = b-a+1) at mean t2, line 1 is iteration a alone at t1."""
        if self.timed_count != 2:
            return None
        (first_iteration, first_ms), (second_iteration, second_ms) = self.first_timed
        n = second_iteration - first_iteration + 1
        if n > 1:
            estimate = (n * second_ms - first_ms) / (n - 1)
            if estimate > 0:
                return estimate
        return None


def tokens_per_s(global_batch_size: int | None, seq_length: int | None, ms_per_iter: float | None) -> float | None:
    """Tokens a second of one iteration line (None where a number is missing)."""
    if seq_length and global_batch_size and ms_per_iter:
        return round(global_batch_size * seq_length / (ms_per_iter / 1000.0), 1)
    return None


def metrics_record(line: lp.IterationLine, seq_length: int | None, attempt: int, first: bool) -> dict:
    """The metrics.jsonl record of one iteration line."""
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
        "tokens_per_s": tokens_per_s(line.global_batch_size, seq_length, line.elapsed_ms),
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
    failure: dict | None = None  # how the last attempt ended when it did not succeed (runs/triage.py Triage.as_dict())

    @property
    def ok(self) -> bool:
        return self.outcome == "success"

    @classmethod
    def from_record(cls, record: object) -> RunSummary | None:
        """A summary read back from summary.json, or None where a member is missing or not of its type (a
        damaged or planted file is not a summary: every member is used in arithmetic and formatting)."""
        if not isinstance(record, dict) or not all(
                name in record and _SUMMARY_TYPES[name](record[name]) for name in _REQUIRED_MEMBERS):
            return None
        if not all(_SUMMARY_TYPES[name](record.get(name)) for name in ("startup", "failure")):
            return None
        failure = None if record.get("failure") is None else failure_record(record["failure"])
        return cls(**{name: record[name] for name in _REQUIRED_MEMBERS}, startup=record.get("startup"),
                   failure=failure)

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
            + (f"{'iteration ' if is_tracker_iteration(self.tracker_iteration) else ''}{self.tracker_iteration} "
               "(latest_checkpointed_iteration.txt)" if self.tracker_iteration
               else f"saved at {self.checkpoints_saved[-1]}" if self.checkpoints_saved else "none saved"),
        ]
        lines += timing.render(self.startup)
        if self.validation:
            lines.append("validation:         " + ", ".join(f"{k} {v:.4f}" for k, v in self.validation.items()))
        return "\n".join(lines)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _optional(check):
    return lambda value: value is None or check(value)


def _list_of(check):
    return lambda value: isinstance(value, list) and all(check(item) for item in value)


def _text(value: object) -> bool:
    return isinstance(value, str)


# Each RunSummary member and the type summary.json must hold it in.
_SUMMARY_TYPES = {
    "outcome": _text, "reasons": _list_of(_text), "last_iteration": _optional(_count),
    "train_iters": _optional(_count), "final_loss": _optional(_number), "steady_ms_per_iter": _optional(_number),
    "steady_tokens_per_s": _optional(_number), "steady_tflops_per_gpu": _optional(_number),
    "peak_memory_mb": _optional(_number), "theoretical_memory_mb": _optional(_number),
    "checkpoints_saved": _list_of(_count), "tracker_iteration": _optional(_text), "skipped_iterations": _count,
    "nan_iterations": _count, "attempts": _count, "exit_code": _optional(_count),
    "validation": lambda value: isinstance(value, dict) and all(_number(v) for v in value.values()),
    "startup": _optional(lambda value: isinstance(value, dict) and all(_optional(_number)(v)
                                                                       for v in value.values())),
    "failure": _optional(lambda value: isinstance(value, dict)),
}
_REQUIRED_MEMBERS = [name for name in _SUMMARY_TYPES if name not in ("startup", "failure")]


def json_safe(value):
    """`value` with every NaN/infinite float as None, for strict JSON (json.dumps(..., allow_nan=False))."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


@dataclass
class LineCounts:
    """Iteration lines taken since RunLog.counts was last reset (a report resets it for each log file)."""

    lines: int = 0
    cut: int = 0  # lines cut before their last field (IterationLine.complete False)
    first_cut: int | None = None  # the first such line's iteration
    last: lp.IterationLine | None = None


class RunLog:
    """Accumulates events of a run; `feed` returns a metrics record for each iteration line.

    Memory does not grow with the number of lines: what the summary needs is folded in as lines come (the two
    medians as counts per distinct value, see Median), and the plots get a bounded sample (Thinned)."""

    def __init__(self, seq_length: int | None = None) -> None:
        self.seq_length = seq_length
        self.arguments: dict[str, str] = {}  # the argument dump's values of KEPT_ARGUMENTS
        self.attempt: Attempt | None = None  # the latest process start
        self.attempt_count = 0
        self._with_lines: Attempt | None = None  # the latest process start that logged an iteration
        self.line_count = 0
        self.last_line: lp.IterationLine | None = None
        self._last_attempt_number = 0  # the attempt of the latest line
        self.counts = LineCounts()
        self.points: Thinned[PlotPoint] = Thinned(PLOT_POINTS)
        self.restarts: Thinned[int] = Thinned(PLOT_RESTARTS)  # the first iteration of every later attempt
        self._last_loss: float | None = None
        self._steady_ms = Median()  # ms of the 3rd and later timed lines of each attempt
        self._tflops_values = Median()  # TFLOP/s (when not 0) of the 3rd and later lines of each attempt
        self._earlier_estimate: float | None = None  # the latest earlier attempt's Attempt.two_line_estimate()
        self._skipped = 0
        self._nan = 0
        self.peak_memory_mb: float | None = None  # max allocated over ranks and reports
        self.theoretical: lp.TheoreticalMemory | None = None
        self.saved: list[int] = []
        self.validation: dict[str, float] = {}
        self.validation_curve: Thinned[tuple[int, float]] = Thinned(PLOT_POINTS)  # (iteration, lm loss)
        self.last_exit: lp.ExitLine | None = None
        self.first_error: str | None = None
        self.first_other_error: str | None = None  # the first that is not torchrun's SignalException
        self.first_result_failure: lp.ResultValidationFailure | None = None
        self.training_done = False
        self._traceback_seen = False
        self._new_attempt_pending = True
        self._lines_at_start = 0  # iteration lines taken before the latest process start (or checkpoint load)
        self._loaded_at_start: int | None = None  # the iteration the latest start loaded, where its log says

    def start_attempt(self) -> None:
        """Call before feeding the log of a new process start (each log file of a resumed run).

        Numbers (iterations, memory, checkpoints) span all attempts; the verdict is the last attempt's, so an
        error that a resume got past does not fail the run."""
        self._new_attempt_pending = True
        self.last_exit = self.first_error = self.first_other_error = self.first_result_failure = None
        self.training_done = False
        self._traceback_seen = False
        self._lines_at_start = self.line_count
        self._loaded_at_start = None

    def feed_attempt(self, lines: Iterable[str]) -> None:
        """The whole log of one process start (one file of a resumed run)."""
        self.start_attempt()
        for event in lp.parse_lines(lines):
            self.feed(event)

    @property
    def train_iters(self) -> int | None:
        if self.last_line is not None:
            return self.last_line.train_iters
        value = lp.argument_value(self.arguments.get("train_iters", "None"))
        return value if isinstance(value, int) else None

    @property
    def reached_iteration(self) -> int | None:
        """The furthest iteration the run is known to have finished: logged lines come every log_interval,
        but a checkpoint or memory report after a later iteration proves it was reached too."""
        attempt = self._with_lines
        if attempt is None or attempt.last_iteration is None:
            return None
        if attempt.finished is None:
            return attempt.last_iteration
        return max(attempt.last_iteration, attempt.finished)

    def _new_attempt(self) -> Attempt:
        if self.attempt is not None and (estimate := self.attempt.two_line_estimate()) is not None:
            self._earlier_estimate = estimate
        self.attempt_count += 1
        self.attempt = Attempt(self.attempt_count)
        return self.attempt

    def _attempt(self) -> Attempt:
        if self._new_attempt_pending or self.attempt is None:
            self._new_attempt_pending = False
            return self._new_attempt()
        return self.attempt

    def _finished(self, iteration: int) -> None:
        if self.attempt is not None:
            finished = self.attempt.finished
            self.attempt.finished = iteration if finished is None else max(finished, iteration)

    def _take(self, line: lp.IterationLine) -> dict | None:
        attempt = self._attempt()
        if attempt.last_iteration is not None and line.iteration == attempt.last_iteration:
            return None  # the same iteration printed by another rank (the simple loop: every rank)
        if attempt.last_iteration is not None and line.iteration < attempt.last_iteration:
            # Iterations went backwards inside one stream: a restart from a checkpoint.
            attempt = self._new_attempt()
        position = attempt.line_count
        first = position < 2
        if self.line_count and self._last_attempt_number != attempt.number:
            self.restarts.add(line.iteration)
        self._last_attempt_number = attempt.number
        attempt.line_count += 1
        attempt.last_iteration = line.iteration
        self._with_lines = attempt
        if line.elapsed_ms is not None:
            if attempt.timed_count < 2:
                attempt.first_timed.append((line.iteration, line.elapsed_ms))
            else:
                self._steady_ms.add(line.elapsed_ms)
            attempt.timed_count += 1
        if position >= 2 and line.tflops_per_gpu:
            self._tflops_values.add(line.tflops_per_gpu)
        # Per-interval counts: the first line of an attempt is not reset, so the second repeats it.
        skipped, nan = line.skipped_iterations or 0, line.nan_iterations or 0
        if position == 0:
            attempt.first_skipped, attempt.first_nan = skipped, nan
        elif position == 1:
            self._skipped -= attempt.first_skipped
            self._nan -= attempt.first_nan
        self._skipped += skipped
        self._nan += nan
        if line.lm_loss is not None:
            self._last_loss = line.lm_loss
        self.line_count += 1
        self.last_line = line
        counts = self.counts
        counts.lines += 1
        counts.last = line
        if not line.complete:
            counts.cut += 1
            if counts.first_cut is None:
                counts.first_cut = line.iteration
        self.points.add(PlotPoint(line.iteration, attempt.number, first, line.lm_loss, line.learning_rate,
                                  line.global_batch_size, line.elapsed_ms, line.tflops_per_gpu))
        return metrics_record(line, self._seq_length(), attempt.number, first)

    def feed(self, event: lp.Event | None) -> dict | None:
        match event:
            case lp.IterationLine():
                return self._take(event)
            case lp.Argument(name=name, value=value):
                if name in KEPT_ARGUMENTS:  # a hostile "dump" of millions of names is not kept
                    self.arguments[name] = value
            case lp.MemoryReport():
                if self.peak_memory_mb is None or event.max_allocated_mb > self.peak_memory_mb:
                    self.peak_memory_mb = event.max_allocated_mb
                self._finished(event.after_iterations)
                return {"kind": "memory", **asdict(event)}
            case lp.TheoreticalMemory():
                self.theoretical = event
            case lp.CheckpointSaved():
                self.saved.append(event.iteration)
                self._finished(event.iteration)
            case lp.CheckpointLoaded():
                self.start_attempt()
                self._attempt().loaded_iteration = event.iteration
                self._loaded_at_start = event.iteration
            case lp.Validation():
                name = "test" if event.split == "test" else "validation"
                if event.split == "validation" and (loss := event.values.get("lm loss")) is not None:
                    self.validation_curve.add((event.iteration, loss))
                for metric, amount in event.values.items():
                    self.validation[f"{name} {metric}"] = amount
            case lp.ExitLine():
                self.last_exit = event
            case lp.Milestone(name="after training is done"):
                self.training_done = True
            case lp.ResultValidationFailure():
                if self.first_result_failure is None:
                    self.first_result_failure = event
            case lp.ErrorLine(kind="traceback"):
                self._traceback_seen = True
            case lp.ErrorLine(text=text, kind=kind):
                # An exception line alone may be a logged, handled one; after a traceback it is a crash.
                if kind == "fatal" or self._traceback_seen:
                    if self.first_error is None:
                        self.first_error = text
                    if self.first_other_error is None and "SignalException" not in text:
                        self.first_other_error = text
        return None

    def _seq_length(self) -> int | None:
        if self.seq_length is None:
            value = lp.argument_value(self.arguments.get("seq_length", "None"))
            if isinstance(value, int):
                self.seq_length = value
        return self.seq_length

    # ------------------------------------------------------------------------------------------ summary

    def steady_ms_per_iter(self) -> float | None:
        """Median ms/iter over lines that exclude start-up (3rd and later timed lines of each attempt, reference
        §4); without any, the latest attempt's estimate from two lines (Attempt.two_line_estimate)."""
        if self._steady_ms:
            return self._steady_ms.median()
        if self.attempt is not None and (estimate := self.attempt.two_line_estimate()) is not None:
            return estimate
        return self._earlier_estimate

    def _steady_tflops(self) -> float | None:
        return self._tflops_values.median() if self._tflops_values else None

    def summary(self, checkpoint_dir: Path | None = None, exit_code: int | None = None) -> RunSummary:
        last = self.last_line
        train_iters = self.train_iters
        tracker = read_tracker(checkpoint_dir) if checkpoint_dir else None
        ms = self.steady_ms_per_iter()
        gbs = last.global_batch_size if last else None
        seq = self._seq_length()
        tokens = gbs * seq / (ms / 1000.0) if (ms and gbs and seq) else None
        outcome, reasons = self._verdict(last, train_iters, checkpoint_dir, tracker, exit_code)
        return RunSummary(
            outcome=outcome, reasons=reasons,
            last_iteration=self.reached_iteration, train_iters=train_iters,
            final_loss=self._last_loss, steady_ms_per_iter=ms, steady_tokens_per_s=tokens,
            steady_tflops_per_gpu=self._steady_tflops(), peak_memory_mb=self.peak_memory_mb,
            theoretical_memory_mb=self.theoretical.total_mb if self.theoretical else None,
            checkpoints_saved=list(self.saved), tracker_iteration=tracker,
            skipped_iterations=self._skipped, nan_iterations=self._nan,
            validation=dict(self.validation), attempts=self.attempt_count, exit_code=exit_code,
        )

    def _checkpoint_failures(self, reached_end: bool, checkpoint_dir: Path | None, tracker: str | None) -> list[str]:
        save_configured = self.arguments.get("save", "None") != "None"
        return checkpoint_failures(self.saved, save_configured, reached_end, checkpoint_dir, tracker)

    def _verdict(self, last: lp.IterationLine | None, train_iters: int | None, checkpoint_dir: Path | None,
                 tracker: str | None, exit_code: int | None) -> tuple[str, list[str]]:
        failures: list[str] = []
        # A signal passed on to torchrun: Megatron's handler saves and exits 0, but torchrun itself then raises
        # SignalException and exits 1. That exit code and traceback are the signal's, not a failure.
        by_signal = self.last_exit is not None and self.last_exit.reason == "signal" and bool(self.saved)
        error = self.first_other_error if by_signal else self.first_error
        if exit_code not in (None, 0) and not (by_signal and not error):
            failures.append(f"exit code {exit_code}")
        if error:
            failures.append(f"error in log: {error[:160]}")
        if self.first_result_failure:
            failure = self.first_result_failure
            where = f" at iteration {failure.iteration}" if failure.iteration else ""
            failures.append(f"result validation failed{where}: {failure.message[:120]}")
        idle = self._idle_start()
        # an earlier process start logged iterations and the latest none: its 0 iterations are said, never hidden
        # behind the earlier ones' progress
        latest = [f"the last attempt: {idle[0]}"] if idle is not None and last is not None else []
        if last is None:
            failures.append(idle[0] if idle is not None and idle[1] else "no iteration was logged")
        elif last.nan_iterations and last.lm_loss is None:
            failures.append(f"loss is NaN: {last.nan_iterations} NaN iteration(s) in the last logged interval")
        elif (loss := self._last_loss) is not None and not math.isfinite(loss):
            failures.append(f"loss is {loss}: the last logged lm loss is not a number")
        elif self._skipped and self._last_loss is None:
            # every logged interval skipped all its steps (fp16's loss scale overflowing from 2^32): Megatron logs a
            # loss only over the steps it applied, so no loss means no step updated the weights
            failures.append("no step updated the weights: every logged iteration was skipped and no loss was "
                            "logged (fp16's dynamic loss scale overflowed at every step); set initial_loss_scale (e.g. "
                            "4096) or train longer")
        reached = self.reached_iteration
        reached_end = self.training_done or (reached is not None and train_iters is not None
                                             and reached >= train_iters)
        # a start with nothing left to train saves only where its iteration is off the save interval (pretrain())
        nothing_left = idle is not None and idle[1]
        failures += self._checkpoint_failures(reached_end and not nothing_left, checkpoint_dir, tracker)
        if failures:
            return "failed", failures + latest
        if reached_end:
            # a start that loaded a checkpoint already at its train_iters ends the run where an earlier one had
            # (a chained or requeued job after the end): success, said; any other start that trained nothing failed
            return ("success" if idle is None or idle[1] else "failed"), latest
        if self.last_exit:
            how = self.last_exit
            saved = f"checkpoint at {self.saved[-1]}" if self.saved else "no checkpoint saved"
            return "stopped", [f"exited on {how.reason} ({how.detail}), {saved}", *latest]
        return "failed", [f"the log ends at iteration {last.iteration} of {train_iters} without an exit line"
                          if last else "the log ends before training", *latest]

    def _attempt_train_iters(self) -> int | None:
        """The iteration the latest process start trains to: its argument dump's train_iters, else train_samples //
        global_batch_size (training.py update_train_iters at a constant batch), else the last line's."""
        def count(name: str) -> int | None:
            value = lp.argument_value(self.arguments.get(name, "None"))
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        iters, samples, batch = count("train_iters"), count("train_samples"), count("global_batch_size")
        if iters is not None:
            return iters
        if samples is not None and batch is not None and batch > 0:
            return samples // batch
        return self.train_iters

    def nothing_left(self) -> str | None:
        """Why the latest process start trained 0 iterations where that is because nothing was left to train."""
        idle = self._idle_start()
        return idle[0] if idle is not None and idle[1] else None

    def _idle_start(self) -> tuple[str, bool] | None:
        """Where the latest process start (or checkpoint load) logged no iteration: why it trained 0, and whether
        that is because nothing was left (the checkpoint it loaded at or past its train_iters: training.py's loop
        `while iteration < args.train_iters` never runs, and Megatron exits 0); None where it logged one."""
        if self.line_count > self._lines_at_start:
            return None
        loaded, total = self._loaded_at_start, self._attempt_train_iters()
        if loaded is not None and total is not None and loaded >= total:
            return (f"0 iterations trained: the checkpoint it loaded is at iteration {loaded} and train_iters is "
                    f"{total}, so nothing was left to train (raise train_iters to train further)"), True
        at = f" after loading the checkpoint at iteration {loaded}" if loaded is not None else ""
        return f"0 iterations trained{at}: no iteration was logged", False


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
    if not is_tracker_iteration(tracker):
        return [f"the log reports a checkpoint at iteration {saved[-1]}, but {checkpoint_dir / TRACKER_FILE} is "
                f"{tracker}: Megatron's next load stops there"]
    written = untrusted.count(tracker)
    if written is not None and written < saved[-1]:
        return [f"the last save ({saved[-1]}) never reached {TRACKER_FILE} (it says {tracker})"]
    return []


def read_tracker(checkpoint_dir: Path) -> str | None:
    """The iteration in <save>/latest_checkpointed_iteration.txt (or "release"), None without one; never raises.

    Read as Megatron's read_metadata reads it: no regular file (os.path.isfile: a FIFO, a device, a directory) is
    no tracker; int() of its text, else "release", else a tracker Megatron cannot load, said in words of the
    launcher's own (the file's text is never shown: it may hold lines or bytes of anything)."""
    path = checkpoint_dir / TRACKER_FILE
    try:
        if not path.is_file():
            return None
        # a few bytes of a regular file: a FIFO or /dev/zero planted there is refused, never read forever
        data = untrusted.read_bytes(path, "checkpoint tracker", MAX_TRACKER_BYTES)
    except (OSError, UserError):
        return f"{UNREADABLE_TRACKER} (not a regular file of at most {MAX_TRACKER_BYTES:,} bytes)"
    text = data.decode("utf-8", "replace").strip()
    if text == "release":
        return text
    iteration = tracker_iteration(text)
    if iteration is not None:
        return str(iteration)
    return f"{UNREADABLE_TRACKER} ({len(data):,} bytes, no iteration from 0 to 2^63-1 nor 'release')"


def is_tracker_iteration(tracker: str) -> bool:
    return tracker == "release" or (tracker.isascii() and tracker.isdigit())
