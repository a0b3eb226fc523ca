"""Megatron's transformer layer with its training math in one ``torch.compile``d function (no TE, TP 1).

Without Transformer Engine, a Megatron layer is ~15 small modules, autograd functions and jit fusions per
forward and as many in backward. On an H200 the GPU then waits for the host between kernels: that idle time was
the last ~7 % between the ``345m`` preset and compiled plain PyTorch (docs/benchmarks.md). ``CompiledLayer`` keeps
Megatron's submodules and parameters (same names, checkpoints, DDP hooks, optimizer) and, where the layer is a
plain GPT block, runs LayerNorm → QKV → SDPA → projection + residual → LayerNorm → MLP + residual as one compiled
function; everything else takes Megatron's own forward. ``fast_path_blocker`` says why a layer cannot. With
Megatron's fp8 set (and no Transformer Engine, which this spec implies) the four linears of that function run as
torchao float8 matmuls (float8.py); a layer that cannot run them stops the job rather than train in bf16.

The compiled function calls none of the submodules, so their module hooks would never fire. Megatron's DDP
registers a forward pre-hook on every module when overlap_param_gather is on: it waits for the parameter
all-gather of each bucket and starts the next one. The fast path therefore runs the submodules' forward pre-hooks
itself, in registration (= forward) order, before the compiled function; a submodule with forward (post) or
backward module hooks, which the fast path cannot honour, sends the layer to Megatron's forward.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core.fp8_utils import is_first_last_bf16_layer
from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd
from megatron.core.models.common.embeddings.yarn_rotary_pos_embedding import (
    _yarn_get_concentration_factor_from_config,
)
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.attention import SelfAttention
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.mlp import MLP
from megatron.core.transformer.transformer_layer import TransformerLayer
from megatron.core.utils import make_viewless_tensor

from launcher.inside.megatron_ext import float8, wgrad_fusion
from launcher.inside.megatron_ext.sdpa_spec import (
    DenseOrMoE,
    SDPACoreAttention,
    ZeroCenteredLayerNorm,
    ZeroCenteredRMSNorm,
    sdpa,
)

# The norm modules layer_math implements: (is RMSNorm, weight stored as gamma - 1).
NORMS = {torch.nn.LayerNorm: (False, False), torch.nn.RMSNorm: (True, False),
         ZeroCenteredLayerNorm: (False, True), ZeroCenteredRMSNorm: (True, True)}


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    # Megatron's bias_gelu fusion is the tanh approximation, with these constants.
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def _norm(x, weight, bias, eps: float, rms: bool, zero_centered: bool):
    if zero_centered:
        weight = weight + 1
    if rms:
        return F.rms_norm(x, (x.size(-1),), weight, eps)
    return F.layer_norm(x, (x.size(-1),), weight, bias, eps)


def _fused_wgrad_linear(x, weight, bias=None):
    """F.linear whose weight gradient accumulates into the weight's main_grad in the GEMM (wgrad_fusion)."""
    out = wgrad_fusion.linear(x, weight, fused=True)
    return out if bias is None else out + bias


def layer_math(
    x, ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b, fused_wgrad=False,
    q_rope=None, k_rope=None,
    *, eps: float, rms: bool, zero_centered: bool, heads: int, groups: int, head_dim: int, scale: float,
    activation: str, hidden_dropout: float, attention_dropout: float, linear=F.linear,
    rotary_interleaved: bool = False, rope_mscale: float = 1.0,
):
    """One pre-LayerNorm GPT layer on [seq, batch, hidden], in Megatron's weight layout and operation order.

    ``linear`` runs the four linears (QKV, projection, fc1, fc2): ``F.linear``, or float8.float8_linear for FP8.
    fused_wgrad: their weight gradients accumulate into their main_grad in the GEMM instead (Megatron's
    gradient_accumulation_fusion; wgrad_fusion.register'ed), not into param.grad (bf16 only).
    q_rope, k_rope: the rotary embedding's frequencies for queries and keys ([seq, 1, 1, rotary dim], Megatron's
    rotary_pos_emb), applied with Megatron's own unfused function (rotary_percent < 1 leaves the rest as is)."""
    if fused_wgrad:
        linear = _fused_wgrad_linear
    s, b, _ = x.shape
    per_group = heads // groups
    y = _norm(x, ln1_w, ln1_b, eps, rms, zero_centered)
    # Megatron's fused QKV rows are grouped per query group: [q (per_group heads), k, v] for each group.
    qkv = linear(y, qkv_w, qkv_b).view(s, b, groups, (per_group + 2) * head_dim)
    q, k, v = torch.split(qkv, [per_group * head_dim, head_dim, head_dim], dim=3)
    q = q.reshape(s, b, heads, head_dim)
    if q_rope is not None:
        q = _apply_rotary_pos_emb_bshd(q, q_rope, rotary_interleaved=rotary_interleaved, mscale=rope_mscale)
    if k_rope is not None:
        k = _apply_rotary_pos_emb_bshd(k, k_rope, rotary_interleaved=rotary_interleaved, mscale=rope_mscale)
    attn = sdpa(
        q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3),
        dropout_p=attention_dropout, is_causal=True, scale=scale, enable_gqa=groups != heads,
    )
    attn = attn.permute(2, 0, 1, 3).reshape(s, b, heads * head_dim)
    out = linear(attn, proj_w)
    if proj_b is not None:
        out = out + proj_b
    x = x + F.dropout(out, hidden_dropout)

    y = _norm(x, ln2_w, ln2_b, eps, rms, zero_centered)
    h = linear(y, fc1_w, fc1_b)
    if activation == "gelu_tanh":
        h = _gelu_tanh(h)
    elif activation == "gelu":
        h = F.gelu(h)
    else:  # swiglu
        gate, up = torch.chunk(h, 2, dim=-1)
        h = F.silu(gate) * up
    out = linear(h, fc2_w)
    if fc2_b is not None:
        out = out + fc2_b
    return x + F.dropout(out, hidden_dropout)


@functools.cache
def compiled_layer_math(fp8_format: str | None = None):
    """``layer_math`` compiled once per process and linear kind (bf16, or one FP8 format): every layer shares the
    graph (same shapes and constants; static).

    MEGATRON_LAUNCH_COMPILE_BACKEND picks the torch.compile backend (default inductor; tests use aot_eager, with
    which FP8 is emulated: float8 GEMMs need a GPU of compute capability 8.9+)."""
    backend = os.environ.get("MEGATRON_LAUNCH_COMPILE_BACKEND", "inductor")
    math = layer_math
    if fp8_format is not None:
        math = functools.partial(layer_math, linear=float8.float8_linear(fp8_format, emulate=fp8_emulated()))
    return torch.compile(math, backend=backend, fullgraph=True, dynamic=False)


def fp8_emulated() -> bool:
    """torchao's emulated float8 GEMM (a test on CPU), never on a GPU run."""
    return not torch.cuda.is_available()


def _activation(config) -> str | None:
    if config.activation_func_fp8_input_store:
        return None  # Megatron keeps the activation input in fp8 for backward; the compiled graph would not
    if config.gated_linear_unit:
        plain_glu = config.activation_func_clamp_value is None and not config.glu_linear_offset
        return "swiglu" if config.activation_func is F.silu and plain_glu else None
    if config.activation_func is F.gelu:
        # With bias_activation_fusion Megatron runs its tanh-approximated bias_gelu (it needs a bias).
        if config.bias_activation_fusion:
            return "gelu_tanh" if config.add_bias_linear else None
        return "gelu"
    return None


def fast_path_blocker(layer: TransformerLayer) -> str | None:
    """None when ``layer``'s training forward can run as ``layer_math``; else the reason it cannot."""
    config = layer.config
    attention, mlp = layer.self_attention, layer.mlp
    checks = [
        (isinstance(attention, SelfAttention), "attention is not SelfAttention"),
        (isinstance(getattr(attention, "core_attention", None), SDPACoreAttention), "core attention is not SDPA"),
        (isinstance(mlp, MLP), "the MLP is not a dense MLP (experts?)"),
        (isinstance(layer.cross_attention, IdentityOp), "cross attention"),
        (isinstance(layer.pre_cross_attn_layernorm, IdentityOp), "cross attention layernorm"),
        (type(layer.input_layernorm) in NORMS and type(layer.pre_mlp_layernorm) is type(layer.input_layernorm),
         "not torch LayerNorm/RMSNorm"),
        (config.tensor_model_parallel_size == 1 and config.context_parallel_size == 1
         and not config.sequence_parallel, "tensor/context/sequence parallelism"),
        (config.recompute_granularity is None, "activation recomputation"),
        # (apply_residual_connection_post_layernorm is never read by Megatron's layer at the pin: no blocker)
        (not config.fp32_residual_connection, "fp32 residual"),
        (not config.fp4, "fp4"),
        (_activation(config) is not None, "activation function"),
        (not getattr(config, "attention_output_gate", False), "gated attention"),
        (config.mlp_chunks_for_training <= 1, "chunked MLP"),
        (not config.cpu_offloading and not getattr(config, "fine_grained_activation_offloading", False),
         "activation offloading"),
        (getattr(config, "cuda_graph_impl", "none") == "none", "CUDA graphs"),
        (not config.test_mode, "test mode"),
    ]
    for ok, reason in checks:
        if not ok:
            return reason
    linears = (attention.linear_qkv, attention.linear_proj, mlp.linear_fc1, mlp.linear_fc2)
    if not all(type(m) in (ColumnParallelLinear, RowParallelLinear) for m in linears):
        return "linear layers are not Megatron's local ones"
    if attention.q_layernorm is not None or attention.k_layernorm is not None:
        return "q/k LayerNorm"
    if attention.attn_mask_type != AttnMaskType.causal:
        return "attention mask is not causal"
    for norm in (layer.input_layernorm, layer.pre_mlp_layernorm):
        if norm.weight is None or (isinstance(norm, torch.nn.LayerNorm) and norm.bias is None):
            return "norm without affine parameters"
    return None


def fp8_format_of(layer: CompiledLayer) -> tuple[str | None, str | None]:
    """(the FP8 format this layer's linears run in with torchao's float8 (float8.py), or None for bf16; why it
    cannot, or None): Megatron's fp8 setting, except the first/last layers its first_last_layers_bf16 keeps in
    bf16 (as TE's context does). A problem stops the layer's first forward: the job would silently train bf16."""
    config = layer.config
    if not config.fp8 or is_first_last_bf16_layer(config, layer.layer_number - 1):
        return None, None
    recipe = getattr(config.fp8_recipe, "value", config.fp8_recipe)
    problem = float8.unsupported(config.fp8, recipe, emulate=fp8_emulated()) or layer.fast_path_blocker
    if problem is None:
        announce_fp8(config.fp8)
    return str(config.fp8), problem


def fp8_refused(reason: str) -> RuntimeError:
    return RuntimeError(f"megatron-launch: fp8 without Transformer Engine runs only in the compiled layers with "
                        f"torchao, and cannot here: {reason}")


@functools.cache
def announce_fp8(fp8_format: str) -> None:
    if torch.distributed.is_initialized() and torch.distributed.get_rank() != 0:
        return
    print(f"> megatron-launch fp8: {float8.describe(fp8_format)}", flush=True)


@functools.cache
def announce(blocker: str | None) -> None:
    """One line in the training log (rank 0) per outcome: the layers run compiled, or why they do not."""
    if torch.distributed.is_initialized() and torch.distributed.get_rank() != 0:
        return
    state = "on" if blocker is None else f"off ({blocker}), Megatron's own layer forward"
    print(f"> megatron-launch compiled layers: {state}", flush=True)


def submodules(layer: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in layer.modules() if m is not layer]


def hook_blocker(layer: torch.nn.Module) -> str | None:
    """None unless a submodule has module hooks the fast path cannot run for it (forward post or backward)."""
    for module in submodules(layer):
        if module._forward_hooks or module._backward_hooks or module._backward_pre_hooks:
            return f"module hooks on {type(module).__name__}"
    return None


def run_forward_pre_hooks(layer: torch.nn.Module) -> None:
    """Each submodule's forward pre-hooks, as its own call would run them (their inputs are unused here)."""
    for module in submodules(layer):
        for hook_id, hook in list(module._forward_pre_hooks.items()):
            if hook_id in module._forward_pre_hooks_with_kwargs:
                hook(module, (), {})
            else:
                hook(module, ())


COVERED_INPUTS = ("hidden_states", "rotary_pos_emb")


def input_blocker(args: tuple, kwargs: dict) -> str | None:
    """None when a forward call passes only hidden states and the rotary embedding's frequencies (everything else
    None); else the reason. An explicit attention mask may be more than causal (--reset-attention-mask); with the
    SDPA spec the launcher passes none."""
    if args or kwargs.get("hidden_states") is None:
        return "positional arguments"
    given = sorted(k for k, v in kwargs.items() if k not in COVERED_INPUTS and v is not None)
    if given:
        return f"{', '.join(given)} given"
    rope = kwargs.get("rotary_pos_emb")
    pair = rope if isinstance(rope, tuple) else (rope, rope)
    if len(pair) != 2 or not all(f is None or isinstance(f, torch.Tensor) and f.dim() == 4 for f in pair):
        return "rotary embedding of another form"
    return None


def rope_frequencies(layer: TransformerLayer, rope: Any) -> tuple[Any, Any]:
    """(queries', keys') rotary frequencies for this layer, as Megatron's SelfAttention takes them: none on a
    layer that no_rope_freq exempts; one tensor serves both."""
    no_rope = layer.config.no_rope_freq
    if rope is None or (no_rope and no_rope[layer.layer_number - 1]):
        return None, None
    return rope if isinstance(rope, tuple) else (rope, rope)


def fuse_weight_gradients(config, weights: tuple[torch.Tensor, ...]) -> bool:
    """Whether the weights' gradients accumulate into their main_grad in the GEMM (Megatron's
    gradient_accumulation_fusion, as its own linear layers do); if so they are registered and marked so that DDP's
    hook does not add a gradient a second time. False where autograd's param.grad is the way (no fusion, no DDP,
    no gradient, a shared weight)."""
    if not (config.gradient_accumulation_fusion and torch.is_grad_enabled()):
        return False
    if not all(w.requires_grad and getattr(w, "main_grad", None) is not None for w in weights):
        return False
    if any(getattr(w, "zero_out_wgrad", False) for w in weights):  # a shared weight: DDP adds its other grads
        return False
    for weight in weights:
        wgrad_fusion.register(weight)
        weight.grad_added_to_main_grad = True  # DDP resets it when it zeroes the buffers, each iteration
    return True


class CompiledLayer(TransformerLayer):
    """TransformerLayer whose plain-GPT forward runs as one compiled function; otherwise Megatron's forward.

    Dropout in the compiled graph draws from torch's default generator, not Megatron's model-parallel RNG
    tracker: the same distribution at TP 1, not the same bits."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fast_path_blocker = fast_path_blocker(self)
        # Refused at the first forward, not here: a model built only to load or convert a checkpoint (another
        # TP size) never trains; the launcher refuses such a training job before launch.
        self.fp8_format, self.fp8_problem = fp8_format_of(self)
        self.fp8_weights = float8.WeightCache()

    def forward(self, *args: Any, **kwargs: Any):
        if self.fp8_problem:
            raise fp8_refused(self.fp8_problem)
        blocker = self.fast_path_blocker or input_blocker(args, kwargs) or hook_blocker(self)
        announce(blocker)
        if blocker is None:
            run_forward_pre_hooks(self)  # e.g. DDP's wait for the overlapped parameter all-gather
            return self._fast_forward(kwargs["hidden_states"], kwargs.get("rotary_pos_emb")), None
        if self.fp8_format is not None:
            raise fp8_refused(blocker)  # Megatron's own forward would train this layer in bf16
        return super().forward(*args, **kwargs)

    def _fast_forward(self, x: torch.Tensor, rope: Any = None) -> torch.Tensor:
        attention, mlp, config = self.self_attention, self.mlp, self.config
        core = attention.core_attention
        ln1, ln2 = self.input_layernorm, self.pre_mlp_layernorm
        qkv, proj, fc1, fc2 = attention.linear_qkv, attention.linear_proj, mlp.linear_fc1, mlp.linear_fc2
        training = self.training
        weights = [m.weight for m in (qkv, proj, fc1, fc2)]
        if self.fp8_format is not None and float8.weight_cache_enabled():
            # (weight, fp8 bits, scale): each weight cast once per optimizer step, not twice per microbatch
            weights = [self.fp8_weights.get(name, w, self.fp8_format)
                       for name, w in zip(("qkv", "proj", "fc1", "fc2"), weights)]
        qkv_w, proj_w, fc1_w, fc2_w = weights
        q_rope, k_rope = rope_frequencies(self, rope)
        out = compiled_layer_math(self.fp8_format)(
            x, ln1.weight, getattr(ln1, "bias", None), qkv_w, qkv.bias, proj_w, proj.bias,
            ln2.weight, getattr(ln2, "bias", None), fc1_w, fc1.bias, fc2_w, fc2.bias,
            self.fp8_format is None and fuse_weight_gradients(config, (qkv.weight, proj.weight, fc1.weight,
                                                                        fc2.weight)),
            q_rope, k_rope,
            eps=ln1.eps, rms=NORMS[type(ln1)][0], zero_centered=NORMS[type(ln1)][1],
            heads=core.num_heads_per_partition, groups=core.num_query_groups_per_partition,
            head_dim=config.kv_channels, scale=core.softmax_scale, activation=_activation(config),
            hidden_dropout=self.hidden_dropout if training else 0.0,
            attention_dropout=core.dropout_p if training else 0.0,
            rotary_interleaved=config.rotary_interleaved,
            rope_mscale=_yarn_get_concentration_factor_from_config(config),
        )
        # As upstream's layer does: a compiled graph may return a view, which Megatron's checkpointing rejects.
        return make_viewless_tensor(inp=out, requires_grad=out.requires_grad, keep_graph=True)


class CompiledDenseOrMoELayer(DenseOrMoE, CompiledLayer):
    """A CompiledLayer built dense or with experts by its number (moe_layer_freq; sdpa_spec.DenseOrMoE)."""
