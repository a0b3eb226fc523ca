"""The calibration's two parts (issue 27): the held-back runs the fit never sees, the MoE runs, and the MoE
fit itself. The issue's targets for the held-back part that are not reached yet are strict xfails with the
numbers, so that reaching one turns the suite red until the mark is removed (docs/plan.md states them)."""

from __future__ import annotations

import pytest

from launcher.estimate import calibration as cal

pytestmark = pytest.mark.xdist_group("calibration")  # one worker evaluates the runs once for both files


@pytest.fixture
def results(calibration_results) -> list[cal.Result]:
    return list(calibration_results)


def _held_back(results):
    return cal.summary([r for r in results if r.run.held_back])


def test_held_back_part_has_dense_and_moe_runs_from_named_sources() -> None:
    held = [r for r in cal.RUNS if r.held_back]
    assert len(held) == 16 and sum(r.moe for r in held) == 8
    assert {r.gpu for r in held} == {"h100-80gb", "b200-180gb"}
    assert all(r.source and r.derived for r in held)


def test_at_least_five_published_moe_runs_each_with_its_source() -> None:
    moe = [r for r in cal.RUNS if r.moe]
    assert len(moe) >= 5
    assert {r.source for r in moe} == {cal.MOE_ZOO, cal.BRIDGE_2511_MOE, cal.BRIDGE_2509_MOE, cal.BRIDGE_26,
                                       cal.BRIDGE_B200}


def test_held_back_median_error_within_5_percent(results) -> None:
    assert _held_back(results)["median_abs_error"] <= 0.05


def test_held_back_nothing_published_refused(results) -> None:
    assert _held_back(results)["refused"] == []


@pytest.mark.xfail(strict=True, reason="not reached since round 7: 16.9 % (the FP8 output layer priced in BF16, "
                   "as Megatron runs it, leaves Llama 3 70B at PP 8 +13.6 %; docs/plan.md, Round 7)")
def test_held_back_p90_error_within_15_percent(results) -> None:
    assert _held_back(results)["p90_abs_error"] <= 0.15


def test_held_back_p90_error_within_20_percent(results) -> None:
    """Issue 40's bound for the 90th percentile."""
    assert _held_back(results)["p90_abs_error"] <= 0.20


def test_held_back_median_error_within_7_percent(results) -> None:
    """Issue 40's bound for the median (issue 27's 5 % above)."""
    assert _held_back(results)["median_abs_error"] <= 0.07


@pytest.mark.xfail(strict=True, reason="not reached: first for 8 of 16 held-back runs (docs/plan.md: why)")
def test_held_back_published_layout_first_for_60_percent(results) -> None:
    s = _held_back(results)
    assert s["top1_hits"] >= 0.6 * s["top3_runs"]


@pytest.mark.xfail(strict=True, reason="not reached since round 7: 14 of 16 (Llama 3 70B's TP 4 · PP 8 fifth once "
                   "its BF16 output layer weighs on the last stage; the zoo's TP 4 · PP 8 ninth; docs/plan.md)")
def test_held_back_published_layout_in_top3_for_90_percent(results) -> None:
    s = _held_back(results)
    assert s["top3_hits"] >= 0.9 * s["top3_runs"]


@pytest.mark.xfail(strict=True, reason="not reached: the plan's first is the published TP·PP for 25 of 52 "
                   "multi-GPU runs (48 %); 12 of the 27 others are ties within the model's error band "
                   "(docs/plan.md: the misses one by one)")
def test_published_layout_first_for_70_percent(results) -> None:
    """`launch plan`'s first-ranked layout (calibration.evaluate ranks with search.search, the plan's own
    search) equals the published TP·PP."""
    s = cal.summary(results)
    assert s["top1_hits"] >= 0.7 * s["top3_runs"]


def test_held_back_moe_median_error_within_12_percent(results) -> None:
    moe = [r for r in results if r.run.held_back and r.run.moe]
    assert cal.summary(moe)["median_abs_error"] <= 0.12


@pytest.mark.parametrize("family", sorted(cal.FITS))
def test_each_family_fit_sees_only_its_fitted_runs_and_finds_the_shipped_constants(family: str) -> None:
    from launcher.estimate import formulas as est
    from launcher.estimate import steptime

    k = steptime.KERNELS[family]
    for moe, grid in cal.FITS[family]:
        constants, residuals = cal.fit_constants(grid, family, moe)
        assert residuals and all(not r.held_back and r.moe == moe for r, _ in residuals)
        assert all(est.GPUS[r.gpu].family == family for r, _ in residuals)
        assert constants == {name: getattr(k, name) for name in grid}


def test_blackwell_has_constants_of_its_own() -> None:
    """B200 is priced by constants fitted on its own published runs, not Hopper's borrowed."""
    from launcher.estimate import steptime

    assert steptime.KERNELS["blackwell"] != steptime.KERNELS["hopper"]
    assert any(r.gpu == "b200-180gb" and not r.held_back for r in cal.RUNS)


def test_fp8_speeds_expert_gemms_by_the_fitted_factor_only() -> None:
    """The FP8 gain of grouped GEMMs is its own constant (fitted: the published FP8 MoE runs do not show the dense
    GEMMs' gain), so changing the dense gain leaves an MoE layer's expert GEMMs as they were."""
    from dataclasses import replace

    from launcher.estimate import formulas as est
    from launcher.estimate import steptime

    run = next(r for r in cal.RUNS if r.moe and r.precision == "fp8" and r.gpu == "h100-80gb")
    m, t = est.model_shape(run.args, run.tp), est.training_of(run.args, run.world)
    k = steptime.KERNELS["hopper"]
    gpu = est.GPUS[run.gpu]
    base = steptime._moe_time(m, t, gpu, k, 4096.0, None, False).compute
    assert steptime._moe_time(m, t, gpu, replace(k, fp8_gain=3.0), 4096.0, None, False).compute == base
    assert steptime._moe_time(m, t, gpu, replace(k, grouped_fp8_gain=2.0), 4096.0, None, False).compute < base


def test_summary_gives_the_90th_percentile_by_linear_interpolation() -> None:
    assert cal.percentile([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 2.0], 0.9) == pytest.approx(1.0)
    assert cal.percentile([0.0, 1.0], 0.9) == pytest.approx(0.9)


def test_ties_are_counted_apart_from_first(results) -> None:
    """`#1 or tied with it` is reported beside `first`, never in its place: it includes every first-hit, and each
    run it adds has its published TP·PP listed within the tie band of #1."""
    s = cal.summary(results)
    assert s["first_tie_hits"] >= s["top1_hits"]
    for r in results:
        if r.in_first_tie and r.rank != 1:
            assert r.gap is not None and 0 <= r.gap and r.rank <= r.tied
    assert "#1 or tied with it for" in cal.part_summary_line("all", results)
    listed = cal.misses_text(results)
    # a header, one line per miss, the line that says which way they lean
    assert sum(1 for r in results if not r.trivial and r.rank != 1) == len(listed.splitlines()) - 2


def test_each_miss_names_the_term_it_loses_on(results) -> None:
    """`--misses` says, for each listed published TP·PP that is not #1, which step-time term it loses most on."""
    missed = [r for r in results if not r.trivial and r.rank not in (None, 1)]
    assert missed
    for r in missed:
        assert r.deciding.startswith("mostly ") and r.deciding in cal.misses_text([r])
    assert all(not r.deciding for r in results if r.rank in (None, 1))


def test_misses_say_which_way_they_lean(results) -> None:
    """`--misses` ends with how many misses have a larger (or smaller) published TP·PP than the plan's #1 and how many
    are listed with less memory: the pattern docs/plan.md reads the misses by."""
    missed = [r for r in results if not r.trivial and r.rank != 1]
    larger = sum(r.run.tp * r.run.pp > r.first_tp_pp[0] * r.first_tp_pp[1] for r in missed)
    assert all(r.first_tp_pp != (0, 0) for r in missed)
    assert f"{len(missed)} misses: published TP·PP larger than #1's in {larger}," in cal.misses_text(results)
    heavy = cal.Result(missed[0].run, 1.0, 1.0, "fits", 2, [], gap=0.01, first_memory_gib=10.0,
                       listed_memory_gib=20.0, first_tp_pp=(missed[0].run.tp * missed[0].run.pp * 2, 1))
    assert cal.miss_pattern_line([heavy]) == ("1 misses: published TP·PP larger than #1's in 0, smaller in 1; "
                                              "listed with less memory than #1 in 0 of 1")
