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
import os
from collections.abc import Callable
from typing import Any

import torch

from launcher.inside.megatron_ext import FP8_FORMATS_WITHOUT_TE, FP8_RECIPES_WITHOUT_TE, FP8_WEIGHT_CACHE_ENV


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
    """``F.linear``'s signature, with the matmul (forward and both backward GEMMs) in float8. ``weight`` may be
    ``(weight, fp8 bits, scale)`` from WeightCache: then the weight is not cast again (tensorwise only)."""
    from torchao.float8.float8_linear import matmul_with_hp_or_float8_args

    config = linear_config(fp8_format, emulate, granularity)
    gemms = mm_config(config)
    attach = cached_float8()  # looked up here: the compiled graph traces `linear`, not a cache lookup

    def linear(x: torch.Tensor, weight: Any, bias: torch.Tensor | None = None) -> torch.Tensor:
        if isinstance(weight, tuple):
            weight = attach(weight[0], weight[1], weight[2], gemms)
        out = matmul_with_hp_or_float8_args.apply(x, weight.t(), gemms, config)
        return out if bias is None else out + bias.to(out.dtype)

    return linear


# -- the weights' FP8 copies, made once per optimizer step --------------------------------------------------------
# Without a cache torchao casts each weight twice per microbatch (forward, and backward for the input gradient):
# at the 175b layer shape and micro batch 1 that is ~9 GB of memory traffic per layer and cast, next to GEMMs of a
# few ms. Transformer Engine caches its FP8 weights across microbatches the same way.

# Each weight cast once per optimizer step (the default); "0": torchao's own per-call cast. Measured on one H200 at
# the 175b layer shape (16 microbatches): 639.0 → 680.8 TFLOP/s, the same losses (docs/fp8-without-te.md).
WEIGHT_CACHE_ENV = FP8_WEIGHT_CACHE_ENV
_STEPS = [0]  # optimizer steps of this process: a step changes the weights


def weight_cache_enabled() -> bool:
    return os.environ.get(WEIGHT_CACHE_ENV, "1") != "0"


def _count_step(*_: Any) -> None:
    _STEPS[0] += 1


@functools.cache
def watch_optimizer_steps() -> None:
    """Every torch optimizer's step (Megatron's inner AdamW too) invalidates the cached FP8 weights."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(_count_step)


def _weight_bits(weight: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    from torchao.float8.float8_utils import tensor_to_scale, to_fp8_saturated

    scale = tensor_to_scale(weight, dtype)
    return to_fp8_saturated(weight.to(torch.float32) * scale, dtype), scale


@functools.cache
def compiled_weight_bits() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    backend = os.environ.get("MEGATRON_LAUNCH_COMPILE_BACKEND", "inductor")
    return torch.compile(_weight_bits, backend=backend, dynamic=False)


class WeightCache:
    """One layer's FP8 weight copies (bits, per-tensor scale), remade when an optimizer step has run, or the
    weight changed in place (its version), or moved."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor]]] = {}

    def get(self, name: str, weight: torch.Tensor, fp8_format: str
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        watch_optimizer_steps()
        key = (_STEPS[0], weight._version, weight.data_ptr())
        hit = self.entries.get(name)
        if hit is None or hit[0] != key:
            dtype = linear_config(fp8_format).cast_config_weight.target_dtype
            with torch.no_grad():
                bits = compiled_weight_bits()(weight.detach(), dtype)
            hit = (key, bits)
            self.entries[name] = hit
        return weight, hit[1][0], hit[1][1]


@functools.cache
def cached_float8() -> Any:
    """The differentiable view of a cached FP8 weight: forward, the Float8TrainingTensor of its bits; backward,
    the gradient passed to the high-precision weight unchanged (as torchao's own cast does)."""
    from torchao.float8.float8_training_tensor import Float8TrainingTensor, GemmInputRole

    @torch._dynamo.allow_in_graph
    class CachedFloat8(torch.autograd.Function):
        @staticmethod
        def forward(ctx, weight, bits, scale, gemms):
            return Float8TrainingTensor(bits, scale, weight.dtype, linear_mm_config=gemms,
                                        gemm_input_role=GemmInputRole.WEIGHT)

        @staticmethod
        def backward(ctx, grad):
            return grad, None, None, None

    return CachedFloat8.apply


def describe(fp8_format: str) -> str:
    """What runs, for the training log: '> megatron-launch fp8: …'."""
    grads = "e5m2" if fp8_format == "hybrid" else "e4m3"
    return (f"torchao float8 {fp8_format} (e4m3 activations/weights, {grads} gradients, dynamic tensorwise "
            "scaling) in the compiled layers' QKV, projection, fc1, fc2")
