"""`launch plan PRESET --measure`: the best layouts that fit this machine, run for a few iterations each.

Each layout runs as `launch PRESET --set …` would run it: the same preset loading, resolution, command and
local backend (a run directory under the run root, the monitor writing its log). Step time and peak memory
are read back from that log (launcher.runs.logparse): the median `elapsed time per iteration` after the
warm-up iterations, and the largest `max allocated` of Megatron's memory reports. The layouts are ranked by
the measurement, printed beside the model's prediction, and appended to a JSON file in the user's data
directory (`plan_refit.measurements_path`) so that the step-time constants can be refitted from real runs.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from launcher.cli import plan_refit, plan_report
from launcher.errors import Problem, UserError
from launcher.estimate import formulas as est
from launcher.estimate import search as ps

WARMUP_ITERATIONS = 3  # the first iterations compile, allocate and fill caches: not timed
MAX_RECORDS = plan_refit.MAX_RECORDS
MAX_LOG_LINES = 200_000  # a measurement log is read at most this far (bounded work whatever the run printed)
# Megatron refuses a schedule in samples together with train_iters
SAMPLE_SCHEDULE = ("train_samples", "lr_warmup_samples", "lr_decay_samples", "lr_wsd_decay_samples")


@dataclass(frozen=True)
class Trial:
    """One layout to run: its settings and what the model predicts for it."""

    label: str
    sets: tuple[str, ...]
    predicted_s: float
    predicted_gib: float


@dataclass(frozen=True)
class Measured:
    trial: Trial
    exit_code: int
    run_dir: str
    step_s: float | None  # median seconds per iteration after the warm-up; None when none was logged
    peak_gib: float | None  # largest max-allocated of Megatron's memory reports (GiB)
    iterations: int  # iteration lines read

    @property
    def error(self) -> float | None:
        # a log claiming 0.0 ms per iteration has no error to show, not a division by zero
        return None if not self.step_s else self.trial.predicted_s / self.step_s - 1


def trials(inputs: plan_report.PlanInputs, count: int, fast_ops_env: str) -> list[Trial]:
    """The `count` fastest predicted layouts that fit: the search's best TP·PP, each also at the neighbouring
    micro batches and the other recompute choices, and (without Transformer Engine, where the launcher's
    compiled fast path is a choice) the best one without the compiled ops."""
    world = inputs.budget.world_size
    result = ps.search(inputs.args, world, inputs.gpu, inputs.budget.gpus_per_node, top=count,
                       allow_sp=inputs.allow_sp, rules=inputs.rules)
    seen: dict[est.Training, ps.Candidate] = {}
    for best in result.best:
        for t in _variants(best.training):
            if t in seen or inputs.rules.problems(t):
                continue
            shape = est.model_shape(inputs.args, t.tp)
            c = ps.evaluate(shape, t, inputs.gpu, inputs.budget.gpus_per_node)
            if c.fit == "fits":
                seen[t] = c
    ranked = sorted(seen.values(), key=ps.rank_key)[:count]
    out = [Trial(ps.describe(c.training), (*inputs.extra_sets, *ps.overrides(c.training, inputs.args)),
                 c.seconds, c.memory.total / est.GIB) for c in ranked]
    # Without Transformer Engine, the best layout again without the compiled ops, in place of the last one; only
    # when there is room for both (one layout asked for: that layout, never none).
    if out and not inputs.kernels.transformer_engine and count > 1:
        out = out[:count - 1]
        first = out[0]
        out.append(replace(first, label=first.label + " (no compiled ops)",
                           sets=(*first.sets, f"env.{fast_ops_env}=norm,scale,adam,nosync")))
    return out


def _variants(t: est.Training) -> Iterator[est.Training]:
    yield t
    i = ps.MICRO_BATCHES.index(t.micro_batch_size) if t.micro_batch_size in ps.MICRO_BATCHES else None
    if i is not None:
        for j in (i - 1, i + 1):
            if 0 <= j < len(ps.MICRO_BATCHES):
                yield replace(t, micro_batch_size=ps.MICRO_BATCHES[j])
    for recompute in ps.RECOMPUTE:
        if recompute != t.recompute:
            yield replace(t, recompute=recompute)


def read_log(path: Path) -> tuple[float | None, float | None, int]:
    """(median seconds per iteration after the warm-up, peak max-allocated GiB, iteration lines) of a log."""
    from launcher import untrusted
    from launcher.runs import logparse

    times: list[tuple[int, float]] = []
    peaks: list[float] = []
    try:  # bounded lines of a regular file (the run's own log, but a run directory is data)
        lines = (line for _, line in zip(range(MAX_LOG_LINES), untrusted.Lines(path, "measurement log", 1 << 30),
                                         strict=False))
        for event in logparse.parse_lines(lines):
            if isinstance(event, logparse.IterationLine) and event.elapsed_ms is not None:
                times.append((event.iteration, event.elapsed_ms / 1000))
            elif isinstance(event, logparse.MemoryReport):
                peaks.append(event.max_allocated_mb * est.MB / est.GIB)
    except (OSError, UserError):
        return None, None, 0
    timed = [s for it, s in times if it > WARMUP_ITERATIONS] or [s for _, s in times[1:]] or [s for _, s in times]
    step = statistics.median(timed) if timed else None
    return step, (max(peaks) if peaks else None), len(times)


def run_trial(ns: Any, trial: Trial, inputs: plan_report.PlanInputs, iterations: int, out: Any) -> Measured:
    """The layout run as `launch` runs it, through the local backend; its log read back."""
    from launcher.backends import local, local_run
    from launcher.cli.job import JobRequest, checked_job
    from launcher.megatron.pin import require_checkout
    from launcher.pipeline.command import build_command
    from launcher.pipeline.preset import load_preset
    from launcher.runs import rundir

    measuring = [f"train_iters={iterations}", "eval_iters=0", "log_interval=1"]
    if inputs.preset.megatron.get("train_samples"):  # a sample-based preset: its schedule in samples goes too
        measuring += [f"{name}=null" for name in SAMPLE_SCHEDULE if inputs.preset.megatron.get(name) is not None]
    preset = load_preset(ns.preset, [*ns.overrides, *trial.sets, *measuring])
    budget = inputs.budget
    # resolved as `launch PRESET` on this budget resolves it (its run directory claimed now)
    job = checked_job(preset, JobRequest(budget.nodes, budget.gpus_per_node, megatron_path=ns.megatron_path,
                                         reserve_run_dir=True))
    command = build_command(job)
    require_checkout(job.megatron_path, job.entry)
    if not ns.no_doctor:
        from launcher.checks.doctor import check_before_launch

        check_before_launch(job, local.process_environment(job.environment))
    assert job.run_dir is not None
    code = local_run.execute(job, command, out=out)
    step, peak, count = read_log(job.run_dir / "logs" / "attempt-1.log")
    checkpoints = job.run_dir / rundir.CHECKPOINTS
    if job.megatron.get("save") == str(checkpoints) and checkpoints.is_dir():
        shutil.rmtree(checkpoints)  # a measurement's final save: the run's own directory, never kept
    return Measured(trial, code, str(job.run_dir), step, peak, count)


def ranked(results: Iterable[Measured]) -> list[Measured]:
    """Measured ones fastest first; failed runs (no step time) after them, in the order they ran."""
    done = [r for r in results if r.step_s is not None and r.exit_code == 0]
    failed = [r for r in results if r not in done]
    return sorted(done, key=lambda r: r.step_s or 0.0) + failed


def records(results: list[Measured], inputs: plan_report.PlanInputs, preset: str,
            settings: Iterable[str] = ()) -> list[dict[str, Any]]:
    """One record per run: what `launch plan --refit` predicts again (preset, the user's --set `settings`, the
    layout's `overrides`) and what was measured."""
    from launcher import MEGATRON_COMMIT, __version__

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return [{
        "time": stamp, "preset": preset, "settings": list(settings), "gpu": inputs.gpu.name,
        "gpus": inputs.budget.world_size,
        "label": r.trial.label, "overrides": list(r.trial.sets), "predicted_s": r.trial.predicted_s,
        "predicted_gib": r.trial.predicted_gib, "measured_s": r.step_s, "measured_peak_gib": r.peak_gib,
        "iterations": r.iterations, "exit_code": r.exit_code, "run_dir": r.run_dir,
        "launcher": __version__, "megatron_commit": MEGATRON_COMMIT,
    } for r in results]


def store(new: list[dict[str, Any]], path: Path) -> tuple[Path, str]:
    """Append to the measurements file (a JSON list, newest last, at most MAX_RECORDS), atomically; returns where
    the records went and a warning. An existing file that cannot be read as one (damaged, too large, not a regular
    file) is left as it is: the new records go to a new file beside it, never lost and never replacing it."""
    from launcher import untrusted
    from launcher.runs.atomic import write_text_atomic

    old: list[Any] = []
    warning = ""
    if os.path.lexists(path):
        try:
            loaded = untrusted.read_json(path, "measurements file", plan_refit.MAX_READ_BYTES)
            if not isinstance(loaded, list):
                raise UserError(f"measurements file {path} is not a list of measurements")
            old = loaded
        except UserError as error:
            target = path.with_name(f"{path.stem}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json")
            warning = (f"warning: {error.problems[0].message}; left as it is, these measurements are stored in "
                       f"{target} (launch plan --refit --measurements {target} reads them)")
            path = target
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps((old + new)[-MAX_RECORDS:], indent=1, allow_nan=False) + "\n")
    return path, warning


def render(results: list[Measured], inputs: plan_report.PlanInputs, stored: Path,
           overrides: Iterable[str] = ()) -> str:
    lines = [f"Measured on this machine ({inputs.budget.world_size} GPU(s); predictions for {inputs.gpu.name}), "
             "fastest first", f"  {'#':>2} {'measured s/iter':>15} {'predicted':>9} {'error':>7} "
             f"{'peak GiB':>8} {'predicted GiB':>13}  layout"]
    for i, r in enumerate(ranked(results), 1):
        measured = f"{r.step_s:15.4f}" if r.step_s is not None else f"{'failed (' + str(r.exit_code) + ')':>15}"
        error = f"{r.error:+7.1%}" if r.error is not None else f"{'':>7}"
        peak = f"{r.peak_gib:8.2f}" if r.peak_gib is not None else f"{'?':>8}"
        lines.append(f"  {i:>2} {measured} {r.trial.predicted_s:9.4f} {error} {peak} {r.trial.predicted_gib:13.2f}"
                     f"  {r.trial.label}")
    lines.append("")
    for i, r in enumerate(ranked(results), 1):
        argv = ["launch", inputs.preset.name, "--gpus-per-node", str(inputs.budget.gpus_per_node)]
        argv += [word for s in (*overrides, *r.trial.sets) for word in ("--set", s)]
        lines.append(f"  #{i}: {shlex.join(argv)}   (run {r.run_dir})")
    lines.append(f"measurements stored in {stored}")
    return "\n".join(lines) + "\n"


def _store_measured(results: list[Measured], inputs: plan_report.PlanInputs, ns: Any) -> tuple[Path, str]:
    path = plan_refit.measurements_path()
    if not results:
        return path, ""
    try:
        return store(records(results, inputs, ns.preset, ns.overrides), path)
    except OSError as error:
        return path, f"warning: the measurements could not be stored in {path}: {error.strerror or error}"


def run(ns: Any) -> int:
    """`launch plan PRESET --measure`: 0 when every layout ran, else the first failed run's exit code."""
    from launcher.backends import local
    from launcher.inside.megatron_ext import FAST_OPS_ENV

    for flag, value in (("--measure-layouts", ns.measure_layouts), ("--measure-iters", ns.measure_iters)):
        if value < 1 or value > 1000:
            raise UserError(Problem(f"{flag} must be between 1 and 1000, got {value}"))
    gpus = ns.gpus_per_node or local.visible_gpus()
    if gpus < 1:
        raise UserError("no GPU is visible on this machine: --measure runs the layouts here",
                        "run it on a GPU machine (plain `launch plan` needs none)")
    if ns.nodes not in (None, 1) or ns.gpus not in (None, gpus):
        raise UserError("--measure runs on this machine only (one node)",
                        f"drop --nodes/--gpus (this machine: {gpus} GPU(s)), or give --gpus-per-node")
    budget = plan_report.Budget(1, gpus)
    _, inputs = plan_report.plan_for(ns, budget)
    chosen = trials(inputs, ns.measure_layouts, FAST_OPS_ENV)
    if not chosen:
        raise UserError(f"no layout of {ns.preset} fits {gpus} × {inputs.gpu.name}", "see `launch plan` for why")
    iterations = max(ns.measure_iters, WARMUP_ITERATIONS + 2)  # at least two timed iterations
    results: list[Measured] = []
    quiet = open(os.devnull, "w")  # noqa: SIM115 - the runs' own logs are in their run directories
    try:
        for i, trial in enumerate(chosen, 1):
            # progress on stderr: stdout is the table, or one JSON document
            print(f"# measuring {i}/{len(chosen)}: {trial.label} ({iterations} iterations)", file=sys.stderr,
                  flush=True)
            results.append(run_trial(ns, trial, inputs, iterations, quiet))
    finally:
        quiet.close()
        # what was measured is stored whatever ends the loop (a later run's failure, Ctrl-C, a full disk)
        path, warning = _store_measured(results, inputs, ns)
    if warning:
        print(warning, file=sys.stderr)
    if ns.format == "json":
        print(json.dumps({"measurements": [asdict(r) | {"error": r.error} for r in ranked(results)],
                          "stored": str(path)}, indent=2, allow_nan=False))
    else:
        sys.stdout.write(render(results, inputs, path, ns.overrides))
    failed = [r.exit_code for r in results if r.exit_code != 0]
    return failed[0] if failed else 0
