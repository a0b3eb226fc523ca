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
from launcher.pipeline.preset import Preset, load_preset, parse_override
from launcher.pipeline.resolve import ResolvedJob
from launcher.runs import rundir, secrets
from launcher.runs.atomic import write_text_atomic
from launcher.runs.monitor import Monitor

# Exit status when the child exited 0 but its log shows a failure (Megatron exits 0 on several failures).
EXIT_FAILED_DESPITE_ZERO = 1


# A run directory is data, not instructions: of its preset.yaml, the settings that decide which program runs (or
# what is loaded into it) must be what the run's first attempt ran, as its manifest records, unless this command
# line gives them again. Everything else (the model, the data, the batch) is the run's own and is taken as is.
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


def refuse_untrusted_changes(preset: Preset, run: rundir.ExistingRun, given: set[str]) -> None:
    """UserError for each program-deciding setting of the run's preset.yaml that differs from its first attempt."""
    attempts = run.manifest.get("attempts") or []
    first = attempts[0] if attempts and isinstance(attempts[0], dict) else {}
    argv = [str(word) for word in first.get("argv") or []] if isinstance(first.get("argv"), list) else []
    env: dict = first["env"] if isinstance(first.get("env"), dict) else {}
    megatron_lm: dict = run.manifest["megatron_lm"] if isinstance(run.manifest.get("megatron_lm"), dict) else {}
    # What a local attempt records is torchrun's own argv and environment; a Slurm or Kubernetes attempt records
    # its submit command (sbatch …, kubectl …), which shows neither: those are compared where recorded.
    ran_torchrun = "--nnodes" in argv[1:]
    launched: dict[str, object] = {
        "entry": run.manifest.get("entry"),
        "megatron_path": megatron_lm.get("path"),
    }
    settings = preset.launcher
    now: dict[str, object] = {"entry": settings.entry, "megatron_path": settings.megatron_path}
    if ran_torchrun:
        launched.update(torchrun=argv[argv.index("--nnodes") - 1], spec=_flag_values(argv, "--spec"))
        now.update(torchrun=settings.torchrun, spec=preset.megatron.get("spec"))
    changed = [(name, now[name], launched[name]) for name in now
               if name not in given and now[name] is not None and now[name] != launched[name]]
    if ran_torchrun:
        changed += [(f"env.{name}", value, env.get(name)) for name, value in settings.env.items()
                    if f"env.{name}" not in given and value != secrets.REDACTED and env.get(name) != value]
    if changed:
        where = run.path / rundir.PRESET_FILE
        raise UserError([Problem(
            f"{where} sets {name}={shown(value)}, but the run's first attempt ran with "
            f"{'no ' + name if before is None else shown(before)} (manifest.json): a resumed run does not take "
            "a program or its environment from the run directory", f"give it on the command line if you mean it: "
            f"--set {name}=…" + (" (or --megatron-path)" if name == "megatron_path" else ""))
            for name, value, before in changed])


def _flag_values(argv: list[str], flag: str) -> list[str] | None:
    """The words after `flag` up to the next flag; None when the flag is not there."""
    if flag not in argv:
        return None
    start = argv.index(flag) + 1
    end = next((i for i in range(start, len(argv)) if argv[i].startswith("--")), len(argv))
    return argv[start:end]


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
            running.unlink(missing_ok=True)
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
