"""apex's ``fused_weight_gradient_mlp_cuda`` in plain torch, for Megatron's ``--gradient-accumulation-fusion``
where apex is not installed (the launcher puts this folder on the ranks' PYTHONPATH only then).

Both functions compute main_grad += grad_outputᵀ · input for 2-D input [tokens, in] and grad_output [tokens, out],
as apex's do (megatron/core/tensor_parallel/layers.py calls them with those shapes)."""

from launcher.inside.megatron_ext.wgrad_fusion import accumulate


def wgrad_gemm_accum_fp32(input, grad_output, main_grad):  # noqa: A002 (apex's parameter name)
    accumulate(main_grad, grad_output, input)


def wgrad_gemm_accum_fp16(input, grad_output, main_grad):  # noqa: A002
    accumulate(main_grad, grad_output, input)
