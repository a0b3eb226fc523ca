"""scripts/accept_variations.py: real jobs (the shipped presets, the import corpus's presets) moved to one GPU and
varied one or two settings at a time as users vary them. A refusal's every `set X=V` way out, followed alone or with
the others, gives an accepted job or strictly fewer problems, never a circle; what the dry-run accepts, Megatron's
own start-up checks accept. A seeded sample here (seconds); the script runs them all (see its docstring)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import accept_variations as variations  # noqa: E402

SEED = 34
SAMPLE = 70  # single mutations drawn from MUTATIONS (each on one base); the script runs every one on several
PAIRS = 15


def test_a_hint_is_read_as_every_way_out_it_offers():
    ways = variations.ways_out
    assert ways("set group_query_attention=false, or multi_latent_attention=false --set mla_down_proj_fusion=false"
                ) == [["group_query_attention=false"], ["multi_latent_attention=false", "mla_down_proj_fusion=false"]]
    # a parenthesis's sets count where the way names none outside it; a list value stays whole
    assert ways("drop layernorm from recompute_modules (--set recompute_modules=[core_attn,mlp]), or run in a "
                "Transformer Engine container (transformer_engine: true)") == [["recompute_modules=[core_attn,mlp]"]]
    # the user's own value (DIR) and the target's kernels are no ways to follow here; a later --set wins
    assert ways("drop it: --set exit_on_missing_checkpoint=false, or --set load=DIR (a checkpoint)") == [
        ["exit_on_missing_checkpoint=false"]]
    assert ways("set x=false, or transformer_engine=true") == [["x=false"]]
    # a layer pattern is one value, brackets and all
    assert ways("--set moe_layer_freq=[0]*1+[1]*23 (a 0 for each dense layer)") == [["moe_layer_freq=[0]*1+[1]*23"]]
    assert ways("unset them: launch p --set a=3 --set b=1 --set a=null") == [["a=null", "b=1"]]


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    work = tmp_path_factory.mktemp("variations")
    empty = work / "empty"
    empty.mkdir()
    rng = random.Random(SEED)
    found = variations.bases(work, None, 0, rng)
    assert len(found) >= 30  # the shipped presets and the import corpus's accepted ones
    chosen = dict(rng.sample(sorted(variations.MUTATIONS.items()), SAMPLE))
    jobs = variations.variations(found, 1, rng, chosen, PAIRS)
    jobs = [job for job in jobs if job[1].mutation != "as moved"][:SAMPLE] + \
        [job for job in jobs if " + " in job[1].mutation] + rng.sample(jobs[:len(found)], 5)
    return empty, jobs


def test_every_way_out_of_a_refused_variation_arrives(sample):
    empty, jobs = sample
    findings, refused = [], 0
    for base, variation in jobs:
        variations.judge(variation, base, empty, None)
        refused += variation.launcher == "refused"
        findings += [f"{variation.base} + {variation.mutation}: {f}" for f in variation.findings]
    assert refused >= 20, refused  # the sample exercises the hints
    assert not findings, "\n".join(findings)


@pytest.mark.megatron
def test_megatron_starts_every_variation_the_dry_run_accepts(sample):
    from upstream_support import shared_checker

    empty, jobs = sample
    megatron = variations.Megatron(None, shared_checker())
    disagreements, accepted = [], 0
    for base, variation in jobs:
        variations.judge(variation, base, empty, megatron)
        accepted += variation.megatron.startswith(("ok", "needs a package"))
        disagreements += [f"{variation.base} + {variation.mutation}: {f}" for f in variation.findings
                          if "Megatron refuses" in f]
    assert accepted >= 30, accepted
    assert not disagreements, "\n".join(disagreements)


def test_odd_values_are_what_the_parser_takes_and_presets_never_use():
    from launcher.megatron.args import catalog

    args = catalog()
    assert variations.odd_values(args["hidden_size"]) == ["0", "-1", str(2**31), "2.5"]
    assert variations.odd_values(args["lr"]) == ["0", "-1.0", "1e30"]
    assert set(variations.odd_values(args["moe_token_dispatcher_type"])) == {"alltoall", "flex"}
    assert variations.odd_values(args["bf16"]) == ["true"]
    odd = variations.odd_mutations()
    assert "odd hidden_size=2.5" in odd and not any("data_path" in label for label in odd)
    assert len(variations.corpus_mutations()) > 100  # the import corpus's own settings


@pytest.fixture(scope="module")
def wide_sample(tmp_path_factory):
    """Odd values and the corpus's settings alone, and three mutations at a time, on a seeded draw."""
    work = tmp_path_factory.mktemp("wide")
    empty = work / "empty"
    empty.mkdir()
    found = variations.bases(work, None, 0, random.Random(SEED))
    return empty, variations.wide_variations(found, random.Random(SEED), 40, 10)


def test_every_way_out_of_a_wide_variation_arrives(wide_sample):
    empty, jobs = wide_sample
    findings = []
    for base, variation in jobs:
        variations.judge(variation, base, empty, None)
        findings += [f"{variation.base} + {variation.mutation}: {f}" for f in variation.findings]
    assert not findings, "\n".join(findings)


@pytest.mark.megatron
def test_megatron_starts_every_wide_variation_the_dry_run_accepts(wide_sample):
    from upstream_support import shared_checker

    empty, jobs = wide_sample
    megatron = variations.Megatron(None, shared_checker())
    disagreements = []
    for base, variation in jobs:
        variations.judge(variation, base, empty, megatron)
        disagreements += [f"{variation.base} + {variation.mutation}: {f}" for f in variation.findings
                          if "Megatron refuses" in f]
    assert not disagreements, "\n".join(disagreements)
