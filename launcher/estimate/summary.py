"""Memory and time of one layout together: `launch plan`'s Estimate and the dry-run header's summary.

Apart from formulas.py (shape, parameters, FLOPs, memory) and steptime.py (seconds per iteration), which it
combines, so that neither imports the other's caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from launcher.estimate.coverage import unmodelled, widening
from launcher.estimate.duration import final_batch
from launcher.estimate.formulas import (
    DEFAULT_GPU,
    GIB,
    MEMORY_RESERVE_BYTES,
    Gpu,
    MegatronParams,
    Memory,
    ModelShape,
    Training,
    built_model_parameters,
    checkpoint_bytes,
    complete_memory,
    fit_status,
    flops_per_iteration,
    fused_attention_of,
    gpu_by_name,
    megatron_memory,
    megatron_parameters,
    memory_difference,
    model_shape,
    padded_vocab_size,
    parameter_count,
    stage_parameters,
    training_of,
    uses_torch_adam,
)
from launcher.estimate.ranges import Range
from launcher.estimate.ranges import time_range as family_range
from launcher.estimate.steptime import StepTime, step_time
from launcher.pipeline.checker import model_args

if TYPE_CHECKING:
    from launcher.pipeline.resolve import ResolvedJob


@dataclass(frozen=True)
class Estimate:
    """Everything `launch plan` prints for one layout."""

    shape: ModelShape
    training: Training
    gpu: Gpu
    parameters: int
    megatron_params: MegatronParams
    flops_per_iteration: float
    megatron: Memory
    megatron_other_optimizer: Memory  # the same with the distributed optimizer toggled
    complete: Memory
    fit: str
    step: StepTime
    extra: dict[str, Any] = field(default_factory=dict)


def estimate(args: Mapping[str, Any], training: Training, gpu: Gpu, gpus_per_node: int = 8,
             tflops: float | None = None) -> Estimate:
    m = model_shape(args, training.tp)
    toggled = Training(**{**asdict(training), "distributed_optimizer": not training.distributed_optimizer})
    complete = complete_memory(m, training)
    return Estimate(
        shape=m,
        training=training,
        gpu=gpu,
        parameters=parameter_count(args, training.tp),
        megatron_params=megatron_parameters(m, training),
        flops_per_iteration=flops_per_iteration(m, training.global_batch_size),
        megatron=megatron_memory(m, training),
        megatron_other_optimizer=megatron_memory(m, toggled),
        complete=complete,
        fit=fit_status(complete.total, gpu),
        step=step_time(m, training, gpu, gpus_per_node, tflops),
    )


def summary(args: Mapping[str, Any], layout: Any, gpu: Gpu | str = DEFAULT_GPU,
            gpus_per_node: int = 8, transformer_engine: bool | None = None, kernels: Any = None) -> dict[str, Any]:
    """One call for the dry-run header: parameters, memory per GPU (GiB) and whether it fits.

    `layout` is launcher.pipeline.checker.Layout (or anything with world_size, tp, pp, vpp, cp, micro_batch_size,
    global_batch_size, and optionally sequence_parallel); the rest is read from the Megatron args.
    `transformer_engine` False means the run uses --transformer-impl local (unfused attention); `kernels`
    (launcher.megatron.pin.Kernels), where known, say which Adam the optimizer step runs.
    """
    g = gpu_by_name(gpu) if isinstance(gpu, str) else gpu
    t = layout_training(args, layout, transformer_engine, kernels)
    e = estimate(args, t, g, gpus_per_node)
    largest = max(memory_difference(e.shape, t), key=lambda d: abs(d.bytes))
    return {
        "gpu": g.name,
        "parameters": e.parameters,
        "parameters_per_gpu": max(sp.params for sp in stage_parameters(e.shape, t)),
        "memory_per_gpu_gib": round(e.complete.total / GIB, 2),
        # unrounded, for the one memory rule (formulas.memory_fit) here and at launch
        "memory_per_gpu_bytes": e.complete.total,
        "megatron_memory_per_gpu_gib": round(e.megatron.total / GIB, 2),
        # the largest term of complete − Megatron (formulas.memory_difference), for the header's one line
        "megatron_difference": {"what": largest.what, "gib": round(largest.bytes / GIB, 2), "why": largest.why},
        "gpu_memory_gib": round(g.memory_bytes / GIB, 1),
        "fits": e.fit,
        "flops_per_iteration": e.flops_per_iteration,
        "seconds_per_iteration": e.step.total,
        # the held-back errors of its family (dense/MoE · GPU generation · precision), as `launch plan` prints
        "seconds_per_iteration_range": list(time_range(args, e).of(e.step.total)),
    }


def time_range(args: Mapping[str, Any], e: Estimate) -> Range:
    """The likely range of `e`'s step time, widened for the settings the estimate does not model."""
    return family_range(bool(e.shape.num_experts), e.gpu.family, e.training.fp8, widening(unmodelled(args)))


def layout_training(args: Mapping[str, Any], layout: Any, transformer_engine: bool | None = None,
                    kernels: Any = None) -> Training:
    """The Training of a resolved job's layout (launcher.pipeline.checker.Layout) over its Megatron args: what the
    dry-run's header and `launch plan`'s "the preset's layout" both price; `kernels` (launcher.megatron.pin.Kernels,
    where known) choose the optimizer's Adam."""
    base = training_of(args, int(layout.world_size))
    schedule_batch = final_batch(args)
    return Training(**{
        **asdict(base),
        "tp": int(layout.tp), "pp": int(layout.pp), "cp": int(getattr(layout, "cp", 1) or 1),
        "vpp": int(getattr(layout, "vpp", None) or 1),
        "micro_batch_size": int(layout.micro_batch_size),
        # with a step batch-size schedule Megatron's own global batch is MBS·DP; the run trains at the schedule's
        "global_batch_size": int(schedule_batch or layout.global_batch_size),
        "sequence_parallel": bool(getattr(layout, "sequence_parallel", base.sequence_parallel)),
        "fused_attention": fused_attention_of(args, transformer_engine),
        "torch_adam": kernels is not None and uses_torch_adam(args, kernels.transformer_engine, kernels.apex),
    })


def memory_room(s: Mapping[str, Any]) -> str:
    """What the one memory rule allows on the summary's GPU, in words: 'the 136.5 GiB a job can use of the 139.8
    GiB of h200-141gb (3.3 GiB go to ...)'."""
    reserve = MEMORY_RESERVE_BYTES / GIB
    return (f"the {s['gpu_memory_gib'] - reserve:.1f} GiB a job can use of the {s['gpu_memory_gib']} GiB of "
            f"{s['gpu']} ({reserve:.1f} GiB go to CUDA's context, NCCL and the allocator's fragmentation)")


def memory_warning(s: Mapping[str, Any]) -> str | None:
    """Said before launch when the estimate is above USABLE_FRACTION of the GPU ("tight") or above what the one
    memory rule allows (memory_fit: the GPU's memory less MEMORY_RESERVE_BYTES for CUDA's context, NCCL and the
    allocator's fragmentation): such a job runs out of memory at its first steps, after the queue."""
    if s["fits"] == "fits":
        return None
    where = (f"above {memory_room(s)}: the job will run out of memory" if s["fits"] == "does not fit" else
             f"within 10 % of the {s['gpu_memory_gib']} GiB of {s['gpu']}: little room for the estimate's error")
    return (f"the memory estimate, ~{s['memory_per_gpu_gib']:.1f} GiB per GPU, is {where}; lower micro_batch_size, "
            "recompute activations, or use more TP/PP (`launch plan` lists layouts that fit)")


# Where the two estimates differ by more than this share of Megatron's, the header says the main reason.
EXPLAINED_DIFFERENCE = 0.1


def summary_line(s: Mapping[str, Any]) -> str:
    """One header line from summary(): '~20.2 GiB per GPU of 79.1 on h100-80gb: fits (Megatron's ...)'; where
    Megatron's own estimate differs much from ours, its largest reason."""
    ours, theirs = s["memory_per_gpu_gib"], s["megatron_memory_per_gpu_gib"]
    why = ""
    largest = s.get("megatron_difference")
    if largest and abs(ours - theirs) > EXPLAINED_DIFFERENCE * max(theirs, 1.0):
        side = "lower" if ours < theirs else "higher"
        why = (f"; ours is {abs(ours - theirs):.1f} GiB {side}, mostly {largest['what']} ({largest['gib']:+.1f} "
               f"GiB): {largest['why']}")
    return (f"~{ours:.1f} GiB per GPU of {s['gpu_memory_gib']} on {s['gpu']}: {s['fits']} "
            f"(Megatron's own estimate {theirs:.1f} GiB{why}; `launch plan` for the breakdown)")


def job_facts(job: ResolvedJob) -> dict[str, Any]:
    """The one estimate of a resolved job: the dry-run prints it, the checks before launch hold this machine's
    GPU memory and disk to it. Megatron's view of the job as it runs (the no-TE/apex settings change attention
    and memory)."""
    args = model_args(job.effective(), job.entry, job.tokenizer_vocab)
    layout, kernels = job.layout, job.kernels
    parameters = built_model_parameters(job.effective(), job.entry, layout.tp, job.tokenizer_vocab)
    return {
        "parameters": parameters,
        # None when the settings do not say (vocab_size=null for the simple loop, which brings its own model)
        "padded_vocab_size": padded_vocab_size(args, layout.tp) if args.get("vocab_size") is not None
        or args.get("padded_vocab_size") else None,
        "kernels": {"transformer_engine": kernels.transformer_engine, "apex": kernels.apex, "how": kernels.how},
        "estimate": summary(args, layout, job.preset.launcher.gpu, job.gpus_per_node, kernels=kernels),
        "checkpoint_bytes": checkpoint_bytes(parameters, args),
    }
