"""`--nodes MIN-MAX`: judge the job at every node count it could start with, keep the counts where every check
holds, and resolve the job once at the highest of them.

The job's argv is one for every count (the batch script does not rewrite Megatron's flags): Megatron derives DP and
the micro batches per step from the world size and keeps the global batch. So the micro batch is fixed once (the
launcher's pick at the highest valid count, or the preset's) and each count is judged with it; a count where the
global batch does not split, the layout does not divide the world, or the entry would change is left out and said
why. Where no count works, the launch is refused with every count's reason.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from launcher.errors import Problem, UserError
from launcher.pipeline import resolve
from launcher.pipeline.node_range import ElasticNodes, NodeCount, NodeRange
from launcher.pipeline.preset import Preset
from launcher.pipeline.resolve import ResolvedJob

_K8S_REFUSAL = Problem(
    "--nodes MIN-MAX (an elastic node count) cannot run on Kubernetes here: the launcher writes a JobSet, whose "
    "number of pods is fixed (JobSet has no elastic policy such as PyTorchJob's elasticPolicy)",
    "give one count, e.g. --nodes 4, or use --slurm for an elastic job")


def attempt_range(preset: Preset, nodes: NodeRange, gpus_per_node: int | None, **kwargs: Any
                  ) -> tuple[ResolvedJob, list[Problem]]:
    """The job at the highest valid count of `nodes` with `job.elastic` set, and its problems; every count's
    reasons as problems when none works. `kwargs` are resolve.attempt's (a one-node job here is not shrunk to
    this machine's GPUs: every count has the same GPUs per node)."""
    target = kwargs.get("target", resolve.HERE)
    if target.kubernetes:
        raise UserError(_K8S_REFUSAL)
    kwargs = {**kwargs, "gpus_here": None}
    cheap = {**kwargs, "data_check": None}  # the data files are the same at every count: checked once, below
    micro = preset.megatron.get("micro_batch_size")
    fixed = preset
    entry = None
    judged: dict[int, tuple[ResolvedJob, list[Problem]]] = {}
    for count in range(nodes.high, nodes.low - 1, -1):  # the highest valid count fixes the micro batch
        job, problems = resolve.attempt(fixed, count, gpus_per_node, **cheap)
        if entry is not None and job.entry != entry:
            problems = [*problems, Problem(f"the entry would be {job.entry} instead of {entry}")]
        judged[count] = job, problems
        if not problems and entry is None:
            entry = job.entry
            if micro is None:
                fixed = replace(preset, megatron={**preset.megatron,
                                                  "micro_batch_size": job.megatron.get("micro_batch_size")})
    valid = tuple(NodeCount(n, job.world_size, job.layout.dp, job.layout.num_microbatches)
                  for n, (job, problems) in sorted(judged.items()) if not problems)
    refused = tuple((n, problems[0].message) for n, (_, problems) in sorted(judged.items()) if problems)
    if not valid:
        return _none_works(nodes, judged)
    elastic = ElasticNodes(nodes, valid, refused)
    job, problems = resolve.attempt(preset, elastic.high, gpus_per_node, **kwargs)
    if len(elastic.valid) > 1:
        problems = [*problems, *_rng_per_dp_rank(job)]
    if not target.slurm and not elastic.contiguous:
        problems = [*problems, Problem(
            f"--nodes {nodes}: torchrun may form any count from {elastic.low} to {elastic.high}, but only "
            f"{', '.join(map(str, elastic.counts))} work ({'; '.join(elastic.refusals())})",
            f"give a range whose every count works, e.g. --nodes {_longest_run(elastic.counts)}, or use --slurm "
            "(the batch script refuses a count that does not work at job start)")]
    notes = [elastic.summary(), *(f"leaves out {line}" for line in elastic.refusals())]
    return replace(job, elastic=elastic, notes=(*job.notes, *notes)), problems


def job_at(job: ResolvedJob, count: NodeCount) -> ResolvedJob:
    """The elastic job as it runs with `count` nodes: the same flags, the world and DP of that count (for the
    estimates: fewer nodes shard the distributed optimizer over fewer ranks, so the fewest need the most memory)."""
    layout = replace(job.layout, world_size=count.world_size, dp=count.dp, num_microbatches=count.num_microbatches)
    return replace(job, nodes=count.nodes, layout=layout)


def _rng_per_dp_rank(job: ResolvedJob) -> list[Problem]:
    """data_parallel_random_init stores one RNG state per data-parallel rank; Megatron loads rng_state[dp_rank],
    so an attempt with more nodes than the one that saved fails to load the checkpoint."""
    if not job.arg("data_parallel_random_init") or job.arg("no_load_rng") or job.arg("finetune"):
        return []
    return [Problem("data_parallel_random_init saves one random state per data-parallel rank, and a resumed attempt "
                    "loads the state of its own rank: an attempt that gets more nodes (a larger DP) than the one "
                    "that saved cannot load the checkpoint", "give one node count, or set no_load_rng=true (a "
                    "resumed attempt then keeps its fresh random states)")]


def _none_works(nodes: NodeRange, judged: dict[int, tuple[ResolvedJob, list[Problem]]]
                ) -> tuple[ResolvedJob, list[Problem]]:
    """No count works: the highest count's job with its problems, and one problem that names each count's reason."""
    job, problems = judged[nodes.high]
    reasons = [f"{n} node(s): {found[0].message}" for n, (_, found) in sorted(judged.items())][:6]
    hint = problems[0].hint or "change the layout or the global batch, or give another range"
    summary = Problem(f"no node count in --nodes {nodes} gives a valid job: " + "; ".join(reasons)
                      + ("; …" if len(judged) > 6 else ""), hint)
    return job, [summary, *problems]


def _longest_run(counts: tuple[int, ...]) -> str:
    """The longest run of consecutive counts, as MIN-MAX (or one count)."""
    best: tuple[int, int] = (counts[0], counts[0])
    start = counts[0]
    for previous, count in zip(counts, counts[1:]):
        if count != previous + 1:
            start = count
        if count - start >= best[1] - best[0]:
            best = (start, count)
    return f"{best[0]}-{best[1]}" if best[0] != best[1] else str(best[0])
