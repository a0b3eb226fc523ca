"""A real launch with a run directory: record it, watch the run, judge the end.

    launch --resume RUN_DIR ──open_resume()──► the run's own preset and its record (resolve points the job at it)
    ResolvedJob, Command ──execute()──► run directory written, torchrun started, its output through the Monitor
"""

from __future__ import annotations

import json
import os
import socket
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from launcher import lock
from launcher.errors import Problem, UserError, shown
from launcher.pipeline.command import Command
from launcher.pipeline.environment import is_loader_variable
from launcher.pipeline.k8s_settings import DEFAULT_IMAGE as K8S_DEFAULT_IMAGE
from launcher.pipeline.preset import LauncherSettings, Preset, load_preset, parse_override
from launcher.pipeline.resolve import ResolvedJob
from launcher.runs import rundir, secrets
from launcher.runs.atomic import write_text_atomic
from launcher.runs.monitor import Monitor

# Exit status when the child exited 0 but its log shows a failure (Megatron exits 0 on several failures).
EXIT_FAILED_DESPITE_ZERO = 1


# A run directory is data, not instructions: of its preset.yaml, the settings that decide which program runs (or
# what is loaded into it) are taken only when they are the launcher's own or this command line gives them again.
# Everything else (the model, the data, the batch) is the run's own and is taken as is.
LOCK_FILE = ".launch.lock"


def open_resume(run_dir: str | Path, overrides: list[str],
                megatron_path_given: bool = False) -> tuple[Preset, rundir.ExistingRun]:
    """The run's own resolved preset (plus any new --set) and its record, locked for this launch."""
    existing = rundir.open_run_dir(Path(run_dir))
    lock.hold(existing.path / LOCK_FILE, f"run directory {existing.path}",
              "another launch --resume of this run is training; wait for it to end")
    existing = rundir.open_run_dir(existing.path)  # as it is now that this launch holds it
    preset_file = str(existing.path / rundir.PRESET_FILE)
    given = {parse_override(text)[0].removeprefix("launcher.").removeprefix("megatron.") for text in overrides}
    if megatron_path_given:
        given.add("megatron_path")
    refuse_untrusted_changes(load_preset(preset_file), existing, given)
    preset = load_preset(preset_file, overrides)
    preset = replace(preset, name=str(existing.manifest.get("preset") or existing.path.name))
    # preset.yaml holds <redacted> for secrets: this launch's environment (or a new --set) supplies them.
    env = secrets.restore_from(preset.launcher.env, os.environ)
    preset = replace(preset, launcher=replace(preset.launcher, env=env))
    if existing.manifest.get("entry") == "simple_loop":
        raise UserError(Problem(f"{existing.path} ran upstream's simple training loop, which cannot resume",
                                "start a new run instead"))
    return preset, existing


# Settings that choose the program a job runs (or the code loaded into it), with the value the launcher uses
# when none is given: from a run directory, only that value is taken; any other must be given on the command line.
_LAUNCHER_OWN: dict[str, object] = {
    "torchrun": LauncherSettings.torchrun,
    "megatron_path": None,
    "slurm.container_image": None,
    "slurm.container_mounts": None,
    "k8s.image": K8S_DEFAULT_IMAGE,
}
# Layer specs the launcher itself names (its own modules, Megatron's): any other is code from somewhere else.
_OWN_SPEC_MODULES = ("launcher.inside.", "megatron.")


def program_settings(preset: Preset) -> dict[str, object]:
    """The program-choosing settings of `preset` that are not the launcher's own: name → value."""
    settings = preset.launcher
    found: dict[str, object] = {
        "torchrun": settings.torchrun, "megatron_path": settings.megatron_path,
        "slurm.container_image": settings.slurm.get("container_image"),
        "slurm.container_mounts": settings.slurm.get("container_mounts") or None,
        "k8s.image": settings.k8s.get("image", K8S_DEFAULT_IMAGE),
    }
    chosen = {name: value for name, value in found.items() if value != _LAUNCHER_OWN[name]}
    spec = preset.megatron.get("spec")
    if spec is not None and not (isinstance(spec, (list, tuple)) and spec
                                 and str(spec[0]).startswith(_OWN_SPEC_MODULES)):
        chosen["spec"] = spec
    chosen.update({f"env.{name}": value for name, value in settings.env.items() if is_loader_variable(name)})
    return chosen


def refuse_untrusted_changes(preset: Preset, run: rundir.ExistingRun, given: set[str]) -> None:
    """UserError naming each setting of the run's preset.yaml that chooses a program or what is loaded into it
    (torchrun, megatron_path, a container image, a layer spec, LD_PRELOAD, PYTHONPATH, BASH_ENV, …) and is not the
    launcher's own, unless this command line gives it again. Whatever the manifest says: it is in the same
    directory, so it proves nothing; and on every backend (a local run, Slurm, Kubernetes)."""
    def is_given(name: str) -> bool:
        parts = name.split(".")
        return any(".".join(parts[:n]) in given for n in range(1, len(parts) + 1))

    chosen = [(name, value) for name, value in program_settings(preset).items() if not is_given(name)]
    if chosen:
        where = run.path / rundir.PRESET_FILE
        raise UserError([Problem(
            f"{where} sets {name}={shown(value)}: a resumed run does not take a program, or what is loaded "
            "into it, from the run directory",
            f"give it on the command line if you mean it: --set {name}=…"
            + (" (or --megatron-path)" if name == "megatron_path" else ""))
            for name, value in chosen])


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
    running = _mark_running(job.run_dir)
    try:
        code = local.run(command, local.process_environment(job.environment), cwd=cwd, on_line=monitor.feed)
    except OSError as error:  # the log or metrics could not be written; local.run has stopped training
        failure = error
    finally:
        try:
            summary = monitor.close(code)
        except OSError as error:
            failure = failure or error
        if running is not None:
            try:
                running.unlink(missing_ok=True)
            except OSError:  # the run root went read-only: `launch runs` judges the gone pid as failed anyway
                pass
    if failure is not None:
        raise UserError(rundir.storage_problem(
            f"cannot write the run's records in {job.run_dir}, so training was stopped", failure))
    _say(f"# report: launch report {job.run_dir}", out)
    assert code is not None, "local.run returned, or its failure was raised above"
    if code == 0 and summary.outcome == "failed":
        return EXIT_FAILED_DESPITE_ZERO
    return code


def _mark_running(run_dir: Path) -> Path | None:
    """running.json: this launcher's pid and host while it runs the job (`launch runs` shows it running, or
    failed once that process is gone without a summary). Best effort: the run does not depend on it."""
    path = run_dir / rundir.RUNNING_FILE
    record = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": datetime.now(UTC).isoformat(timespec="seconds")}
    try:
        write_text_atomic(path, json.dumps(record) + "\n")
    except OSError:
        return None
    return path


def _say(text: str, out: IO[str]) -> None:
    try:
        print(text, file=out, flush=True)
    except OSError:  # the terminal is gone (a hangup); the run directory has everything
        pass
