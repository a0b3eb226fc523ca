"""A run directory to resume: `launch --resume RUN_DIR` ──open_resume()──► the run's own preset and its record
(resolve points the job at it). Running a job here with its run directory is backends.local_run's."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from launcher import lock
from launcher.errors import Problem, UserError, shown
from launcher.pipeline.preset import Preset, load_preset, parse_override
from launcher.runs import rundir, secrets

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
