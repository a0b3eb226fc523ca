"""Every `#N: launch …` line `launch plan` prints, pasted, dry-runs to the job the plan priced: the same layout,
memory, step time; the preset as the user named it (a file stays a path) and the user's own --set items kept.
And the plan's figures for the preset's own layout are its dry-run's (parameters, FLOPs, memory, time)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from launcher.cli import main

GIB = 2**30


def _run(capsys, *argv: str) -> dict:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, (argv, out[-2000:], err[-2000:])
    return json.loads(out)


def _presets(tmp: Path) -> dict[str, tuple[list[str], list[str]]]:
    """name → (plan arguments, what every recipe must carry)."""
    copy = tmp / "my-345m.yaml"
    copy.write_text("base: 345m\ndescription: a preset file\nmegatron:\n  training:\n    micro_batch_size: 4\n")
    layout = tmp / "layout.yaml"
    layout.write_text("base: 345m\ndescription: an explicit pipeline layout\n"
                      "launcher:\n  nodes: 1\n  gpus_per_node: 4\n"
                      "megatron:\n  parallel:\n    pipeline_model_parallel_size: 2\n"
                      "    pipeline_model_parallel_layout: Et*12|t*12L\n  training:\n    micro_batch_size: 4\n")
    virtual = tmp / "virtual.yaml"  # four model chunks on PP 2: the layout string implies two virtual stages
    virtual.write_text("base: 345m\ndescription: a layout string with virtual stages\n"
                       "launcher:\n  nodes: 1\n  gpus_per_node: 2\n"
                       "megatron:\n  parallel:\n    pipeline_model_parallel_size: 2\n"
                       "    pipeline_model_parallel_layout: Et*6|t*6|t*6|t*6L\n  training:\n    micro_batch_size: 4\n")
    schedule = tmp / "schedule.yaml"
    schedule.write_text("base: 345m\ndescription: a batch schedule\nmegatron:\n  training:\n    micro_batch_size: 4\n"
                        "    global_batch_size: null\n    train_iters: null\n    train_samples: 100000\n"
                        "    lr_decay_iters: null\n    lr_warmup_fraction: null\n    lr_warmup_samples: 100\n"
                        "    step_batch_size_schedule: 0:16 20M:32\n")
    moe = tmp / "moe.yaml"
    moe.write_text("base: 345m\ndescription: experts\nlauncher:\n  nodes: 1\n  gpus_per_node: 8\n"
                   "megatron:\n  model:\n    num_experts: 8\n    moe_router_topk: 2\n    add_bias_linear: false\n"
                   "  parallel:\n    expert_model_parallel_size: 4\n  training:\n    micro_batch_size: 4\n")
    return {
        "toy": (["toy"], ["toy"]),
        "toy on 4": (["toy", "--gpus", "4"], ["toy"]),
        "345m on 8": (["345m", "--gpus", "8"], ["345m"]),
        "175b": (["175b", "--top", "3"], ["175b"]),
        "preset file": ([str(copy), "--gpus", "4"], [str(copy)]),
        "layout string": ([str(layout)], [str(layout)]),
        "layout string on 8": ([str(layout), "--gpus", "8"], [str(layout)]),
        "virtual layout string": ([str(virtual)], [str(virtual)]),
        "virtual layout string on 8": ([str(virtual), "--gpus", "8"], [str(virtual)]),
        "user sets": (["345m", "--gpus", "4", "--set", "lr=0.0002", "--set", "hidden_dropout=0.1"],
                      ["345m", "--set", "lr=0.0002", "--set", "hidden_dropout=0.1"]),
        "batch schedule": ([str(schedule), "--gpus", "4"], [str(schedule)]),
        "experts": ([str(moe)], [str(moe)]),
        "experts on 32": ([str(moe), "--gpus", "32", "--top", "3", "--set", "global_batch_size=256"],
                          [str(moe), "--set", "global_batch_size=256"]),
        # the user's micro batch, which some listed layouts change: each command gives it once
        "user micro batch": (["175b", "--nodes", "64", "--gpus-per-node", "8", "--top", "3",
                              "--set", "micro_batch_size=2"], ["175b"]),
    }


CASES = ["toy", "toy on 4", "345m on 8", "175b", "preset file", "layout string", "layout string on 8",
         "virtual layout string", "virtual layout string on 8", "user sets", "batch schedule", "experts",
         "experts on 32", "user micro batch"]


def _text(capsys, *argv: str) -> str:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, (argv, out[-2000:], err[-2000:])
    return out


def _printed_recipes(text: str) -> list[list[str]]:
    """The `#N: launch …` lines of the text output, as a shell would split them when pasted."""
    found = re.findall(r"^  #(\d+): (launch .*)$", text, flags=re.M)
    assert [int(n) for n, _ in found] == list(range(1, len(found) + 1))
    return [shlex.split(line) for _, line in found]


@pytest.mark.parametrize("case", CASES)
def test_every_printed_recipe_dry_runs_to_the_priced_job(case: str, tmp_path: Path, capsys,
                                                         monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    plan_args, carried = _presets(tmp_path)[case]
    plan = _run(capsys, "plan", *plan_args, "--format", "json")
    assert plan["layout"]["valid"], plan["layout"]["problems"]  # the preset's own layout is possible
    best = plan["search"]["best"]
    printed = _printed_recipes(_text(capsys, "plan", *plan_args))
    assert best and len(printed) == len(best)
    schedule = plan["length"] and len(plan["length"]["phases"]) > 1
    for c, command in zip(best, printed):
        assert command == c["command"]
        assert command[:2] == ["launch", carried[0]]
        joined = " ".join(command)
        assert " ".join(carried[1:]) in joined
        named = [command[i + 1].split("=", 1)[0] for i, word in enumerate(command) if word == "--set"]
        assert len(named) == len(set(named)), f"a setting given twice: {joined}"
        dry = _run(capsys, *command[1:], "--dry-run", "--format", "json")
        lay, e = dry["layout"], dry["estimate"]
        assert (lay["tp"], lay["pp"], lay["cp"], lay["ep"], lay["vpp"] or 1, lay["micro_batch_size"],
                lay["sequence_parallel"]) == (c["tp"], c["pp"], c["cp"], c["ep"], c["vpp"], c["micro_batch_size"],
                                              c["sequence_parallel"]), joined
        if schedule:  # Megatron keeps its global_batch_size at MBS·DP; the schedule, passed on, drives the batch
            assert "--global-batch-size" not in dry["argv"], joined
            assert c["global_batch_size"] == plan["length"]["phases"][-1]["global_batch_size"]
        else:
            assert lay["global_batch_size"] == c["global_batch_size"], joined
        assert e["parameters"] == c["parameters"], joined
        assert e["parameters_per_gpu"] == c["parameters_most_loaded_gpu"], joined
        assert e["flops_per_iteration"] == pytest.approx(c["flops_per_iteration"], rel=1e-12), joined
        assert e["memory_per_gpu_gib"] == round(c["memory_gib"], 2), joined
        assert e["megatron_memory_per_gpu_gib"] == round(c["megatron_memory_gib"], 2), joined
        assert e["seconds_per_iteration"] == pytest.approx(c["seconds_per_iteration"], rel=1e-9), joined


@pytest.mark.parametrize("case", ["toy", "345m on 8", "175b", "layout string", "virtual layout string",
                                  "batch schedule", "experts"])
def test_the_preset_layouts_figures_are_its_dry_runs(case: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    plan_args, _ = _presets(tmp_path)[case]
    plan = _run(capsys, "plan", *plan_args, "--format", "json")
    preset_and_budget = [a for a in plan_args if a not in ("--top", "3")]
    if "--gpus" in preset_and_budget:
        i = preset_and_budget.index("--gpus")
        n = int(preset_and_budget[i + 1])
        preset_and_budget[i:i + 2] = ["--nodes", "1", "--gpus-per-node", str(n)]
    dry = _run(capsys, *preset_and_budget, "--dry-run", "--format", "json")
    e = dry["estimate"]
    assert plan["model"]["parameters"] == dry["parameters"] == e["parameters"]
    assert plan["model"]["parameters_most_loaded_gpu"] == e["parameters_per_gpu"]
    assert plan["model"]["flops_per_iteration"] == e["flops_per_iteration"]
    assert round(plan["memory"]["complete"]["total"] / GIB, 2) == e["memory_per_gpu_gib"]
    assert round(plan["memory"]["megatron"]["total"] / GIB, 2) == e["megatron_memory_per_gpu_gib"]
    assert plan["time"]["step"]["total"] == pytest.approx(e["seconds_per_iteration"], rel=1e-9)
