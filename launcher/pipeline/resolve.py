"""One resolution step: preset + target + world + run directory + kernels of the target → one ResolvedJob.

    preset (base:, file, --set) ──┐
    target: here | Slurm | Slurm in a container image
    world: nodes × GPUs per node  ├─► resolve() ─► ResolvedJob ─► Command ─► dry-run · local run · sbatch · records
    run directory (new or resumed)│                    └─► checks, estimates
    kernels where the job runs ───┘

Every Megatron setting is decided here, in this order, and only then checked: the entry (the toy's one-GPU
fallback; --preflight's all-reduce), the micro batch, the settings for a missing TE/apex, the run directory's
paths, and the signal handling a Slurm job needs to checkpoint at its time limit. After this, nothing adds or
changes a Megatron setting: every consumer reads the one ResolvedJob.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from launcher.checks.data import check_data, check_data_sources, data_files
from launcher.errors import Problem, UserError
from launcher.megatron.pin import Kernels
from launcher.pipeline import kernels as kernel_rules
from launcher.pipeline.layout import Layout, check, choose_entry, choose_micro_batch
from launcher.pipeline.preset import Preset
from launcher.runs import rundir

PREFLIGHT = "allreduce"  # --preflight: the job's torchrun and rendezvous run an all-reduce instead of training
NO_KERNELS = Kernels(False, False, "preset")


@dataclass(frozen=True)
class Target:
    """Where the job runs: here, on Slurm's nodes as they are, on Slurm's nodes inside a container image, or in a
    Kubernetes JobSet's pods (always an image)."""

    slurm: bool = False
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()
    kubernetes: bool = False

    @property
    def remote(self) -> bool:
        """A batch job on a cluster's nodes: it may be stopped, restarted and resumed from its checkpoints."""
        return self.slurm or self.kubernetes

    def describe(self) -> str:
        if self.kubernetes:
            return f"Kubernetes, container image {self.container_image}"
        if self.container_image:
            return f"Slurm, container image {self.container_image}"
        return "Slurm" if self.slurm else "here"


HERE = Target()


@dataclass(frozen=True)
class ResolvedJob:
    """The job as it will run; what the checks saw is what every consumer prints, records and runs."""

    preset: Preset  # its megatron: every setting the job passes to Megatron, exactly as passed
    layout: Layout
    nodes: int
    gpus_per_node: int
    entry: str  # "pretrain_gpt", "simple_loop", or "allreduce" (--preflight)
    kernels: Kernels  # as found where the job runs
    megatron_path: Path
    target: Target = HERE
    run_dir: Path | None = None  # checkpoints, TensorBoard and logs go here (None: a preflight run here)
    existing: rundir.ExistingRun | None = None  # set when resuming that run
    added: Mapping[str, Any] = field(default_factory=dict)  # Megatron settings the launcher added: dest → value
    kernel_flags: Mapping[str, Any] = field(default_factory=dict)  # the part of `added` for a missing TE/apex
    notes: tuple[str, ...] = ()  # said once to the user (fallbacks, resolutions)
    warnings: tuple[str, ...] = ()  # legal but probably not what the user wants
    unseen_files: tuple[str, ...] = ()  # data files this machine cannot see: checked on the node at job start

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def megatron(self) -> dict[str, Any]:
        return dict(self.preset.megatron)


def world(preset: Preset, nodes: int | None, gpus_per_node: int | None,
          gpus_here: Callable[[], int] | None = None) -> tuple[int, int, list[str]]:
    """Nodes and GPUs per node, the same for a dry-run and a run: as given, else the preset's. A one-node job
    that runs here (`gpus_here` counts this machine's GPUs) takes at most this machine's GPUs. Asked only when it
    matters, so a 175B dry-run never waits for nvidia-smi. (nodes, GPUs per node, notes)"""
    nodes = preset.launcher.nodes if nodes is None else nodes
    notes = []
    if gpus_per_node is None:
        gpus_per_node = preset.launcher.gpus_per_node
        here = gpus_here() if gpus_here is not None and nodes == 1 and gpus_per_node > 1 else 0
        if 0 < here < gpus_per_node:
            notes.append(f"this machine has {here} GPU(s): {here} instead of the preset's {gpus_per_node} "
                         "(--gpus-per-node N to choose)")
            gpus_per_node = here
    bad = [Problem(f"{name} must be at least 1, got {value}") for name, value in
           (("--nodes", nodes), ("--gpus-per-node", gpus_per_node)) if value < 1]
    if bad:
        raise UserError(bad)
    return nodes, gpus_per_node, notes


def target_for(preset: Preset, slurm: bool, kubernetes: bool = False) -> Target:
    if kubernetes:
        from launcher.pipeline.k8s_settings import parse_k8s_settings

        return Target(kubernetes=True, container_image=parse_k8s_settings(preset.launcher.k8s).image)
    if not slurm:
        return HERE
    from launcher.pipeline.slurm_settings import check_environment, parse_slurm_settings

    try:
        settings = parse_slurm_settings(preset.launcher.slurm)
    except UserError as exc:  # the environment's problems in the same breath, not one round trip later
        raise UserError([*exc.problems, *check_environment(preset.launcher.env)]) from None
    return Target(True, settings.container_image, settings.container_mounts)


def kernels_of(preset: Preset, target: Target) -> Kernels:
    launcher = preset.launcher
    return kernel_rules.kernels_for(launcher.transformer_engine, launcher.apex, slurm=target.slurm,
                                    container_image=target.container_image)


def resolve(preset: Preset, nodes: int | None = None, gpus_per_node: int | None = None, *,
            kernels: Kernels = NO_KERNELS, megatron_path: Path = Path("."), target: Target = HERE,
            run_dir: Path | None = None, existing: rundir.ExistingRun | None = None,
            preflight: bool = False, gpus_here: Callable[[], int] | None = None) -> ResolvedJob:
    """Decide every setting, then check them all; UserError lists every problem at once.

    `gpus_here` counts this machine's GPUs when the job runs here (see `world`)."""
    nodes, gpus_per_node, world_notes = world(preset, nodes, gpus_per_node, gpus_here)
    job, problems = resolve_settings(preset, nodes, gpus_per_node, kernels=kernels, megatron_path=megatron_path,
                                     target=target, run_dir=run_dir, existing=existing, preflight=preflight)
    # a micro batch the launcher picked is never blamed in a batch hint: the user did not choose it
    picked = preset.megatron.get("micro_batch_size") is None and preset.launcher.max_micro_batch_size is not None
    layout, found, warnings = check(job.preset, job.world_size, gpus_per_node, kernels.transformer_engine,
                                    kernels.apex, micro_batch_picked=picked)
    problems += found
    unseen: list[str] = []
    if job.entry == "pretrain_gpt":  # the simple loop brings its own mock data; the all-reduce reads none
        found, unseen = _check_data(job.preset.effective(), target)
        problems += found
        if unseen:
            warnings.append("this machine cannot see the data files " + ", ".join(unseen) + "; the job checks "
                            "them on its first node at start")
    if problems or layout is None:
        raise UserError(problems)
    return replace(job, layout=layout, notes=(*world_notes, *job.notes), warnings=(*job.warnings, *warnings),
                   unseen_files=tuple(unseen))


def resolve_settings(preset: Preset, nodes: int, gpus_per_node: int, *, kernels: Kernels = NO_KERNELS,
                     megatron_path: Path = Path("."),
                     target: Target = HERE, run_dir: Path | None = None,
                     existing: rundir.ExistingRun | None = None, preflight: bool = False
                     ) -> tuple[ResolvedJob, list[Problem]]:
    """Every setting decided, nothing checked yet: the job (its layout still a placeholder) and the problems
    found while deciding. `launch --check` puts these settings to Megatron even when the launcher refuses."""
    world_size = nodes * gpus_per_node
    preset, entry, notes, problems = choose_entry(preset, world_size)
    preset, notes = choose_micro_batch(preset, world_size, notes)
    added: dict[str, Any] = {}
    kernel_flags: dict[str, Any] = {}
    if preflight:
        entry = PREFLIGHT
    elif entry == "pretrain_gpt":
        kernel_flags = kernel_rules.fallbacks(preset.megatron, kernels)
        notes = [*notes, *kernel_rules.fast_path_notes(preset.megatron, kernels)]
        problems = [*problems, *kernel_rules.fast_path_problems(preset.megatron, kernels)]
        added.update(kernel_flags)
        megatron = {**preset.megatron, **kernel_flags}
        if existing is not None:  # --save = --load = the run's own checkpoints
            added.update(existing.resume_megatron_args())
            megatron.update(existing.resume_megatron_args())
        if run_dir is not None:
            paths = rundir.run_dir_megatron_args(run_dir, megatron)
            added.update(paths)
            megatron.update(paths)
        if target.remote and run_dir is not None:
            signal_settings, more_notes, signal_problems = _time_limit_settings(preset.megatron, megatron)
            added.update(signal_settings)
            megatron.update(signal_settings)
            notes, problems = [*notes, *more_notes], [*problems, *signal_problems]
        preset = replace(preset, megatron=megatron)
    job = ResolvedJob(preset=preset, layout=_NO_LAYOUT, nodes=nodes, gpus_per_node=gpus_per_node, entry=entry,
                      kernels=kernels, megatron_path=megatron_path, target=target,
                      run_dir=Path(run_dir).absolute() if run_dir is not None else None, existing=existing,
                      added=added, kernel_flags=kernel_flags, notes=tuple(notes))
    return job, problems


_NO_LAYOUT = Layout(world_size=0, tp=0, pp=0, cp=0, ep=0, dp=0, vpp=None, micro_batch_size=0, global_batch_size=0,
                    num_microbatches=0, sequence_parallel=False)


def _time_limit_settings(given: Mapping[str, Any], megatron: Mapping[str, Any]
                         ) -> tuple[dict[str, Any], list[str], list[Problem]]:
    """What a requeued or chained Slurm job (or a restarted Kubernetes JobSet) needs to checkpoint when it is
    stopped, where the preset leaves it open.

    The batch script forwards SIGTERM to the ranks before the limit (on Kubernetes the kubelet sends it, and
    torchrun forwards it); Megatron's --exit-signal-handler (default signal SIGTERM) then saves a checkpoint and
    exits, and the next attempt resumes from --load."""
    settings: dict[str, Any] = {}
    notes: list[str] = []
    signal_name = megatron.get("exit_signal") or "SIGTERM"
    if signal_name != "SIGTERM":
        return settings, notes, [Problem(
            f"exit_signal={signal_name} would never fire: the ranks are stopped with SIGTERM",
            "remove exit_signal from the preset (Megatron's default is SIGTERM)")]
    if megatron.get("exit_signal_handler") is None:
        settings["exit_signal_handler"] = True
    elif not megatron["exit_signal_handler"]:
        notes.append("exit_signal_handler is off: at the time limit the ranks stop without saving a checkpoint")
    if not given.get("save_interval") and megatron["save_interval"] >= rundir.PERIODIC_SAVE_ITERATIONS:
        retain = megatron.get("save_retain_interval")
        notes.append(f"a checkpoint every {megatron['save_interval']} iterations (set save_interval=N to change)"
                     + (f"; of the older ones, only every {retain}th iteration's is kept (save_retain_interval)"
                        if retain else ""))
    if megatron["load"] != megatron["save"]:
        notes.append(f"load={megatron['load']} differs from save={megatron['save']}: "
                     f"a requeued or chained attempt restarts from {megatron['load']}")
    return settings, notes, []


def _check_data(args: Mapping[str, Any], target: Target) -> tuple[list[Problem], list[str]]:
    """Here, every data check (exit 2 before launch). For Slurm, the same when this machine sees the files;
    otherwise only the checks that need no file, and the files this machine cannot see."""
    if target.remote:
        unseen = [path for path in data_files(args) if not os.path.exists(path)]
        if unseen:
            return check_data_sources(args), unseen
    return check_data(args), []
