"""The SDPA layer spec and the fast fallback stand-ins, on CPU against the upstream modules they replace."""

from __future__ import annotations

import socket

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

pytestmark = pytest.mark.megatron


@pytest.fixture(scope="module")
def model_parallel_cpu():
    """One-rank gloo process group, model-parallel state, an RNG tracker, global memory buffer on CPU."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import initialize_rng_tracker

    created = not dist.is_initialized()
    if created:  # a free port: two test files using this fixture may run at once on two workers
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    parallel_state.initialize_model_parallel()
    initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    current_device = torch.cuda.current_device
    torch.cuda.current_device = lambda: "cpu"  # upstream's attention takes a scratch buffer "on the GPU"
    yield
    torch.cuda.current_device = current_device
    parallel_state.destroy_model_parallel()
    if created:
        dist.destroy_process_group()


def attention_config(groups: int, dropout: float = 0.0):
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, num_query_groups=groups,
                             attention_dropout=dropout, masked_softmax_fusion=False, use_cpu_initialization=True)


@pytest.mark.parametrize("groups", [4, 2, 1], ids=["mha", "gqa", "mqa"])
def test_sdpa_matches_upstream_local_attention(model_parallel_cpu, groups):
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType

    from launcher.inside.megatron_ext.sdpa_spec import SDPACoreAttention

    config = attention_config(groups)
    upstream = DotProductAttention(config, 1, AttnMaskType.causal, "self")
    sdpa = SDPACoreAttention(config, 1, AttnMaskType.causal, "self")
    torch.manual_seed(0)
    seq, batch = 10, 3
    query = torch.randn(seq, batch, 4, 16, requires_grad=True)
    key = torch.randn(seq, batch, groups, 16, requires_grad=True)
    value = torch.randn(seq, batch, groups, 16, requires_grad=True)
    causal_mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)[None, None]  # True = masked, as Megatron's
    expected = upstream(query, key, value, causal_mask)
    got = sdpa(query, key, value, causal_mask)
    assert got.shape == expected.shape == (seq, batch, 64)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    grads = torch.autograd.grad(got.square().sum(), (query, key, value))
    expected_grads = torch.autograd.grad(expected.square().sum(), (query, key, value))
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


def test_sdpa_padding_mask_follows_megatron_convention(model_parallel_cpu):
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType

    from launcher.inside.megatron_ext.sdpa_spec import SDPACoreAttention

    config = attention_config(4)
    torch.manual_seed(1)
    q, k, v = (torch.randn(6, 2, 4, 16) for _ in range(3))
    mask = torch.zeros(2, 1, 6, 6, dtype=torch.bool)
    mask[0, :, :, 4:] = True  # batch 0: the last two keys are padding
    expected = DotProductAttention(config, 1, AttnMaskType.padding, "self")(q, k, v, mask)
    got = SDPACoreAttention(config, 1, AttnMaskType.padding, "self")(q, k, v, mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_sdpa_applies_a_document_mask_like_upstream(model_parallel_cpu):
    """--reset-attention-mask: two documents in one causal sequence; the explicit mask must win."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType

    from launcher.inside.megatron_ext.sdpa_spec import SDPACoreAttention

    config = attention_config(4)
    torch.manual_seed(3)
    q, k, v = (torch.randn(6, 2, 4, 16) for _ in range(3))
    mask = torch.ones(6, 6, dtype=torch.bool).triu(1)
    mask[3:, :3] = True  # the second document does not see the first
    mask = mask[None, None]
    expected = DotProductAttention(config, 1, AttnMaskType.causal, "self")(q, k, v, mask)
    got = SDPACoreAttention(config, 1, AttnMaskType.causal, "self")(q, k, v, mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_layer_spec_is_upstream_local_spec_with_sdpa_core_attention():
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    from launcher.inside.megatron_ext.sdpa_spec import SDPACoreAttention, build_layer_spec

    class Args:
        normalization = "RMSNorm"
        qk_layernorm = True
        num_experts = None

    spec = build_layer_spec(Args())
    upstream = get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm")
    mine, theirs = spec.submodules.self_attention.submodules, upstream.submodules.self_attention.submodules
    assert mine.core_attention is SDPACoreAttention
    assert (mine.linear_qkv, mine.linear_proj) == (theirs.linear_qkv, theirs.linear_proj)
    mlp, upstream_mlp = spec.submodules.mlp, upstream.submodules.mlp  # functools.partial: compare the parts
    assert (mlp.func, mlp.args, mlp.keywords) == (upstream_mlp.func, upstream_mlp.args, upstream_mlp.keywords)
    # Megatron's torch fallback norm (no apex/TE) is the spec's TorchNorm, which adds zero-centered gamma
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    from launcher.inside.megatron_ext.sdpa_spec import TorchNorm

    theirs_norm = upstream.submodules.input_layernorm
    assert spec.submodules.input_layernorm is (TorchNorm if theirs_norm is WrappedTorchNorm else theirs_norm)
    assert mine.q_layernorm is (TorchNorm if theirs.q_layernorm is WrappedTorchNorm else theirs.q_layernorm)
    assert spec.module is upstream.module


def test_layer_spec_builds_multi_latent_attention_with_sdpa_core_attention():
    from megatron.core.transformer.multi_latent_attention import MLASelfAttention

    from launcher.inside.megatron_ext.sdpa_spec import SDPACoreAttention, TorchNorm, build_layer_spec

    class Args:
        multi_latent_attention = True
        qk_layernorm = True
        normalization = "RMSNorm"

    attention = build_layer_spec(Args()).submodules.self_attention
    assert attention.module is MLASelfAttention
    assert attention.submodules.core_attention is SDPACoreAttention
    assert (attention.submodules.q_layernorm, attention.submodules.kv_layernorm) == (TorchNorm, TorchNorm)


def test_sdpa_takes_multi_latent_attentions_head_sizes(model_parallel_cpu):
    """MLA's query/key heads (qk_head_dim + qk_pos_emb_head_dim) are wider than its value heads: softmax(q·kᵀ·scale)·v
    with the scale it gives, out as [s, b, heads × v_head_dim] (what upstream's local attention cannot take)."""
    from megatron.core.transformer.enums import AttnMaskType

    from launcher.inside.megatron_ext.sdpa_spec import SDPACoreAttention

    config = attention_config(4)
    sdpa = SDPACoreAttention(config, 1, AttnMaskType.causal, "self", softmax_scale=0.1, k_channels=24, v_channels=8)
    torch.manual_seed(2)
    seq, batch = 7, 2
    q, k = torch.randn(seq, batch, 4, 24), torch.randn(seq, batch, 4, 24)
    v = torch.randn(seq, batch, 4, 8)
    scores = torch.einsum("sbhd,tbhd->bhst", q, k) * 0.1
    scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
    expected = torch.einsum("bhst,tbhd->sbhd", scores.softmax(-1), v).reshape(seq, batch, 4 * 8)
    got = sdpa(q, k, v, None)
    assert got.shape == (seq, batch, 32)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_foreach_norm_and_scale_match_upstream_fallbacks():
    from megatron.core.utils import local_multi_tensor_scale

    from launcher.inside.megatron_ext.fast_ops import foreach_l2_norm, foreach_scale, foreach_scale_tensor

    torch.manual_seed(2)
    tensors = [torch.randn(5, 7), torch.randn(3), torch.randn(11, 2)]
    norm, _ = foreach_l2_norm(0, None, [tensors], False)
    torch.testing.assert_close(norm, torch.linalg.vector_norm(torch.cat([t.flatten() for t in tensors])).reshape(1))

    mine = [torch.empty_like(t, dtype=torch.bfloat16) for t in tensors]
    theirs = [torch.empty_like(t, dtype=torch.bfloat16) for t in tensors]
    foreach_scale(0, None, [tensors, mine], 0.5)
    local_multi_tensor_scale(0, None, [tensors, theirs], 0.5)
    for a, b in zip(mine, theirs):
        assert torch.equal(a, b)

    scaled = [t.clone() for t in tensors]
    foreach_scale_tensor(0, None, [scaled, scaled], torch.tensor([0.25]))
    for a, t in zip(scaled, tensors):
        torch.testing.assert_close(a, t * 0.25)


def test_fast_ops_selection():
    from launcher.inside.megatron_ext import ALL_OPS, DEFAULT_OPS, selected_ops

    assert selected_ops(None) == DEFAULT_OPS == ALL_OPS
    assert selected_ops("layer,save") == ("layer", "save")
    assert selected_ops("ce, norm") == ("ce", "norm")
    assert selected_ops("none") == ()
    with pytest.raises(ValueError, match="unknown fast op"):
        selected_ops("ce,fastest")


def test_training_loop_device_tensors_come_through_pinned_memory_without_a_host_wait():
    """Megatron's training_log builds torch.tensor([0.0], device='cuda') every step; from pageable memory that copy
    waits for the whole queued step. The training module's torch gives the same tensor through page-locked memory."""
    import types

    from launcher.inside.megatron_ext.fast_ops import _PinnedTensorTorch

    view = _PinnedTensorTorch(torch)
    assert view.float32 is torch.float32 and view.distributed is torch.distributed
    host = view.tensor([1.5, 2.0], dtype=torch.double, device="cpu")
    assert host.dtype == torch.double and host.tolist() == [1.5, 2.0] and not host.is_pinned()

    calls = []

    class Built:
        def pin_memory(self):
            calls.append("pin")
            return self

        def to(self, device, non_blocking=False):
            calls.append(("to", device, non_blocking))
            return "on the device"

    fake = types.SimpleNamespace(device=torch.device,
                                 tensor=lambda data, **kw: calls.append(("build", data, kw)) or Built())
    got = _PinnedTensorTorch(fake).tensor([0.0], dtype=torch.float, device="cuda")
    assert got == "on the device"
    assert calls == [("build", [0.0], {"dtype": torch.float}), "pin", ("to", "cuda", True)]


def test_sync_free_step_gives_the_training_loop_the_pinned_tensor_torch():
    training = pytest.importorskip("megatron.training.training")
    from megatron.core.optimizer import clip_grads
    from megatron.core.optimizer.optimizer import MixedPrecisionOptimizer

    from launcher.inside.megatron_ext import fast_ops

    saved = [(module, name, getattr(module, name)) for module, name in (
        (training, "torch"), (training, "logical_and_across_model_parallel_group"),
        (training, "reduce_max_stat_across_model_parallel_group"), (MixedPrecisionOptimizer, "get_loss_scale"),
        (clip_grads, "multi_tensor_scale_tensor_impl"))]
    try:
        fast_ops._patch_sync_free_step()
        assert isinstance(training.torch, fast_ops._PinnedTensorTorch)
        assert training.torch.Tensor is torch.Tensor
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_cross_entropy_matches_megatrons_loss_and_gradient(model_parallel_cpu, monkeypatch, label_smoothing):
    """The ce fast op against upstream's vocab_parallel_cross_entropy (TP 1): the same per-token loss and the same
    gradient, label smoothing included (Megatron's K/(K-1) smoothing, not torch's)."""
    from megatron.core.tensor_parallel.cross_entropy import vocab_parallel_cross_entropy

    from launcher.inside.megatron_ext import fast_ops

    monkeypatch.setenv("MEGATRON_LAUNCH_COMPILE_BACKEND", "aot_eager")
    fast_ops._compiled_cross_entropy.cache_clear()
    torch.manual_seed(3)
    logits = (torch.randn(6, 2, 50) * 3).to(torch.bfloat16)
    target = torch.randint(0, 50, (6, 2))
    weights = torch.rand(6, 2)
    mine_in, theirs_in = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    mine = fast_ops.CrossEntropy.apply(mine_in, target, label_smoothing)
    theirs = vocab_parallel_cross_entropy(theirs_in, target, label_smoothing)
    assert mine.dtype == torch.float32 and mine.shape == target.shape
    torch.testing.assert_close(mine, theirs.float(), atol=1e-5, rtol=1e-5)
    (mine * weights).sum().backward()
    (theirs * weights).sum().backward()
    assert mine_in.grad.dtype == torch.bfloat16
    torch.testing.assert_close(mine_in.grad.float(), theirs_in.grad.float(), atol=1e-3, rtol=1e-2)
    fast_ops._compiled_cross_entropy.cache_clear()
