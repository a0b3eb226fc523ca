"""What the SDPA fast spec (sdpa_spec.py, with compiled_layer.py) does not implement: one table, read by the
launcher's pipeline before launch (launcher/pipeline/kernels.py picks Megatron's plain local spec instead, with a
note) and by the spec itself inside training (it refuses a job that names it anyway). Imports no torch.

Megatron's model builder (gpt_builders.gpt_builder at the pin) takes a ``--spec`` as the layer spec for every
layer and skips its own choice, so anything that choice would have done differently is a gap here:

- ``experimental_attention_variant``: a block spec of its own, which asserts Transformer Engine: refused without;
- ``heterogeneous_layers_config_*``: a block spec of their own;
- ``mtp_num_layers``: gpt_builders.gpt_builder at the pin fails with any ``--spec`` and multi-token prediction
  (``use_te`` is only bound when no spec is given: UnboundLocalError at model build, found by the CPU
  rehearsal); Megatron's local spec (no ``--spec``) builds it;
- ``window_size``, ``softmax_type`` other than vanilla: upstream's local DotProductAttention implements them
  (FusedScaleMaskSoftmax's window, the softmax offset), torch's SDPA does not.

What the spec does implement beyond upstream's torch fallback: zero-centered gamma and memory-efficient LayerNorm
as plain LayerNorm math (sdpa_spec.TorchNorm), a mix of dense and MoE layers (``moe_layer_freq``: each layer
picks its MLP by its global number, sdpa_spec.DenseOrMoE, as Megatron's decoder block spec does), and
multi-latent attention, whose MLASelfAttention gives the core
attention different query/key and value head sizes that upstream's local DotProductAttention does not take
(found by the CPU rehearsal). So MLA without Transformer Engine trains on this spec only: with a gap above, which
sends the job to Megatron's local spec, it is refused (LOCAL_SPEC_ONLY_GAPS), as zero-centered gamma is without
apex (the local spec's torch norm asserts). The compiled layer sends a layer it
cannot run (MLA's too) to Megatron's own forward (compiled_layer.fast_path_blocker), so it adds no gap. Context
parallelism is refused for every local spec before launch (pipeline/layout.py), so it is no gap of this spec
either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Gap:
    """A Megatron setting (argparse dest) whose value the SDPA spec does not implement."""

    setting: str
    what: str  # "the SDPA layer spec does not cover <what>"
    applies: Callable[[Mapping[str, Any]], bool]  # over the job's Megatron settings (absent = Megatron's default)
    local_spec: str = ""  # why Megatron's plain local spec cannot build it either ("" when it can): refused then
    apex_builds: bool = False  # the local spec builds it with apex (its norm); without apex it is refused


def _given(dest: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda settings: settings.get(dest) not in (None, False)


SDPA_SPEC_GAPS: tuple[Gap, ...] = (
    Gap("experimental_attention_variant", "experimental attention variants",
        _given("experimental_attention_variant"),
        local_spec="Megatron's experimental-attention block spec asserts the Transformer Engine implementation "
                   "(experimental_attention_variant_module_specs.py)"),
    Gap("heterogeneous_layers_config_path", "heterogeneous layers", _given("heterogeneous_layers_config_path")),
    Gap("heterogeneous_layers_config_encoded_json", "heterogeneous layers",
        _given("heterogeneous_layers_config_encoded_json")),
    Gap("mtp_num_layers", "multi-token prediction", lambda settings: bool(settings.get("mtp_num_layers"))),
    Gap("window_size", "sliding-window attention", _given("window_size")),
    Gap("softmax_type", "softmax types other than vanilla",
        lambda settings: settings.get("softmax_type") not in (None, "vanilla")),
)


# TransformerConfig fields whose assert in Megatron's torch norm fallback (WrappedTorchNorm) the spec's own norm
# lifts by implementing them (sdpa_spec.TorchNorm); Megatron's checks read them as off for a job on this spec.
NORM_FEATURES = ("layernorm_zero_centered_gamma", "memory_efficient_layer_norm")


_TORCH_NORM = "Megatron's torch norm fallback (WrappedTorchNorm, taken without apex) asserts '{} not supported by " \
              "torch LayerNorm' at model build"

# What the SDPA spec builds but Megatron's plain local spec does not (zero-centered gamma: not without apex;
# memory_efficient_layer_norm is no flag at the pin, only a TransformerConfig field):
# refused when a gap moves the job there.
LOCAL_SPEC_ONLY_GAPS: tuple[Gap, ...] = (
    Gap("multi_latent_attention", "multi-latent attention", _given("multi_latent_attention"),
        local_spec="MLASelfAttention passes k_channels/v_channels to the core attention, which only the launcher's "
                   "SDPA spec and Transformer Engine's take (the local DotProductAttention fails at model build)"),
    Gap("layernorm_zero_centered_gamma", "zero-centered gamma", _given("layernorm_zero_centered_gamma"),
        local_spec=_TORCH_NORM.format("zero_centered_gamma"), apex_builds=True),
)


def off(gap: Gap) -> str:
    """The `--set` value that takes a job out of this gap: Megatron's default for the setting."""
    return "vanilla" if gap.setting == "softmax_type" else "null"


def sdpa_spec_gaps(settings: Mapping[str, Any]) -> list[Gap]:
    """The gaps these Megatron settings fall into; empty when the SDPA spec builds this model as upstream would."""
    return [gap for gap in SDPA_SPEC_GAPS if gap.applies(settings)]


def refused(gaps: list[Gap], settings: Mapping[str, Any], apex: bool = False) -> list[Gap]:
    """The gaps no layer spec without Transformer Engine builds: such a job is refused before launch. `gaps`:
    those of `settings` (sdpa_spec_gaps); any of them sends the job to Megatron's local spec, which then has to
    build what only the SDPA spec does too (with `apex`, its norm builds the norm features)."""
    local_only = [gap for gap in LOCAL_SPEC_ONLY_GAPS
                  if gap.applies(settings) and not (apex and gap.apex_builds)] if gaps else []
    return [gap for gap in gaps if gap.local_spec] + local_only


def describe(gaps: list[Gap]) -> str:
    """'multi-latent attention (multi_latent_attention)', joined: names the settings the user can change."""
    return ", ".join(dict.fromkeys(f"{gap.what} ({gap.setting})" for gap in gaps))
