"""What the job's target would refuse, said before anything runs (the dry-run, `show`, `--check`, a written script).

Where the job is meant to run decides what can be known:
- a job meant for THIS machine (a launch here: no --slurm/--k8s, one node, and this machine has a GPU) gets the very
  checks a launch here runs before torchrun (checks.doctor.job_findings, launch_verdict): the dry-run refuses what
  the launch would refuse, with the same messages;
- a job meant elsewhere (a cluster, more nodes than this one, or a machine without a GPU preparing the job) gets a
  warning for each Python package its settings need there that the preset does not declare (launcher.packages):
  the nodes check them at job start, and `launch --check` holds the preset to its declaration.
The memory estimate is held to the job's GPU (launcher.gpu) by the one memory rule (estimate.formulas.memory_fit,
which the launch's own check on this machine's GPU uses too): within 10 % of the GPU a warning, above the GPU's
memory less a fixed reserve a refusal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from launcher.checks import doctor
from launcher.checks.capacity import sharded_over, unmodelled_memory_settings
from launcher.errors import Problem
from launcher.estimate import summary as estimate
from launcher.megatron import requirements
from launcher.megatron.effective import effective_settings
from launcher.pipeline import elastic
from launcher.pipeline.divisors import divisors
from launcher.pipeline.resolve import ResolvedJob


@dataclass(frozen=True)
class Where:
    """Where a job is meant to run, as the command line and this machine say."""

    remote: bool  # --slurm or --k8s
    gpus_here: int  # this machine's visible GPUs

    def meant_here(self, job: ResolvedJob) -> bool:
        """A launch here would run the whole job on this machine, which has a GPU to run it."""
        return not self.remote and job.nodes == 1 and self.gpus_here > 0


def judge(job: ResolvedJob, problems: list[Problem], where: Where,
          process_env: Callable[[], Mapping[str, str]], launch_checks: bool = True
          ) -> tuple[ResolvedJob, list[Problem]]:
    """The job with the target's warnings added, and the problems with the target's refusals added.
    `process_env` gives the environment the training processes would get here (asked only for a job meant here);
    without `launch_checks` (--no-doctor, which a launch here skips too) a job meant here is not checked here."""
    here = where.meant_here(job)
    # A refused layout has no estimate; the rest is still said, all problems at once. Here, the launch's own check
    # holds the estimate to this machine's GPU (checks.capacity).
    # A refused layout has no estimate; a job refused for other things (a value Megatron asserts, a kernel at the
    # first step, a package) has its layout, and its memory is said with the rest, not after they are fixed
    estimated = not problems or layout_adds_up(job)
    try:
        warnings, found = _memory_at_experts_that_fit(job, not here) if estimated else ([], [])
    except (ValueError, TypeError, ArithmeticError, KeyError, IndexError):
        if not problems:
            raise
        # a setting the checks already refuse (a layout string with unknown letters) may leave nothing to
        # estimate: those problems say what to fix; the estimate comes once they are fixed
        warnings, found, estimated = [], [], False
    if here and launch_checks:
        said, refused = checks_before_launch(job, process_env(), capacity=estimated)
        warnings += said
        found += refused
    elif job.entry == "pretrain_gpt":
        warnings += target_package_warnings(job)
    fresh = [w for w in warnings if w not in job.warnings]
    return replace(job, warnings=(*job.warnings, *fresh)), [*problems, *found]


def layout_adds_up(job: ResolvedJob) -> bool:
    """TP·PP·CP·DP is the world and micro batch × DP × microbatches the global batch: the layout the checks derived
    is whole, whatever else they refused."""
    lay = job.layout
    numbers = (lay.tp, lay.pp, lay.cp, lay.dp, lay.world_size, lay.micro_batch_size, lay.num_microbatches,
               lay.global_batch_size)
    return all(isinstance(n, int) and n >= 1 for n in numbers) and \
        lay.model_parallel_size * lay.dp == lay.world_size and \
        lay.micro_batch_size * lay.dp * lay.num_microbatches == lay.global_batch_size


def checks_before_launch(job: ResolvedJob, process_env: Mapping[str, str],
                         capacity: bool = True) -> tuple[list[str], list[Problem]]:
    """What a launch here says before torchrun (doctor.launch_verdict), except a missing Megatron-LM checkout: the
    dry-run prints the command without one and says so as a warning (cli.job), as it always has."""
    findings = doctor.job_findings(job, doctor.Context(megatron_path=job.megatron_path, env=process_env), capacity)
    has_checkout = (Path(job.megatron_path) / "pretrain_gpt.py").is_file()
    kept = [f for f in findings if has_checkout or f.check != "megatron-lm checkout"]
    return doctor.launch_verdict(kept)


def target_package_warnings(job: ResolvedJob) -> list[str]:
    """Each Python package the job's settings need on the target that the preset does not declare it has."""
    settings = effective_settings(job.megatron, job.layout.vpp).settings
    declared = set(job.preset.launcher.packages)
    return [f"{row.condition(settings, job.megatron)} needs {row.wanted()} where the job runs ({row.cite}); each "
            f"node checks it at job start; declare it once the target has it: launcher.packages: [{row.package}]"
            for row in requirements.applicable(settings, ["package"]) if row.package not in declared]


def _memory_at_experts_that_fit(job: ResolvedJob, refuse: bool) -> tuple[list[str], list[Problem]]:
    """The memory verdict; where the world does not hold the experts' grid (ETP·EP·PP), at the largest expert-
    parallel size it holds (the way out the layout's own hint offers), so that the memory is said with the layout
    problem rather than once it is fixed: experts split over ranks that do not exist fit no GPU."""
    tp, pp = job.layout.tp, job.layout.pp
    etp, ep = job.arg("expert_tensor_parallel_size") or tp, job.arg("expert_model_parallel_size") or 1
    if ep <= 1 or job.world_size % (etp * ep * pp) == 0:
        return _memory_at_fewest_nodes(job, refuse)
    # the sizes below ep that divide world / (ETP·PP), from the bounded divisors (ep may be 99999999999)
    grid = etp * pp
    experts = job.arg("num_experts")
    fits = [e for e in reversed(divisors(job.world_size // grid)) if e < ep and (experts or e) % e == 0] \
        if job.world_size % grid == 0 else []
    if not fits:
        return [], []
    said = f"at expert_model_parallel_size {fits[0]}, the largest this world holds: "
    warnings, found = _memory_at_fewest_nodes(
        replace(job, megatron={**job.megatron, "expert_model_parallel_size": fits[0]}), refuse)
    return [said + w for w in warnings], [replace(p, message=said + p.message) for p in found]


def _memory_at_fewest_nodes(job: ResolvedJob, refuse: bool) -> tuple[list[str], list[Problem]]:
    """The memory verdict; an elastic job's at its fewest nodes, which need the most memory per GPU (the
    distributed optimizer's state is split over the fewest data-parallel ranks)."""
    if job.elastic is None or job.elastic.low == job.nodes:
        return memory_verdict(job, refuse)
    fewest = job.elastic.valid[0]
    said = f"with {fewest.nodes} node(s), the fewest of --nodes {job.elastic.requested}: "
    warnings, found = memory_verdict(elastic.job_at(job, fewest), refuse)
    more = f"; or a higher MIN in --nodes MIN-{job.elastic.requested.high}"
    return [said + w for w in warnings], [replace(p, message=said + p.message, hint=(p.hint or "") + more)
                                          for p in found]


def memory_verdict(job: ResolvedJob, refuse: bool = True) -> tuple[list[str], list[Problem]]:
    """The memory estimate against the job's GPU: a warning above 90 % of it, a refusal (with `refuse`) where the
    one memory rule (formulas.memory_fit, through the estimate's `fits`) says it does not fit, unless a setting
    saves memory the estimate does not count."""
    job_facts = estimate.job_facts(job)
    facts = job_facts["estimate"]
    warning = estimate.memory_warning(facts)
    unknown = [] if job_facts["padded_vocab_size"] else [
        "the vocabulary size is not known here (vocab_size is not set and the tokenizer's files are not readable "
        "here), so the memory and time estimates leave out the embedding and output layer; set vocab_size to count "
        "them"]
    if warning is None:
        return unknown, []
    unmodelled = unmodelled_memory_settings(job.arg, sharded_over(job))
    beyond = facts["fits"] == "does not fit"
    if not refuse or not beyond or unmodelled:
        return [warning + (f" (the estimate does not count what {', '.join(unmodelled)} saves)"
                           if unmodelled and beyond else "")] + unknown, []
    return [], [Problem(
        f"the memory estimate, ~{facts['memory_per_gpu_gib']:.1f} GiB per GPU, is above {estimate.memory_room(facts)}"
        ": the job cannot fit",
        "lower micro_batch_size, recompute activations (recompute_granularity=full), use the distributed optimizer "
        "or more TP/PP (`launch plan` lists layouts that fit); or set launcher.gpu to the GPU the job runs on",
        stage="launcher")]
