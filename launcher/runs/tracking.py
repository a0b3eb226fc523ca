"""A real launch with a run directory: record it, watch the run, judge the end.

    launch --resume RUN_DIR ──open_resume()──► the run's own preset and its record (resolve points the job at it)
    ResolvedJob, Command ──execute()──► run directory written, torchrun started, its output through the Monitor
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import IO

from launcher.errors import Problem, UserError
from launcher.pipeline.command import Command
from launcher.pipeline.preset import Preset, load_preset
from launcher.pipeline.resolve import ResolvedJob
from launcher.runs import rundir, secrets
from launcher.runs.monitor import Monitor

# Exit status when the child exited 0 but its log shows a failure (Megatron exits 0 on several failures).
EXIT_FAILED_DESPITE_ZERO = 1


def open_resume(run_dir: str | Path, overrides: list[str]) -> tuple[Preset, rundir.ExistingRun]:
    """The run's own resolved preset (plus any new --set) and its record."""
    existing = rundir.open_run_dir(Path(run_dir))
    preset = load_preset(str(existing.path / rundir.PRESET_FILE), overrides)
    preset = replace(preset, name=str(existing.manifest.get("preset") or existing.path.name))
    # preset.yaml holds <redacted> for secrets: this launch's environment (or a new --set) supplies them.
    env = secrets.restore_from(preset.launcher.env, os.environ)
    preset = replace(preset, launcher=replace(preset.launcher, env=env))
    if existing.manifest.get("entry") == "simple_loop":
        raise UserError(Problem(f"{existing.path} ran upstream's simple training loop, which cannot resume",
                                "start a new run instead"))
    return preset, existing


def execute(job: ResolvedJob, command: Command, *, extra_files: dict[str, str] | None = None,
            out: IO[str] | None = None) -> int:
    """Write (or extend) the run directory, run the command here through the monitor, return the exit status."""
    from launcher.backends import local

    assert job.run_dir is not None, "a training run has a run directory"
    out = out or sys.stdout
    local.runnable_argv(command)  # the checks local.run makes, before anything is written
    if job.existing is None:
        rundir.create_run_dir(job, command, list(job.preset.overrides), run_dir=job.run_dir,
                              megatron_path=job.megatron_path, extra_files=extra_files)
    else:
        rundir.record_attempt(job.existing, command.argv, command.env)
    print(f"# run directory: {job.run_dir}", file=out, flush=True)
    save = job.megatron.get("save")
    try:
        monitor = Monitor(job.run_dir, checkpoint_dir=Path(save) if save else None,
                          seq_length=job.megatron.get("seq_length"), out=out)
    except OSError as error:
        raise UserError(rundir.storage_problem(f"cannot write the run's log in {job.run_dir}", error)) from None
    # The simple loop writes its checkpoint to $PWD/ckpt: run it inside the run directory.
    cwd = str(job.run_dir) if job.entry == "simple_loop" else None
    code, failure = None, None
    try:
        code = local.run(command, local.process_environment(job.environment), cwd=cwd, on_line=monitor.feed)
    except OSError as error:  # the log or metrics could not be written; local.run has stopped training
        failure = error
    finally:
        try:
            summary = monitor.close(code)
        except OSError as error:
            failure = failure or error
    if failure is not None:
        raise UserError(rundir.storage_problem(
            f"cannot write the run's records in {job.run_dir}, so training was stopped", failure))
    _say(f"# report: launch report {job.run_dir}", out)
    assert code is not None, "local.run returned, or its failure was raised above"
    if code == 0 and summary.outcome == "failed":
        return EXIT_FAILED_DESPITE_ZERO
    return code


def _say(text: str, out: IO[str]) -> None:
    try:
        print(text, file=out, flush=True)
    except OSError:  # the terminal is gone (a hangup); the run directory has everything
        pass
