"""One parser for pipeline_model_parallel_layout (with its bounds) and one derivation of the virtual-pipeline size,
read by the checker and the estimator alike."""

import subprocess
import sys
import time

import pytest

from launcher.estimate import formulas
from launcher.estimate.stages import SplitError, split_layers
from launcher.pipeline.checker import check
from launcher.pipeline.pipeline_layout import virtual_pipeline_size
from launcher.pipeline.preset import load_preset
from tests.conftest import REPO

HUGE = "pipeline_model_parallel_layout=Et*300000000|L"
TOO_LONG = ("pipeline_model_parallel_layout 'Et*300000000|L' unrolls to more than 1,440 characters, "
            "for num_layers 24")


def test_plan_refuses_a_huge_layout_at_once_with_the_dry_runs_message():
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "launcher", "plan", "345m", "--set", HUGE, "--gpus", "8"],
                          capture_output=True, text=True, timeout=60, cwd=REPO, env={"PYTHONPATH": str(REPO)})
    assert time.monotonic() - started < 30
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == f"error: {TOO_LONG}"


def test_the_estimators_split_is_bounded_by_the_pipelines_parser():
    with pytest.raises(SplitError, match="unrolls to more than 1,440 characters"):
        split_layers(24, 2, layout="Et*300000000|L")


def test_the_checker_and_the_estimator_read_the_same_virtual_pipeline_size():
    """num_layers_per_virtual_pipeline_stage counts the embedding/loss accounted in the split, as validate_args."""
    preset = load_preset("345m", ["num_layers=22", "pipeline_model_parallel_size=4",
                                  "num_layers_per_virtual_pipeline_stage=2",
                                  "account_for_embedding_in_pipeline_split=true",
                                  "account_for_loss_in_pipeline_split=true", "global_batch_size=8",
                                  "micro_batch_size=1"])
    layout, problems, _ = check(preset, 4, 4)
    assert [p.message for p in problems] == []
    assert layout is not None and layout.vpp == 3  # (22 + 2) / PP 4 / 2, not 22 / 4 / 2 = 2
    assert virtual_pipeline_size(preset.arg) == 3
    assert formulas.training_of(preset.effective(), 4).vpp == 3


@pytest.mark.parametrize("settings, expected", [
    ({}, 1),
    ({"pipeline_model_parallel_size": 2, "num_virtual_stages_per_pipeline_rank": 3}, 3),
    ({"pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "Et|t|t|tL"}, 2),
    ({"pipeline_model_parallel_size": 2, "num_layers_per_virtual_pipeline_stage": 4}, 3),
])
def test_virtual_pipeline_size_follows_validate_args(settings, expected):
    args = {"num_layers": 24, "pipeline_model_parallel_size": 1, **settings}
    assert virtual_pipeline_size(lambda name: formulas.megatron_value(args, name)) == expected
