"""Weight-gradient accumulation fused into the weight-gradient GEMM, without NVIDIA apex.

Megatron keeps each weight's gradient in an fp32 ``main_grad`` buffer. Without fusion every micro-batch computes a
bf16 weight gradient and adds it to ``main_grad`` in a second pass over 10 bytes per parameter (read fp32, read
bf16, write fp32): at the 175B layer shape with 16 micro-batches that pass is ~15 % of the step. apex's
``fused_weight_gradient_mlp_cuda`` accumulates in the GEMM's epilogue instead; ``torch.addmm`` with ``out_dtype``
(CUDA, torch >= 2.8) does the same, so the launcher needs no apex for it:

- ``apex_free/fused_weight_gradient_mlp_cuda.py``: apex's module name and functions, for Megatron's own linear
  layers (``--gradient-accumulation-fusion``), put on the ranks' PYTHONPATH where apex is missing;
- ``linear``: the compiled layer's linear with the same accumulation (compiled_layer.py).

Where the fused kernel is missing (a CPU, an older torch) the same sum is computed in two passes.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F


@functools.cache
def _fused_on(device: torch.device) -> bool:
    """Whether torch here accumulates a bf16 GEMM into an fp32 output in one kernel (probed once per device)."""
    if device.type != "cuda":
        return False
    try:
        out = torch.zeros(16, 16, device=device)
        a = torch.ones(16, 16, device=device, dtype=torch.bfloat16)
        torch.addmm(out, a, a, out_dtype=torch.float32, out=out)
        return bool(out[0, 0].item() == 16.0)
    except (RuntimeError, TypeError, NotImplementedError):
        return False


def accumulate(main_grad: torch.Tensor, grad_output: torch.Tensor, inputs: torch.Tensor) -> None:
    """main_grad += grad_outputᵀ · inputs, for 2-D grad_output [tokens, out] and inputs [tokens, in]."""
    if main_grad.dtype == torch.float32 and grad_output.dtype != torch.float32 and _fused_on(main_grad.device):
        torch.addmm(main_grad, grad_output.t(), inputs, out_dtype=torch.float32, out=main_grad)
    elif main_grad.dtype == grad_output.dtype:
        main_grad.addmm_(grad_output.t(), inputs)
    else:
        main_grad.add_(torch.matmul(grad_output.t(), inputs))


# weight.data_ptr() → the weight's main_grad. main_grad is a view of DDP's gradient buffer, whose version counter
# every accumulation into any of its views bumps: saved for backward, it would fail autograd's version check at
# the next layer's accumulation (seen on the H200). So backward finds it through the weight instead.
_MAIN_GRADS: dict[int, torch.Tensor] = {}


def register(weight: torch.Tensor) -> None:
    """Makes `linear(x, weight, fused=True)` accumulate into weight.main_grad (called at each forward)."""
    _MAIN_GRADS[weight.data_ptr()] = weight.main_grad


@torch.library.custom_op("megatron_launch::wgrad_accumulate", mutates_args=())
def _wgrad_accumulate(grad_output: torch.Tensor, inputs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Accumulates into the weight's main_grad and returns an uninitialised stand-in for its gradient.

    Opaque to the compiler on purpose: main_grad is written here and read only by the optimizer after backward,
    never inside a graph, so the graph has nothing to order around it. The stand-in goes to param.grad, which
    Megatron's DDP hook discards because the forward set ``grad_added_to_main_grad`` (as apex's path does)."""
    main_grad = _MAIN_GRADS[weight.data_ptr()]
    accumulate(main_grad, grad_output.reshape(-1, grad_output.size(-1)), inputs.reshape(-1, inputs.size(-1)))
    return torch.empty_like(weight)


@_wgrad_accumulate.register_fake
def _(grad_output, inputs, weight):
    return torch.empty_like(weight)


@torch.library.custom_op("megatron_launch::linear_fused_wgrad", mutates_args=())
def _linear(inputs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.linear(inputs, weight)


@_linear.register_fake
def _(inputs, weight):
    return inputs.new_empty((*inputs.shape[:-1], weight.size(0)))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, grad):
    x, weight = ctx.saved_tensors
    return torch.matmul(grad, weight), _wgrad_accumulate(grad, x, weight)


_linear.register_autograd(_backward, setup_context=_setup_context)


def linear(inputs: torch.Tensor, weight: torch.Tensor, fused: bool) -> torch.Tensor:
    """F.linear without bias; with `fused`, the weight gradient accumulates into its registered main_grad in the
    GEMM instead of reaching param.grad."""
    return _linear(inputs, weight) if fused else F.linear(inputs, weight)
