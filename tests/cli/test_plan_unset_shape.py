"""`launch plan` of a preset without the model's shape names every size not set (exit 2); it only chooses the
micro batch itself. It crashed computing the shape from None (an empty file, `num_layers: null`)."""

import pytest

from launcher import cli


@pytest.mark.parametrize("text", ["", "megatron: {num_layers: 2}\n", "base: toy\nmegatron:\n  hidden_size: null\n"])
def test_a_preset_without_its_shape_is_refused_naming_each_size(tmp_path, capsys, text):
    preset = tmp_path / "p.yaml"
    preset.write_text(text)
    assert cli.main(["plan", str(preset), "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert "hidden_size is not set" in err and "hint:" in err and "internal error" not in err
    assert "micro_batch_size is not set" not in err


def test_the_plan_still_chooses_an_unset_micro_batch(capsys):
    assert cli.main(["plan", "345m", "--gpus", "8", "--set", "micro_batch_size=null"]) == 0
    assert "Best layouts for 8 × h100-80gb" in capsys.readouterr().out


def test_a_preset_whose_launch_needs_a_micro_batch_is_planned_with_the_one_chosen(capsys):
    # no micro batch and none for the launcher to pick: the preset's own launch is refused here, and its layout is
    # priced as the listed ones are (it divided by the refused job's zero pipeline stages)
    argv = ["plan", "345m", "--gpus", "64", "--set", "micro_batch_size=null", "--set", "max_micro_batch_size=null",
            "--set", "pipeline_model_parallel_size=2"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "The preset's layout: TP" in out and "internal error" not in out
