"""Fork flags whose meaning at the pin is an exact formula of the flag's value and other settings of the same
script (launcher/data/flag_translations.json, a row's `computed`): ModelLink's --n-shared-experts N is a shared
expert N × the expert width wide. Each formula takes the flag's value and the settings it reads, as imported, and
gives the pin's settings, or raises NotComputable with what is missing (the row then refuses as it would without
a formula)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any


class NotComputable(ValueError):
    """An input of a formula is absent, not a number, or out of the range the fork accepts."""


def _integer(name: str, value: Any) -> int:
    if value is None:
        raise NotComputable(f"{name} is not given")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value.strip()):
        return int(value)
    raise NotComputable(f"{name} is not known without running the script")


def count_times_expert_width(count: int, reads: dict[str, Any]) -> dict[str, Any]:
    """ModelLink's shared expert: an MLP n_shared_experts × the expert width wide (moe_layer.py: its
    --moe-intermediate-size, else the config's ffn_hidden_size); MindSpeed's and MindSpeed-LLM's shared-expert
    feature: moe_ffn_hidden_size, else ffn_hidden_size. A count of 0 builds none."""
    given = reads["moe_ffn_hidden_size"]
    width = _integer("moe_ffn_hidden_size" if given is not None or reads["ffn_hidden_size"] is None
                     else "ffn_hidden_size", given if given is not None else reads["ffn_hidden_size"])
    return {"moe_shared_expert_intermediate_size": count * width} if count else {}


def first_k_dense(k: int, reads: dict[str, Any]) -> dict[str, Any]:
    """ModelLink's layer i (from 0) is MoE when i >= K and i % moe_layer_freq == 0 (transformer_block.py; its
    --moe-layer-freq is an integer, and without it the fork ignores K); the pin takes that as a 0/1 pattern."""
    _integer("num_experts", reads["num_experts"])  # without experts the fork ignores K
    layers = _integer("num_layers", reads["num_layers"])
    freq = _integer("moe_layer_freq", reads["moe_layer_freq"])
    if freq < 1:
        raise NotComputable(f"moe_layer_freq {freq} is not a positive frequency")
    if not 0 <= k < layers:
        raise NotComputable(f"K {k} is not below num_layers {layers} (the fork refuses it)")
    pattern = [1 if i >= k and i % freq == 0 else 0 for i in range(layers)]
    dense = pattern.index(1) if 1 in pattern else layers
    if dense < layers and pattern[dense:] == [1] * (layers - dense):  # the usual case, as DeepSeek's configs say it
        return {"moe_layer_freq": f"[0]*{dense}+[1]*{layers - dense}" if dense else f"[1]*{layers}"}
    return {"moe_layer_freq": "[" + ",".join(map(str, pattern)) + "]"}


def tp_extend_ep(_: None, reads: dict[str, Any]) -> dict[str, Any]:
    """MindSpeed's --moe-tp-extend-ep: each expert whole, the experts spread over EP × TP ranks (num_local_experts
    = num_experts / (EP · TP)), the pin's expert parallelism of that size without expert tensor parallelism;
    an absent size is Megatron's default, 1, in the fork and at the pin alike."""
    tp = 1 if reads["tensor_model_parallel_size"] is None else _integer(
        "tensor_model_parallel_size", reads["tensor_model_parallel_size"])
    ep = 1 if reads["expert_model_parallel_size"] is None else _integer(
        "expert_model_parallel_size", reads["expert_model_parallel_size"])
    return {"expert_tensor_parallel_size": 1, "expert_model_parallel_size": ep * tp}


# a row's `computed.formula` → the function; its `computed.reads` name the settings passed in `reads`
FORMULAS: dict[str, Callable[[Any, dict[str, Any]], dict[str, Any]]] = {
    "count_times_expert_width": count_times_expert_width,
    "first_k_dense": first_k_dense,
    "tp_extend_ep": tp_extend_ep,
}


def compute(formula: str, value: Any, reads: dict[str, Any]) -> dict[str, Any]:
    """The pin's settings (dest → value, not yet typed) for the flag's `value` (None for a switch), given the
    settings the row reads (None where the script gives none); NotComputable when one it needs is absent or not
    known here."""
    return FORMULAS[formula](None if value is None else _integer("its value", value), reads)
