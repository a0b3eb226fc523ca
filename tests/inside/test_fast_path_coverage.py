"""The SDPA fast path covers a feature or says so before launch: one table (coverage.py) that the pipeline and the
spec inside training both read, so the launcher never hands the spec a model it would refuse."""

from __future__ import annotations

import types

import pytest

from launcher.errors import UserError
from launcher.inside.megatron_ext.coverage import SDPA_SPEC_GAPS
from launcher.megatron.pin import Kernels
from launcher.pipeline.kernels import SDPA_SPEC, fallbacks
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve

WITHOUT = Kernels(False, False, "preset")

# One Megatron setting per gap that falls into it (a new gap without an example fails the first test).
GAP_EXAMPLES = {
    "experimental_attention_variant": {"experimental_attention_variant": "gated_delta_net"},
    "heterogeneous_layers_config_path": {"heterogeneous_layers_config_path": "/tmp/layers.json"},
    "heterogeneous_layers_config_encoded_json": {"heterogeneous_layers_config_encoded_json": "{}"},
    "mtp_num_layers": {"mtp_num_layers": 1, "position_embedding_type": "rope"},
    "window_size": {"window_size": "(128, 0)"},
    "softmax_type": {"softmax_type": "learnable"},
}
# Features the spec implements although upstream's torch fallback would not (or that it takes as upstream does).
COVERED = [
    {"layernorm_zero_centered_gamma": True},
    {"normalization": "RMSNorm", "layernorm_zero_centered_gamma": True},
    {"num_experts": 4, "moe_layer_freq": 1},
    {"num_experts": 4, "moe_layer_freq": "([0]*1+[1]*23)", "add_bias_linear": False},
    {"num_experts": 4, "moe_layer_freq": 2, "multi_latent_attention": True, "add_bias_linear": False},
    {"qk_layernorm": True},
    {"softmax_type": "vanilla"},
    {"multi_latent_attention": True},
]


def test_every_gap_has_an_example():
    assert {gap.setting for gap in SDPA_SPEC_GAPS} == set(GAP_EXAMPLES)


REFUSED = {gap.setting for gap in SDPA_SPEC_GAPS if gap.local_spec}
MOVED = sorted(set(GAP_EXAMPLES) - REFUSED)


def test_the_gaps_no_local_spec_builds_are_those_the_rehearsal_found():
    # functional-test matrix: the experimental-attention block spec fails without TE (MLA builds on the SDPA spec)
    assert REFUSED == {"experimental_attention_variant"}


def test_multi_latent_attention_that_another_gap_sends_to_the_local_spec_is_refused():
    with pytest.raises(UserError) as err:
        resolve(load_preset("345m", ["multi_latent_attention=true", "window_size=(128, 0)"]), 1, 1, kernels=WITHOUT)
    assert ("error: multi-latent attention (multi_latent_attention) needs Transformer Engine: the launcher's SDPA "
            "spec builds it without TE but does not cover sliding-window attention (window_size), and Megatron's "
            "local spec cannot build it") in err.value.render()


def test_multi_token_prediction_with_multi_latent_attention_is_refused_without_te():
    # any --spec fails with MTP in Megatron's builder (use_te unbound), and the local spec cannot build MLA
    with pytest.raises(UserError) as err:
        resolve(load_preset("345m", ["multi_latent_attention=true", "mtp_num_layers=1",
                                     "position_embedding_type=rope"]), 1, 1, kernels=WITHOUT)
    assert "does not cover multi-token prediction (mtp_num_layers), and Megatron's local spec cannot build it" in (
        err.value.render())


def test_zero_centered_gamma_that_a_gap_sends_to_the_local_spec_is_refused_without_apex():
    # seen through `launch --check`: Megatron's torch norm fallback asserts at model build
    overrides = ["layernorm_zero_centered_gamma=true", "window_size=(128, 0)"]
    with pytest.raises(UserError) as err:
        resolve(load_preset("345m", overrides), 1, 1, kernels=WITHOUT)
    assert ("needs Transformer Engine or NVIDIA apex: the launcher's SDPA spec builds it without TE but does not "
            "cover sliding-window attention (window_size), and Megatron's local spec cannot build it without apex"
            ) in err.value.render()
    job = resolve(load_preset("345m", overrides), 1, 1, kernels=Kernels(False, True, "preset"))  # apex's norm
    assert "spec" not in job.megatron


def test_the_norm_features_are_those_the_specs_norm_implements():
    from launcher.inside.megatron_ext.coverage import LOCAL_SPEC_ONLY_GAPS, NORM_FEATURES

    assert {gap.setting for gap in LOCAL_SPEC_ONLY_GAPS if gap.apex_builds} <= set(NORM_FEATURES)


@pytest.mark.parametrize("setting", MOVED)
def test_a_feature_the_spec_does_not_cover_gets_megatrons_local_spec_with_a_note(setting):
    settings = GAP_EXAMPLES[setting]
    assert "spec" not in fallbacks(settings, WITHOUT)
    assert fallbacks(settings, WITHOUT)["transformer_impl"] == "local"
    overrides = [f"{dest}={value}" for dest, value in settings.items()]
    job = resolve(load_preset("345m", overrides), 1, 1, kernels=WITHOUT)
    assert "spec" not in job.megatron
    gap = next(g for g in SDPA_SPEC_GAPS if g.setting == setting)
    assert (f"the SDPA fast path does not cover {gap.what} ({setting}): Megatron's local layer spec is used "
            "(it trains, but slower)") in job.notes


@pytest.mark.parametrize("settings", COVERED, ids=lambda s: ",".join(s))
def test_a_covered_feature_keeps_the_sdpa_spec(settings):
    assert fallbacks(settings, WITHOUT)["spec"] == SDPA_SPEC["spec"]


def test_a_preset_naming_the_spec_for_a_model_it_does_not_cover_is_refused_before_launch():
    with pytest.raises(UserError) as err:
        resolve(load_preset("345m", ["softmax_type=learnable",
                                     "spec=launcher.inside.megatron_ext.sdpa_spec_fast layer_spec"]),
                1, 1, kernels=WITHOUT)
    text = err.value.render()
    assert ("error: spec launcher.inside.megatron_ext.sdpa_spec_fast layer_spec does not cover softmax types "
            "other than vanilla (softmax_type)") in text
    assert "hint: remove spec from the preset (--set spec=null)" in text


def test_multi_latent_attention_without_transformer_engine_takes_the_sdpa_spec(launch):
    code, out, err = launch("345m", "--dry-run", "--set", "multi_latent_attention=true",
                            "--set", "transformer_engine=false")
    assert code == 0 and "error:" not in err
    assert "--multi-latent-attention" in out and "--spec launcher.inside.megatron_ext.sdpa_spec_fast layer_spec" in out


def test_multi_latent_attention_with_transformer_engine_is_no_fast_path_question():
    job = resolve(load_preset("345m", ["multi_latent_attention=true"]), 1, 1, kernels=Kernels(True, True, "preset"))
    assert "spec" not in job.megatron


def test_the_dry_run_says_which_spec_the_job_gets(launch):
    # Megatron's local spec keeps the s×s scores: ~112 GiB at the preset's micro batch, which an H200 holds
    code, out, err = launch("345m", "--dry-run", "--set", "window_size=(64,0)", "--set", "transformer_engine=false",
                            "--set", "gpu=h200-141gb")
    assert code == 0, err
    assert "# note: the SDPA fast path does not cover sliding-window attention (window_size)" in out
    assert "--spec" not in out


# -- inside training: the spec accepts exactly what the pipeline gives it -----------------------------------

@pytest.mark.megatron
@pytest.mark.parametrize("setting", sorted(GAP_EXAMPLES))
def test_the_spec_refuses_each_gap_the_pipeline_avoids(setting):
    pytest.importorskip("megatron.core")
    from launcher.inside.megatron_ext.sdpa_spec import build_layer_spec

    gap = next(g for g in SDPA_SPEC_GAPS if g.setting == setting)
    with pytest.raises(ValueError, match=f"does not cover {gap.what}"):
        build_layer_spec(types.SimpleNamespace(**GAP_EXAMPLES[setting]))


@pytest.mark.megatron
@pytest.mark.parametrize("settings", COVERED, ids=lambda s: ",".join(s))
def test_the_spec_builds_each_covered_feature(settings):
    pytest.importorskip("megatron.core")
    from launcher.inside.megatron_ext.sdpa_spec import SDPACoreAttention, build_layer_spec

    spec = build_layer_spec(types.SimpleNamespace(**_parsed(settings)))
    assert spec.submodules.self_attention.submodules.core_attention is SDPACoreAttention
    dense = spec.params.get("dense_submodules")
    if dense is not None:  # a mix of dense and MoE layers: both with the SDPA attention, only one with experts
        assert dense.self_attention.submodules.core_attention is SDPACoreAttention
        assert "MoELayer" in repr(spec.submodules.mlp) and "MoELayer" not in repr(dense.mlp)


def _parsed(settings: dict) -> dict:
    """Settings as Megatron's parser leaves them: moe_layer_freq's pattern evaluated to a list."""
    freq = settings.get("moe_layer_freq")
    return dict(settings, moe_layer_freq=eval(freq)) if isinstance(freq, str) else settings  # noqa: S307


@pytest.mark.megatron
@pytest.mark.parametrize("normalization", ["LayerNorm", "RMSNorm"])
def test_zero_centered_gamma_norm_is_one_plus_the_stored_weight(normalization):
    """--apply-layernorm-1p without apex/TE: Megatron's torch fallback asserts; the spec's norm stores gamma - 1
    (zero at init) and scales by 1 + weight, as apex's FusedLayerNorm and TE's norms do."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("megatron.core")
    from megatron.core.transformer.transformer_config import TransformerConfig

    from launcher.inside.megatron_ext.sdpa_spec import TorchNorm

    config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2, normalization=normalization,
                               layernorm_zero_centered_gamma=True, use_cpu_initialization=True)
    norm = TorchNorm(config, 8, eps=1e-5)
    assert torch.equal(norm.weight, torch.zeros(8))
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(-0.5, 0.5, 8))
    x = torch.randn(3, 8)
    plain = (torch.nn.LayerNorm(8) if normalization == "LayerNorm" else torch.nn.RMSNorm(8, eps=1e-5))
    with torch.no_grad():
        plain.weight.copy_(norm.weight + 1)
        if normalization == "LayerNorm":
            plain.bias.copy_(norm.bias)
    torch.testing.assert_close(norm(x), plain(x))
    assert list(dict(norm.named_parameters())) == list(dict(plain.named_parameters()))  # same checkpoint keys


@pytest.mark.megatron
def test_a_layer_has_experts_where_megatrons_moe_layer_freq_pattern_says():
    pytest.importorskip("megatron.core")
    from launcher.inside.megatron_ext.sdpa_spec import is_moe_layer

    def moe_layers(freq, layers=6):
        return [n for n in range(1, layers + 1) if is_moe_layer(types.SimpleNamespace(moe_layer_freq=freq), n)]

    assert moe_layers(1) == [1, 2, 3, 4, 5, 6]
    assert moe_layers(2) == [1, 3, 5]  # every N-th from the first, as gpt_layer_specs counts
    assert moe_layers([0, 1, 1, 0, 1, 1]) == [2, 3, 5, 6]

