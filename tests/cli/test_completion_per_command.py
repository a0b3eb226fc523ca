"""Completion knows each command's own options, option values (choices, GPU names) and fish, through one
function every shell's script calls (`launch completion --complete -- WORDS…`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli.completion import complete
from tests.cli.completion_support import bash_complete

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("words, expected", [
    (["launch", "plan", "--g"], ["--gpu", "--gpus", "--gpus-per-node"]),
    (["launch", "plan", "345m", "--gpu", "h1"], ["h100-80gb"]),
    (["launch", "prepare-data", "--tokenizer", ""], ["byte", "gpt2", "hf"]),
    (["launch", "prepare-data", "--build-index", "34"], ["345m"]),
    (["launch", "completion", ""], ["bash", "zsh", "fish"]),
    (["launch", "fetch-megatron", "--s"], ["--source"]),
    (["launch", "report", "--f"], ["--format"]),
    (["launch", "345m", "--gpus"], ["--gpus-per-node"]),
    (["launch", "345m", "--format", ""], ["text", "json"]),
])
def test_tab_offers_what_this_command_takes(words, expected):
    assert complete(words) == expected


def test_gpu_names_come_from_the_gpu_catalogue():
    from launcher.estimate.formulas import GPUS

    assert complete(["launch", "plan", "175b", "--gpu", ""]) == sorted(GPUS)




def test_bash_script_completes_a_subcommands_options(launch, tmp_path):
    code, script, err = launch("completion", "bash")
    assert code == 0, err
    (tmp_path / "launch.bash").write_text(script)
    assert bash_complete(tmp_path / "launch.bash", "launch", "plan", "--g") == ["--gpu", "--gpus", "--gpus-per-node"]
    assert bash_complete(tmp_path / "launch.bash", "launch", "plan", "345m", "--gpu", "a100") == [
        "a100-40gb", "a100-80gb"]


def test_fish_script_asks_the_launcher(launch):
    code, script, err = launch("completion", "fish")
    assert code == 0, err
    assert script.startswith("# megatron-launch completion for fish; load it with:  ")
    assert "completion --complete -- (commandline -opc) (commandline -ct)" in script
    assert "complete -c launch -a '(__megatron_launch_complete)'" in script
