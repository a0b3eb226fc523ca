"""Layout search, its validity rules, overrides and the `launch plan` report (pure, no torch)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from plan_shapes import GPT_175B, GPT_345M, TOY

from launcher.cli import plan_report as pr
from launcher.errors import UserError
from launcher.estimate import formulas as est
from launcher.estimate import search as ps

H100 = est.GPUS["h100-80gb"]


def apply_overrides(args: dict[str, Any], items: list[str]) -> dict[str, Any]:
    """What `--set` does with the items, for the few value kinds overrides() writes."""
    out = dict(args)
    for item in items:
        name, value = item.split("=", 1)
        out[name] = {"null": None, "true": True, "false": False}.get(value, value)
        if isinstance(out[name], str) and value.isdigit():
            out[name] = int(value)
    return out


def test_layout_problems_name_every_factor() -> None:
    # The search's rules are launcher.pipeline.checker's, so these are the messages `launch` prints.
    m = est.model_shape(GPT_175B)
    t = est.training_of(GPT_175B, 64)
    assert ps.layout_problems(m, t) == [
        "world size 64 = 8 node(s) × 8 GPUs is not divisible by TP·PP·CP = 8·16·1 = 128"]
    bad = replace(est.training_of(GPT_175B, 1536), pp=5, tp=3, micro_batch_size=7)
    problems = " | ".join(ps.layout_problems(m, replace(bad, world_size=15 * 64)))
    assert "num_layers 96 is not divisible by pipeline_model_parallel_size 5" in problems
    assert "global batch size 1536 is not divisible by micro batch 7 × data-parallel size 64 = 448" in problems
    interleaved = replace(est.training_of(GPT_175B, 1536), vpp=2, global_batch_size=12 * 8)
    assert "multiple of PP 16" in " ".join(ps.layout_problems(m, interleaved))


def test_search_ranks_fitting_layouts_by_time() -> None:
    result = ps.search(GPT_175B, 1536, H100, 8, top=5)
    assert len(result.best) == 5
    times = [c.seconds for c in result.best]
    assert times == sorted(times)
    for c in result.best:
        assert c.fit in ("fits", "tight")
        assert not ps.layout_problems(est.model_shape(GPT_175B, c.training.tp), c.training)
        assert c.training.tp <= 8 and c.training.world_size == 1536
    assert result.fitting <= result.valid <= result.considered


def test_overrides_select_exactly_the_listed_layout() -> None:
    for args, world in ((GPT_175B, 1536), (GPT_345M, 8), (TOY, 8)):
        for c in ps.search(args, world, H100, 8, top=5).best:
            selected = est.training_of(apply_overrides(args, ps.overrides(c.training, args)), world)
            assert selected == c.training


def test_alternatives_say_why_they_lost() -> None:
    result = ps.search(GPT_175B, 64, H100, 8, top=3)
    verdicts = {a.label.split(" [")[0]: a.verdict for a in result.alternatives}
    assert verdicts["the preset's own layout"].startswith(
        "invalid: world size 64 = 8 node(s) × 8 GPUs is not divisible")
    assert verdicts["pure data parallel (TP1 PP1)"].startswith("does not fit: needs")
    big = ps.search(GPT_175B, 1536, H100, 8, top=3)
    own = next(a for a in big.alternatives if a.label.startswith("the preset's own layout"))
    assert "slower than #1" in own.verdict or "as fast as #1" in own.verdict


def test_too_few_gpus_says_the_minimum() -> None:
    need = ps.minimum_gpus(GPT_175B, H100, 8)
    assert need is not None and need > 8
    assert ps.search(GPT_175B, need, H100, 8).best
    assert not ps.search(GPT_175B, need - 8, H100, 8).best
    with pytest.raises(UserError) as err:
        pr.build_plan("175b", GPT_175B, pr.Budget(1, 8), H100)
    assert f"at least {need} GPUs" in err.value.render()


def test_local_transformer_impl_never_gets_sequence_parallel() -> None:
    args = {**GPT_345M, "transformer_impl": "local"}
    result = ps.search(args, 8, H100, 8, top=50)
    assert all(not c.training.sequence_parallel for c in result.best)
    assert any("sequence parallel" in n for n in result.notes)


def test_budget_resolution() -> None:
    assert pr.resolve_budget(None, None, 1024) == pr.Budget(128, 8)
    assert pr.resolve_budget(None, None, 1024, preset_nodes=1, preset_gpus_per_node=1) == pr.Budget(128, 8)
    assert pr.resolve_budget(None, None, 4) == pr.Budget(1, 4)
    assert pr.resolve_budget(None, 4, 16) == pr.Budget(4, 4)
    assert pr.resolve_budget(2, 4, None) == pr.Budget(2, 4)
    assert pr.resolve_budget(None, None, None, 192, 8) == pr.Budget(192, 8)
    with pytest.raises(UserError, match="not a whole number of nodes"):
        pr.resolve_budget(None, None, 12)
    with pytest.raises(UserError, match="cannot be combined"):
        pr.resolve_budget(2, None, 16)


@pytest.mark.parametrize(("text", "tokens"), [("300B", 300e9), ("1.5T", 1.5e12), ("2e9", 2e9), ("10k", 1e4)])
def test_parse_tokens(text: str, tokens: float) -> None:
    assert pr.parse_tokens(text) == tokens


def test_plan_json_and_text() -> None:
    plan = pr.build_plan("175b", GPT_175B, pr.Budget(192, 8), H100, top=3, tokens=300e9)
    data = json.loads(pr.render_json(plan))
    assert data["model"]["padded_vocab_size"] == 51200
    assert data["layout"]["valid"] and data["memory"]["fits"] == "fits"
    assert data["time"]["seconds_to_tokens"] > 0
    assert len(data["search"]["best"]) == 3
    assert data["search"]["best"][0]["command"][:2] == ["launch", "175b"]
    text = pr.render_text(plan)
    for needle in ("Memory per GPU", "optimizer state", "activations", "per iteration", "Best layouts",
                   "Why not", "--set"):
        assert needle in text


def test_tie_band_is_the_held_back_median_error() -> None:
    """Layouts predicted closer than the model's own error are a tie; the band is the held-back runs' median
    |error| (launcher/estimate/ranges.py), whatever those errors are."""
    import statistics

    from launcher.estimate import ranges

    assert ranges.tie_band() == pytest.approx(statistics.median(abs(r.error) for r in ranges.HELD_BACK))
    runs = tuple(ranges.HeldBack(str(e), False, "hopper", False, e) for e in (0.01, -0.2, 0.03, -0.05))
    assert ranges.tie_band(runs) == pytest.approx(0.04)
    assert ranges.tie_band(()) == 0.0


def test_tied_counts_the_layouts_within_the_band_of_the_first() -> None:
    result = ps.search(GPT_175B, 1536, H100, 8, top=10)
    first = result.best[0].seconds
    inside = [c for c in result.best if c.seconds <= first * (1 + result.tie_band)]
    assert result.tie_band > 0 and result.tied >= len(inside) >= 1
    assert ps.tied_with_first(result.best, result.tie_band) == len(inside)
    assert ps.tied_with_first(result.best, 0.0) == sum(c.seconds == first for c in result.best)
    assert ps.tied_with_first([], 0.1) == 0


def test_plan_marks_the_tie_with_the_first_and_says_why() -> None:
    plan = pr.build_plan("175b", GPT_175B, pr.Budget(128, 8), H100, top=5)
    search = plan["search"]
    band = search["tie_band"]
    first = search["best"][0]["seconds_per_iteration"]
    marks = [c["tied_with_first"] for c in search["best"]]
    assert marks == [c["seconds_per_iteration"] <= first * (1 + band) and any(marks[1:]) for c in search["best"]]
    text = pr.render_text(plan)
    rows = [line for line in text.splitlines() if line.startswith(" ≈")]
    assert len(rows) == sum(marks)
    if sum(marks) > 1:
        assert f"within {band:.1%} of #1's estimate" in text and "a tie the model cannot order" in text


@pytest.mark.parametrize(("name", "world"), [("toy", 8), ("345m", 8), ("345m", 32), ("175b", 1536), ("175b", 256)])
def test_the_search_judges_layouts_with_the_pipelines_own_check(name: str, world: int) -> None:
    """One rule set: a candidate is valid exactly when launcher.pipeline.checker's check, run on the preset with
    the candidate's --set items, finds no layout problem."""
    from launcher.pipeline.checker import check
    from launcher.pipeline.preset import load_preset

    preset = load_preset(name)
    args = preset.effective()
    rules = ps.Rules(args, 8, te=True, apex=True)
    base = est.training_of(args, world)
    checked = 0
    for layout in ps.structural_layouts(est.model_shape(args), base, min(8, world)):
        for t in ps.knob_variants(layout, allow_sp=True):
            checked += 1
            if checked % 7:  # every 7th keeps the run short; the grid still spans every knob
                continue
            candidate = load_preset(name, ps.overrides(t, args))
            layout_messages = {p.message for p in check(candidate, world, min(8, world), True, True)[1]}
            assert set(rules.problems(t)) <= layout_messages, ps.describe(t)
            if not rules.problems(t):
                assert est.training_of(candidate.effective(), world) == t
    assert checked > 50


def test_virtual_stages_are_every_divisor_of_a_ranks_layers_up_to_the_bound() -> None:
    # 40 layers on PP 2: 20 per rank, so VPP 10 and 20 (one layer per virtual stage) are tried, as published runs do.
    args = dict(GPT_345M, num_layers=40, global_batch_size=64)
    m = est.model_shape(args)
    split = ps.pipeline_split(m, est.training_of(args, 8), 2)
    assert split is not None
    assert ps.vpp_choices(m, split) == [1, 2, 4, 5, 10, 20]
    assert ps.vpp_choices(m, replace(split, pp=1)) == [1]
    tried = {t.vpp for t in ps.structural_layouts(m, est.training_of(args, 8), 8) if t.pp == 2}
    assert tried == {1, 2, 4, 5, 10, 20}
    # a rank with more layers than the bound stops at it
    many = dict(args, num_layers=2 * 96)
    split = ps.pipeline_split(est.model_shape(many), est.training_of(many, 8), 2)
    assert split is not None
    assert max(ps.vpp_choices(est.model_shape(many), split)) <= ps.MAX_VPP == 64
    assert 48 in ps.vpp_choices(est.model_shape(many), split)


def test_the_calibration_prices_the_vpps_the_search_tries() -> None:
    from launcher.estimate import calibration as cal

    run = next(r for r in cal.RUNS if r.name == "Megatron README 119B")  # 92 layers on PP 4: 23 per rank
    t = est.training_of(run.args, run.world)
    m = est.model_shape(run.args)
    vpps = {c.vpp for c in cal._choices(run, t, m)}
    assert vpps == set(ps.vpp_choices(m, t)) == {1, 23}
