"""The one way a command line becomes a ResolvedJob: `launch PRESET` (run, dry-run, --check, --slurm), `launch show`,
`launch import`'s check, `launch prepare-data --build-index` and `launch plan` all resolve through `job_for`, so
the same arguments give the same job everywhere (`launch show X` = `launch X --dry-run`).

What this machine contributes is decided here, once: its GPU count (a one-node job here takes at most these), the
kernels it has, the Megatron-LM checkout, the run directory's name, the environment the ranks inherit, and the
data files it can see. With `judge` (the dry-run, show, --check, a written Slurm/K8s job), the job is also held to
its target (checks.target_verdict): a job meant for this machine gets the checks a launch here runs before torchrun.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from launcher.checks.data import check_job_data, check_job_data_only, model_vocab_size
from launcher.errors import Problem, UserError
from launcher.megatron.pin import checkout_warning, megatron_path
from launcher.pipeline import elastic, resolve
from launcher.pipeline.node_range import NodeRange
from launcher.pipeline.preset import Preset, override_name
from launcher.pipeline.resolve import ResolvedJob, ResumedRun


@dataclass(frozen=True)
class JobRequest:
    """What the command line asks besides the preset."""

    nodes: int | NodeRange | None = None  # --nodes N, or MIN-MAX (elastic: pipeline/elastic.py)
    gpus_per_node: int | None = None
    slurm: bool = False
    k8s: bool = False
    preflight: bool = False
    megatron_path: str | None = None  # --megatron-path
    existing: ResumedRun | None = None  # --resume
    run_dir: bool = True  # a training job names its run directory (save/load/tensorboard point into it)
    reserve_run_dir: bool = False  # a real launch claims the name at once (mkdir); a dry-run only names it
    local: bool = True  # a one-node job here takes at most this machine's GPUs (not for import's check, plan, list)
    # judged against its target before anything runs (checks.target_verdict): what a launch here would refuse for a
    # job meant for this machine, what the target must have for one meant elsewhere; a real launch here runs those
    # checks itself (checks.doctor.check_before_launch)
    judge: bool = False
    judge_here: bool = True  # with judge: run the launch's checks for a job meant here (--no-doctor skips both)
    # a cut index cache file is a problem for a job that would load it, not for --build-index, which replaces it
    check_caches: bool = True


def local_gpus() -> int:
    from launcher.backends import local

    return local.visible_gpus()


def job_for(preset: Preset, request: JobRequest = JobRequest()) -> tuple[ResolvedJob, list[Problem]]:
    """The job these arguments resolve to and every problem with it (resolve.attempt)."""
    from launcher.runs import rundir

    # a job here (run, dry-run, show or --check): this machine's GPUs bound a one-node job
    remote = request.slurm or request.k8s
    gpus_here = functools.cache(local_gpus) if request.local and not remote else None
    target = resolve.target_for(preset, request.slurm, request.k8s)
    kernels = resolve.kernels_of(preset, target)
    path = megatron_path(request.megatron_path, preset.launcher.megatron_path)
    # A training run's directory is named now (the dry-run shows it) and made at launch; a preflight here has none.
    run_dir = request.existing.path if request.existing else None
    if run_dir is None and request.run_dir and (remote or not request.preflight):
        name = rundir.reserve_run_dir if request.reserve_run_dir else rundir.new_run_dir_path
        run_dir = name(Path(preset.launcher.run_root), preset.name)
    settings: dict[str, Any] = dict(kernels=kernels, megatron_path=path, target=target, run_dir=run_dir,
                                    existing=request.existing, preflight=request.preflight, gpus_here=gpus_here,
                                    inherited_env=dict(os.environ),
                                    data_check=check_job_data if request.check_caches else check_job_data_only)
    if isinstance(request.nodes, NodeRange):
        job, problems = elastic.attempt_range(preset, request.nodes, request.gpus_per_node, **settings)
    else:
        job, problems = resolve.attempt(preset, request.nodes, request.gpus_per_node, **settings)
    if job.megatron.get("vocab_size") is None:  # the estimates count the tokenizer's vocabulary where it is known
        job = replace(job, tokenizer_vocab=model_vocab_size(job.effective()))
    # Said, not refused: a Slurm job may run from a cluster path this machine cannot see (a run here refuses it at
    # launch). Kubernetes pods run Megatron-LM from their image.
    missing = None if request.k8s else checkout_warning(job.megatron_path, job.entry)
    if missing:
        job = replace(job, warnings=(*job.warnings, missing))
    set_here = any(override_name(o) == "megatron_path" for o in preset.overrides)
    if set_here and request.megatron_path is not None and megatron_path(None, preset.launcher.megatron_path) != path:
        job = replace(job, warnings=(*job.warnings, f"--set megatron_path does nothing for this job: --megatron-path "
                                     f"decides ({path}); drop one of them"))
    if request.judge:
        from launcher.backends import local
        from launcher.checks.target_verdict import Where, judge

        # this machine's GPUs, counted once (world() may have asked already)
        where = Where(remote=remote, gpus_here=gpus_here() if gpus_here is not None and job.nodes == 1 else 0)
        job, problems = judge(job, problems, where, lambda: local.process_environment(job.environment),
                              launch_checks=request.judge_here)
    return job, problems


def checked_job(preset: Preset, request: JobRequest = JobRequest()) -> ResolvedJob:
    """The job, or UserError with every problem at once."""
    job, problems = job_for(preset, request)
    if problems:
        raise UserError(problems)
    return job


def job_as_declared(preset: Preset) -> tuple[ResolvedJob, list[Problem]]:
    """The job on the preset's own world, whatever this machine has, with the run directory a launch names (not made):
    what `launch import` checks and compares with the script it read. Judged as `launch PRESET --dry-run` judges a job
    meant elsewhere (the memory estimate and the target's rules included, with the checkpoint and TensorBoard paths
    the run directory gives), so the import lists every problem the dry-run would and no other."""
    return job_for(preset, JobRequest(local=False, judge=True))
