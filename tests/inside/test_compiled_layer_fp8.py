"""FP8 without Transformer Engine: the compiled layer's linears through torchao's float8 matmul (emulated on CPU,
where float8 GEMMs do not run; the GPU measurement is scripts/bench_fp8.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")
pytest.importorskip("torchao.float8")

from tests.inside.test_compiled_layer import fast_compile, layer_pair  # noqa: E402,F401  (fixture)
from tests.inside.test_megatron_ext import model_parallel_cpu  # noqa: E402,F401  (fixture)

pytestmark = pytest.mark.megatron


def run(layer, x, grad):
    inp = x.clone().requires_grad_(True)
    out, _ = layer(hidden_states=inp, attention_mask=None)
    out.backward(grad)
    return out.detach(), inp.grad, {n: p.grad for n, p in layer.named_parameters()}


def relative_error(got, expected):
    return float((got - expected).norm() / expected.norm())


@pytest.mark.parametrize("fp8_format", ["hybrid", "e4m3"])
def test_fp8_layer_trains_near_the_bf16_layer_with_quantized_matmuls(model_parallel_cpu, fp8_format):  # noqa: F811
    upstream, compiled = layer_pair(bias_activation_fusion=True, fp8=fp8_format)
    assert compiled.fp8_format == fp8_format and compiled.fast_path_blocker is None
    torch.manual_seed(1)
    x, grad = torch.randn(16, 2, 64), torch.randn(16, 2, 64)
    expected, expected_dx, expected_grads = run(upstream, x, grad)  # Megatron's forward: fp8 a no-op without TE
    got, dx, grads = run(compiled, x, grad)
    # float8 (3 mantissa bits in e4m3): close to the exact layer, never equal to it
    assert 0 < relative_error(got, expected) < 0.05
    assert 0 < relative_error(dx, expected_dx) < 0.1
    for name, theirs in expected_grads.items():
        assert grads[name] is not None and grads[name].shape == theirs.shape, name
        assert relative_error(grads[name], theirs) < 0.15, name


def test_fp8_formats_pick_the_gradient_dtype():
    from launcher.inside.megatron_ext import float8

    hybrid, e4m3 = float8.linear_config("hybrid"), float8.linear_config("e4m3")
    assert hybrid.cast_config_input.target_dtype == torch.float8_e4m3fn
    assert hybrid.cast_config_weight.target_dtype == torch.float8_e4m3fn
    assert hybrid.cast_config_grad_output.target_dtype == torch.float8_e5m2
    assert e4m3.cast_config_grad_output.target_dtype == torch.float8_e4m3fn
    assert hybrid.cast_config_input.scaling_granularity.value == "tensorwise"


def test_first_and_last_layers_kept_in_bf16_stay_out_of_fp8(model_parallel_cpu):  # noqa: F811
    _, compiled = layer_pair(fp8="hybrid", first_last_layers_bf16=True, num_layers_at_start_in_bf16=1,
                             num_layers_at_end_in_bf16=0, fp8_recipe="tensorwise")
    assert compiled.fp8_format is None  # layer 1 of 2 is the first one


@pytest.mark.parametrize(("overrides", "reason"), [
    ({"fp8_recipe": "blockwise"}, "fp8 recipe blockwise is Transformer Engine's"),
    ({"fp32_residual_connection": True}, "fp32 or post-LayerNorm residual"),
], ids=["te-recipe", "layer-not-compiled"])
def test_fp8_the_compiled_layer_cannot_run_stops_the_job(model_parallel_cpu, overrides, reason):  # noqa: F811
    _, layer = layer_pair(fp8="hybrid", **overrides)  # built (a checkpoint conversion would only load it)
    with pytest.raises(RuntimeError, match=reason):
        layer(hidden_states=torch.randn(4, 2, 64), attention_mask=None)


def test_cached_fp8_weights_give_torchaos_own_numbers_and_are_cast_once_per_step(model_parallel_cpu, monkeypatch):  # noqa: F811,E501
    from launcher.inside.megatron_ext import compiled_layer, float8

    _, compiled = layer_pair(bias_activation_fusion=True, fp8="hybrid")
    torch.manual_seed(1)
    x, grad = torch.randn(16, 2, 64), torch.randn(16, 2, 64)
    monkeypatch.setenv(float8.WEIGHT_CACHE_ENV, "0")
    plain = run(compiled, x, grad)
    monkeypatch.setenv(float8.WEIGHT_CACHE_ENV, "1")
    casts = []
    real = float8.compiled_weight_bits()
    monkeypatch.setattr(float8, "compiled_weight_bits", lambda: lambda *a: casts.append(1) or real(*a))
    compiled_layer.compiled_layer_math.cache_clear()
    torch._dynamo.reset()
    first = run(compiled, x, grad)
    second = run(compiled, x, grad)  # the next microbatch: the same FP8 weights, not cast again
    assert len(casts) == 4
    torch.testing.assert_close(first[0], plain[0])
    torch.testing.assert_close(first[1], plain[1])
    for name in plain[2]:
        torch.testing.assert_close(first[2][name], plain[2][name], msg=name)
        torch.testing.assert_close(second[2][name], plain[2][name], msg=name)
    optimizer = torch.optim.SGD(compiled.parameters(), lr=0.5)
    optimizer.step()  # new weights: cast again
    run(compiled, x, grad)
    assert len(casts) == 8
