"""CompiledLayer and the host-known loss scale, on CPU against Megatron's own layer and optimizer."""

from __future__ import annotations

import dataclasses
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from tests.inside.test_megatron_ext import model_parallel_cpu  # noqa: E402,F401  (fixture)

pytestmark = pytest.mark.megatron


@pytest.fixture(autouse=True)
def fast_compile(monkeypatch):
    # aot_eager traces the same forward and backward graphs as inductor without generating kernels (seconds,
    # not a minute, on a 2-core machine); the GPU runs in docs/benchmarks.md use inductor.
    monkeypatch.setenv("MEGATRON_LAUNCH_COMPILE_BACKEND", "aot_eager")
    from launcher.inside.megatron_ext import compiled_layer

    compiled_layer.compiled_layer_math.cache_clear()
    torch._dynamo.reset()  # each case compiles afresh: all of them share one code object's recompile limit (8)


def layer_pair(**overrides):
    """Megatron's TransformerLayer from the SDPA spec and a CompiledLayer with the same weights."""
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    from launcher.inside.megatron_ext.compiled_layer import CompiledLayer
    from launcher.inside.megatron_ext.sdpa_spec import build_layer_spec

    options = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "use_cpu_initialization": True,
               "hidden_dropout": 0.0, "attention_dropout": 0.0, "normalization": "LayerNorm", **overrides}
    normalization = options["normalization"]
    config = TransformerConfig(**options)
    spec = build_layer_spec(types.SimpleNamespace(normalization=normalization))
    torch.manual_seed(0)
    upstream = build_module(spec, config=config, layer_number=1)
    compiled = build_module(dataclasses.replace(spec, module=CompiledLayer), config=config, layer_number=1)
    compiled.load_state_dict(upstream.state_dict())
    return upstream, compiled


@pytest.fixture
def math_calls(monkeypatch):
    """Counts calls of the compiled function, to prove the fast path ran."""
    from launcher.inside.megatron_ext import compiled_layer

    calls = []
    real = compiled_layer.compiled_layer_math

    def counting(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(compiled_layer, "compiled_layer_math", counting)
    return calls


@pytest.mark.parametrize("overrides", [
    {"bias_activation_fusion": True},  # Megatron's tanh-approximated fused bias-GeLU (pretrain_gpt's default)
    {"bias_activation_fusion": True, "num_query_groups": 2, "kv_channels": 24},
    {},  # exact GeLU (TransformerConfig's default: no activation fusion)
    {"gated_linear_unit": True, "activation_func": torch.nn.functional.silu, "add_bias_linear": False,
     "normalization": "RMSNorm"},
    {"bias_activation_fusion": True, "layernorm_zero_centered_gamma": True},  # --apply-layernorm-1p
    {"gated_linear_unit": True, "activation_func": torch.nn.functional.silu, "add_bias_linear": False,
     "normalization": "RMSNorm", "layernorm_zero_centered_gamma": True},
    # Megatron's layer never reads this setting: the compiled layer runs it, with the same pre-LayerNorm residual
    {"bias_activation_fusion": True, "apply_residual_connection_post_layernorm": True},
], ids=["gpt", "gqa", "exact-gelu", "swiglu-rmsnorm", "zero-centered-layernorm", "zero-centered-rmsnorm",
        "post-layernorm-residual-setting"])
def test_compiled_layer_matches_megatron_layer(model_parallel_cpu, math_calls, overrides):  # noqa: F811
    upstream, compiled = layer_pair(**overrides)
    assert compiled.fast_path_blocker is None
    assert list(dict(compiled.named_parameters())) == list(dict(upstream.named_parameters()))  # same checkpoints
    x = torch.randn(12, 3, 64)
    got, expected = same_forward_and_gradients(upstream, compiled, x, 1e-5)
    assert got._base is None
    assert math_calls == [1]


def same_forward_and_gradients(upstream, compiled, x, tolerance, **inputs):
    """Both layers on `x` (and `inputs`): the same output, input gradient and every parameter's gradient."""
    given = [x.clone().requires_grad_(True) for _ in range(2)]
    expected, _ = upstream(hidden_states=given[0], attention_mask=None, **inputs)
    got, context = compiled(hidden_states=given[1], attention_mask=None, **inputs)
    assert context is None
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=tolerance)
    grad = torch.randn_like(expected)
    expected.backward(grad)
    got.backward(grad)
    torch.testing.assert_close(given[1].grad, given[0].grad, atol=tolerance, rtol=tolerance)
    for (name, mine), (_, theirs) in zip(compiled.named_parameters(), upstream.named_parameters()):
        torch.testing.assert_close(mine.grad, theirs.grad, atol=10 * tolerance, rtol=10 * tolerance, msg=name)
    return got, expected


LLAMA = {"gated_linear_unit": True, "activation_func": torch.nn.functional.silu, "add_bias_linear": False,
         "normalization": "RMSNorm", "num_query_groups": 2}


@pytest.mark.parametrize(("overrides", "rotary_percent", "pair"), [
    (LLAMA, 1.0, False),
    ({**LLAMA, "rotary_interleaved": True}, 1.0, False),
    ({"bias_activation_fusion": True}, 0.5, True),  # GPT-NeoX's partial rotary; queries' and keys' given apart
    ({**LLAMA, "no_rope_freq": [1, 0]}, 1.0, False),  # this layer (the first) has no RoPE
], ids=["llama", "interleaved", "partial-rotary-pair", "no-rope-layer"])
def test_compiled_layer_applies_rotary_embeddings_as_megatron(model_parallel_cpu, math_calls,  # noqa: F811
                                                              overrides, rotary_percent, pair):
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    upstream, compiled = layer_pair(**overrides, init_method_std=0.3)  # attention weighs in the output
    assert compiled.fast_path_blocker is None
    head_dim = upstream.config.kv_channels
    freqs = RotaryEmbedding(head_dim, rotary_percent, rotary_interleaved=upstream.config.rotary_interleaved,
                            use_cpu_initialization=True)(12)
    rope = (freqs, freqs.clone()) if pair else freqs
    x = torch.randn(12, 3, 64)
    _, expected = same_forward_and_gradients(upstream, compiled, x, 1e-4, rotary_pos_emb=rope)
    if "no_rope_freq" not in overrides:  # the embedding changes the layer's output
        with torch.no_grad():
            plain, _ = upstream(hidden_states=x, attention_mask=None)
        assert not torch.allclose(plain, expected, atol=1e-2)
    assert math_calls == [1]


def test_compiled_layer_dropout(model_parallel_cpu, math_calls):  # noqa: F811
    upstream, compiled = layer_pair(bias_activation_fusion=True, hidden_dropout=0.2, attention_dropout=0.2)
    x = torch.randn(12, 3, 64)
    upstream.eval()
    compiled.eval()
    with torch.no_grad():  # evaluation: no dropout, the same as Megatron's layer
        torch.testing.assert_close(compiled(hidden_states=x)[0], upstream(hidden_states=x)[0],
                                   atol=1e-5, rtol=1e-5)
    compiled.train()
    evaluated = compiled.eval()(hidden_states=x)[0].detach()
    trained = compiled.train()(hidden_states=x)[0]
    assert not torch.allclose(trained, evaluated)  # dropout is applied in training
    trained.sum().backward()
    assert all(p.grad is not None for p in compiled.parameters())
    assert len(math_calls) == 3


@pytest.mark.parametrize(("overrides", "reason"), [
    ({"fp32_residual_connection": True}, "fp32 residual"),
    ({"gated_linear_unit": True, "activation_func": torch.nn.functional.silu, "glu_linear_offset": 1.0},
     "activation function"),
    ({"gated_linear_unit": True, "activation_func": torch.nn.functional.silu,
      "activation_func_fp8_input_store": True}, "activation function"),
    ({"test_mode": True}, "test mode"),
], ids=["fp32-residual", "glu-offset", "fp8-activation-store", "test-mode"])
def test_what_the_compiled_layer_does_not_cover_is_refused(model_parallel_cpu, overrides, reason):  # noqa: F811
    _, layer = layer_pair(**overrides)
    assert layer.fast_path_blocker == reason


def test_inputs_the_compiled_layer_does_not_cover_go_to_megatron(model_parallel_cpu, math_calls):  # noqa: F811
    from launcher.inside.megatron_ext.compiled_layer import input_blocker

    upstream, layer = layer_pair()
    x = torch.randn(4, 2, 64)
    # A rotary embedding given as cosines and sines (Megatron's flash-decode inference) is not the fast path's.
    assert input_blocker((), {"hidden_states": x, "rotary_pos_cos": torch.ones(4, 8)}) == "rotary_pos_cos given"
    assert input_blocker((), {"hidden_states": x, "rotary_pos_emb": (torch.ones(4, 8),) * 2}) == \
        "rotary embedding of another form"
    # Two documents in one sequence (--reset-attention-mask): the mask is more than causal and must be applied.
    documents = torch.ones(4, 4, dtype=torch.bool).triu(1)
    documents[2:, :2] = True  # True = masked, as Megatron's
    mask = documents[None, None]
    torch.testing.assert_close(layer(hidden_states=x, attention_mask=mask)[0],
                               upstream(hidden_states=x, attention_mask=mask)[0])
    assert not math_calls
    assert input_blocker((), {"hidden_states": x, "attention_mask": mask, "context": None}) == "attention_mask given"
    assert input_blocker((x,), {}) == "positional arguments"


def test_bf16_loss_scale_is_answered_by_the_host():
    from megatron.core.optimizer.optimizer import MixedPrecisionOptimizer

    from launcher.inside.megatron_ext import fast_ops

    upstream = MixedPrecisionOptimizer.get_loss_scale
    try:
        fast_ops._patch_constant_loss_scale()
        bf16 = types.SimpleNamespace(grad_scaler=None, _scale_one=torch.tensor([1.0]))
        scale = MixedPrecisionOptimizer.get_loss_scale(bf16)
        assert isinstance(scale, fast_ops.HostKnownTensor) and scale.host_value == 1.0
        assert scale.item() == 1.0 and MixedPrecisionOptimizer.get_loss_scale(bf16) is scale
        scaled = scale * torch.full((3,), 2.0)  # what scale_loss does: a plain tensor comes out
        assert type(scaled) is torch.Tensor and scaled.tolist() == [2.0, 2.0, 2.0]
        fp16 = types.SimpleNamespace(grad_scaler=types.SimpleNamespace(scale=torch.tensor([4096.0])))
        assert MixedPrecisionOptimizer.get_loss_scale(fp16) is fp16.grad_scaler.scale
    finally:
        MixedPrecisionOptimizer.get_loss_scale = upstream


def test_distributed_optimizer_parameter_gather_overlap_is_waited_for(model_parallel_cpu, math_calls):  # noqa: F811
    """Megatron's DDP waits for each bucket's overlapped parameter all-gather in its submodules' forward pre-hooks;
    a compiled forward that skipped them left the handles open (`assert self.param_gather_handle is None` at the
    next step's start_param_sync: the 175b flags on one GPU crashed at iteration 3)."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    _, layer = layer_pair(bias_activation_fusion=True)
    ddp_config = DistributedDataParallelConfig(use_distributed_optimizer=True, overlap_grad_reduce=True,
                                               overlap_param_gather=True, bucket_size=4096)  # several buckets
    model = DistributedDataParallel(layer.config, ddp_config, layer)
    assert len(model.bucket_groups) > 1
    x = torch.randn(12, 3, 64)
    for _ in range(2):  # each step starts the all-gathers (as the optimizer step does); forward must finish them
        model.start_param_sync()
        model(hidden_states=x)
        assert [g.param_gather_handle for g in model.bucket_groups] == [None] * len(model.bucket_groups)
    assert len(math_calls) == 2  # and the layer still ran compiled


def test_submodule_hooks_run_or_send_the_layer_to_megatron(model_parallel_cpu, math_calls):  # noqa: F811
    _, layer = layer_pair(bias_activation_fusion=True)
    seen = []
    layer.mlp.linear_fc1.register_forward_pre_hook(lambda module, args: seen.append("pre"))
    layer.self_attention.linear_qkv.register_forward_pre_hook(lambda module, args, kwargs: seen.append("kw"),
                                                              with_kwargs=True)
    x = torch.randn(12, 3, 64)
    layer(hidden_states=x)
    assert seen == ["kw", "pre"] and len(math_calls) == 1  # forward order, once each, compiled
    # A forward (post) hook needs the submodule's output, which the compiled function never makes.
    layer.mlp.linear_fc2.register_forward_hook(lambda module, args, output: seen.append("post"))
    layer(hidden_states=x)
    assert seen[-1] == "post" and len(math_calls) == 1


@pytest.fixture
def apex_free_fusion(monkeypatch):
    """Megatron's linear layers with --gradient-accumulation-fusion, apex's module replaced by the launcher's."""
    import importlib.util

    from megatron.core.tensor_parallel import layers

    from launcher import inside

    path = f"{inside.__path__[0]}/apex_free/fused_weight_gradient_mlp_cuda.py"
    spec = importlib.util.spec_from_file_location("fused_weight_gradient_mlp_cuda", path)
    assert spec is not None and spec.loader is not None
    shim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim)
    monkeypatch.setattr(layers, "_grad_accum_fusion_available", True)
    monkeypatch.setattr(layers, "fused_weight_gradient_mlp_cuda", shim, raising=False)


def main_grads_after_two_microbatches(layer, overlap: bool) -> dict[str, torch.Tensor]:
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    ddp_config = DistributedDataParallelConfig(overlap_grad_reduce=overlap, bucket_size=4096 if overlap else None)
    model = DistributedDataParallel(layer.config, ddp_config, layer)
    model.zero_grad_buffer()
    torch.manual_seed(1)
    for _ in range(2):
        with model.no_sync():
            model(hidden_states=torch.randn(12, 3, 64, requires_grad=True))[0].square().sum().backward()
    return {name: p.main_grad.clone() for name, p in layer.named_parameters()}


@pytest.mark.parametrize("overlap", [False, True], ids=["no-overlap", "overlap-grad-reduce"])
def test_weight_gradients_accumulate_in_the_gemm_without_apex(
        model_parallel_cpu, math_calls, apex_free_fusion, overlap):  # noqa: F811
    """With gradient_accumulation_fusion, the weight gradients of two micro-batches reach main_grad through the
    GEMM (the compiled layer's and Megatron's own linears, apex's module replaced by the launcher's): the same sums
    as autograd's param.grad added by DDP, and DDP's hook adds nothing a second time."""
    upstream, compiled = layer_pair(bias_activation_fusion=True, gradient_accumulation_fusion=True)
    _, plain = layer_pair(bias_activation_fusion=True, gradient_accumulation_fusion=False)
    expected = main_grads_after_two_microbatches(plain, overlap)
    for layer in (compiled, upstream):
        got = main_grads_after_two_microbatches(layer, overlap)
        assert got.keys() == expected.keys()
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-5, msg=name)
    assert compiled.self_attention.linear_qkv.weight.grad_added_to_main_grad is True
    assert math_calls  # the compiled path ran


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_fused_weight_gradients_of_views_of_one_buffer(model_parallel_cpu, apex_free_fusion, monkeypatch,  # noqa: F811
                                                       backend):
    """DDP's main_grads are views of one buffer, so each accumulation bumps the version counter they share: the
    fused path must not hand them to autograd (on the H200 the fourth layer GEMM's backward failed autograd's
    version check). Two micro-batches through the layer math, eager and traced, sum what autograd would."""
    from launcher.inside.megatron_ext import compiled_layer

    monkeypatch.setenv("MEGATRON_LAUNCH_COMPILE_BACKEND", backend)
    compiled_layer.compiled_layer_math.cache_clear()
    _, fused = layer_pair(bias_activation_fusion=True, gradient_accumulation_fusion=True)
    _, plain = layer_pair(bias_activation_fusion=True)
    attention, mlp = fused.self_attention, fused.mlp
    weights = (attention.linear_qkv.weight, attention.linear_proj.weight, mlp.linear_fc1.weight, mlp.linear_fc2.weight)
    buffer = torch.zeros(sum(w.numel() for w in weights))
    offset = 0
    for w in weights:
        w.main_grad = buffer[offset:offset + w.numel()].view_as(w)
        offset += w.numel()
    torch.manual_seed(1)
    for _ in range(2):
        x = torch.randn(12, 3, 64)
        if backend == "eager":
            monkeypatch.setattr(compiled_layer, "compiled_layer_math", lambda *_: compiled_layer.layer_math)
        fused(hidden_states=x.clone().requires_grad_(True))[0].square().sum().backward()
        plain(hidden_states=x.clone().requires_grad_(True))[0].square().sum().backward()
    expected = dict(plain.named_parameters())
    for name, param in fused.named_parameters():
        if any(param is w for w in weights):
            torch.testing.assert_close(param.main_grad, expected[name].grad, rtol=1e-4, atol=1e-5, msg=name)
            assert param.grad_added_to_main_grad is True
        else:
            torch.testing.assert_close(param.grad, expected[name].grad, rtol=1e-4, atol=1e-5, msg=name)
