"""Faster stand-ins for the pure-PyTorch fallbacks Megatron uses when neither Transformer Engine nor apex is
installed. Each one is applied only when Megatron is on that fallback, and computes the same thing:

- ``ce``: the TP=1 language-model cross entropy as one compiled kernel each way, saving only each token's
  log-sum-exp for backward, instead of ~10 passes of fp32 elementwise work over the [tokens, vocab] logits and
  a saved fp32 softmax (upstream's ``vocab_parallel_cross_entropy``; same formula, label smoothing included).
- ``norm``: the gradient-norm fallback with ``torch._foreach_norm`` instead of one ``.item()`` sync per tensor.
- ``scale``: the multi-tensor scale/copy fallback (gradient clipping, main->model param copy) with foreach ops.
- ``adam``: torch's fused AdamW kernel instead of the default multi-tensor (foreach) one.
- ``nosync``: no host-device synchronisation inside a training step. Gradient clipping keeps the norm on the
  GPU (Megatron's own path for Transformer Engine's ``multi_tensor_scale_tensor``), and the training loop's
  model-parallel reductions of the grad norm, the learning rate and the update flag are skipped when the
  model-parallel group has one rank (a reduction over one rank is the value itself), and the loss scale of a
  bf16 run (always 1, no grad scaler) answers the training loop's per-step ``.item()`` from the host. Without
  this, five ``.item()`` calls per step leave the GPU idle while the CPU catches up. The training loop's
  ``torch.tensor([...], device='cuda')`` (its loss-sum default, built every step) comes through page-locked
  memory: from pageable memory the copy waits for every kernel queued before it (a ~60 ms host wait per step
  on 345m, then ~3 ms of GPU idle while the host catches up).
- ``nancheck``: Megatron's fatal NaN/Inf checks of the loss and the gradients (``--rerun-mode disabled``) keep
  their verdicts on the GPU and are read back at most two steps later, and before every save, instead of
  stopping the host at each check (deferred_checks.py).
- ``layer``: each transformer layer's math as one compiled function (compiled_layer.py; applied by the spec).
- ``save``: the asynchronous checkpoint save copies the tensors to host memory in the training process, into one
  page-locked buffer kept for the run, and hands the persistent writer that buffer instead of CUDA handles
  (staged_save.py).

Used through ``--spec launcher.inside.megatron_ext.sdpa_spec_fast layer_spec``; the environment variable
``MEGATRON_LAUNCH_FAST_OPS`` (comma list, default all, ``none`` for none) picks which ones.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable

import torch

from launcher.inside.megatron_ext import FAST_OPS_ENV, selected_ops


def foreach_l2_norm(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
    """Drop-in for megatron.core.utils.local_multi_tensor_l2_norm: (norm as a 1-element fp32 tensor, None)."""
    tensors = [t for t in tensor_lists[0] if t.numel() > 0]
    if not tensors:
        return torch.zeros(1, dtype=torch.float, device="cuda"), None
    # dtype=fp32 in the kernel: no per-tensor .float() on the host, which left the GPU idle for ~1 ms per step
    norms = torch._foreach_norm(tensors, 2, dtype=torch.float32)
    total = torch.linalg.vector_norm(torch.stack(norms))
    return total.reshape(1), None


def foreach_scale(chunk_size, noop_flag, tensor_lists, scale):
    """Drop-in for megatron.core.utils.local_multi_tensor_scale: dst[i] = src[i] * scale."""
    sources, targets = list(tensor_lists[0]), list(tensor_lists[1])
    if not sources:
        return
    if all(s is t for s, t in zip(sources, targets)):
        torch._foreach_mul_(targets, scale)
        return
    if scale != 1.0:
        sources = torch._foreach_mul(sources, scale)
    torch._foreach_copy_(targets, sources)


def foreach_scale_tensor(chunk_size, noop_flag, tensor_lists, scale):
    """Drop-in for Transformer Engine's multi_tensor_scale_tensor: dst[i] = src[i] * scale (a GPU scalar)."""
    sources, targets = list(tensor_lists[0]), list(tensor_lists[1])
    if not sources:
        return
    scale = scale.reshape(())
    if all(s is t for s, t in zip(sources, targets)):
        torch._foreach_mul_(targets, scale)
        return
    torch._foreach_copy_(targets, torch._foreach_mul(sources, scale))


def _compile(function):
    # MEGATRON_LAUNCH_COMPILE_BACKEND: as for the compiled layers (compiled_layer.py); tests on CPU use aot_eager
    backend = os.environ.get("MEGATRON_LAUNCH_COMPILE_BACKEND", "inductor")
    return torch.compile(function, backend=backend, dynamic=False)


def _smoothing(label_smoothing: float, vocab: int) -> float:
    # Megatron's: 1/(K-1) of the mass to every other index (cross_entropy.py: alpha * K / (K - 1))
    return label_smoothing * vocab / (vocab - 1)


def cross_entropy_forward(logits: torch.Tensor, target: torch.Tensor, label_smoothing: float):
    """(Megatron's per-token loss in fp32, each row's log-sum-exp), compiled into one kernel."""
    x = logits.float()
    lse = torch.logsumexp(x, dim=-1)
    loss = lse - x.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    if label_smoothing > 0:
        smoothing = _smoothing(label_smoothing, x.size(-1))
        loss = (1.0 - smoothing) * loss - smoothing * (x.mean(dim=-1) - lse)
    return loss, lse


def cross_entropy_backward(logits, target, lse, grad, label_smoothing: float) -> torch.Tensor:
    """d loss / d logits (Megatron's backward: softmax - (1 - s) * one-hot - s / K), in the logits' dtype: one read
    of the logits and one write."""
    x = logits.float()
    vocab = x.size(-1)
    hit = (torch.arange(vocab, device=x.device) == target.unsqueeze(-1)).float()
    softmax = torch.exp(x - lse.unsqueeze(-1))
    if label_smoothing > 0:
        smoothing = _smoothing(label_smoothing, vocab)
        d = softmax - (1.0 - smoothing) * hit - smoothing / vocab
    else:
        d = softmax - hit
    return (d * grad.unsqueeze(-1)).to(logits.dtype)


class CrossEntropy(torch.autograd.Function):
    """The TP=1 language-model loss with what backward needs chosen by hand: the logits as they came (bf16: half
    of the [tokens, vocab] fp32 softmax upstream keeps) and one fp32 number per token. One compiled kernel each
    way (on one H200, 345m: 4.15 ms a step against 4.73 for a compiled F.cross_entropy; docs/benchmarks.md)."""

    @staticmethod
    def forward(ctx, logits, target, label_smoothing):
        loss, lse = _compiled_cross_entropy()[0](logits, target, label_smoothing)
        ctx.save_for_backward(logits, target, lse)
        ctx.label_smoothing = label_smoothing
        return loss

    @staticmethod
    def backward(ctx, grad):
        logits, target, lse = ctx.saved_tensors
        backward = _compiled_cross_entropy()[1]
        return backward(logits, target, lse, grad.contiguous(), ctx.label_smoothing), None, None


@functools.cache
def _compiled_cross_entropy():
    return _compile(cross_entropy_forward), _compile(cross_entropy_backward)


def _patch_cross_entropy() -> None:
    from megatron.core import parallel_state, tensor_parallel

    upstream = tensor_parallel.vocab_parallel_cross_entropy

    def vocab_parallel_cross_entropy(vocab_parallel_logits, target, label_smoothing=0.0):
        if parallel_state.get_tensor_model_parallel_world_size() != 1:
            return upstream(vocab_parallel_logits, target, label_smoothing)
        return CrossEntropy.apply(vocab_parallel_logits, target, float(label_smoothing))

    tensor_parallel.vocab_parallel_cross_entropy = vocab_parallel_cross_entropy


def _patch_multi_tensor(ops: Iterable[str]) -> None:
    from megatron.core import utils as core_utils
    from megatron.core.optimizer import clip_grads
    from megatron.core.optimizer import optimizer as optimizer_module

    ops = set(ops)
    if "norm" in ops and clip_grads.l2_norm_impl is core_utils.local_multi_tensor_l2_norm:
        clip_grads.l2_norm_impl = foreach_l2_norm
    if "scale" in ops:
        for module in (clip_grads, optimizer_module):
            if module.multi_tensor_scale_impl is core_utils.local_multi_tensor_scale:
                module.multi_tensor_scale_impl = foreach_scale


def _patch_adam() -> None:
    import megatron.core.optimizer as mcore_optimizer

    if not getattr(mcore_optimizer, "USING_PYTORCH_OPTIMIZER", False):
        return  # TE's or apex's fused Adam is in use already
    if getattr(torch.optim.AdamW, "_megatron_launch_fused", False):
        return

    class FusedAdamW(torch.optim.AdamW):
        _megatron_launch_fused = True

        def __init__(self, params, *args, **kwargs):
            if not kwargs.get("capturable") and kwargs.get("foreach") is None:
                kwargs.setdefault("fused", True)
            super().__init__(params, *args, **kwargs)

    # Megatron looks torch.optim.AdamW up when it builds the optimizer, after the model (and this spec).
    torch.optim.AdamW = FusedAdamW


class HostKnownTensor(torch.Tensor):
    """A device tensor whose value the host also holds: ``.item()`` answers without waiting for the GPU.
    Operations on it give plain tensors."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    def item(self):
        return self.host_value


def host_known(tensor: torch.Tensor, value: float) -> HostKnownTensor:
    known = torch.Tensor._make_subclass(HostKnownTensor, tensor)
    known.host_value = value
    return known


def _patch_constant_loss_scale() -> None:
    from megatron.core.optimizer.optimizer import MixedPrecisionOptimizer

    upstream = MixedPrecisionOptimizer.get_loss_scale
    if getattr(upstream, "_megatron_launch_sync_free", False):
        return

    def get_loss_scale(self):
        if self.grad_scaler is not None:
            return upstream(self)
        if not isinstance(self._scale_one, HostKnownTensor):  # upstream's constant 1, the host knows it
            self._scale_one = host_known(self._scale_one, 1.0)
        return self._scale_one

    get_loss_scale._megatron_launch_sync_free = True
    MixedPrecisionOptimizer.get_loss_scale = get_loss_scale


class _PinnedTensorTorch:
    """The ``torch`` that the training loop's module sees: every attribute is torch's, except that
    ``tensor(data, device=<cuda>)`` is built in page-locked host memory and copied without blocking the host. The
    same values arrive in the same stream order; only the host no longer waits for the GPU."""

    def __init__(self, module) -> None:
        self._torch = module

    def __getattr__(self, name: str):
        return getattr(self._torch, name)

    def tensor(self, data, *args, device=None, **kwargs):
        real = self._torch
        if args or device is None or real.device(device).type != "cuda" or kwargs.get("requires_grad") \
                or kwargs.get("pin_memory"):
            return real.tensor(data, *args, device=device, **kwargs)
        return real.tensor(data, **kwargs).pin_memory().to(device, non_blocking=True)


def _patch_sync_free_step() -> None:
    from megatron.core import parallel_state
    from megatron.core.optimizer import clip_grads

    _patch_constant_loss_scale()

    if clip_grads.multi_tensor_scale_tensor_impl is None:
        clip_grads.multi_tensor_scale_tensor_impl = foreach_scale_tensor
    try:
        from megatron.training import training
    except ImportError:  # megatron-core alone: no training loop to patch
        return
    upstream_and = training.logical_and_across_model_parallel_group
    upstream_max = training.reduce_max_stat_across_model_parallel_group
    if getattr(upstream_max, "_megatron_launch_sync_free", False):
        return

    def model_parallel_alone() -> bool:
        return parallel_state.get_model_parallel_group().size() == 1

    def logical_and_across_model_parallel_group(value):
        if not isinstance(value, torch.Tensor) and model_parallel_alone():
            return bool(value)
        return upstream_and(value)

    def reduce_max_stat_across_model_parallel_group(stat):
        if model_parallel_alone():
            if isinstance(stat, torch.Tensor):
                return stat.detach().reshape(())  # formatted (synced) only when a log line prints it
            return stat
        return upstream_max(stat)

    reduce_max_stat_across_model_parallel_group._megatron_launch_sync_free = True
    if training.torch is torch:
        training.torch = _PinnedTensorTorch(torch)
    training.logical_and_across_model_parallel_group = logical_and_across_model_parallel_group
    training.reduce_max_stat_across_model_parallel_group = reduce_max_stat_across_model_parallel_group


def apply(ops: Iterable[str]) -> tuple[str, ...]:
    """Apply the named fast ops to this (training) process; returns the ones applied."""
    ops = tuple(ops)
    if "ce" in ops:
        _patch_cross_entropy()
    if "norm" in ops or "scale" in ops:
        _patch_multi_tensor(ops)
    if "adam" in ops:
        _patch_adam()
    if "nosync" in ops:
        _patch_sync_free_step()
    if "nancheck" in ops:
        from launcher.inside.megatron_ext import deferred_checks

        deferred_checks.install()
    if "save" in ops:
        from launcher.inside.megatron_ext import staged_save

        staged_save.install()
    return ops


def apply_from_environment() -> tuple[str, ...]:
    return apply(selected_ops(os.environ.get(FAST_OPS_ENV)))
