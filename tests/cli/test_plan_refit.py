"""`launch plan --refit`: the step-time constants refitted on the runs `launch plan --measure` stored, predicted
again exactly as they were predicted, and the plan ranked with them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.cli import plan_refit
from launcher.estimate import formulas as est
from launcher.estimate import refit as fit
from launcher.estimate.steptime import KERNELS, step_time

REPO = Path(__file__).resolve().parents[2]
H200_RUNS = REPO / "docs" / "data" / "h200-plan-measure-345m.json"  # launch plan 345m --measure on one H200
H200 = est.gpu_by_name("h200-141gb")


def test_stored_runs_are_predicted_again_as_they_were_predicted():
    records = json.loads(H200_RUNS.read_text())
    compared = 0
    for record in records:
        case = plan_refit.case_of(record, H200)
        if case is None:
            assert any(s.startswith("env.") for s in record["overrides"])  # the compiled-ops choice only
            continue
        assert step_time(case.shape, case.training, H200).total == pytest.approx(record["predicted_s"], rel=1e-9)
        compared += 1
    assert compared == 3


def test_a_refit_finds_the_constants_that_made_the_times(tmp_path):
    """Times made with gemm 0.80 and elementwise 40: the refit lands there and its errors vanish."""
    records = json.loads(H200_RUNS.read_text())
    truth = replace(KERNELS["hopper"], gemm=0.8, elementwise=40)
    made = []
    for record in records:
        case = plan_refit.case_of(record, H200)
        if case is not None:
            made.append({**record, "measured_s": step_time(case.shape, case.training, H200, kernels=truth).total})
    path = tmp_path / "measurements.json"
    path.write_text(json.dumps(made))
    result, runs = plan_refit.refit_for(path, H200)
    assert runs == 3
    assert (result.after.gemm, result.after.elementwise) == (0.8, 40)
    assert max(abs(e) for e in result.errors_after) < 1e-9


def test_plan_refit_on_the_h200_runs_ranks_with_the_refitted_constants(launch, tmp_path):
    code, out, err = launch("plan", "345m", "--gpu", "h200-141gb", "--refit", "--measurements", str(H200_RUNS),
                            "--format", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["refit"]["runs"] == 3 and plan["refit"]["constants"]
    before = sorted(abs(e) for e in plan["refit"]["errors_before"])[1]
    after = sorted(abs(e) for e in plan["refit"]["errors_after"])[1]
    assert after < before
    notes = plan["search"]["notes"]
    assert any("step-time constants refitted on 3 run(s) measured on h200-141gb" in n for n in notes)
    code, shipped, err = launch("plan", "345m", "--gpu", "h200-141gb", "--format", "json")
    seconds = [p["search"]["best"][0]["seconds_per_iteration"] for p in (json.loads(shipped), plan)]
    assert seconds[0] != seconds[1]


@pytest.mark.parametrize(("content", "message"), [
    (None, "no measurements at"),
    ("{not json", "cannot read the measurements"),
    ('{"a": 1}', "is not a list of measurements"),
    ("[]", "holds 0 usable run(s) on h200-141gb; a refit needs at least 2"),
])
def test_refit_without_usable_measurements_exits_2_with_a_hint(launch, tmp_path, content, message):
    path = tmp_path / "measurements.json"
    if content is not None:
        path.write_text(content)
    code, out, err = launch("plan", "345m", "--gpu", "h200-141gb", "--refit", "--measurements", str(path))
    assert code == 2, out + err
    assert message in err and "hint:" in err and "Traceback" not in err


def test_refit_and_measure_are_one_after_the_other(launch):
    code, _, err = launch("plan", "345m", "--refit", "--measure")
    assert code == 2 and "--refit and --measure go one after the other" in err


def test_refit_needs_runs_of_one_gpu_family():
    with pytest.raises(ValueError):
        fit.refit([])


@pytest.mark.parametrize(("content", "message"), [
    ("[" * 100 + "]" * 100, "nesting deeper than"),
    ('[{"measured_s": NaN}]', "is not valid JSON"),
    ('[{"measured_s": Infinity}]', "is not valid JSON"),
    ('[{"measured_s": 1e400}]', "beyond a float's range"),
    ("[" + "1" * 5000 + "]", "digits"),
])
def test_refit_refuses_measurements_that_are_not_strict_json(launch, tmp_path, content, message):
    path = tmp_path / "measurements.json"
    path.write_text(content)
    code, out, err = launch("plan", "345m", "--gpu", "h200-141gb", "--refit", "--measurements", str(path))
    assert code == 2, out + err
    assert message in err and "hint:" in err and "Traceback" not in err and "internal error" not in err


def test_refit_skips_records_of_wrong_types(launch, tmp_path):
    records = json.loads(H200_RUNS.read_text())
    wrong = [{**records[0], "settings": {"a": 1}}, {**records[0], "overrides": "lr=1"}, {**records[0], "gpus": 1e308},
             {**records[0], "measured_s": 1e308}, {**records[0], "preset": ["345m"]}, {**records[0], "label": 5},
             {**records[0], "settings": [[["x"]]]}, {**records[0], "gpus": True}]
    path = tmp_path / "measurements.json"
    path.write_text(json.dumps(wrong + records))
    code, out, err = launch("plan", "345m", "--gpu", "h200-141gb", "--refit", "--measurements", str(path),
                            "--format", "json")
    assert code == 0, err
    assert json.loads(out)["refit"]["runs"] == 3


def test_refit_on_a_fifo_does_not_wait_for_a_writer(launch, tmp_path):
    import os
    path = tmp_path / "measurements.json"
    os.mkfifo(path)
    code, out, err = launch("plan", "345m", "--gpu", "h200-141gb", "--refit", "--measurements", str(path))
    assert code == 2 and "not a regular file" in err and "hint:" in err


def test_refit_resolves_each_distinct_layout_once(launch, tmp_path):
    import time
    records = json.loads(H200_RUNS.read_text())
    path = tmp_path / "measurements.json"
    path.write_text(json.dumps(records * 3000))  # 9,000 records of three layouts
    started = time.monotonic()
    code, out, err = launch("plan", "345m", "--gpu", "h200-141gb", "--refit", "--measurements", str(path))
    assert code == 0, err
    assert time.monotonic() - started < 30
