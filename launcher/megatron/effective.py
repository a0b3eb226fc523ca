"""The settings Megatron will really use: the job's values (catalog defaults filled in), after the rewrites
validate_args and TransformerConfig make in place without failing ("Disabling …", "… is ignored", or nothing).

Every launcher rule judges these, not the preset's values: `tp_comm_overlap` with `sequence_parallel: true` at
TP 1 is refused because Megatron first turns sequence parallelism off at TP 1 and then asserts that TP overlap
needs it. Each rewrite cites the line of megatron/training/arguments.py at 432d76b2b8bf that makes it; they are
applied in that file's order, since a later rewrite reads the result of an earlier one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from launcher.megatron import args as megatron_args

EMERGING_OPTIMIZERS = ("muon", "dist_muon", "lion", "soap", "adaptive_muon")
# pretrain_gpt.py calls parse_and_validate_args(args_defaults={'tokenizer_type': 'GPT2BPETokenizer'}): its
# defaults where the argv leaves a setting unset.
PRETRAIN_GPT_DEFAULTS = {"tokenizer_type": "GPT2BPETokenizer"}


@dataclass(frozen=True)
class Rewrite:
    """One setting Megatron changes in place: from the value given (or defaulted) to the one it uses."""

    dest: str
    given: Any
    now: Any
    cite: str  # where Megatron does it
    message: str  # said to the user as a warning when `explicit` (the preset set it) or `always`
    always: bool = False

    def warn(self, given: Mapping[str, Any]) -> bool:
        return self.always or given.get(self.dest) is not None


@dataclass(frozen=True)
class Effective:
    """Megatron's view of the job: every argument after the rewrites, and the rewrites themselves."""

    settings: Mapping[str, Any]
    rewrites: tuple[Rewrite, ...]

    def __getitem__(self, dest: str) -> Any:
        return self.settings[dest]

    def warnings(self, given: Mapping[str, Any]) -> list[str]:
        return [r.message for r in self.rewrites if r.message and r.warn(given)]


def with_defaults(given: Mapping[str, Any]) -> dict[str, Any]:
    """Every Megatron argument: the job's value, else Megatron's own default."""
    return {dest: given[dest] if given.get(dest) is not None else arg.default
            for dest, arg in megatron_args.catalog().items()}


# (cite, rewrite): each takes the settings so far and the virtual pipeline size, and returns {dest: new value}
# plus the message that tells the user (empty: Megatron's own bookkeeping, not worth a warning).
Step = tuple[str, bool, Callable[[dict[str, Any], int | None], tuple[dict[str, Any], str]]]


def _recompute_activations(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    """--recompute-activations is selective recompute: validate_args sets the granularity before its checks."""
    return ({"recompute_granularity": "selective"}, "") if s["recompute_activations"] else ({}, "")


def _no_interleaving(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    if vpp is not None:
        return {}, ""
    return {"overlap_p2p_comm": False, "align_param_gather": False}, (
        "overlap_p2p_comm and align_param_gather are turned off by Megatron without the interleaved pipeline "
        "schedule (arguments.py:991)")


def _megatron_fsdp(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    if not s["use_megatron_fsdp"]:
        return {}, ""
    return {"use_distributed_optimizer": True}, "use_megatron_fsdp turns on use_distributed_optimizer " \
                                                "(Megatron-FSDP needs it)"


def _fsdp_registration(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    if s["nccl_ub"] and s["use_megatron_fsdp"]:
        return {"fsdp_manual_registration": True}, "nccl_ub with use_megatron_fsdp turns on fsdp_manual_registration"
    return {}, ""


def _fp16_nan_check(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    if s["fp16"] and not s["loss_scale"]:
        return {"check_for_nan_in_loss_and_grad": False}, (
            "check_for_nan_in_loss_and_grad is turned off by Megatron with fp16's dynamic loss scaling")
    return {}, ""


def _bf16_grads(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    if not s["bf16"]:
        return {}, ""
    if s["grad_reduce_in_bf16"]:
        return {"accumulate_allreduce_grads_in_fp32": False}, ""
    if s["main_grads_dtype"] in (None, "fp32"):
        return {"accumulate_allreduce_grads_in_fp32": True}, ""
    return {}, ""


def _sequence_parallel(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    if s["tensor_model_parallel_size"] == 1 and s["sequence_parallel"]:
        return {"sequence_parallel": False}, "sequence_parallel is ignored with TP 1 (Megatron turns it off)"
    return {}, ""


def _bias_gelu(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    return ({"bias_gelu_fusion": False}, "") if not s["add_bias_linear"] else ({}, "")


def _rope(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    out: dict[str, Any] = {"position_embedding_type": "rope"} if s["use_rotary_position_embeddings"] else {}
    if out.get("position_embedding_type", s["position_embedding_type"]) != "rope":
        out["apply_rope_fusion"] = False
    return out, ""


def _single_router_lists(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    """A one-element list of load-balancing types (or aux-loss coefficients) becomes the element itself, which
    TransformerConfig's checks compare with a string (`!= "sinkhorn"` exempts top-1 routing from pre-softmax)."""
    changes = {dest: s[dest][0] for dest in ("moe_router_load_balancing_type", "moe_aux_loss_coeff")
               if isinstance(s[dest], list) and len(s[dest]) == 1}
    return changes, ""


def _emerging_optimizer(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    out: dict[str, Any] = {"use_layer_wise_distributed_optimizer": False}
    if s["optimizer"] in EMERGING_OPTIMIZERS:
        if s["optimizer"] == "dist_muon":
            out.update(optimizer="muon", use_layer_wise_distributed_optimizer=True)
        if s["use_distributed_optimizer"]:
            out.update(use_layer_wise_distributed_optimizer=True, use_distributed_optimizer=False)
    return out, ""


def _fake_process_group(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    if s["fake_process_group"]:
        return {"check_for_nan_in_loss_and_grad": False, "use_gloo_process_groups": False}, ""
    return {}, ""


def _async_save(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    if s["ckpt_format"] != "torch" and s["async_save"] and not s["use_persistent_ckpt_worker"]:
        return {"async_save": False}, ("async_save is disabled by Megatron without use_persistent_ckpt_worker "
                                       "(arguments.py:1621): set use_persistent_ckpt_worker=true for "
                                       "asynchronous saves")
    return {}, ""


def _async_strategy(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    return ({"async_strategy": "mcore"}, "") if not s["async_save"] else ({}, "")


def _mtp_pattern(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    """The legacy MTP pattern moves into hybrid_layer_pattern (a hybrid model's; a GPT model ignores both)."""
    if s["mtp_hybrid_override_pattern"] is not None and (s["mtp_num_layers"] or 0) > 0 and \
            "/" not in (s["hybrid_layer_pattern"] or ""):
        return {"mtp_hybrid_override_pattern": None}, "mtp_hybrid_override_pattern is ignored for GPT models"
    return {}, ""


def _microbatch_group(s: dict[str, Any], vpp: int | None) -> tuple[dict[str, Any], str]:
    if s["microbatch_group_size_per_vp_stage"] is None:
        return {"microbatch_group_size_per_vp_stage": s["pipeline_model_parallel_size"]}, ""
    return {}, ""


# In validate_args' order; `always`: warned even when the preset did not set the rewritten setting itself.
STEPS: tuple[Step, ...] = (
    ("arguments.py:605", False, _recompute_activations),
    ("arguments.py:774", True, _mtp_pattern),
    ("arguments.py:991", False, _no_interleaving),
    ("arguments.py:1119", True, _megatron_fsdp),
    ("arguments.py:1141", True, _fsdp_registration),
    ("arguments.py:1169", False, _fp16_nan_check),
    ("arguments.py:1182", False, _bf16_grads),
    ("arguments.py:1384", False, _sequence_parallel),
    ("arguments.py:1437", False, _bias_gelu),
    ("arguments.py:1457", False, _rope),
    ("arguments.py:1492", False, _single_router_lists),
    ("arguments.py:1551", False, _emerging_optimizer),
    ("arguments.py:1585", False, _fake_process_group),
    ("arguments.py:1627", False, _async_save),
    ("arguments.py:1630", False, _async_strategy),
    ("model_parallel_config.py:453", False, _microbatch_group),  # ModelParallelConfig.__post_init__
)


def effective_settings(given: Mapping[str, Any], vpp: int | None = None) -> Effective:
    """Megatron's settings after its silent rewrites. `given`: the job's Megatron settings as passed (absent or
    None = Megatron's default); `vpp`: the virtual pipeline size validate_args derives (None: not interleaved)."""
    settings = with_defaults(given)
    for dest, value in PRETRAIN_GPT_DEFAULTS.items():
        if settings.get(dest) is None:
            settings[dest] = value
    rewrites: list[Rewrite] = []
    for cite, always, step in STEPS:
        changes, message = step(settings, vpp)
        for dest, now in changes.items():
            if settings.get(dest) != now:
                rewrites.append(Rewrite(dest, settings.get(dest), now, cite, message, always))
                message = ""  # one warning per step, however many settings it changes
            settings[dest] = now
    return Effective(settings, tuple(rewrites))
