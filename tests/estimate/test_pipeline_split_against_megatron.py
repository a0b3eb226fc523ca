"""The split of decoder layers over pipeline ranks with uneven first/last stages and the embedding or loss counted
as layers, at every PP including 1, against Megatron's own TransformerConfig and get_num_layers_to_build at the pin:
refused where Megatron refuses, the same layers on every rank where it builds; the checker agrees."""

from __future__ import annotations

import itertools

import pytest

from launcher.errors import UserError
from launcher.estimate.stages import SplitError, split_layers
from tests.pipeline.test_layout import plan

LAYERS = 24
FIRSTS = (None, 1, 2, 5, 6, 8, 24, 30, 0)
LASTS = (None, 3, 6, 18, 24)
ACCOUNTED = ((False, False), (True, False), (False, True), (True, True))
GRID = [(pp, first, last, emb, loss) for pp in (1, 2, 3, 4) for first, last in itertools.product(FIRSTS, LASTS)
        for emb, loss in ACCOUNTED]


def megatron_split(pp: int, first: int | None, last: int | None, emb: bool, loss: bool) -> list[int] | None:
    """Each rank's decoder layers as Megatron builds them, or None where it refuses (config or build)."""
    config_module = pytest.importorskip("megatron.core.transformer.transformer_config")
    block = pytest.importorskip("megatron.core.transformer.transformer_block")
    import torch

    try:
        config = config_module.TransformerConfig(
            num_layers=LAYERS, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=pp,
            num_layers_in_first_pipeline_stage=first, num_layers_in_last_pipeline_stage=last,
            account_for_embedding_in_pipeline_split=emb, account_for_loss_in_pipeline_split=loss,
            pipeline_dtype=torch.bfloat16)
        return [block.get_num_layers_to_build(config, vp_stage=None, pp_rank=rank) for rank in range(pp)]
    except (ValueError, AssertionError):
        return None


@pytest.mark.parametrize(("pp", "first", "last", "emb", "loss"), GRID)
def test_the_split_is_megatrons(pp, first, last, emb, loss):
    theirs = megatron_split(pp, first, last, emb, loss)
    if theirs is None or min(theirs) < 0:  # refused; or middle ranks of fewer than 0 layers: refused here too
        with pytest.raises(SplitError):
            split_layers(LAYERS, pp, first=first, last=last, embedding_in_split=emb, loss_in_split=loss)
    else:
        ours = split_layers(LAYERS, pp, first=first, last=last, embedding_in_split=emb, loss_in_split=loss)
        assert [stage.layers for stage in ours] == theirs


PP1 = [(first, last, emb, loss) for (pp, first, last, emb, loss) in GRID if pp == 1]


@pytest.mark.parametrize(("first", "last", "emb", "loss"), PP1)
def test_the_checker_refuses_at_pp_1_exactly_what_megatron_refuses(first, last, emb, loss):
    overrides = ["pipeline_model_parallel_size=1",
                 *([f"decoder_first_pipeline_num_layers={first}"] if first is not None else []),
                 *([f"decoder_last_pipeline_num_layers={last}"] if last is not None else []),
                 f"account_for_embedding_in_pipeline_split={str(emb).lower()}",
                 f"account_for_loss_in_pipeline_split={str(loss).lower()}"]
    theirs = megatron_split(1, first, last, emb, loss)
    if theirs is None:
        with pytest.raises(UserError) as refused:
            plan(overrides=overrides, gpus=1)
        assert "hint: " in refused.value.render()
        return
    job = plan(overrides=overrides, gpus=1)
    said = [w for w in job.warnings if "at PP 1 the one pipeline rank is both first and last" in w]
    # Megatron builds another number of layers than num_layers only where both are set: said, with that number
    assert bool(said) == (theirs != [LAYERS])
    if said:
        assert f"Megatron builds decoder_last_pipeline_num_layers {theirs[0]} decoder layers" in said[0]


def test_pp_1_with_uneven_stages_is_not_ignored():
    # one of them equal to num_layers: the one rank holds every layer; any other: refused (was read as even)
    assert [s.layers for s in split_layers(24, 1, first=24)] == [24]
    with pytest.raises(SplitError, match="19 middle layers remain for 0 middle pipeline stages"):
        split_layers(24, 1, first=5)
    with pytest.raises(SplitError, match="cannot be combined"):
        split_layers(24, 1, first=24, embedding_in_split=True)
    assert [s.layers for s in split_layers(24, 1, first=2, last=3)] == [3]  # what Megatron builds


def test_first_and_last_beyond_the_model_are_refused_by_the_checker_too():
    text = ""
    with pytest.raises(UserError) as refused:
        plan(overrides=["pipeline_model_parallel_size=4", "decoder_first_pipeline_num_layers=18",
                        "decoder_last_pipeline_num_layers=18"], gpus=4)
    text = refused.value.render()
    assert "exceed num_layers 24: -12 layers are left for the 2 middle pipeline stages" in text
