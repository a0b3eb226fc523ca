"""Every time `launch plan` predicts carries the range of its family's held-back errors, in the text and the JSON:
the preset's step time and its time to train and GPU-hours for the preset's own training length, each listed
layout's, and each alternative's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from launcher.cli import main


def _out(capsys, *argv: str) -> str:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, (argv, err[-2000:])
    return out


def _moe(tmp: Path) -> str:
    path = tmp / "experts.yaml"
    path.write_text("base: 345m\ndescription: experts\nlauncher:\n  nodes: 1\n  gpus_per_node: 8\n"
                    "megatron:\n  model:\n    num_experts: 8\n    moe_router_topk: 2\n    add_bias_linear: false\n"
                    "  parallel:\n    expert_model_parallel_size: 4\n  training:\n    micro_batch_size: 4\n")
    return str(path)


def _within(value: float, bounds: list[float]) -> bool:
    return bounds[0] < value < bounds[1]


@pytest.mark.parametrize("preset", ["toy", "345m", "175b", "experts"])
def test_every_predicted_time_has_its_range(preset: str, tmp_path: Path, capsys) -> None:
    name = _moe(tmp_path) if preset == "experts" else preset
    plan = json.loads(_out(capsys, "plan", name, "--format", "json"))
    text = _out(capsys, "plan", name)
    length = plan["length"]
    assert length and length["iterations"] > 0 and length["tokens"] > 0  # the preset's own training length
    t = plan["time"]
    assert _within(t["step"]["total"], t["seconds_range"])
    assert _within(t["seconds_to_tokens"], t["seconds_to_tokens_range"])
    assert _within(t["gpu_hours"], t["gpu_hours_range"])
    assert re.search(r"^    likely range +\S+ – \S+ s", text, flags=re.M)
    assert re.search(r"^    time to train +.+ \(.+ – .+\) for .+ tokens in [\d,]+ iterations .*; .+ GPU-hours "
                     r"\(.+ – .+\)$", text, flags=re.M)
    if plan["search"]["best"][0]["ep"] > 1 or "experts" in preset:
        assert "moe" in plan["range"]["family"].lower()
    rows = [line for line in text.splitlines() if re.match(r"^ [ ≈] ?\d+ +\d+ +\d+ ", line)]
    assert len(rows) == len(plan["search"]["best"])
    for c, row in zip(plan["search"]["best"], rows):
        assert _within(c["seconds_per_iteration"], c["seconds_range"])
        assert _within(c["seconds_to_tokens"], c["seconds_to_tokens_range"])
        assert _within(c["gpu_hours"], c["gpu_hours_range"])
        # the step time's, the time to train's and the GPU-hours' ranges, each printed in the row
        assert len(re.findall(r"\S+–\S+", row)) == 3, row
    timed = [a for a in plan["search"]["alternatives"] if a["seconds"] is not None]
    for a in timed:
        assert _within(a["seconds"], a["seconds_range"])
        line = next(x for x in text.splitlines() if x.startswith(f"  {a['label']}: "))
        assert re.search(r"likely \S+–\S+ s/iteration", line), line


@pytest.mark.parametrize("preset", ["toy", "345m", "175b", "experts"])
def test_the_dry_runs_step_time_has_the_plans_range(preset: str, tmp_path: Path, capsys) -> None:
    name = _moe(tmp_path) if preset == "experts" else preset
    plan = json.loads(_out(capsys, "plan", name, "--format", "json"))
    e = json.loads(_out(capsys, name, "--dry-run", "--format", "json"))["estimate"]
    assert e["seconds_per_iteration"] == pytest.approx(plan["time"]["step"]["total"], rel=1e-9)
    low, high = e["seconds_per_iteration_range"]
    assert low < e["seconds_per_iteration"] < high
    if preset != "toy":  # toy's own launch runs upstream's loop, without the settings the plan's layouts name
        assert [low, high] == pytest.approx(plan["time"]["seconds_range"], rel=1e-9)


def test_a_preset_with_a_setting_not_modelled_names_it_and_widens_the_range(tmp_path: Path, capsys) -> None:
    path = tmp_path / "unmodelled.yaml"
    path.write_text("base: 345m\ndescription: settings the estimate does not model\nmegatron:\n  model:\n"
                    "    mtp_num_layers: 1\n    position_embedding_type: rope\n  training:\n    optimizer: sgd\n")
    text = _out(capsys, "plan", str(path))
    plan = json.loads(_out(capsys, "plan", str(path), "--format", "json"))
    plain = json.loads(_out(capsys, "plan", "345m", "--format", "json"))
    for name, value in (("mtp_num_layers", "1"), ("optimizer", "sgd")):
        assert re.search(rf"^not modelled: {name}={value} \(effect: .+; time range ±\d+% wider\)$", text, flags=re.M)
        assert name in [n["name"] for n in plan["not_modelled"]]
    low, high = plan["time"]["seconds_range"]
    plain_low, plain_high = plain["time"]["seconds_range"]
    step, plain_step = plan["time"]["step"]["total"], plain["time"]["step"]["total"]
    assert low / step < plain_low / plain_step and high / step > plain_high / plain_step
    assert "wider for the settings not modelled below" in text
