"""Can the job's optimizer read the optimizer state of a torch_dist checkpoint, and what changes when it does?

What the pinned Megatron does, measured by saving a tiny GPT with its own save_checkpoint and loading it with the
changed setting (scripts/ckpt_load_matrix.py; the table in docs/resume-and-requeue.md):

  saved state             job: plain optimizer                    job: distributed optimizer
  plain optimizer         fp32 ↔ fp16/bf16 raises; fp16 ↔ bf16     raises ('ShardedTensor.flattened_range is not
                          loads (weights cast)                     supported')
  distributed,            raises (KeyError: optimizer.state.…      raises when a buffer's (param, grad) dtype or the
  dp_reshardable          not in state dict)                       padded vocabulary changed; loads otherwise
  distributed,            raises (as above)                        every precision change loads (weights cast)
  fully_reshardable

`no_load_optim` and `finetune` skip the optimizer's state: each of these then loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PLAIN = "plain"
# the distributed optimizer's sharding types measured at the pin; the deprecated ones were not
MEASURED = ("dp_reshardable", "fully_reshardable")
FLOAT16_OPTIMIZER, FP32_OPTIMIZER = "Float16OptimizerWithFloat16Params", "FP32Optimizer"
NO_LOAD_OPTIM = ("--set no_load_optim=true (the weights and the iteration load; Adam's moments and the "
                 "learning-rate schedule start again)")


@dataclass(frozen=True)
class Verdict:
    level: str  # refuse | warn | note
    topic: str  # optimizer (which optimizer reads the state) | precision
    message: str
    hint: str = ""


def params_dtype(settings: Mapping[str, Any]) -> str:
    return "fp16" if settings.get("fp16") is True else "bf16" if settings.get("bf16") is True else "fp32"


def grad_dtype(settings: Mapping[str, Any]) -> str:
    """The dtype of the distributed optimizer's gradient buffers: fp32 where gradients are accumulated and reduced
    in fp32 (validate_args turns that on for bf16 unless grad_reduce_in_bf16 or a main_grads_dtype other than fp32),
    else the params' (training.py: grad_reduce_in_fp32=args.accumulate_allreduce_grads_in_fp32)."""
    if settings.get("accumulate_allreduce_grads_in_fp32") is True:
        return "fp32"
    dtype = params_dtype(settings)
    main_grads = str(settings.get("main_grads_dtype") or "fp32").replace("torch.float32", "fp32")
    if dtype == "bf16" and not settings.get("grad_reduce_in_bf16") and main_grads == "fp32":
        return "fp32"
    return dtype


def saved_kind(saved: Mapping[str, Any], content_metadata: Mapping[str, Any] | None) -> str:
    """PLAIN, or the distributed optimizer's sharding type the state was saved in: the content metadata's (written
    only with the distributed optimizer at the pin), else as Megatron assumes before megatron-core 0.13."""
    if content_metadata is not None:
        kind = content_metadata.get("distrib_optim_sharding_type")
        if kind:
            return str(kind)
        return PLAIN if not saved.get("use_distributed_optimizer") else "unknown"
    if not saved.get("use_distributed_optimizer"):
        return PLAIN
    return "fully_sharded_model_space" if saved.get("ckpt_fully_parallel_save") else "dp_zero_gather_scatter"


def judge(job_args: Mapping[str, Any], saved: Mapping[str, Any], content_metadata: Mapping[str, Any] | None,
          padded_vocab: tuple[int, int] | None = None) -> list[Verdict]:
    """The optimizer state of a torch_dist checkpoint against the job that loads it (the caller knows that it
    does: no no_load_optim, finetune or release checkpoint). `padded_vocab`: (checkpoint, job) rows of the
    embedding, where both are known."""
    kind = saved_kind(saved, content_metadata)
    distributed = bool(job_args.get("use_distributed_optimizer"))
    old, new = params_dtype(saved), params_dtype(job_args)
    change = f"params {old} (checkpoint) → {new} (job)"
    if kind == PLAIN and distributed:
        return [Verdict("refuse", "optimizer", "use_distributed_optimizer false (checkpoint) → true (job): the "
                        "distributed optimizer cannot read a plain optimizer's state; Megatron stops at load "
                        "(CheckpointingException: ShardedTensor.flattened_range is not supported)",
                        f"resume with --set use_distributed_optimizer=false, or {NO_LOAD_OPTIM}")]
    if kind != PLAIN and not distributed:
        return [Verdict("refuse", "optimizer", f"use_distributed_optimizer true (checkpoint, saved {kind}) → false "
                        "(job): the plain optimizer looks for its own state keys, which the distributed optimizer "
                        "never saved; Megatron stops at load (CheckpointException: KeyError 'optimizer.state.… from "
                        "model not in state dict')",
                        f"resume with --set use_distributed_optimizer=true, or {NO_LOAD_OPTIM}")]
    if kind == PLAIN:
        return _plain(old, new, change, job_args)
    if kind == "dp_reshardable":
        return _dp_reshardable(job_args, saved, padded_vocab)
    if old == new:
        return []
    if kind == "fully_reshardable":
        return [Verdict("warn", "precision", f"{change}: loads (the distributed optimizer's state saved "
                        "fully_reshardable holds fp32 main params and Adam's moments per parameter); the model's "
                        f"weights are cast to {new}, so training continues at another precision from the resumed "
                        "iteration"
                        + _loss_scale(old, new, job_args), f"keep {old} to resume exactly ({keep(old)})")]
    return [Verdict("warn", "precision", f"{change} with the distributed optimizer's state saved {kind}: whether "
                    "Megatron loads that state at another precision was not measured at the pin",
                    f"keep {old} to resume exactly ({keep(old)}), or {NO_LOAD_OPTIM}")]


def _plain(old: str, new: str, change: str, job_args: Mapping[str, Any]) -> list[Verdict]:
    if old == new:
        return []
    if "fp32" in (old, new):
        kinds = {"fp32": FP32_OPTIMIZER, "fp16": FLOAT16_OPTIMIZER, "bf16": FLOAT16_OPTIMIZER}
        raised = ("KeyError: 'pre_wd_mult' (optimizer.py:441)" if new == "fp32" else
                  "CheckpointException: KeyError 'optimizer.state.fp32_param.… from model not in state dict'")
        return [Verdict("refuse", "precision", f"{change}: the checkpoint's optimizer state is a {kinds[old]}'s, "
                        f"the job's optimizer a {kinds[new]}, which reads keys the other never saved: Megatron "
                        f"stops at load ({raised})", f"keep {old} to resume ({keep(old)}), or {NO_LOAD_OPTIM}")]
    return [Verdict("warn", "precision", f"{change}: loads (both keep fp32 main params, restored with Adam's "
                    f"moments as saved); the model's weights are cast to {new}, so training continues at another "
                    "precision" + _loss_scale(old, new, job_args), f"keep {old} to resume exactly ({keep(old)})")]


def _loss_scale(old: str, new: str, job_args: Mapping[str, Any]) -> str:
    if new == "fp16" and old != "fp16":
        scale = job_args.get("loss_scale") or f"initial_loss_scale ({job_args.get('initial_loss_scale') or 2**32:g})"
        return f"; the checkpoint holds no loss scale: it starts at {scale}"
    if old == "fp16" and new != "fp16":
        return "; the checkpoint's loss scale is dropped"
    return ""


def _dp_reshardable(job_args: Mapping[str, Any], saved: Mapping[str, Any],
                    padded_vocab: tuple[int, int] | None) -> list[Verdict]:
    """The state is kept per gradient buffer, named by its (param dtype, grad dtype) and sized by the parameters
    in it (distrib_optimizer.py sharded_param_state_dp_reshardable): a buffer the job names otherwise is not in the
    checkpoint, one of another size does not fit."""
    out = []
    before = (params_dtype(saved), grad_dtype(saved))
    after = (params_dtype(job_args), grad_dtype(job_args))
    if before != after:
        said = f"(params {before[0]}, grads {before[1]}) (checkpoint) → (params {after[0]}, grads {after[1]}) (job)"
        out.append(Verdict("refuse", "precision", f"the distributed optimizer's buffers {said}: its state saved "
                           "dp_reshardable is named by those dtypes, and the job's are not in the checkpoint; "
                           "Megatron stops at load (CheckpointException: KeyError "
                           "'optimizer.distributed.….dtype_(…).….param from model not in state dict')",
                           f"resume with the checkpoint's precision ({_precision_flags(saved)}), or {NO_LOAD_OPTIM}; "
                           "save with --set dist_ckpt_optim_fully_reshardable=true to change precision on a later "
                           "resume"))
    if padded_vocab is not None and padded_vocab[0] != padded_vocab[1]:
        out.append(Verdict("refuse", "optimizer", f"the padded vocabulary {padded_vocab[0]} (checkpoint) → "
                           f"{padded_vocab[1]} (job) rows: the distributed optimizer's state saved dp_reshardable "
                           "is one flat buffer per bucket, now of another size; Megatron stops at load "
                           "(CheckpointingException: Global shape mismatch for loaded … tensor for key "
                           "optimizer.distributed.…)",
                           f"resume with the checkpoint's vocabulary, or {NO_LOAD_OPTIM}"))
    return out


def keep(dtype: str) -> str:
    """The settings that give the params dtype `dtype`."""
    return " ".join(f"--set {name}={'true' if name == dtype else 'false'}" for name in ("bf16", "fp16"))


def _precision_flags(saved: Mapping[str, Any]) -> str:
    dtype = params_dtype(saved)
    flags = [keep(dtype)]
    if dtype == "bf16":
        flags.append(f"--set grad_reduce_in_bf16={'true' if grad_dtype(saved) == 'bf16' else 'false'}")
    return " ".join(flags)
