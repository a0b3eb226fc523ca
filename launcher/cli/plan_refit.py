"""`launch plan PRESET --refit`: the plan with step-time constants refitted on the runs `launch plan --measure`
measured for that GPU (launcher/estimate/refit.py), so that the layouts are ranked at this machine's speed.

Each stored run is predicted again exactly as the plan predicted it (its preset, the user's --set and the layout's
settings, resolved on its GPU count), so the shipped constants reproduce the stored prediction.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from launcher.errors import Problem, UserError
from launcher.estimate import formulas as est
from launcher.estimate import refit as fit
from launcher.estimate import steptime

MAX_READ_BYTES = 64 << 20  # a larger measurements file is refused (MAX_RECORDS records of ~1 KiB, with room)
MAX_RECORDS = 10_000  # the measurements file keeps the newest this many (launch plan --measure)


def measurements_path() -> Path:
    """Where `launch plan --measure` appends its runs: the launcher's data directory."""
    from launcher.megatron.pin import data_dir

    return data_dir() / "measurements.json"


def load_records(path: Path) -> list[dict[str, Any]]:
    """The records of a measurements file: a regular file of bounded size holding strict JSON (a FIFO is refused,
    not waited on; NaN, 1e400 or nesting deeper than a record are refused), the newest MAX_RECORDS of them."""
    from launcher import untrusted

    if not os.path.lexists(path):
        raise UserError(Problem(f"no measurements at {path}", "measure first: launch plan PRESET --measure "
                                "(on the GPU machine), or name a file with --measurements FILE"))
    try:
        data = untrusted.read_json(path, "measurements file", MAX_READ_BYTES)
    except UserError as error:
        raise UserError(Problem(f"cannot read the measurements: {error.problems[0].message}",
                                "name a measurements file written by launch plan --measure")) from None
    if not isinstance(data, list):
        raise UserError(Problem(f"{path} is not a list of measurements",
                                "name a measurements file written by launch plan --measure"))
    return [r for r in data[-MAX_RECORDS:] if isinstance(r, dict)]


def _texts(value: Any) -> list[str] | None:
    """A record's list of --set texts; None when it is not one (a damaged or hand-made record)."""
    if value is None:
        return []
    if isinstance(value, list) and len(value) <= 1000 and all(isinstance(v, str) for v in value):
        return value
    return None


def case_of(record: dict[str, Any], gpu: est.Gpu) -> fit.Case | None:
    """The stored run as a case of the step-time model, or None when it cannot be one (another GPU, a failed run,
    the compiled-ops choice the model does not tell apart, a preset that no longer loads, a field of a wrong type)."""
    measured, gpus, preset_name = record.get("measured_s"), record.get("gpus"), record.get("preset")
    settings, overrides = _texts(record.get("settings")), _texts(record.get("overrides"))
    if settings is None or overrides is None or not isinstance(preset_name, str):
        return None
    sets = settings + overrides
    if record.get("gpu") != gpu.name or record.get("exit_code") != 0 or isinstance(measured, bool) \
            or not isinstance(measured, (int, float)) or not 0 < measured < 1e6 or isinstance(gpus, bool) \
            or not isinstance(gpus, int) or not 1 <= gpus <= 1 << 20 or any(s.startswith("env.") for s in sets):
        return None
    shaped = _shape_of(preset_name, tuple(sets), gpus)
    if shaped is None:
        return None
    shape, training = shaped
    label = record.get("label")
    return fit.Case(label if isinstance(label, str) else "", shape, training, gpu, gpus, float(measured))


@functools.lru_cache(maxsize=4096)
def _shape_of(preset_name: str, sets: tuple[str, ...], gpus: int) -> tuple[Any, Any] | None:
    """The model shape and training of a stored run, resolved once per distinct (preset, --set, GPUs): a file of
    thousands of runs of a few layouts costs a few resolutions, not thousands."""
    from launcher.cli.job import JobRequest, job_for
    from launcher.pipeline.preset import load_preset

    try:
        preset = load_preset(preset_name, list(sets))
        preset = replace(preset, launcher=replace(preset.launcher, entry="pretrain_gpt"))
        job, problems = job_for(preset, JobRequest(1, gpus, run_dir=False, local=False))
    except UserError:
        return None
    if problems:
        return None
    args = job.effective()
    t = est.training_of(args, gpus)
    return est.model_shape(args, t.tp), t


def refit_for(path: Path, gpu: est.Gpu) -> tuple[fit.Refit, int]:
    """The refit on the stored runs of `gpu` (the newest per layout), and how many runs it used."""
    newest: dict[tuple, fit.Case] = {}
    for record in load_records(path):
        case = case_of(record, gpu)
        if case is not None:
            newest[(case.shape, case.training)] = case
    cases = list(newest.values())
    if len(cases) < fit.MIN_RUNS:
        raise UserError(Problem(f"{path} holds {len(cases)} usable run(s) on {gpu.name}; a refit needs at least "
                                f"{fit.MIN_RUNS}", f"measure on that GPU: launch plan PRESET --measure --gpu "
                                f"{gpu.name}"))
    return fit.refit(cases), len(cases)


@contextmanager
def kernels_installed(family: str, kernels: steptime.Kernels) -> Iterator[None]:
    """The plan's step times with these constants for `family`, then the shipped ones again."""
    saved = steptime.KERNELS[family]
    steptime.KERNELS[family] = kernels
    try:
        yield
    finally:
        steptime.KERNELS[family] = saved


def describe(result: fit.Refit, runs: int, path: Path, gpu: est.Gpu) -> str:
    import statistics

    changed = ", ".join(f"{name} {old:g} → {new:g}" for name, (old, new) in result.changed().items()) or "unchanged"
    before = statistics.median(abs(e) for e in result.errors_before)
    after = statistics.median(abs(e) for e in result.errors_after)
    return (f"step-time constants refitted on {runs} run(s) measured on {gpu.name} ({path}): {changed}; their "
            f"median |error| {before:.1%} → {after:.1%}")
