"""How long a preset trains: its length in tokens and iterations (train_samples, train_iters or a token budget),
the phases of a step batch-size schedule, evaluation passes, and the time and GPU-hours that follow from a step
time per batch size.

Megatron's step_batch_size_schedule ("0:768 250B:1536 …", thresholds in tokens with K/M/B/T, converted to
samples by seq_length) sets the global batch by how many samples have been consumed; the schedule's last batch
is the one Megatron calls final. With train_iters the run makes that many steps, each at the batch of the
moment; with train_samples (or a token budget) it runs until the samples are consumed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_UNITS = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
MAX_PHASES = 64  # a schedule longer than this is not a schedule anyone writes: the plan reads no further


def batch_schedule(args: Mapping[str, Any]) -> list[tuple[int, int]] | None:
    """[(threshold in samples, global batch)] of step_batch_size_schedule, as Megatron parses it; None when
    unset or not readable (the pipeline's checker reports a bad one)."""
    text = args.get("step_batch_size_schedule")
    if not text:
        return None
    seq = int(args["seq_length"])
    out = []
    for entry in re.split(r"[,\s]+", str(text).strip())[:MAX_PHASES]:
        threshold, sep, size = entry.partition(":")
        match = re.fullmatch(r"([0-9]{1,15}(?:\.[0-9]{0,15})?)([KMBT]?)", threshold.strip().upper())
        if not sep or not match or not re.fullmatch(r"[0-9]{1,12}", size.strip()):
            return None
        tokens = int(float(match.group(1)) * _UNITS.get(match.group(2), 1))
        out.append((tokens // seq, int(size)))
    out.sort()
    return out or None


def final_batch(args: Mapping[str, Any]) -> int | None:
    """The schedule's last batch (Megatron's final global batch size), or None without a schedule."""
    schedule = batch_schedule(args)
    return schedule[-1][1] if schedule else None


@dataclass(frozen=True)
class Phase:
    batch: int  # global batch size
    iterations: float


@dataclass(frozen=True)
class Length:
    """What the run trains for, by batch size."""

    phases: tuple[Phase, ...]
    seq_length: int
    source: str  # how the length was found, said to the user

    @property
    def iterations(self) -> float:
        return sum(p.iterations for p in self.phases)

    @property
    def tokens(self) -> float:
        return sum(p.iterations * p.batch for p in self.phases) * self.seq_length

    def as_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "iterations": self.iterations, "source": self.source,
                "phases": [{"global_batch_size": p.batch, "iterations": p.iterations} for p in self.phases]}


def training_length(args: Mapping[str, Any], batch: int, tokens: float | None = None) -> Length | None:
    """The run's length: `tokens` (a --tokens budget) if given, else train_samples or train_iters; phases by the
    batch schedule, else all at `batch`. None when the preset says neither."""
    seq = int(args["seq_length"])
    schedule = batch_schedule(args) or [(0, batch)]
    if tokens is not None:
        return Length(_by_samples(schedule, tokens / seq, whole=False), seq, "--tokens")
    if args.get("train_samples"):
        return Length(_by_samples(schedule, float(args["train_samples"])), seq, "train_samples")
    if args.get("train_iters"):
        return Length(_by_iterations(schedule, float(args["train_iters"])), seq, "train_iters")
    return None


def _by_samples(schedule: list[tuple[int, int]], samples: float, whole: bool = True) -> tuple[Phase, ...]:
    """Megatron runs until the samples are consumed (whole steps); a token budget is priced exactly."""
    phases = []
    for i, (start, size) in enumerate(schedule):
        end = min(samples, schedule[i + 1][0]) if i + 1 < len(schedule) else samples
        if end > start:
            steps = (end - start) / size
            phases.append(Phase(size, math.ceil(steps) if whole else steps))
    return tuple(phases)


def _by_iterations(schedule: list[tuple[int, int]], iterations: float) -> tuple[Phase, ...]:
    phases, left = [], iterations
    for i, (start, size) in enumerate(schedule):
        steps = math.ceil((schedule[i + 1][0] - start) / size) if i + 1 < len(schedule) else left
        steps = min(steps, left)
        if steps > 0:
            phases.append(Phase(size, steps))
        left -= steps
        if left <= 0:
            break
    return tuple(phases)


def evaluation_iterations(args: Mapping[str, Any], iterations: float) -> float:
    """Forward-only evaluation steps the run makes: eval_iters every eval_interval iterations (Megatron's
    defaults when unset: every 1000, 100 steps; none with skip_train or eval_iters 0)."""
    interval = args.get("eval_interval") or 1000
    per = args.get("eval_iters")
    per = 100 if per is None else per
    return math.floor(iterations / max(1, int(interval))) * max(0, int(per))


def train_seconds(length: Length, step_at: Callable[[int], float], args: Mapping[str, Any]) -> dict[str, float]:
    """Seconds of training steps and of evaluation (each a forward pass, ⅓ of a step at the evaluation batch)."""
    steps = sum(p.iterations * step_at(p.batch) for p in length.phases)
    last = length.phases[-1].batch if length.phases else 1
    eval_batch = int(args.get("eval_global_batch_size") or last)
    evaluation = evaluation_iterations(args, length.iterations) * step_at(eval_batch) / 3
    return {"steps": steps, "evaluation": evaluation, "total": steps + evaluation}
