"""A GPT layer spec for Megatron installs without Transformer Engine: the local (pure MCore) layer with
its core attention replaced by ``torch.nn.functional.scaled_dot_product_attention`` (flash kernel).

Selected in a ``pretrain_gpt.py`` run with ``--spec launcher.inside.megatron_ext.sdpa_spec layer_spec``.
Megatron's ``gpt_builders.gpt_builder`` imports the module and takes the attribute as it is (it does not call
it), so ``layer_spec`` is a ModuleSpec built at import time. By then Megatron has parsed its arguments, so the
spec follows them (normalization, qk-layernorm, MoE experts) exactly like the built-in local spec does.

Upstream's local core attention (``DotProductAttention``) materialises the [b, heads, s, s] score matrix and
runs an unfused softmax; on an H200 the SDPA flash kernel makes the 345M model ~1.6x faster per step.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core import tensor_parallel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer import transformer_block
from megatron.core.transformer.attention import SelfAttention
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.multi_latent_attention import MLASelfAttention
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.torch_norm import WrappedTorchNorm
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.transformer_layer import (
    TransformerLayer,
    TransformerLayerSubmodules,
    get_transformer_layer_offset,
)
from megatron.core.utils import divide, get_pg_rank

from launcher.inside.megatron_ext.coverage import NORM_FEATURES, describe, sdpa_spec_gaps

FLASH_MAX_HEAD_DIM = 256


def sdpa(q, k, v, *, enable_gqa: bool, attn_mask=None, **kwargs) -> torch.Tensor:
    """F.scaled_dot_product_attention on [b, heads, s, d], with grouped key/value heads repeated to the query heads
    first where flash attention cannot run. Of torch's fused kernels only flash (and cuDNN) take grouped heads, and
    flash takes half precision only, no explicit mask and head dims up to 256; the memory-efficient kernel takes
    none of grouped heads (sdp_utils.cpp), so torch would run its math attention, which keeps each layer's
    [b, heads, s, s] probabilities, dropped probabilities and dropout mask for the backward (one H200, fp32, 64
    heads of one query group at sequence 4096, 4 layers: 36 GiB). The repeat is what enable_gqa computes (key head
    i // (heads / groups) for query head i) and costs two [b, heads, s, d] tensors."""
    no_flash = q.dtype == torch.float32 or attn_mask is not None or q.size(-1) > FLASH_MAX_HEAD_DIM
    if enable_gqa and no_flash and k.size(-3) != q.size(-3):
        repeats = q.size(-3) // k.size(-3)
        k, v = k.repeat_interleave(repeats, dim=-3), v.repeat_interleave(repeats, dim=-3)
        enable_gqa = False
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=enable_gqa, **kwargs)


class ZeroCenteredLayerNorm(torch.nn.LayerNorm):
    """LayerNorm whose weight is stored as gamma - 1 (``--apply-layernorm-1p``), as apex's and TE's are: it
    starts at zero and ``1 + weight`` scales the normalised input."""

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.weight is not None:
            torch.nn.init.zeros_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight + 1, self.bias, self.eps)


class ZeroCenteredRMSNorm(torch.nn.RMSNorm):
    """RMSNorm with the weight stored as gamma - 1, as TE's zero-centered RMSNorm."""

    def reset_parameters(self) -> None:
        super().reset_parameters()
        if self.weight is not None:
            torch.nn.init.zeros_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight + 1, self.eps)


class _NormConfig:
    """The config as WrappedTorchNorm should see it: what TorchNorm implements itself is switched off."""

    def __init__(self, config: TransformerConfig):
        self._config = config
        for feature in NORM_FEATURES:  # zero-centered gamma; apex's memory saving (the math is plain LayerNorm)
            setattr(self, feature, False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._config, name)


class TorchNorm:
    """Megatron's torch norm fallback (WrappedTorchNorm, used without apex and TE) plus zero-centered gamma and
    memory-efficient LayerNorm, which it asserts against; its other asserts (sequence parallelism, persistent
    LayerNorm) still apply."""

    def __new__(cls, config: TransformerConfig, hidden_size: int, eps: float = 1e-5, **_unused: Any) -> Any:
        norm = WrappedTorchNorm(_NormConfig(config), hidden_size, eps)
        if config.layernorm_zero_centered_gamma:
            zero_centered = {torch.nn.LayerNorm: ZeroCenteredLayerNorm, torch.nn.RMSNorm: ZeroCenteredRMSNorm}
            norm.__class__ = zero_centered[type(norm)]
            norm.reset_parameters()
        return norm


class SDPACoreAttention(MegatronModule):
    """Drop-in replacement for MCore's local ``DotProductAttention`` (same constructor and forward; plus the
    query/key and value head sizes multi-latent attention gives, as TE's attention takes them).

    Tensors come in as [seq, batch, heads, head_dim] and the result goes out as [seq, batch, heads*head_dim],
    as the local attention does. An explicit mask is applied as given; without one (the launcher passes
    --no-create-attention-mask-in-dataloader) a causal mask type uses the flash kernel's own causal masking.
    """

    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: AttnMaskType,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        cp_comm_type: str | None = None,
        pg_collection: ProcessGroupCollection | None = None,
        k_channels: int | None = None,  # TE's attention takes these too; multi-latent attention passes them
        v_channels: int | None = None,
    ):
        super().__init__(config=config)
        if config.context_parallel_size != 1:
            raise ValueError("SDPA core attention does not support context parallelism (needs TE)")
        if config.window_size is not None:
            raise ValueError("SDPA core attention does not support sliding-window attention")
        if getattr(config, "softmax_type", "vanilla") != "vanilla":
            raise ValueError("SDPA core attention supports only the vanilla softmax")
        self.layer_number = max(1, layer_number)
        self.attn_mask_type = attn_mask_type
        self.attention_type = attention_type
        if pg_collection is None:
            pg_collection = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp"])
        tp_size = pg_collection.tp.size()
        # multi-latent attention gives its query/key and value head sizes (they differ: e.g. 192 and 128)
        head_dim = k_channels if k_channels is not None else config.kv_channels
        value_dim = v_channels if v_channels is not None else config.kv_channels
        self.hidden_size_per_partition = divide(value_dim * config.num_attention_heads, tp_size)
        self.num_heads_per_partition = divide(config.num_attention_heads, tp_size)
        self.num_query_groups_per_partition = divide(config.num_query_groups, tp_size)
        # apply_query_key_layer_scaling divides the scale by the layer number and multiplies the scores back
        # in fp32 inside the softmax: the product is unchanged, so the plain scale is the same attention.
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
        self.dropout_p = config.attention_dropout if attention_dropout is None else attention_dropout

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: torch.Tensor | None = None,
        packed_seq_params: Any = None,
    ) -> torch.Tensor:
        if packed_seq_params is not None:
            raise ValueError("packed sequences need Transformer Engine attention")
        if attention_bias is not None:
            raise ValueError("attention bias is not supported by SDPA core attention")
        mask_type = self.attn_mask_type if attn_mask_type is None else attn_mask_type
        seq_q, seq_k = query.size(0), key.size(0)
        # [s, b, n, d] -> [b, n, s, d]; a view, the flash kernel only needs the last dim contiguous.
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        is_causal = False
        sdpa_mask = None
        if attention_mask is not None:
            # Megatron's mask is True where attention is NOT allowed. It can be more than causal (documents
            # reset by --reset-attention-mask), so it wins; without one the flash kernel's causal mode is used.
            sdpa_mask = ~attention_mask
        elif mask_type == AttnMaskType.causal:
            if seq_q == seq_k:
                is_causal = True
            elif seq_q > 1:  # chunked prefill: queries are the last seq_q positions
                sdpa_mask = torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device).tril(seq_k - seq_q)
        dropout_p = self.dropout_p if self.training else 0.0
        gqa = q.size(1) != k.size(1)  # fewer key/value heads than query heads (MLA has as many)
        if dropout_p > 0.0 and not self.config.sequence_parallel:
            # Same RNG stream as upstream's local attention dropout (distinct per tensor-parallel rank).
            with tensor_parallel.get_cuda_rng_tracker().fork():
                out = self._sdpa(q, k, v, sdpa_mask, dropout_p, is_causal, gqa)
        else:
            out = self._sdpa(q, k, v, sdpa_mask, dropout_p, is_causal, gqa)
        # [b, n, s, d] -> [s, b, n*d]
        return out.permute(2, 0, 1, 3).reshape(seq_q, out.size(0), self.hidden_size_per_partition)

    def _sdpa(self, q, k, v, mask, dropout_p: float, is_causal: bool, gqa: bool) -> torch.Tensor:
        return sdpa(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=self.softmax_scale,
                    enable_gqa=gqa)


class Attributes(Mapping[str, Any]):
    """Megatron's parsed arguments (or any object) read as the mapping of settings coverage.py's table expects."""

    def __init__(self, args: Any):
        self._args = args

    def __getitem__(self, name: str) -> Any:
        try:
            return getattr(self._args, name)
        except AttributeError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter(dir(self._args))

    def __len__(self) -> int:
        return len(dir(self._args))


def is_moe_layer(config: TransformerConfig, layer_number: int) -> bool:
    """Whether decoder layer `layer_number` (1-based, global) has experts: Megatron's moe_layer_freq pattern
    (gpt_layer_specs.get_gpt_decoder_layer_specs: an int N, every N-th layer from the first; a list, per layer)."""
    freq = config.moe_layer_freq
    if isinstance(freq, int):
        return (layer_number - 1) % freq == 0
    return bool(freq[layer_number - 1])


class DenseOrMoE:
    """Mixin before a TransformerLayer class: the layer is built dense or with experts as moe_layer_freq says
    for its global number, so that one ``--spec`` serves a block that mixes them (Megatron's builder takes a
    --spec as every layer's spec). The global number is TransformerLayer's own: the local number plus this
    pipeline stage's offset."""

    def __init__(self, config: TransformerConfig, submodules: TransformerLayerSubmodules, layer_number: int = 1,
                 *args: Any, dense_submodules: TransformerLayerSubmodules, **kwargs: Any):
        pg_collection = kwargs.get("pg_collection") or ProcessGroupCollection.use_mpu_process_groups()
        number = layer_number + get_transformer_layer_offset(config, kwargs.get("vp_stage"),
                                                             get_pg_rank(pg_collection.pp))
        chosen = submodules if is_moe_layer(config, number) else dense_submodules
        super().__init__(config, chosen, layer_number, *args, **kwargs)  # type: ignore[call-arg]


class DenseOrMoELayer(DenseOrMoE, TransformerLayer):
    """Megatron's TransformerLayer, dense or MoE by its number (DenseOrMoE)."""


def build_layer_spec(args: Any | None = None) -> ModuleSpec:
    """The local GPT layer spec for ``args`` (Megatron's parsed arguments, or None for defaults) with
    SDPA core attention; with experts on only some layers (moe_layer_freq), a DenseOrMoELayer spec that
    carries the dense layer's submodules too."""
    options: dict[str, Any] = {}
    if args is not None:
        gaps = sdpa_spec_gaps(Attributes(args))
        if gaps:  # the launcher never picks this spec then (coverage.py); a preset that names it is refused
            raise ValueError(f"the SDPA layer spec does not cover {describe(gaps)}; leave spec unset so the "
                             "launcher picks Megatron's local spec")
        options = {
            "multi_latent_attention": bool(getattr(args, "multi_latent_attention", False)),
            "num_experts": getattr(args, "num_experts", None),
            "moe_grouped_gemm": getattr(args, "moe_grouped_gemm", False),
            "qk_layernorm": getattr(args, "qk_layernorm", False),
            "normalization": getattr(args, "normalization", "LayerNorm"),
            "qk_l2_norm": getattr(args, "qk_l2_norm", False),
        }
    spec = _with_sdpa(get_gpt_layer_local_spec(**options))
    if options.get("num_experts") and _mixed(getattr(args, "moe_layer_freq", 1)):
        dense = _with_sdpa(get_gpt_layer_local_spec(**dict(options, num_experts=None, moe_grouped_gemm=False)))
        return ModuleSpec(module=DenseOrMoELayer, submodules=spec.submodules,
                          params={"dense_submodules": dense.submodules})
    return spec


def _mixed(moe_layer_freq: Any) -> bool:
    """Whether Megatron's parsed moe_layer_freq leaves some layers dense."""
    return moe_layer_freq != 1 if isinstance(moe_layer_freq, int) else not all(moe_layer_freq)


def _with_sdpa(spec: ModuleSpec) -> ModuleSpec:
    """Megatron's local layer spec with SDPA core attention and the norms of TorchNorm."""
    attention = spec.submodules.self_attention
    if attention.module not in (SelfAttention, MLASelfAttention):
        raise ValueError(f"unexpected attention module {attention.module.__name__} in the local spec")
    norms = {name: TorchNorm for name in ("q_layernorm", "k_layernorm", "kv_layernorm")
             if getattr(attention.submodules, name, None) is WrappedTorchNorm}
    attention.submodules = replace(attention.submodules, core_attention=SDPACoreAttention, **norms)
    layer_norms = {name: TorchNorm for name in ("input_layernorm", "pre_mlp_layernorm")
                   if getattr(spec.submodules, name) is WrappedTorchNorm}
    spec.submodules = replace(spec.submodules, **layer_norms)
    return spec


def use_torch_norm_for_final_layernorm() -> None:
    """Without apex and TE the block's final LayerNorm is WrappedTorchNorm too (transformer_block.LayerNormImpl,
    taken for any layer spec): the same TorchNorm there, so zero-centered gamma holds for the whole model."""
    if transformer_block.LayerNormImpl is WrappedTorchNorm:
        transformer_block.LayerNormImpl = TorchNorm


def _training_args() -> Any | None:
    """Megatron's parsed arguments when this is imported inside a training run, else None."""
    try:
        from megatron.training import global_vars
    except ImportError:
        return None
    return getattr(global_vars, "_GLOBAL_ARGS", None)


layer_spec: ModuleSpec = build_layer_spec(_training_args())
use_torch_norm_for_final_layernorm()
