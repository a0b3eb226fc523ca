"""Settings that only one feature reads: a hint that drops the feature drops them with it, so that following the
hint does not leave a setting behind that then fails on its own (seen: "drop fp8" left
--reuse-grad-buf-for-mxfp8-param-ag, which asserts fp8_param_gather when the model is wrapped)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from launcher.megatron import args as megatron_args

# feature (the setting that turns it on) → the settings only it reads, by name: every Megatron setting with fp8 in
# its name is read under fp8 only (fp8_param_gather, fp8_recipe, reuse_grad_buf_for_mxfp8_param_ag, …); the
# optimizer state's lower precisions only under the precision-aware optimizer.
FEATURE_ONLY = {"fp8": re.compile(r"fp8"),
                # optimizer_config.py:457-469: without the precision-aware optimizer each of these must stay fp32
                "use_precision_aware_optimizer": re.compile(r"^(main_grads|main_params|exp_avg|exp_avg_sq)_dtype$"),
                # the distributed optimizer's own overlaps (checker.optimizer_overlap: each needs it)
                "use_distributed_optimizer": re.compile(r"^overlap_param_gather(_with_optimizer_step)?$"),
                # multi-latent attention's own sizes and rotary scaling (argument_utils.py:334: YaRN only with MLA)
                "multi_latent_attention": re.compile(r"^(rope_type|q_lora_rank|kv_lora_rank|qk_head_dim|"
                                                     r"qk_pos_emb_head_dim|v_head_dim|mla_down_proj_fusion)$"),
                # paged stashing pages what the per-rank capacity drops (transformer_config.py:1688)
                "moe_expert_rank_capacity_factor": re.compile(r"^moe_paged_stash$"),
                # the interleaved schedule's own p2p overlap in warm-up and flush (model_parallel_config.py:459:
                # overlap_p2p_comm, which Megatron keeps only under a virtual pipeline)
                "num_layers_per_virtual_pipeline_stage": re.compile(r"^overlap_p2p_comm_warmup_flush$"),
                "num_virtual_stages_per_pipeline_rank": re.compile(r"^overlap_p2p_comm_warmup_flush$")}


# setting → (the value that turns a feature on, the settings only that feature reads): a fix that moves the setting
# to another value drops them too (--moe-enable-deepep outside the flex dispatcher: transformer_config.py:1428)
VALUE_ONLY = {"moe_token_dispatcher_type": ("flex", re.compile(r"^moe_enable_deepep$")),
              "transformer_impl": ("inference_optimized", re.compile(r"^inference_fuse_tp_communication$"))}


def _yaml(value: Any) -> str:
    return "null" if value is None else ("true" if value else "false") if isinstance(value, bool) else str(value)


@functools.cache
def _matching(pattern: re.Pattern[str], besides: str = "") -> tuple[tuple[str, Any], ...]:
    """(name, Megatron's default) of every catalog setting the pattern names, other than `besides`. Matched once:
    the layout search asks for each rule's way out thousands of times, and the catalog has hundreds of settings."""
    return tuple((dest, entry.default) for dest, entry in megatron_args.catalog().items()
                 if dest != besides and pattern.search(dest))


def drop(feature: str, arg: Callable[[str], Any]) -> list[str]:
    """`--set` assignments (without the --set) that turn `feature` off and reset every setting only it reads that the
    job changes from Megatron's default."""
    out = [f"{feature}={_yaml(megatron_args.catalog()[feature].default)}"]
    for dest, default in _matching(FEATURE_ONLY[feature], feature):
        if arg(dest) is not None and arg(dest) != default:
            out.append(f"{dest}={_yaml(default)}")
    return out


def drop_hint(feature: str, arg: Callable[[str], Any]) -> str:
    return " ".join(f"--set {a}" for a in drop(feature, arg))


def _left(setting: str, arg: Callable[[str], Any]) -> list[str]:
    """`--set` assignments that reset what only VALUE_ONLY[setting]'s feature reads, where the job changes it."""
    return [f"{dest}={_yaml(default)}" for dest, default in _matching(VALUE_ONLY[setting][1])
            if arg(dest) is not None and arg(dest) != default]


def with_drops(fix: str, arg: Callable[[str], Any]) -> str:
    """A fix whose `set FEATURE=off` drops a feature of FEATURE_ONLY, with every setting only it reads dropped too;
    likewise a fix that moves a setting of VALUE_ONLY off the value its feature needs. A fix that already drops
    them is returned as it is (applying this twice changes nothing)."""
    for setting, (on, _) in VALUE_ONLY.items():
        moved = re.compile(rf"(?<![\w.]){setting}=(?!{on}\b)([\w-]+)")  # "set X=V" or a later way's "X=V"
        found = moved.search(fix)
        if found and _left(setting, arg) and not all(f"{a}" in fix for a in _left(setting, arg)):
            fix = fix[:found.end()] + "".join(f" --set {a}" for a in _left(setting, arg)) + fix[found.end():]
    for feature in FEATURE_ONLY:
        # "set FEATURE=off", or a later way's bare "FEATURE=off"
        off = _yaml(megatron_args.catalog()[feature].default)
        found = re.search(rf"((?:(?:--)?set )?)(?<![\w.]){feature}={off}\b", fix)
        if not found:
            continue
        dropped = drop(feature, arg)
        # the hint's own "set " stays as it was written; a hint that already drops them is left as it is
        if len(dropped) > 1 and not all(a in fix for a in dropped[1:]):
            return fix[:found.start()] + found[1] + " --set ".join(dropped) + fix[found.end():]
    return fix
