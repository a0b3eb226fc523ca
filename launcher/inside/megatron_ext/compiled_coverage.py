"""What the compiled layer (compiled_layer.py) does not run, by Megatron setting; imports no torch.

Read before launch where it matters: FP8 without Transformer Engine runs only in the compiled layers (float8.py),
so a job asking for it with one of these settings would train bf16 in Megatron's own layer forward. The table
mirrors compiled_layer.fast_path_blocker and input_blocker for what a setting decides; anything it misses still
stops the job at the layer's first forward (compiled_layer.fp8_refused), never trains quietly in bf16.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# (reason, applies to Megatron's effective settings read through `arg`)
GAPS: tuple[tuple[str, Callable[[Callable[[str], Any]], bool]], ...] = (
    ("tensor parallelism (TP > 1)", lambda arg: (arg("tensor_model_parallel_size") or 1) > 1),
    ("context parallelism (CP > 1)", lambda arg: (arg("context_parallel_size") or 1) > 1),
    ("activation recomputation (recompute_granularity)", lambda arg: arg("recompute_granularity") is not None),
    ("multi-latent attention", lambda arg: bool(arg("multi_latent_attention"))),
    ("experimental attention variants", lambda arg: arg("experimental_attention_variant") is not None),
    ("q/k LayerNorm (qk_layernorm)", lambda arg: bool(arg("qk_layernorm"))),
    ("gated attention (attention_output_gate)", lambda arg: bool(arg("attention_output_gate"))),
    ("activation functions other than GeLU and SwiGLU (squared_relu, quick_geglu, a clamp or a GLU offset)",
     lambda arg: bool(arg("squared_relu") or arg("quick_geglu") or arg("activation_func_clamp_value") is not None
                      or arg("glu_linear_offset"))),
    ("fp32_residual_connection", lambda arg: bool(arg("fp32_residual_connection"))),
    ("per-document attention masks (reset_attention_mask)", lambda arg: bool(arg("reset_attention_mask"))),
    ("CUDA graphs (cuda_graph_impl)", lambda arg: arg("cuda_graph_impl") not in (None, "none")),
    ("chunked MLP (mlp_chunks_for_training)", lambda arg: (arg("mlp_chunks_for_training") or 1) > 1),
)


def compiled_layer_gaps(arg: Callable[[str], Any]) -> list[str]:
    """Why the compiled layer would hand these settings' layers to Megatron's forward (empty: it runs them)."""
    return [reason for reason, applies in GAPS if applies(arg)]
