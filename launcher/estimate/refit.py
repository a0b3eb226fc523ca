"""The step-time constants refitted on runs measured on the user's own machine (`launch plan --measure` stores
them): the compute constants a run on one node shows, the GEMM efficiency and the elementwise passes, by a search over
a grid for the lowest mean |log error|. The rest stays as calibrated on published runs.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from launcher.estimate.formulas import Gpu, ModelShape, Training
from launcher.estimate.steptime import KERNELS, Kernels, step_time

# What one node's runs can tell apart: the GEMM rate and the memory-bound work around it (launch overhead,
# communication and the pipeline need other layouts than one machine's few runs).
GRID: dict[str, tuple[float, ...]] = {
    "gemm": tuple(round(0.40 + 0.02 * i, 2) for i in range(29)),  # 0.40 … 0.96
    "elementwise": (10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 120, 140, 160, 200),
}
MIN_RUNS = 2


@dataclass(frozen=True)
class Case:
    label: str
    shape: ModelShape
    training: Training
    gpu: Gpu
    gpus_per_node: int
    measured_s: float


@dataclass(frozen=True)
class Refit:
    before: Kernels
    after: Kernels
    errors_before: tuple[float, ...]  # predicted / measured − 1, per case, at the shipped constants
    errors_after: tuple[float, ...]

    def changed(self) -> dict[str, tuple[float, float]]:
        return {name: (getattr(self.before, name), getattr(self.after, name)) for name in GRID
                if getattr(self.before, name) != getattr(self.after, name)}


def errors(cases: Sequence[Case], kernels: Kernels) -> tuple[float, ...]:
    return tuple(step_time(c.shape, c.training, c.gpu, c.gpus_per_node, kernels=kernels).total / c.measured_s - 1
                 for c in cases)


def refit(cases: Sequence[Case]) -> Refit:
    """Every point of GRID (the two constants move together on one node's runs: a coordinate descent stops short),
    the lowest mean |log error| first, ties to the one nearest the shipped constants; one GPU family."""
    families = {c.gpu.family for c in cases}
    if len(families) != 1 or len(cases) < MIN_RUNS:
        raise ValueError(f"refit needs at least {MIN_RUNS} runs of one GPU family")
    before = KERNELS[families.pop()]

    def score(kernels: Kernels) -> tuple[float, float]:
        loss = statistics.fmean(abs(math.log1p(e)) for e in errors(cases, kernels))
        distance = sum(abs(math.log(getattr(kernels, n) / getattr(before, n))) for n in GRID)
        return round(loss, 9), distance

    points = [replace(before, **dict(zip(GRID, values, strict=True))) for values in itertools.product(*GRID.values())]
    best = min(points, key=score)
    return Refit(before, best, errors(cases, before), errors(cases, best))
