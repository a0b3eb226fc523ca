"""FP8 linears without Transformer Engine: torchao's float8 training matmul inside the compiled layer.

Megatron's FP8 (``--fp8-format``) is Transformer Engine's; without TE its fp8 context is a no-op and the job would
train in bf16. On the launcher's SDPA fast path the compiled layer (compiled_layer.py) runs the layer's four
linears (QKV, projection, fc1, fc2) through torchao's ``matmul_with_hp_or_float8_args``, the autograd function
behind ``torchao.float8.Float8Linear``: each operand is cast to float8 with a dynamic per-tensor scale (its amax
now, no history) in forward and backward, and the GEMMs run as ``torch._scaled_mm``. Weights, gradients and
checkpoints stay in the model's precision (bf16); the embedding and output layer are not FP8 (as with TE).

Formats, as Megatron/TE name them: ``hybrid`` = e4m3 activations and weights, e5m2 gradients (torchao's default
tensorwise recipe); ``e4m3`` = e4m3 for all three. Megatron's recipes ``delayed`` (its default) and ``tensorwise``
run as dynamic tensorwise scaling here; the others (mxfp8, blockwise, custom) are TE's alone.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import torch

from launcher.inside.megatron_ext import FP8_FORMATS_WITHOUT_TE, FP8_RECIPES_WITHOUT_TE


def torchao_missing() -> str | None:
    """None when torchao's float8 training is importable; else why not."""
    try:
        import torchao.float8  # noqa: F401
    except ImportError as error:
        return f"torchao is not importable ({error})"
    return None


def unsupported(fp8_format: str | None, recipe: str | None, *, emulate: bool = False) -> str | None:
    """None when this process can train ``fp8_format`` with torchao; else the reason (for the training log)."""
    if fp8_format not in FP8_FORMATS_WITHOUT_TE:
        return f"fp8 format {fp8_format} (torchao float8 runs {', '.join(FP8_FORMATS_WITHOUT_TE)})"
    if str(recipe) not in FP8_RECIPES_WITHOUT_TE:
        return f"fp8 recipe {recipe} is Transformer Engine's (without it: {', '.join(FP8_RECIPES_WITHOUT_TE)})"
    missing = torchao_missing()
    if missing:
        return missing
    if not emulate and torch.cuda.is_available() and torch.cuda.get_device_capability() < (8, 9):
        return f"float8 matmuls need compute capability 8.9 or newer, this GPU has {torch.cuda.get_device_capability()}"
    return None


@functools.cache
def linear_config(fp8_format: str, emulate: bool = False, granularity: str = "tensorwise") -> Any:
    """torchao's Float8LinearConfig for a Megatron fp8 format: dynamic tensorwise scaling (torchao's fastest
    recipe on Hopper: cuBLAS's tensorwise-scaled FP8 GEMM), e5m2 gradients for hybrid, e4m3 everywhere for e4m3.
    ``granularity="rowwise"`` is torchao's rowwise recipe (e4m3 throughout), measured against it by
    scripts/bench_fp8.py only."""
    from torchao.float8.config import CastConfig, Float8LinearConfig, e4m3_dtype, e5m2_dtype

    if granularity == "rowwise":
        return dataclasses.replace(Float8LinearConfig.from_recipe_name("rowwise"), emulate=emulate)
    grad = e5m2_dtype if fp8_format == "hybrid" else e4m3_dtype
    return Float8LinearConfig(cast_config_grad_output=CastConfig(target_dtype=grad), emulate=emulate)


def mm_config(config: Any) -> Any:
    """The per-GEMM settings Float8Linear derives from its config (float8_linear.Float8Linear.__init__)."""
    from torchao.float8.float8_training_tensor import LinearMMConfig, ScaledMMConfig

    def gemm(gemm_config: Any) -> Any:
        return ScaledMMConfig(config.emulate, gemm_config.use_fast_accum, False, config.pad_inner_dim)

    return LinearMMConfig(gemm(config.gemm_config_output), gemm(config.gemm_config_grad_input),
                          gemm(config.gemm_config_grad_weight))


@functools.cache
def float8_linear(fp8_format: str, emulate: bool = False, granularity: str = "tensorwise"
                  ) -> Callable[..., torch.Tensor]:
    """``F.linear``'s signature, with the matmul (forward and both backward GEMMs) in float8."""
    from torchao.float8.float8_linear import matmul_with_hp_or_float8_args

    config = linear_config(fp8_format, emulate, granularity)
    gemms = mm_config(config)

    def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        out = matmul_with_hp_or_float8_args.apply(x, weight.t(), gemms, config)
        return out if bias is None else out + bias.to(out.dtype)

    return linear


def describe(fp8_format: str) -> str:
    """What runs, for the training log: '> megatron-launch fp8: …'."""
    grads = "e5m2" if fp8_format == "hybrid" else "e4m3"
    return (f"torchao float8 {fp8_format} (e4m3 activations/weights, {grads} gradients, dynamic tensorwise "
            "scaling) in the compiled layers' QKV, projection, fc1, fc2")
