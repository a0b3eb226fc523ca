"""Parse Megatron-LM training logs (pinned 432d76b2b8bf) into typed events.

Formats follow megatron/training/training.py (training_log, evaluate_and_print_results, print_datetime),
checkpointing.py and utils/common_utils.py (report_memory); see reference §4. Every parser is tolerant:
lines may carry launcher prefixes (`[rank3]:`, `[default0]:`, srun -l `3: `), ANSI colour codes, or be cut
off mid-line; a line that cannot be understood yields nothing rather than an exception.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

# torchrun's --tee/--log-line-prefix ("[rank3]:", "[default0]:"), srun -l ("3: "), torchx (NeMo-Run: a role and
# replica, "pretrain/0 [default2]:") and a multi-node runner's host (pdsh, DeepSpeed's: "gpu-7: [rank3]:") put these in
# front.
_PREFIX_RE = re.compile(r"^(?:[\w.-]{1,200}: (?=\[(?:rank|default)\d))?"
                        r"(?:[\w.-]{1,200}/\d{1,6} \[(?:default)?\d{1,6}\]:)?"
                        r"(?:\[(?:rank|default)\d+\]:|\s*\d{1,5}: )*")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
MAX_LINE = 64 * 1024  # Megatron's longest lines are a few KiB; longer ones are not parsed (bounded regex work)


def clean_line(line: str) -> str:
    """Drop rank prefixes, colour codes, carriage-return overwrites and the line ending."""
    line = _ANSI_RE.sub("", line.rstrip("\r\n"))
    if "\r" in line:  # a progress bar redrawn in place: keep what was drawn last
        line = line.rsplit("\r", 1)[-1]
    return _PREFIX_RE.sub("", line, count=1)


def _to_float(text: str) -> float | None:
    try:
        return float(text)  # accepts Megatron's "NAN"/"INF" spelling of {:.6E}
    except ValueError:
        return None


# A count in a log (iteration, samples, rank) fits in int64: the patterns read at most 18 digits (\d{1,18}(?!\d)),
# so a longer one is damage, not a count, and never reaches arithmetic (a float of it overflows).
MAX_DIGITS = 18


def _to_int(text: str) -> int | None:
    text = text.strip()
    if len(text.lstrip("+-")) > MAX_DIGITS:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _to_time(text: str) -> datetime | None:
    try:
        return datetime.strptime(text, _TIMESTAMP_FORMAT)
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------- events


@dataclass(frozen=True)
class IterationLine:
    """One ` [ts] iteration N/T | ... |` line (printed by the last rank at iteration 1, then every log_interval)."""

    iteration: int
    train_iters: int
    elapsed_ms: float | None = None
    consumed_samples: int | None = None
    skipped_samples: int | None = None
    tflops_per_gpu: float | None = None
    energy_j_per_gpu: float | None = None
    power_w_per_gpu: float | None = None
    learning_rate: float | None = None
    global_batch_size: int | None = None
    losses: dict[str, float] = field(default_factory=dict)
    loss_scale: float | None = None
    grad_norm: float | None = None
    num_zeros: float | None = None
    params_norm: float | None = None
    skipped_iterations: int | None = None
    nan_iterations: int | None = None
    timestamp: datetime | None = None
    complete: bool = True  # False when the line was cut before its last field

    @property
    def lm_loss(self) -> float | None:
        return self.losses.get("lm loss")


@dataclass(frozen=True)
class MemoryReport:
    """`[Rank R] (after N iterations) memory (MB) | allocated: X | max allocated: Y | ...` (DP-rank-0 ranks)."""

    rank: int
    after_iterations: int
    allocated_mb: float
    max_allocated_mb: float
    reserved_mb: float | None = None
    max_reserved_mb: float | None = None
    device_used_mb: float | None = None


@dataclass(frozen=True)
class TheoreticalMemory:
    weight_and_optimizer_mb: float
    activation_mb: float | None
    total_mb: float


@dataclass(frozen=True)
class CheckpointSaving:
    iteration: int
    directory: str
    ckpt_format: str


@dataclass(frozen=True)
class CheckpointSaved:
    iteration: int
    directory: str


@dataclass(frozen=True)
class CheckpointLoaded:
    directory: str
    iteration: int


@dataclass(frozen=True)
class CheckpointMissing:
    """`WARNING: could not find the metadata file ...`: training starts from random weights."""

    tracker_file: str


@dataclass(frozen=True)
class Validation:
    """` validation loss at iteration N [on validation set|on test set] | lm loss value: X | lm loss PPL: Y |`."""

    iteration: int
    split: str  # "validation" (periodic or final) or "test"
    final: bool
    values: dict[str, float]
    perplexities: dict[str, float]


@dataclass(frozen=True)
class ExitLine:
    """Megatron's own early exits; all of them end the process with exit code 0 (reference §0.8)."""

    reason: str  # "signal", "duration", "interval"
    detail: str


@dataclass(frozen=True)
class Milestone:
    """`[after training is done] datetime: ...` and friends from print_datetime."""

    name: str
    timestamp: datetime | None


@dataclass(frozen=True)
class ResultValidationFailure:
    """Megatron's rerun state machine rejected a result (NaN/Inf/spiky loss or gradients)."""

    iteration: int | None
    message: str


@dataclass(frozen=True)
class ErrorLine:
    """A line that may signal a crash.

    kind: "traceback" (the header), "exception" (`SomeError: ...`, fatal only after a traceback header),
    "fatal" (CUDA out of memory, torchrun's ChildFailedError, Megatron's exit for a missing ADLR autoresume).
    """

    text: str
    kind: str = "fatal"


@dataclass(frozen=True)
class Argument:
    """One `  name ........ value` line of the argument dump (rank 0, before training)."""

    name: str
    value: str


Event = (
    IterationLine | MemoryReport | TheoreticalMemory | CheckpointSaving | CheckpointSaved | CheckpointLoaded
    | CheckpointMissing | Validation | ExitLine | Milestone | ResultValidationFailure | ErrorLine | Argument
)

# ---------------------------------------------------------------------------------------------- iteration

_ITERATION_RE = re.compile(
    r"(?:\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\]\s*)?iteration\s+(?P<it>\d{1,18})(?!\d)\s*/\s*"
    r"(?P<total>\d{1,18})(?!\d)\s*\|"
)

_FLOAT_FIELDS = {
    "elapsed time per iteration (ms)": "elapsed_ms",
    "throughput per GPU (TFLOP/s/GPU)": "tflops_per_gpu",
    "energy per GPU (J/iter/GPU)": "energy_j_per_gpu",
    "power per GPU (W/GPU)": "power_w_per_gpu",
    "learning rate": "learning_rate",
    "loss scale": "loss_scale",
    "grad norm": "grad_norm",
    "num zeros": "num_zeros",
    "params norm": "params_norm",
}
# Times and rates cannot be negative (or NaN): such a value is damage, and is left out rather than averaged in.
_MEASURED = {"elapsed_ms", "tflops_per_gpu", "energy_j_per_gpu", "power_w_per_gpu"}
_INT_FIELDS = {
    "consumed samples": "consumed_samples",
    "skipped samples": "skipped_samples",
    "global batch size": "global_batch_size",
    "number of skipped iterations": "skipped_iterations",
    "number of nan iterations": "nan_iterations",
}
_LAST_FIELD = "number of nan iterations"


def parse_iteration_line(line: str) -> IterationLine | None:
    """Parse one iteration line; None if `line` is not one. Unknown `key: float |` fields count as losses."""
    match = _ITERATION_RE.search(line)
    if match is None:
        return None
    values: dict = {
        "iteration": int(match["it"]),
        "train_iters": int(match["total"]),
        "timestamp": _to_time(match["ts"]) if match["ts"] else None,
    }
    losses: dict[str, float] = {}
    complete = False
    # "key: value |" fields, read by splitting (a pattern over the rest backtracks quadratically on a long field
    # without ':'); keys never contain ':' or '|'; the text after the last '|' is a field cut with its line
    for piece in line[match.end():].split("|")[:-1]:
        key, colon, text = piece.partition(":")
        key, text = key.strip(), text.strip()
        if not colon or not key:
            continue
        if key in _FLOAT_FIELDS:
            number = _to_float(text)
            if number is not None and not (_FLOAT_FIELDS[key] in _MEASURED and not 0 <= number < math.inf):
                values[_FLOAT_FIELDS[key]] = number
        elif key in _INT_FIELDS:
            number = _to_int(text)
            if number is not None:
                values[_INT_FIELDS[key]] = number
        else:
            number = _to_float(text)
            if number is not None:
                losses[key] = number  # "lm loss", MoE/MTP auxiliary losses
        if key == _LAST_FIELD:
            complete = True
    return IterationLine(**values, losses=losses, complete=complete)


# ---------------------------------------------------------------------------------------------- other lines

_MEMORY_RE = re.compile(
    # "(after N iterations)" from training_log, "(before/after save_checkpoint for iteration N)" around saves
    r"\[Rank (?P<rank>\d{1,18})(?!\d)\] \((?:after (?P<it>\d{1,18})(?!\d) iterations|"
    r"(?:before|after) save_checkpoint for iteration "
    r"(?P<save_it>\d{1,18})(?!\d))\) memory \(MB\)"
    r" \| allocated: (?P<alloc>[\d.]+) \| max allocated: (?P<max_alloc>[\d.]+)"
    r"(?: \| reserved: (?P<res>[\d.]+))?(?: \| max reserved: (?P<max_res>[\d.]+))?"
    r"(?: \| total device memory used: (?P<used>[\d.]+))?"
)
_THEORY_RE = re.compile(
    r"Theoretical memory footprints: weight and optimizer=(?P<w>[\d.]+) MB"
    r"(?:, activation=(?P<a>[\d.]+) MB)?, total=(?P<t>[\d.]+) MB"
)
# Each checkpoint pattern is matched once, where its first words are (_match_at): searched, `.+?` after words
# repeated along a long line would be tried from each repetition (quadratic).
_SAVING_RE = re.compile(r"saving checkpoint at iteration\s+(?P<it>\d{1,18})(?!\d) to (?P<dir>.+?) in "
                        r"(?P<fmt>\S+) format")
_SAVED_RE = re.compile(r"successfully saved checkpoint from iteration\s+(?P<it>\d{1,18})(?!\d) to (?P<dir>.+?) "
                       r"\[ t \d+/\d+")
_LOADED_RE = re.compile(r"successfully loaded checkpoint from (?P<dir>.+?) \[ t [^\]]{0,200}\] at iteration "
                        r"(?P<it>\d{1,18})(?!\d)")
_MISSING_RE = re.compile(r"WARNING: could not find the metadata file (?P<file>\S+)")
_VALIDATION_RE = re.compile(
    r"validation(?:-\S{1,64})? loss at iteration (?P<it>\d{1,18})(?!\d)(?P<where> on (?:validation|test) set)? "
    r"\|(?P<rest>.*)"
)
_VALUE_RE = re.compile(r"\s*(?P<key>[^|]+?) (?P<kind>value|PPL): (?P<num>[^|\s]+) ")  # one field, before its '|'
_EXIT_SIGNAL_RE = re.compile(r"\[exiting program after receiving (?P<sig>\w+)\.?\]")
_EXIT_DURATION_RE = re.compile(r"\[exiting program after (?P<min>[\d.]+) minutes\]")
_EXIT_INTERVAL_RE = re.compile(r"\[exiting program at iteration (?P<it>\d{1,18})(?!\d)\]")
_MILESTONE_RE = re.compile(
    r"\[(?P<name>after megatron is initialized|before the start of training step|after training is done)\]"
    r" datetime: (?P<ts>\S+ \S+)"
)
# megatron.core.rerun_state_machine logs NaN/Inf/spiky-loss detections at ERROR level, with an iteration.
_RERUN_RE = re.compile(r"ERROR:megatron\.core\.rerun_state_machine:(?P<msg>.*)")
_RERUN_ITERATION_RE = re.compile(r"iteration #?(?P<it>\d{1,18})(?!\d)")
_RERUN_MESSAGE_RE = re.compile(r"\(message='(?P<msg>[^']*)'\)")
_TRACEBACK_RE = re.compile(r"^\s*Traceback \(most recent call last\):")
_EXCEPTION_RE = re.compile(r"^\s*\w+(?:\.\w+)*(?:Error|Exception|Interrupt): ")
_FATAL_RE = re.compile(
    r"CUDA out of memory|torch\.OutOfMemoryError"
    r"|torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError"
    r"|ADLR autoresume is not available"
)
# examples/run_simple_mcore_train_loop.py: every rank prints this for iterations 0..4, then a reload message.
_SIMPLE_LOOP_RE = re.compile(r"^Iteration (?P<it>\d{1,18})(?!\d): Losses reduced: (?P<rest>.*)")
_SIMPLE_LOSS_RE = re.compile(r"'(?P<key>[^']+)': tensor\((?P<num>[-+\w.]+)")
SIMPLE_LOOP_ITERATIONS = 5
SIMPLE_LOOP_DONE = "Successfully loaded the model"
_ARGUMENT_RE = re.compile(r"^  (?P<name>[A-Za-z_]\w*) \.*\s(?P<value>.*)$")
_ARGS_BEGIN = "------------------------ arguments ------------------------"
_ARGS_END = "-------------------- end of arguments ---------------------"


def parse_line(raw: str) -> Event | None:
    """Parse one log line outside the argument dump; None when it carries nothing we track."""
    line = clean_line(raw)
    if "iteration" in line and "|" in line and "loss at iteration" not in line:
        parsed = parse_iteration_line(line)
        if parsed is not None:
            return parsed
    if "memory (MB)" in line and (m := _MEMORY_RE.search(line)):
        return MemoryReport(
            rank=int(m["rank"]), after_iterations=int(m["it"] or m["save_it"]),
            allocated_mb=float(m["alloc"]), max_allocated_mb=float(m["max_alloc"]),
            reserved_mb=_opt_float(m["res"]), max_reserved_mb=_opt_float(m["max_res"]),
            device_used_mb=_opt_float(m["used"]),
        )
    if "Theoretical memory" in line and (m := _THEORY_RE.search(line)):
        return TheoreticalMemory(float(m["w"]), _opt_float(m["a"]), float(m["t"]))
    if "checkpoint" in line:
        if m := _match_at(_SAVING_RE, line, "saving checkpoint at"):
            return CheckpointSaving(int(m["it"]), m["dir"], m["fmt"])
        if m := _match_at(_SAVED_RE, line, "successfully saved checkpoint"):
            return CheckpointSaved(int(m["it"]), m["dir"])
        if m := _match_at(_LOADED_RE, line, "successfully loaded checkpoint"):
            return CheckpointLoaded(m["dir"], int(m["it"]))
    if "could not find the metadata file" in line and (m := _MISSING_RE.search(line)):
        return CheckpointMissing(m["file"])
    if "loss at iteration" in line and (m := _VALIDATION_RE.search(line)):
        return _validation(m)
    if "exiting program" in line:
        if m := _EXIT_SIGNAL_RE.search(line):
            return ExitLine("signal", m["sig"])
        if m := _EXIT_DURATION_RE.search(line):
            return ExitLine("duration", f"{m['min']} minutes")
        if m := _EXIT_INTERVAL_RE.search(line):
            return ExitLine("interval", f"iteration {m['it']}")
    if "datetime:" in line and (m := _MILESTONE_RE.search(line)):
        return Milestone(m["name"], _to_time(m["ts"]))
    if "rerun_state_machine" in line and (m := _RERUN_RE.search(line)):
        text = m["msg"].strip()
        it = _RERUN_ITERATION_RE.search(text)
        short = _RERUN_MESSAGE_RE.search(text)
        return ResultValidationFailure(int(it["it"]) if it else None, short["msg"] if short else text)
    if line.startswith("Iteration ") and (m := _SIMPLE_LOOP_RE.match(line)):
        losses = {lm["key"]: v for lm in _SIMPLE_LOSS_RE.finditer(m["rest"]) if (v := _to_float(lm["num"])) is not None}
        # The loop counts from 0; Megatron's own lines count from 1.
        return IterationLine(iteration=int(m["it"]) + 1, train_iters=SIMPLE_LOOP_ITERATIONS, losses=losses)
    if line.strip() == SIMPLE_LOOP_DONE:
        return Milestone("after training is done", None)
    if _FATAL_RE.search(line):
        return ErrorLine(line.strip(), "fatal")
    if _TRACEBACK_RE.search(line):
        return ErrorLine(line.strip(), "traceback")
    if _EXCEPTION_RE.search(line):
        return ErrorLine(line.strip(), "exception")
    return None


def _match_at(pattern: re.Pattern[str], line: str, head: str) -> re.Match[str] | None:
    """`pattern` matched where `head` (its first words) first occurs in `line`: linear in the line's length."""
    start = line.find(head)
    return pattern.match(line, start) if start >= 0 else None


def _opt_float(text: str | None) -> float | None:
    return None if text is None else _to_float(text)


def _validation(m: re.Match) -> Validation | None:
    values: dict[str, float] = {}
    perplexities: dict[str, float] = {}
    for piece in m["rest"].split("|")[:-1]:  # fields split first: a pattern over the rest backtracks on long ones
        vm = _VALUE_RE.fullmatch(piece)
        if vm is None:
            continue
        number = _to_float(vm["num"])
        if number is None:
            continue
        (values if vm["kind"] == "value" else perplexities)[vm["key"].strip()] = number
    if not values:
        return None
    where = (m["where"] or "").strip()
    return Validation(
        iteration=int(m["it"]), split="test" if "test" in where else "validation",
        final=bool(where), values=values, perplexities=perplexities,
    )


class LogParser:
    """Stateful line parser: knows when it is inside the argument dump. Feed lines in order."""

    def __init__(self) -> None:
        self._in_arguments = False

    def feed(self, raw: str) -> Event | None:
        line = clean_line(raw)
        if self._in_arguments:
            if line.startswith("----") and "end of arguments" in line:
                self._in_arguments = False
                return None
            if m := _ARGUMENT_RE.match(line):
                return Argument(m["name"], m["value"].strip())
            if line.startswith("  "):
                return None
            self._in_arguments = False  # dump cut short (another rank's output, crash): parse normally
        elif line.strip() == _ARGS_BEGIN.strip():
            self._in_arguments = True
            return None
        if len(line) > MAX_LINE:
            return None
        try:
            return parse_line(line)
        except (ValueError, OverflowError):  # digits past int()'s limit, "1.2.3" where [\d.]+ matched: not ours
            return None


def parse_lines(lines: Iterable[str]) -> Iterator[Event]:
    parser = LogParser()
    for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event


def argument_value(text: str) -> int | float | bool | str | None:
    """Turn an argument-dump value (Python's str() of it) into int/float/bool/None where it is one."""
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text
