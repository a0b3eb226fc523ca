"""A configuration made for another Megatron model (Mamba/hybrid, T5, BERT, vision-language) is refused before
launch by name: pretrain_gpt.py would parse its settings and train a GPT model that ignores them."""

from __future__ import annotations

import pytest

from launcher.megatron import args as megatron_args
from launcher.megatron.model_families import FAMILY_SETTINGS, other_families
from tests.pipeline.refusals import refused


@pytest.mark.parametrize(("setting", "family"), [
    ("hybrid_layer_pattern=M*M*", "Mamba/hybrid"),
    ("is_hybrid_model=true", "Mamba/hybrid"),
    ("decoder_num_layers=12", "T5"),
    ("bert_binary_head=false", "BERT"),
    ("img_h=336", "vision-language"),
])
def test_a_setting_only_another_model_reads_is_refused_by_name(setting, family):
    text = refused([setting], 1, 1)
    assert f"{setting.split('=')[0]}: read only by a" in text and family in text
    assert "would build a GPT model that ignores it" in text


def test_megatrons_default_value_is_no_sign_of_another_model():
    catalog = megatron_args.catalog()
    default = lambda dest: catalog[dest].default  # noqa: E731
    assert other_families({"mamba_head_dim": 64, "img_h": 224, "bert_binary_head": True}, default) == {}


def test_every_family_setting_is_a_megatron_argument_at_the_pin():
    catalog = megatron_args.catalog()
    assert [name for names in FAMILY_SETTINGS.values() for name in names if name not in catalog] == []
