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
from types import MappingProxyType
from typing import Any, Protocol

from launcher import slurm_names
from launcher.errors import Problem, UserError
from launcher.megatron import args as megatron_args
from launcher.megatron.effective import effective_settings
from launcher.megatron.pin import Kernels
from launcher.pipeline import kernels as kernel_rules
from launcher.pipeline import startup
from launcher.pipeline.checker import Layout, check, choose_entry, choose_micro_batch, microbatches_per_step
from launcher.pipeline.environment import JobEnvironment, job_environment, per_worker_variables_given, uses_fsdp
from launcher.pipeline.inert_settings import inert_settings
from launcher.pipeline.k8s_settings import K8sSettings, parse_k8s_settings
from launcher.pipeline.load_rules import (
    checkpoint_needed,
    nothing_left_to_train,
    optimizer_state_unloadable,
    training_iterations,
)
from launcher.pipeline.node_range import ElasticNodes
from launcher.pipeline.preset import Preset, parse_override
from launcher.pipeline.run_paths import PERIODIC_SAVE_ITERATIONS, run_dir_megatron_args
from launcher.pipeline.runner import TORCHRUN, Runner, choose_runner
from launcher.pipeline.runtime import DEFAULT_TORCHRUN, Runtime, runtime_for
from launcher.pipeline.slurm_settings import SlurmSettings, check_environment, parse_slurm_settings
from launcher.pipeline.unused_overrides import JobFacts, overrides_not_given_again, unused_overrides

PREFLIGHT = "allreduce"  # --preflight: the job's torchrun and rendezvous run an all-reduce instead of training
NO_KERNELS = Kernels(False, False, "preset")
# The data check that needs files (launcher.checks.data.check_job_data), given by the caller: (every Megatron
# argument as Megatron sees it, whether the job runs on a cluster's nodes, whether this Python is the job's: not
# in a container image) → (problems, data files this machine cannot see).
DataCheck = Callable[[Mapping[str, Any], bool, bool], tuple[list[Problem], list[str]]]


@dataclass(frozen=True)
class Placement:
    """Where the job runs: here, on Slurm's nodes as they are, on Slurm's nodes inside a container image, or in a
    Kubernetes JobSet's pods (always an image); for Slurm and Kubernetes, their settings, parsed once."""

    slurm: bool = False
    container_image: str | None = None
    container_mounts: tuple[str, ...] = ()
    slurm_settings: SlurmSettings | None = None
    kubernetes: bool = False
    k8s_settings: K8sSettings | None = None

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


HERE = Placement()


class ResumedRun(Protocol):
    """The run directory a job resumes (launcher.runs.rundir.ExistingRun): what resolve and the recorders read."""

    @property
    def path(self) -> Path: ...

    @property
    def manifest(self) -> dict[str, Any]: ...

    def resume_megatron_args(self) -> dict[str, Any]: ...


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class ResolvedJob:
    """The job as it will run; what the checks saw is what every consumer prints, records and runs."""

    preset: Preset  # as written (base:, file, --set): resolve never changes it
    megatron: Mapping[str, Any]  # every setting the job passes to Megatron, in argv order, exactly as passed
    layout: Layout
    nodes: int
    gpus_per_node: int
    entry: str  # "pretrain_gpt", "simple_loop", or "allreduce" (--preflight)
    kernels: Kernels  # as found where the job runs
    megatron_path: Path
    target: Placement = HERE
    environment: JobEnvironment = field(default_factory=JobEnvironment)  # every rank's, decided before the checks
    rdzv_port: int = 29500  # torchrun's c10d rendezvous on the first node (several nodes)
    run_dir: Path | None = None  # checkpoints, TensorBoard and logs go here (None: a preflight run here)
    existing: ResumedRun | None = None  # set when resuming that run
    added: Mapping[str, Any] = field(default_factory=dict)  # what the launcher decided: dest → value as passed
    kernel_flags: Mapping[str, Any] = field(default_factory=dict)  # the part of `added` for a missing TE/apex
    notes: tuple[str, ...] = ()  # said once to the user (fallbacks, resolutions)
    warnings: tuple[str, ...] = ()  # legal but probably not what the user wants
    unseen_files: tuple[str, ...] = ()  # data files this machine cannot see: checked on the node at job start
    runtime: Runtime = field(default_factory=lambda: runtime_for(DEFAULT_TORCHRUN))  # its Python, torchrun
    runner: Runner = Runner(TORCHRUN, "default")  # torchrun, or the one process here started directly
    # --nodes MIN-MAX: the counts the job may start with (pipeline/elastic.py); `nodes` is the highest of them
    elastic: ElasticNodes | None = None
    # the vocabulary the tokenizer gives where vocab_size is not set (its files or a known default, read by the
    # caller: cli/job.py), for the estimates only: the command does not change
    tokenizer_vocab: int | None = None

    def __post_init__(self) -> None:
        for name in ("megatron", "added", "kernel_flags"):  # immutable all the way down, not only frozen
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def arg(self, dest: str) -> Any:
        """The value Megatron will see: the job's, else Megatron's own default."""
        value = self.megatron.get(dest)
        return megatron_args.catalog()[dest].default if value is None else value

    def effective(self) -> dict[str, Any]:
        """Every Megatron argument as Megatron will see it (defaults filled in)."""
        return {dest: self.arg(dest) for dest in megatron_args.catalog()}

    def as_checked(self) -> Preset:
        """The preset with every setting the job passes: what the rules judge."""
        return replace(self.preset, megatron=dict(self.megatron))


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


def target_for(preset: Preset, slurm: bool, kubernetes: bool = False) -> Placement:
    """Where the job runs; for Slurm or Kubernetes, its settings parsed (the only place they are)."""
    if kubernetes:
        k8s = parse_k8s_settings(preset.launcher.k8s)
        return Placement(kubernetes=True, container_image=k8s.image, k8s_settings=k8s)
    if not slurm:
        return HERE
    try:
        settings = parse_slurm_settings(preset.launcher.slurm)
    except UserError as exc:  # the environment's problems in the same breath, not one round trip later
        raise UserError([*exc.problems, *check_environment(preset.launcher.env)]) from None
    return Placement(True, settings.container_image, settings.container_mounts, settings)


def kernels_of(preset: Preset, target: Placement) -> Kernels:
    launcher = preset.launcher
    return kernel_rules.kernels_for(launcher.transformer_engine, launcher.apex, slurm=target.slurm,
                                    container_image=target.container_image, packages=launcher.packages)


def resolve(preset: Preset, nodes: int | None = None, gpus_per_node: int | None = None, *,
            kernels: Kernels = NO_KERNELS, megatron_path: Path = Path("."), target: Placement = HERE,
            run_dir: Path | None = None, existing: ResumedRun | None = None,
            preflight: bool = False, gpus_here: Callable[[], int] | None = None,
            inherited_env: Mapping[str, str] | None = None, data_check: DataCheck | None = None) -> ResolvedJob:
    """Decide every setting, then check them all; UserError lists every problem at once (see `attempt`)."""
    job, problems = attempt(preset, nodes, gpus_per_node, kernels=kernels, megatron_path=megatron_path,
                            target=target, run_dir=run_dir, existing=existing, preflight=preflight,
                            gpus_here=gpus_here, inherited_env=inherited_env, data_check=data_check)
    if problems:
        raise UserError(problems)
    return job


def attempt(preset: Preset, nodes: int | None = None, gpus_per_node: int | None = None, *,
            kernels: Kernels = NO_KERNELS, megatron_path: Path = Path("."), target: Placement = HERE,
            run_dir: Path | None = None, existing: ResumedRun | None = None,
            preflight: bool = False, gpus_here: Callable[[], int] | None = None,
            inherited_env: Mapping[str, str] | None = None, data_check: DataCheck | None = None
            ) -> tuple[ResolvedJob, list[Problem]]:
    """Decide every setting, then check them all: the job and every problem (none: it may run). `launch show` and
    `launch --check` show the job the launcher would run even when it refuses.

    `gpus_here` counts this machine's GPUs when the job runs here (see `world`); `inherited_env` is the
    environment the launch starts in, which the ranks inherit (a local run's; sbatch exports the submitter's;
    None: this process's);
    `data_check` checks the data files where this machine can see them."""
    nodes_given, gpus_per_node_given = nodes is not None, gpus_per_node is not None
    nodes, gpus_per_node, world_notes = world(preset, nodes, gpus_per_node, gpus_here)
    job, problems = resolve_settings(preset, nodes, gpus_per_node, kernels=kernels, megatron_path=megatron_path,
                                     target=target, run_dir=run_dir, existing=existing, preflight=preflight,
                                     inherited_env=inherited_env)
    # a micro batch the launcher picked is never blamed in a batch hint: the user did not choose it
    picked = preset.megatron.get("micro_batch_size") is None and preset.launcher.max_micro_batch_size is not None
    layout, found, warnings = check(job.as_checked(), job.world_size, gpus_per_node, kernels.transformer_engine,
                                    kernels.apex, micro_batch_picked=picked, env=job.environment,
                                    te_version=kernels.te_version, torchao_available=kernels.torchao)
    problems += found
    warnings += unused_overrides(preset, JobFacts(
        slurm=target.slurm, kubernetes=target.kubernetes, nodes=job.nodes, gpus_per_node=job.gpus_per_node,
        entry=job.entry, direct=job.runner.direct, resumed=existing is not None,
        slurm_rdzv_port=target.slurm_settings.rdzv_port if target.slurm_settings is not None else None,
        nodes_given=nodes_given, gpus_per_node_given=gpus_per_node_given))
    warnings += per_worker_variables_given(preset.launcher.env)
    if existing is not None:
        warnings += overrides_not_given_again(existing.manifest, preset.overrides)
    if job.entry == "pretrain_gpt":
        warnings += inert_settings(preset.megatron, effective_settings(job.megatron).__getitem__)
        problems += checkpoint_needed(preset.megatron, job.megatron, existing is not None, target.remote)
        problems += optimizer_state_unloadable(job.megatron, kernels.transformer_engine, kernels.apex, target.remote)
        if layout is not None:
            iterations = training_iterations(job.megatron, layout.global_batch_size, bool(layout.batch_schedule))
            problems += nothing_left_to_train(job.megatron, iterations, layout.global_batch_size)
    unseen: list[str] = []
    if job.entry == "pretrain_gpt" and data_check is not None:  # the simple loop brings its own mock data
        found, unseen = data_check(job.effective(), target.remote, not target.container_image)
        # about files on the target, which Megatron's argument checks never open: no disagreement with them
        problems += [replace(p, stage="data") if p.stage == "validate" else p for p in found]
        if unseen:
            warnings.append("this machine cannot see the data files " + ", ".join(unseen) + "; the job checks "
                            "them on its first node at start")
    if layout is None and not problems:
        problems.append(Problem("the layout could not be derived"))  # check() says why; a guard, not a rule
    return replace(job, layout=layout or job.layout, notes=(*world_notes, *job.notes),
                   warnings=(*job.warnings, *warnings), unseen_files=tuple(unseen)), problems


def resolve_settings(preset: Preset, nodes: int, gpus_per_node: int, *, kernels: Kernels = NO_KERNELS,
                     megatron_path: Path = Path("."),
                     target: Placement = HERE, run_dir: Path | None = None,
                     existing: ResumedRun | None = None, preflight: bool = False,
                     inherited_env: Mapping[str, str] | None = None) -> tuple[ResolvedJob, list[Problem]]:
    """Every setting decided, nothing checked yet: the job (its layout still a placeholder) and the problems
    found while deciding."""
    world_size = nodes * gpus_per_node
    written = preset.megatron
    chosen, entry, notes, problems = choose_entry(preset, world_size)
    chosen, notes = choose_micro_batch(chosen, world_size, notes)
    megatron: dict[str, Any] = dict(chosen.megatron)
    kernel_flags: dict[str, Any] = {}
    if preflight and entry == "pretrain_gpt":
        # the all-reduce takes no Megatron flags; its settings stay the training job's it precedes, as that job runs
        # them, so that its header's estimate is the dry-run's of that job
        kernel_flags = kernel_rules.fallbacks(megatron, kernels, microbatches_per_step(chosen, world_size))
        megatron.update(kernel_flags)
    if preflight:
        entry = PREFLIGHT
        if target.slurm_settings is not None:  # runs once and just reports: nothing to resume, no chain to block
            settings = target.slurm_settings
            name = f"{settings.job_name or f'megatron-{preset.name}'}-preflight"
            target = replace(target, slurm_settings=replace(settings, requeue=False, chain=1, job_name=name))
    elif entry == "pretrain_gpt":
        microbatches = microbatches_per_step(chosen, world_size)
        kernel_flags = kernel_rules.fallbacks(megatron, kernels, microbatches)
        notes = [*notes, *kernel_rules.fast_path_notes(megatron, kernels),
                 *kernel_rules.fused_accumulation_notes(kernel_flags, microbatches)]
        problems = [*problems, *kernel_rules.fast_path_problems(megatron, kernels)]
        megatron.update(kernel_flags)
        if existing is not None:  # --save = --load = the run's own checkpoints, unless this --set moves them
            given = {parse_override(text)[0].removeprefix("megatron.") for text in preset.overrides}
            megatron.update({k: v for k, v in existing.resume_megatron_args().items() if k not in given})
            notes = [*notes, resume_note(existing, megatron)]
            target, left_out = _exclude_failed_hosts(target, existing)
            notes = [*notes, *left_out]
        if run_dir is not None:
            run_args = run_dir_megatron_args(run_dir, megatron)
            megatron.update(run_args)
            if "tensorboard_log_interval" in run_args:
                notes = [*notes, f"TensorBoard every {run_args['tensorboard_log_interval']} iterations, the log "
                         "interval (Megatron's default of 1 waits for the GPU in every step; one H200, 345m, with "
                         "rerun_mode disabled: +3.7 %); --set tensorboard_log_interval=N to choose"]
        if target.remote and run_dir is not None:
            signal_settings, more_notes, signal_problems = _time_limit_settings(chosen.megatron, megatron)
            megatron.update(signal_settings)
            notes, problems = [*notes, *more_notes], [*problems, *signal_problems]
    added = {dest: value for dest, value in megatron.items() if dest not in written or not _same(written[dest], value)}
    arg = replace(preset, megatron=megatron).arg
    runner = choose_runner(preset.launcher.runner, processes=world_size, here=not target.remote,
                           torchrun=preset.launcher.torchrun, inprocess_restart=bool(arg("inprocess_restart")))
    environment = job_environment(
        entry=entry, tp=arg("tensor_model_parallel_size"), cp=arg("context_parallel_size"), fsdp=uses_fsdp(arg),
        megatron_path=megatron_path, settings=megatron, preset_env=preset.launcher.env,
        inherited=dict(os.environ) if inherited_env is None else inherited_env, apex=kernels.apex,
        direct=runner.direct)
    notes = [*notes, *startup.startup_notes({name: environment.exported[name] for name in environment.chosen})]
    if entry == "pretrain_gpt":
        notes = [*notes, *kernel_rules.fast_spec_notes(megatron, kernels, environment.get)]
    slurm_port = target.slurm_settings.rdzv_port if target.slurm_settings is not None else None
    job = ResolvedJob(preset=preset, megatron=megatron, layout=_NO_LAYOUT, nodes=nodes, gpus_per_node=gpus_per_node,
                      entry=entry, kernels=kernels, megatron_path=megatron_path, target=target,
                      environment=environment, rdzv_port=slurm_port or preset.launcher.master_port,
                      run_dir=Path(run_dir).absolute() if run_dir is not None else None, existing=existing,
                      added=added, kernel_flags=kernel_flags, notes=tuple(notes),
                      runtime=runtime_for(preset.launcher.torchrun, slurm=target.slurm,
                                          container_image=target.container_image), runner=runner)
    return job, problems


def _same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to itself (a preset's `lr: .nan` is the user's value, not one the launcher added)."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)


def _exclude_failed_hosts(target: Placement, existing: ResumedRun) -> tuple[Placement, list[str]]:
    """A resubmitted Slurm run leaves out the hosts its batch script found failing (manifest excluded_nodes,
    launcher/runs/requeue_policy.py): --exclude, unless the preset's extra_sbatch already says where to run."""
    settings = target.slurm_settings
    if settings is None:
        return target, []
    names, not_taken = slurm_names.node_names(existing.manifest.get("excluded_nodes"))
    notes = [f"manifest.json excluded_nodes: {not_taken}, not taken"] if not_taken else []
    if not names or any(o.startswith(("--exclude", "-x", "--nodelist", "-w")) for o in settings.extra_sbatch):
        return target, notes
    option = f"--exclude={','.join(names)}"
    return (replace(target, slurm_settings=replace(settings, extra_sbatch=(*settings.extra_sbatch, option))),
            [*notes, f"leaving out {', '.join(names)}: an earlier attempt failed there (manifest.json excluded_nodes)"])


def resume_note(existing: ResumedRun, megatron: Mapping[str, Any]) -> str:
    """What a resumed run takes from its directory, and where it reads and writes outside it."""
    inside = os.path.normpath(Path(existing.path).absolute())  # `RUN/../x` is outside
    paths = {name: megatron.get(name) for name in ("load", "save", "tensorboard_dir")}
    outside = [f"{name} {value}" for name, value in paths.items()
               if value and not Path(os.path.normpath(Path(str(value)).absolute())).is_relative_to(inside)]
    return (f"resuming {existing.path}: its preset.yaml gives the settings, its manifest the checkpoint directory "
            f"(load {paths['load']}, save {paths['save']})"
            + (f"; outside the run directory: {', '.join(outside)}" if outside else ""))


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
    if not given.get("save_interval") and megatron["save_interval"] >= PERIODIC_SAVE_ITERATIONS:
        retain = megatron.get("save_retain_interval")
        notes.append(f"a checkpoint every {megatron['save_interval']} iterations (set save_interval=N to change)"
                     + (f"; of the older ones, only every {retain}th iteration's is kept (save_retain_interval)"
                        if retain else ""))
    if megatron["load"] != megatron["save"]:
        notes.append(f"load={megatron['load']} differs from save={megatron['save']}: "
                     f"a requeued or chained attempt restarts from {megatron['load']}")
    return settings, notes, []
