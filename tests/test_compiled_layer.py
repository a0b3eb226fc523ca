"""CompiledLayer and the host-known loss scale, on CPU against Megatron's own layer and optimizer."""

from __future__ import annotations

import dataclasses
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from tests.test_megatron_ext import model_parallel_cpu  # noqa: E402,F401  (fixture)

pytestmark = pytest.mark.megatron


@pytest.fixture(autouse=True)
def fast_compile(monkeypatch):
    # aot_eager traces the same forward and backward graphs as inductor without generating kernels (seconds,
    # not a minute, on a 2-core machine); the GPU runs in docs/benchmarks.md use inductor.
    monkeypatch.setenv("MEGATRON_LAUNCH_COMPILE_BACKEND", "aot_eager")
    from launcher.megatron_ext import compiled_layer

    compiled_layer.compiled_layer_math.cache_clear()


def layer_pair(**overrides):
    """Megatron's TransformerLayer from the SDPA spec and a CompiledLayer with the same weights."""
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    from launcher.megatron_ext.compiled_layer import CompiledLayer
    from launcher.megatron_ext.sdpa_spec import build_layer_spec

    normalization = overrides.pop("normalization", "LayerNorm")
    config = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True,
                               hidden_dropout=0.0, attention_dropout=0.0, normalization=normalization, **overrides)
    spec = build_layer_spec(types.SimpleNamespace(normalization=normalization))
    torch.manual_seed(0)
    upstream = build_module(spec, config=config, layer_number=1)
    compiled = build_module(dataclasses.replace(spec, module=CompiledLayer), config=config, layer_number=1)
    compiled.load_state_dict(upstream.state_dict())
    return upstream, compiled


@pytest.mark.parametrize("overrides", [
    {},
    {"num_query_groups": 2},
    {"bias_activation_fusion": False},  # exact GeLU instead of Megatron's tanh-approximated fused one
    {"gated_linear_unit": True, "activation_func": torch.nn.functional.silu, "add_bias_linear": False,
     "normalization": "RMSNorm"},
], ids=["gpt", "gqa", "exact-gelu", "swiglu-rmsnorm"])
def test_compiled_layer_matches_megatron_layer(model_parallel_cpu, overrides):  # noqa: F811
    upstream, compiled = layer_pair(**overrides)
    assert compiled.fast_path_blocker is None
    assert list(dict(compiled.named_parameters())) == list(dict(upstream.named_parameters()))  # same checkpoints
    x = torch.randn(12, 3, 64)
    inputs = [x.clone().requires_grad_(True) for _ in range(2)]
    expected, _ = upstream(hidden_states=inputs[0], attention_mask=None)
    got, context = compiled(hidden_states=inputs[1], attention_mask=None)
    assert context is None and got._base is None
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(expected)
    expected.backward(grad)
    got.backward(grad)
    torch.testing.assert_close(inputs[1].grad, inputs[0].grad, atol=1e-5, rtol=1e-5)
    for (name, mine), (_, theirs) in zip(compiled.named_parameters(), upstream.named_parameters()):
        torch.testing.assert_close(mine.grad, theirs.grad, atol=1e-4, rtol=1e-4, msg=name)


def test_compiled_layer_leaves_what_it_does_not_cover_to_megatron(model_parallel_cpu, monkeypatch):  # noqa: F811
    from launcher.megatron_ext import compiled_layer

    _, layer = layer_pair(fp32_residual_connection=True)
    assert layer.fast_path_blocker == "fp32 or post-LayerNorm residual"
    _, layer = layer_pair()
    math_calls = []
    monkeypatch.setattr(compiled_layer, "compiled_layer_math", lambda: math_calls.append(1))
    x = torch.randn(4, 2, 64)
    rotary = torch.zeros(4, 1, 1, 16)
    out, _ = layer(hidden_states=x, attention_mask=None, rotary_pos_emb=rotary)  # rotary: Megatron's forward
    assert out.shape == x.shape and not math_calls


def test_bf16_loss_scale_is_answered_by_the_host():
    from megatron.core.optimizer.optimizer import MixedPrecisionOptimizer

    from launcher.megatron_ext import fast_ops

    upstream = MixedPrecisionOptimizer.get_loss_scale
    try:
        fast_ops._patch_constant_loss_scale()
        bf16 = types.SimpleNamespace(grad_scaler=None, _scale_one=torch.tensor([1.0]))
        scale = MixedPrecisionOptimizer.get_loss_scale(bf16)
        assert scale.item() == 1.0 and MixedPrecisionOptimizer.get_loss_scale(bf16) is scale
        scaled = scale * torch.full((3,), 2.0)  # what scale_loss does: a plain tensor comes out
        assert type(scaled) is torch.Tensor and scaled.tolist() == [2.0, 2.0, 2.0]
        fp16 = types.SimpleNamespace(grad_scaler=types.SimpleNamespace(scale=torch.tensor([4096.0])))
        assert MixedPrecisionOptimizer.get_loss_scale(fp16) is fp16.grad_scaler.scale
    finally:
        MixedPrecisionOptimizer.get_loss_scale = upstream
