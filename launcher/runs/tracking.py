"""A real launch with a run directory: point Megatron at it, record it, watch the run, judge the end.

    preset ──prepare()──► preset with save/load/tensorboard in runs/<preset>-<UTC>/ (or the resumed run's)
    plan, command ──execute()──► run directory written, torchrun started, its output through the Monitor
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from launcher.errors import Problem, UserError
from launcher.pipeline.preset import Preset, load_preset
from launcher.runs import rundir, secrets
from launcher.runs.monitor import Monitor

# Exit status when the child exited 0 but its log shows a failure (Megatron exits 0 on several failures).
EXIT_FAILED_DESPITE_ZERO = 1


@dataclass(frozen=True)
class Prepared:
    preset: Preset  # with the run directory's Megatron settings
    run_dir: Path
    existing: rundir.ExistingRun | None  # set when resuming

    @property
    def checkpoint_dir(self) -> Path | None:
        save = self.preset.megatron.get("save")
        return Path(save) if save else None


def _with_megatron(preset: Preset, extra: dict[str, Any]) -> Preset:
    return replace(preset, megatron={**preset.megatron, **extra})


def prepare_new(preset: Preset, entry: str) -> Prepared:
    """A new run directory path; `entry` is the plan's (toy falls back to pretrain_gpt on one GPU)."""
    path = rundir.new_run_dir_path(Path(preset.launcher.run_root), preset.name)
    if entry == "simple_loop":  # takes no arguments; it checkpoints into $PWD/ckpt
        return Prepared(preset, path, None)
    return Prepared(_with_megatron(preset, rundir.run_dir_megatron_args(path, preset.megatron)), path, None)


def prepare_resume(run_dir: str | Path, overrides: list[str]) -> Prepared:
    """The run's own resolved preset (plus any new --set), with --save = --load = its checkpoint directory."""
    existing = rundir.open_run_dir(Path(run_dir))
    preset_file = existing.path / rundir.PRESET_FILE
    preset = load_preset(str(preset_file), overrides)
    preset = replace(preset, name=str(existing.manifest.get("preset") or existing.path.name))
    # preset.yaml holds <redacted> for secrets: this launch's environment (or a new --set) supplies them.
    env = secrets.restore_from(preset.launcher.env, os.environ)
    preset = replace(preset, launcher=replace(preset.launcher, env=env))
    if existing.manifest.get("entry") == "simple_loop":
        raise UserError(Problem(f"{existing.path} ran upstream's simple training loop, which cannot resume",
                                "start a new run instead"))
    return Prepared(_with_megatron(preset, existing.resume_megatron_args()), existing.path, existing)


def execute(prepared: Prepared, plan: Any, command: Any, megatron_path: Path, *,
            extra_files: dict[str, str] | None = None, out: IO[str] | None = None) -> int:
    """Write (or extend) the run directory, run the command here through the monitor, return the exit status."""
    from launcher.backends import local

    out = out or sys.stdout
    local.resolved_argv(command)  # the checks local.run makes, before anything is written
    if shutil.which(command.argv[0]) is None:
        raise UserError(f"{command.argv[0]} is not on PATH",
                        "install torch in this environment, or --set torchrun=PATH")
    if prepared.existing is None:
        rundir.create_run_dir(plan, command, list(prepared.preset.overrides), run_dir=prepared.run_dir,
                              megatron_path=megatron_path, extra_files=extra_files)
    else:
        rundir.record_attempt(prepared.existing, command.argv, command.env)
    print(f"# run directory: {prepared.run_dir}", file=out, flush=True)
    monitor = Monitor(prepared.run_dir, checkpoint_dir=prepared.checkpoint_dir,
                      seq_length=prepared.preset.megatron.get("seq_length"), out=out)
    # The simple loop writes its checkpoint to $PWD/ckpt: run it inside the run directory.
    cwd = str(prepared.run_dir) if plan.entry == "simple_loop" else None
    code = None
    try:
        code = local.run(command, cwd=cwd, on_line=monitor.feed)
    finally:
        summary = monitor.close(code)
    print(f"# report: launch report {prepared.run_dir}", file=out, flush=True)
    if code == 0 and summary.outcome == "failed":
        return EXIT_FAILED_DESPITE_ZERO
    return code
