"""A job's pipeline_model_parallel_layout shrunk to the layout rehearsal's pipeline: fewer stages and layers, the
same shape (embedding, loss and MTP placement, virtual stages, smaller and empty stages), or said what was lost."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from launcher.checks.rehearsal_pipeline import megatron_accepts, parse_stages, shape, shrink_pipeline_layout
from launcher.checks.rehearsal_ranks import RankLayout, _load_settings, load_layout, rank_settings
from tests.checks.test_rehearsal_ranks import job

# NVIDIA's functional-test layouts at the pin (job PP, decoder layers, MTP layers), and more shapes
LAYOUTS = [
    ("Et|(tt|)*6mL", 2, 13, 1),  # moe/gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_scoped_cudagraph
    ("Et*3|(tt|)*6mL", 2, 15, 1),  # moe/…_fine_grained_offloading
    ("Et*3|(tt|)*6tmL", 2, 16, 1),  # moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_selective_recompute_experimental
    ("Et*3|(tt|)*6L", 2, 15, 0),  # moe/…_no_mtp_no_a2a_ovlp_fine_grained_offloading
    ("Et*2|(tt|)*5t|tmL", 4, 14, 1),  # mixtral/deepseekv3_proxy_flex_tp1pp4emp16etp1cp1_release
    ("Et*7|t*7mL", 2, 14, 1),  # mixtral/deepseekv3_proxy_flex_tp2pp2emp16etp1cp1_gb_200_release
    ("Ettt|(tt|)*29,m|L", 16, 61, 1),  # Megatron's own example: MTP and loss each on a stage of their own
    ("E|(tt|)*30,L", 16, 60, 0),  # the embedding and the loss alone
    ("E|t*4||t*4|t*4|t*4|t*4|t*4L", 4, 24, 0),  # an empty stage
]


@pytest.mark.parametrize("text, job_pp, layers, mtp", LAYOUTS, ids=[x[0] for x in LAYOUTS])
@pytest.mark.parametrize("pp, vpp", [(2, 2), (2, None), (4, 2), (4, None)])
def test_a_shrunk_layout_has_the_rehearsals_stages_and_megatrons_placement(text, job_pp, layers, mtp, pp, vpp):
    stages = parse_stages(text)
    assert stages is not None and megatron_accepts(stages, job_pp)
    if pp * (vpp or 1) > len(stages):  # the rehearsal's pipeline is never longer than the job's
        assert shrink_pipeline_layout(text, job_pp, pp, vpp).text is None
        return
    shrunk = shrink_pipeline_layout(text, job_pp, pp, vpp)
    assert shrunk.text is not None, shrunk.notes
    picked = parse_stages(shrunk.text)
    assert picked is not None and len(picked) == pp * (vpp or 1) and megatron_accepts(picked, pp)
    assert shrunk.layers == shrunk.text.count("t") <= 3 * len(picked)
    assert shrunk.text.count("m") == mtp and shrunk.text.count("E") == shrunk.text.count("L") == 1
    # whatever of the job's shape the smaller pipeline lost is named in the note
    lost = shape(stages, job_pp) - shape(picked, pp)
    assert all(what in shrunk.notes[0].partition("; not kept: ")[2] for what in lost)


def test_a_layout_keeps_its_shape_where_the_rehearsals_pipeline_has_room():
    shrunk = shrink_pipeline_layout("Ettt|(tt|)*29,m|L", 16, 2, 2)
    # the embedding's stage holds more layers than the others; MTP on a stage of its own, on another pipeline rank
    # than the loss (Megatron's standalone MTP); the loss alone
    assert shrunk.text == "Ett|t|m|L"
    assert shrunk.notes == ("pipeline_model_parallel_layout Ettt|(tt|)*29,m|L (32 stages at PP 16): rehearsed as "
                            "Ett|t|m|L (4 stages at PP 2)",)


def test_what_a_smaller_pipeline_cannot_keep_is_said():
    shrunk = shrink_pipeline_layout("E|(tt|)*5,m|L", 4, 2, None)
    assert shrunk.text == "Et|mL"
    assert shrunk.notes == ("pipeline_model_parallel_layout E|(tt|)*5,m|L (8 stages at PP 4): rehearsed as Et|mL "
                            "(2 stages at PP 2); not kept: separate stages after the last decoder layer, MTP on a "
                            "stage of its own, MTP on another pipeline rank than the loss, the embedding on a stage "
                            "of its own, the loss on a stage of its own",)


def test_a_per_layer_patterns_layer_count_is_shared_in_the_jobs_proportions():
    shrunk = shrink_pipeline_layout("Et|(tt|)*6mL", 2, 2, 2, layers=13)
    assert shrunk.text == "Ettt|ttttt|ttttt|mL" and shrunk.layers == 13
    assert shrink_pipeline_layout("E|t|t|t|t|t|t|L", 4, 4, 2, layers=5).text is None  # fewer layers than stages


def test_a_layout_not_of_megatrons_shape_is_left_to_megatron_and_the_stages_are_even():
    shrunk = shrink_pipeline_layout("tE|tL", 2, 2, None)
    assert shrunk.text is None and "the tiny model's stages are even instead" in shrunk.notes[0]


def scoped_cudagraph() -> dict:
    """moe/gpt3_moe_mcore_te_tp4_ep2_etp2_pp2_scoped_cudagraph's pipeline: 13 layers named by moe_layer_freq, MTP,
    Et|(tt|)*6mL at PP 2 (4 virtual stages). Rehearsed with its layout dropped, it failed at model build:
    'num_layers=13 should be divisible by config.pipeline_model_parallel_size=2' (transformer_block.py:149)."""
    return {**job("345m").megatron, "num_layers": 13, "mtp_num_layers": 1, "num_experts": 8, "moe_router_topk": 2,
            "moe_layer_freq": "([0]*4+[1]*9)", "pipeline_model_parallel_size": 2,
            "pipeline_model_parallel_layout": "Et|(tt|)*6mL", "tensor_model_parallel_size": 4,
            "expert_model_parallel_size": 2, "expert_tensor_parallel_size": 2}


def test_the_rehearsals_settings_keep_the_jobs_layout_string_shrunk():
    layout = RankLayout(tp=2, pp=2, vpp=2, ep=2, etp=2, dp=2)
    settings, notes = rank_settings(scoped_cudagraph(), layout, load_layout(layout, None))
    assert settings["pipeline_model_parallel_layout"] == "Ettt|ttttt|ttttt|mL"
    assert settings["num_layers"] == 13 and settings["moe_layer_freq"] == "([0]*4+[1]*9)"
    # Megatron takes one way of naming virtual stages: the layout's length
    assert "num_virtual_stages_per_pipeline_rank" not in settings
    assert "num_layers_per_virtual_pipeline_stage" not in settings
    assert any(note.startswith("pipeline_model_parallel_layout Et|(tt|)*6mL (8 stages at PP 2): rehearsed as")
               for note in notes)
    assert not any("stages are even" in note for note in notes)


def test_the_checkpoint_loads_at_another_pp_with_the_layout_placed_there():
    layout = RankLayout(tp=1, pp=2, vpp=2, ep=2, dp=2)
    settings, _ = rank_settings(scoped_cudagraph(), layout, load_layout(layout, None))
    same_pp = _load_settings(settings, scoped_cudagraph(), layout, replace(layout, tp=2), Path("ckpt"), [])
    assert same_pp["pipeline_model_parallel_layout"] == settings["pipeline_model_parallel_layout"]
    other = RankLayout(tp=1, pp=4, vpp=None, ep=2, dp=2)
    moved = _load_settings(settings, scoped_cudagraph(), layout, other, Path("ckpt"), [])
    stages = parse_stages(moved["pipeline_model_parallel_layout"])
    assert stages is not None and len(stages) == 4 and moved["pipeline_model_parallel_layout"].count("t") == 13
    single = _load_settings(settings, scoped_cudagraph(), layout, RankLayout(tp=2, ep=2), Path("ckpt"), [])
    assert "pipeline_model_parallel_layout" not in single  # PP 1: no pipeline to lay out


@pytest.mark.megatron
@pytest.mark.parametrize("text, job_pp, layers, mtp", LAYOUTS[:6], ids=[x[0] for x in LAYOUTS[:6]])
def test_megatron_accepts_each_shrunk_layout(text, job_pp, layers, mtp):
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    for pp, vpp in [(2, 2), (2, None), (4, 2)]:
        if pp * (vpp or 1) > len(parse_stages(text) or []):
            continue
        shrunk = shrink_pipeline_layout(text, job_pp, pp, vpp, layers=layers)
        assert shrunk.text is not None
        parsed = PipelineParallelLayerLayout(shrunk.text, pp)
        parsed.validate_layer_layout(shrunk.layers, mtp or None)
        assert parsed.virtual_pipeline_model_parallel_size == (vpp or 1)
