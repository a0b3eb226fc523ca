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
    assert len(held) == 12 and sum(r.moe for r in held) == 6
    assert all(r.source and r.derived for r in held)


def test_at_least_five_published_moe_runs_each_with_its_source() -> None:
    moe = [r for r in cal.RUNS if r.moe]
    assert len(moe) >= 5
    assert {r.source for r in moe} == {cal.MOE_ZOO, cal.BRIDGE_2511_MOE, cal.BRIDGE_2509_MOE, cal.BRIDGE_26}


@pytest.mark.xfail(strict=True, reason="not reached since Bridge 26.x joined the held-back part: median 5.2 %")
def test_held_back_median_error_within_5_percent(results) -> None:
    assert _held_back(results)["median_abs_error"] <= 0.05


def test_held_back_nothing_published_refused(results) -> None:
    assert _held_back(results)["refused"] == []


@pytest.mark.xfail(strict=True, reason="not reached: 90th percentile 23.6 % (Qwen3 30B-A3B: 25.11 -51.5 %, "
                   "26.02.01 PP2 EP8 -25.2 %)")
def test_held_back_p90_error_within_15_percent(results) -> None:
    assert _held_back(results)["p90_abs_error"] <= 0.15


@pytest.mark.xfail(strict=True, reason="not reached: first for 5 of 12 held-back runs")
def test_held_back_published_layout_first_for_60_percent(results) -> None:
    s = _held_back(results)
    assert s["top1_hits"] >= 0.6 * s["top3_runs"]


@pytest.mark.xfail(strict=True, reason="not reached: top 3 for 9 of 12 held-back runs")
def test_held_back_published_layout_in_top3_for_90_percent(results) -> None:
    s = _held_back(results)
    assert s["top3_hits"] >= 0.9 * s["top3_runs"]


def test_moe_fit_sees_only_the_fitted_part_and_finds_the_shipped_constants() -> None:
    from launcher.estimate import steptime

    constants, residuals = cal.fit_moe()
    assert all(not r.held_back and r.moe for r, _ in residuals)
    k = steptime.KERNELS["hopper"]
    assert constants == {name: getattr(k, name) for name in cal.MOE_GRID}


def test_summary_gives_the_90th_percentile_by_linear_interpolation() -> None:
    assert cal.percentile([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 2.0], 0.9) == pytest.approx(1.0)
    assert cal.percentile([0.0, 1.0], 0.9) == pytest.approx(0.9)
