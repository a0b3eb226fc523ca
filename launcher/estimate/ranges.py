"""The range around each predicted time: what the held-back published runs of its family say the model misses by.

A family is dense or MoE × the GPU's kernel family (its generation) × precision (FP8 or not). The held-back part of
the calibration (launcher/estimate/calibration.py, runs no fit has seen) gives each run's error, predicted /
published − 1; a prediction `p` of that family then lies in [p / (1 + largest error), p / (1 + smallest error)],
the truth each of those runs would have had. With fewer than MIN_RUNS runs in a family, the next wider one is
used (the generation and dense/MoE, then dense/MoE, then every held-back run); a generation with no run of its
own (Ada: its constants are borrowed) widens the range by UNCALIBRATED each way. Settings the
estimate does not model (launcher/estimate/coverage.py) widen it further.

HELD_BACK holds the errors as the calibration computes them; tests/estimate/test_plan_calibration.py holds
the two to each other, so a change in the model that moves them fails until this table is regenerated with
`python -m launcher.estimate.calibration --ranges`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIN_RUNS = 3
MIN_HALF_WIDTH = 0.05  # never narrower than ±5 %: a handful of runs cannot promise more
UNCALIBRATED = 0.25  # a GPU generation whose constants are borrowed from another
FITTED_GENERATIONS = ("ampere", "hopper", "blackwell")  # the kernel families with constants fitted on their own runs


@dataclass(frozen=True)
class HeldBack:
    name: str
    moe: bool
    generation: str  # kernel family of the GPU (launcher.gpus: hopper, ampere, ...)
    fp8: bool
    error: float  # predicted / published − 1


# (name, MoE, generation, FP8, error) of every held-back run; regenerate with --ranges.
HELD_BACK: tuple[HeldBack, ...] = (
    HeldBack("NeMo 24.07 GPT-3 175B (512 GPUs)", False, "hopper", True, -0.004),
    HeldBack("NeMo 24.07 Llama 2 7B", False, "hopper", True, 0.023),
    HeldBack("NeMo 24.07 Llama 2 13B", False, "hopper", True, 0.013),
    HeldBack("NeMo 24.07 Llama 2 70B", False, "hopper", True, -0.033),
    HeldBack("MoE zoo Qwen3 235B TP4 PP8 EP8 (DeepEP)", True, "hopper", False, 0.055),
    HeldBack("Bridge 25.11 Qwen3 30B-A3B", True, "hopper", True, -0.458),
    HeldBack("Bridge 25.11 Qwen3 235B-A22B", True, "hopper", True, -0.032),
    HeldBack("Bridge 26.04.01 Llama 3 70B (GBS 256)", False, "hopper", True, 0.127),
    HeldBack("Bridge 26.06 Llama 3.1 405B (GBS 1536)", False, "hopper", True, 0.032),
    HeldBack("Bridge 26.06 Qwen3 30B-A3B EP16", True, "hopper", True, -0.122),
    HeldBack("Bridge 26.02.01 Qwen3 30B-A3B PP2 EP8", True, "hopper", True, 0.165),
    HeldBack("Bridge 26.04.01 Qwen3 235B-A22B (GBS 8192)", True, "hopper", True, -0.025),
    HeldBack("Bridge B200 25.11 Llama 3 8B", False, "blackwell", True, 0.093),
    HeldBack("Bridge B200 25.11 Llama 3.1 405B", False, "blackwell", True, -0.024),
    HeldBack("Bridge B200 26.02 Qwen3 30B-A3B", True, "blackwell", True, 0.046),
    HeldBack("Bridge B200 26.02 Qwen3 235B-A22B (GBS 8192)", True, "blackwell", True, 0.174),
)


@dataclass(frozen=True)
class Range:
    """Where the true time of a prediction lies, as factors of it, and what the factors rest on."""

    low: float  # factor: the truth is at least low × predicted
    high: float
    family: str  # the family whose runs give the range, as said to the user
    runs: int
    widened: float = 0.0  # by the settings the estimate does not model

    def of(self, seconds: float) -> tuple[float, float]:
        return seconds * self.low, seconds * self.high

    def as_dict(self) -> dict[str, Any]:
        return {"low_factor": self.low, "high_factor": self.high, "family": self.family, "runs": self.runs,
                "widened_by_unmodelled": self.widened}


def family_name(moe: bool, generation: str, fp8: bool) -> str:
    return f"{'MoE' if moe else 'dense'} · {generation} · {'FP8' if fp8 else 'BF16/FP16'}"


def time_range(moe: bool, generation: str, fp8: bool, widen: float = 0.0,
               runs: tuple[HeldBack, ...] = HELD_BACK) -> Range:
    """The range for a prediction of this family (module docstring), widened by `widen` each way."""
    kind = "MoE" if moe else "dense"
    tiers = (
        (family_name(moe, generation, fp8),
         [r for r in runs if (r.moe, r.generation, r.fp8) == (moe, generation, fp8)]),
        (f"{kind} · {generation}", [r for r in runs if (r.moe, r.generation) == (moe, generation)]),
        (kind, [r for r in runs if r.moe == moe]),
        ("all held-back runs", list(runs)),
    )
    label, chosen = next(((name, rs) for name, rs in tiers if len(rs) >= MIN_RUNS), tiers[-1])
    errors = [r.error for r in chosen] or [0.0]
    low, high = 1 / (1 + max(errors)), 1 / (1 + min(errors))
    low, high = min(low, 1 - MIN_HALF_WIDTH), max(high, 1 + MIN_HALF_WIDTH)
    calibrated = generation in FITTED_GENERATIONS
    extra = widen + (UNCALIBRATED if not calibrated else 0.0)
    if not calibrated:
        label += f" ({generation}'s constants are not fitted on its own runs: ±{UNCALIBRATED:.0%} wider)"
    return Range(low / (1 + extra), high * (1 + extra), label, len(chosen), widen)


def tie_band(runs: tuple[HeldBack, ...] = HELD_BACK) -> float:
    """The step-time difference the model cannot resolve: the median |error| of the held-back runs. Two layouts
    predicted closer than this are a tie (launcher/estimate/search.py orders ties by memory headroom)."""
    errors = sorted(abs(r.error) for r in runs)
    if not errors:
        return 0.0
    mid = len(errors) // 2
    return errors[mid] if len(errors) % 2 else (errors[mid - 1] + errors[mid]) / 2
