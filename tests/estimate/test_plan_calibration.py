"""The step-time model against published Megatron runs (launcher/estimate/calibration.py): the targets of
issue 16, and docs/plan.md showing the very table these runs produce."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.estimate import calibration as cal

DOC = Path(__file__).resolve().parents[2] / "docs" / "plan.md"


pytestmark = pytest.mark.xdist_group("calibration")  # one worker evaluates the runs once for both files


@pytest.fixture
def results(calibration_results) -> list[cal.Result]:
    return list(calibration_results)


def test_median_error_within_15_percent(results) -> None:
    assert cal.summary(results)["median_abs_error"] <= 0.15


def test_published_layout_in_top3_for_three_in_four(results) -> None:
    s = cal.summary(results)
    assert s["top3_hits"] >= 0.75 * s["top3_runs"], [(r.run.name, r.rank) for r in results if not r.in_top3]


def test_no_published_layout_is_refused(results) -> None:
    assert cal.summary(results)["refused"] == []
    dense = [r for r in results if not r.run.moe]
    # a dense layout as published fits within the plan's margin; where the source leaves VPP or the micro batch
    # open, the calibration takes the fastest choice within the GPU's memory (calibration.chosen), which may be
    # above the margin
    assert all(r.fit == "fits" for r in dense if not {"vpp", "micro_batch_size"} & set(r.run.free)), [
        (r.run.name, r.memory_gib) for r in dense if r.fit != "fits"]
    assert all(r.fit in ("fits", "tight") for r in dense)
    # MoE memory is newer: four published MoE layouts land between 90 % and 100 % (docs/plan.md says which): the
    # zoo's stated one, and three whose unstated recompute is priced as none, as they ran (calibration.chosen)
    assert [r.run.name for r in results if r.run.moe and r.fit != "fits"] == [
        "MoE zoo Qwen3 235B TP2 PP32 EP8 (A2A)", "Bridge 25.11 Qwen3 30B-A3B",
        "Bridge 25.09 Qwen3 30B-A3B (token drop)",
        "Bridge B200 25.11 Qwen3 235B-A22B"]
    assert all(r.fit == "tight" for r in results if r.run.moe and r.fit != "fits")


def test_every_run_names_its_source(results) -> None:
    for r in results:
        assert r.run.source and r.run.derived and r.run.seconds > 0


def test_docs_show_this_table(results) -> None:
    """Regenerate with `python -m launcher.estimate.calibration` and paste into docs/plan.md."""
    assert cal.markdown(results) in DOC.read_text()


def test_the_ranges_rest_on_these_held_back_errors(results) -> None:
    """launcher/estimate/ranges.py keeps the held-back errors the plan's ranges come from; regenerate it with
    `python -m launcher.estimate.calibration --ranges` when the model moves them."""
    from launcher.estimate import ranges

    assert cal.held_back_errors(results) == ranges.HELD_BACK
