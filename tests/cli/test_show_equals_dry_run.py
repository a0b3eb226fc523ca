"""`launch show X ARGS` says what `launch X ARGS --dry-run` runs, field by field (both resolve through cli/job.py)."""

import json

import pytest

from launcher.cli import main
from launcher.pipeline.command import script_args
from launcher.pipeline.preset import available_presets
from tests.conftest import without_run_stamp

SHARED = ("preset", "description", "entry", "target", "nodes", "gpus_per_node", "layout", "added", "notes",
          "warnings", "sources", "overrides", "env", "run_dir")
CASES = [(name,) for name in available_presets()] + [
    ("toy", "--gpus-per-node", "1"),
    ("345m", "--nodes", "2", "--gpus-per-node", "8"),
    ("345m", "--gpus-per-node", "2", "--set", "tensor_model_parallel_size=2"),
    ("345m", "--set", "env.WANDB_API_KEY=abc", "--set", "lr=3e-4"),
    ("toy", "--gpus-per-node", "2", "--set", "lr=0.01"),
    ("175b", "--nodes", "128"),
]


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--format", "json"]) == 0, capsys.readouterr()
    return json.loads(without_run_stamp(capsys.readouterr().out))


@pytest.fixture
def one_gpu_here(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")


@pytest.mark.parametrize("args", CASES, ids=" ".join)
def test_show_equals_the_dry_run_on_every_field(capsys, one_gpu_here, args):
    shown = run_json(capsys, "show", *args)
    printed = run_json(capsys, *args, "--dry-run")
    assert {key: shown[key] for key in SHARED} == {key: printed[key] for key in SHARED}
    assert script_args(shown["megatron"]) == printed["script_args"]
    launcher = shown["launcher"]
    assert (launcher["nodes"], launcher["gpus_per_node"], launcher["entry"]) == (
        printed["nodes"], printed["gpus_per_node"], printed["entry"])


def test_show_of_the_toy_on_one_visible_gpu_is_the_pretrain_gpt_fallback(capsys, one_gpu_here):
    shown = run_json(capsys, "show", "toy")
    assert (shown["entry"], shown["nodes"], shown["gpus_per_node"], shown["layout"]["tp"]) == ("pretrain_gpt", 1, 1, 1)
    assert shown["added"]["tensor_model_parallel_size"] == 1


def test_show_text_says_the_world_of_the_job_in_header_and_table(capsys):
    assert main(["show", "345m", "--nodes", "2", "--gpus-per-node", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "# entry pretrain_gpt; world 2 node(s) × 8 GPU(s)" in lines
    assert [line.split() for line in lines if line.split()[:1] in (["nodes"], ["gpus_per_node"])] == [
        ["nodes", "2"], ["gpus_per_node", "8"]]


def test_the_dry_runs_added_holds_the_micro_batch_the_launcher_picked(capsys):
    printed = run_json(capsys, "345m", "--gpus-per-node", "1", "--dry-run")
    assert printed["added"]["micro_batch_size"] == 32
    assert printed["script_args"][printed["script_args"].index("--micro-batch-size") + 1] == "32"


def test_secrets_are_masked_in_the_dry_runs_json(capsys):
    printed = run_json(capsys, "345m", "--gpus-per-node", "1", "--set", "env.WANDB_API_KEY=abc123", "--dry-run")
    assert printed["env"]["WANDB_API_KEY"] == "<redacted>"
    assert "abc123" not in json.dumps(printed)
