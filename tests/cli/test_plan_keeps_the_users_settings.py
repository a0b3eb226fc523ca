"""`launch plan` with the user's --set: a setting the search chooses anew in a listed layout is said (which layouts,
which value); the GPU and the world the user set are the ones priced, or the plan refuses to guess between two."""

from __future__ import annotations

import json

import pytest

NO_KERNELS = ("--set", "transformer_engine=false", "--set", "apex=false")


def _plan(launch, *argv: str) -> dict:
    code, out, err = launch("plan", "345m", *NO_KERNELS, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def _sets(command: list[str]) -> list[str]:
    return [word for i, word in enumerate(command) if i and command[i - 1] == "--set"]


def test_a_user_setting_the_layouts_replace_is_said_with_each_layout_and_value(launch):
    user = ["micro_batch_size=4", "recompute_granularity=full", "recompute_method=uniform",
            "recompute_num_layers=1", "lr=1e-4"]
    plan = _plan(launch, "--gpus", "8", *[w for item in user for w in ("--set", item)])
    best, replaced = plan["search"]["best"], {r["dest"]: r for r in plan["search"]["replaced"]}
    assert "lr" not in replaced and "recompute_granularity" in replaced
    for dest, item in replaced.items():
        assert item["line"] in plan["search"]["notes"] and item["line"].startswith(f"your --set {item['set']} ")
        for number, layout in enumerate(best, 1):
            ran = {s.split("=")[0]: s.split("=", 1)[1] for s in _sets(layout["command"])}
            if number in item["layouts"]:  # the command runs the layout's value, not the user's
                assert ran[dest] == item["values"][item["layouts"].index(number)] != item["set"].split("=", 1)[1]
            else:  # the user's own item is carried as given
                assert item["set"] in _sets(layout["command"])
    for layout in best:
        assert "lr=1e-4" in _sets(layout["command"])


def test_settings_the_search_does_not_choose_are_not_said(launch):
    plan = _plan(launch, "--gpus", "8", "--set", "lr=1e-4", "--set", "seq_length=512")
    assert plan["search"]["replaced"] == []
    assert not any(note.startswith("your --set") for note in plan["search"]["notes"])


def test_the_plan_prices_the_gpu_the_preset_names(launch):
    plan = _plan(launch, "--set", "gpu=h200-141gb")
    assert plan["gpu"]["name"] == "h200-141gb"
    assert all("gpu=h200-141gb" in _sets(c["command"]) for c in plan["search"]["best"])


def test_a_gpu_given_by_flag_is_carried_by_every_listed_command(launch):
    plan = _plan(launch, "--gpu", "h200-141gb")
    assert plan["gpu"]["name"] == "h200-141gb"
    assert all("gpu=h200-141gb" in _sets(c["command"]) for c in plan["search"]["best"])
    plain = _plan(launch)
    assert plain["gpu"]["name"] == "h100-80gb" and not any(
        s.startswith("gpu=") for c in plain["search"]["best"] for s in _sets(c["command"]))


@pytest.mark.parametrize(("argv", "said"), [
    (["--gpu", "h200-141gb", "--set", "gpu=a100-80gb"], "--gpu h200-141gb and --set gpu=a100-80gb name two GPUs"),
    (["--gpus", "16", "--set", "nodes=1"], "--set nodes=1 and the budget's 2 nodes disagree"),
    (["--gpus-per-node", "2", "--set", "gpus_per_node=4"], "--set gpus_per_node=4 and the budget's 2 gpus per node"),
])
def test_a_gpu_or_world_given_twice_differently_is_refused(launch, argv, said):
    code, out, err = launch("plan", "345m", *argv)
    assert code == 2 and said in err and "hint: give the" in err, err
