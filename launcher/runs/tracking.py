"""A run directory to resume: `launch --resume RUN_DIR` ──open_resume()──► the run's own preset and its record
(resolve points the job at it). Running a job here with its run directory is backends.local_run's."""

from __future__ import annotations

import atexit
import os
import sys
from dataclasses import replace
from pathlib import Path

from launcher import lock
from launcher.errors import Problem, UserError, shown
from launcher.pipeline.environment import is_loader_variable
from launcher.pipeline.k8s_settings import DEFAULT_IMAGE as K8S_DEFAULT_IMAGE
from launcher.pipeline.k8s_settings import DEFAULT_PVC
from launcher.pipeline.preset import LauncherSettings, Preset, load_preset, override_name
from launcher.runs import rundir, secrets

# A run directory is data, not instructions: of its preset.yaml, the settings that decide which program runs (or
# what is loaded into it) are taken only when they are the launcher's own or this command line gives them again.
# Everything else (the model, the data, the batch) is the run's own and is taken as is.
LOCK_FILE = ".launch.lock"


def open_resume(run_dir: str | Path, overrides: list[str],
                megatron_path_given: bool = False) -> tuple[Preset, rundir.ExistingRun]:
    """The run's own resolved preset (plus any new --set) and its record, locked for this launch."""
    existing = rundir.open_run_dir(Path(run_dir))
    lock_path = existing.path / LOCK_FILE
    left = lock.hold(lock_path, f"run directory {existing.path}",
                     "another launch --resume of this run is training; wait for it to end")
    if left:
        print(f"note: {left}", file=sys.stderr)
    # removed when this launch ends (SIGTERM and Ctrl-C end it through Python too): one found later was left by a
    # launch that was killed, and the next one says so
    atexit.register(lock.release, lock_path, True)
    existing = rundir.open_run_dir(existing.path)  # as it is now that this launch holds it
    preset_file = str(existing.path / rundir.PRESET_FILE)
    given = {override_name(text) for text in overrides}
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
    # the claim mounted at the run root in every pod (the checkpoints loaded, and the code where megatron_path or
    # the launcher is on it), the Secret whose keys become the job's environment (whose credentials it uses), and
    # the namespace both names are looked up in
    "k8s.pvc": DEFAULT_PVC,
    "k8s.secret": None,
    "k8s.namespace": "default",
}
# Layer specs the launcher itself names (its own modules, Megatron's): any other is code from somewhere else.
_OWN_SPEC_MODULES = ("launcher.inside.", "megatron.")
# Megatron settings that name Python code it imports and calls (core/fp8_utils.py
# _resolve_callable_from_python_import_path: the custom FP8/FP4 recipe's quantizer factory)
IMPORT_PATH_SETTINGS = ("fp8_quantizer_factory", "fp4_quantizer_factory",
                        # a YAML naming the RL environments' agent classes: `pkg.mod.Class` is imported and
                        # `file.py:Class` executed (megatron/rl/__init__.py import_class)
                        "langrl_env_config")
# #SBATCH options of slurm.extra_sbatch that say where and when a job runs and who hears of it. Any other may choose
# what runs: --export=LD_PRELOAD=…, --export-file, --chdir (the batch script's `python3 -m` imports from its working
# directory first), pyxis' --container-image/-mounts/-env, --get-user-env, a burst buffer's script (--bb, --bbf).
_PLACEMENT_SBATCH = frozenset({
    "mail-type", "mail-user", "constraint", "cluster-constraint", "clusters", "reservation", "comment", "wckey",
    "nice", "priority", "licenses", "exclude", "nodelist", "switches", "begin", "deadline", "hint", "distribution",
    "gpu-bind", "gpu-freq", "cpu-freq", "gpus-per-task", "gpus-per-socket", "cpus-per-gpu", "ntasks-per-gpu",
    "ntasks-per-core", "ntasks-per-socket", "sockets-per-node", "cores-per-socket", "threads-per-core", "mincpus",
    "tmp", "core-spec", "thread-spec", "spread-job", "use-min-nodes", "contiguous", "oversubscribe", "overcommit",
    "kill-on-invalid-dep", "no-kill", "acctg-freq", "power", "network", "exclusive", "x", "w", "C"})


def program_settings(preset: Preset) -> dict[str, object]:
    """The program-choosing settings of `preset` that are not the launcher's own: name → value."""
    settings = preset.launcher
    found: dict[str, object] = {
        "torchrun": settings.torchrun, "megatron_path": settings.megatron_path,
        "slurm.container_image": settings.slurm.get("container_image"),
        "slurm.container_mounts": settings.slurm.get("container_mounts") or None,
        "k8s.image": settings.k8s.get("image", K8S_DEFAULT_IMAGE),
        **{f"k8s.{name}": settings.k8s.get(name, _LAUNCHER_OWN[f"k8s.{name}"])
           for name in ("pvc", "secret", "namespace")},
    }
    chosen = {name: value for name, value in found.items() if value != _LAUNCHER_OWN[name]}
    extra = settings.slurm.get("extra_sbatch")
    extra = [extra] if isinstance(extra, str) else extra if isinstance(extra, list) else []
    choosing = [str(o) for o in extra if str(o).lstrip("-").split("=", 1)[0] not in _PLACEMENT_SBATCH]
    if choosing:
        chosen["slurm.extra_sbatch"] = choosing
    spec = preset.megatron.get("spec")
    if spec is not None and not (isinstance(spec, (list, tuple)) and spec
                                 and str(spec[0]).startswith(_OWN_SPEC_MODULES)):
        chosen["spec"] = spec
    chosen.update({f"env.{name}": value for name, value in settings.env.items() if is_loader_variable(name)})
    for name in IMPORT_PATH_SETTINGS:  # Python that Megatron imports and calls
        if preset.megatron.get(name) is not None:
            chosen[name] = preset.megatron[name]
    if preset.megatron.get("trust_remote_code"):  # Hugging Face then runs the tokenizer directory's own Python
        chosen["trust_remote_code"] = True
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
    where = run.path / rundir.PRESET_FILE
    problems = [Problem(
        f"{where} sets {name}={shown(value)}: a resumed run does not take a program, or what is loaded "
        "into it, from the run directory",
        f"give it on the command line if you mean it: --set {name}=…"
        + (" (or --megatron-path)" if name == "megatron_path" else ""))
        for name, value in chosen]
    problems += [Problem(
        f"{run.path / (rundir.MANIFEST if name == 'load' else rundir.PRESET_FILE)} names the checkpoint {name}="
        f"{shown(path)}, outside the run directory: Megatron unpickles a checkpoint's metadata (torch_dist's "
        ".metadata), and a pickle runs code",
        f"give it on the command line if you mean to load it: --set {name}=…")
        for name, path in checkpoints_elsewhere(preset, run).items() if name not in given]
    if problems:
        raise UserError(problems)


def checkpoints_elsewhere(preset: Preset, run: rundir.ExistingRun) -> dict[str, str]:
    """The checkpoints a resume would load from outside the run directory: the manifest's checkpoint directory
    (--load) and the preset's pretrained_checkpoint. name → path."""
    inside = os.path.normpath(run.path.absolute())
    found = {"load": run.checkpoint_dir, "pretrained_checkpoint": preset.megatron.get("pretrained_checkpoint")}
    return {name: str(path) for name, path in found.items()
            if path and not Path(os.path.normpath(Path(str(path)).absolute())).is_relative_to(inside)}
