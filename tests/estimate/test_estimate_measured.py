"""The dry-run's memory estimate against peaks measured on an H200 (tests/fixtures/logs/h200_*.log)."""

import json
import re
from pathlib import Path

import pytest

from tests.conftest import MEGATRON

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
SHRUNK_175B = ["--nodes", "1", "--gpus-per-node", "2", "--set", "num_layers=2", "--set", "tensor_model_parallel_size=2",
               "--set", "pipeline_model_parallel_size=1", "--set", "global_batch_size=16", "--set", "train_samples=48",
               "--set", "sequence_parallel=false"]
PRESETS = Path(__file__).parents[1] / "fixtures" / "presets"
MIXTRAL_ONE_GPU = [f"{key}={value}" for key, value in (  # the functional-test matrix's moves (pass 10)
    ("nodes", 1), ("gpus_per_node", 1), ("num_layers", 4), ("train_iters", 4), ("transformer_impl", "null"),
    ("tensor_model_parallel_size", 1), ("pipeline_model_parallel_size", 1), ("expert_model_parallel_size", 1),
    ("expert_tensor_parallel_size", 1), ("num_layers_per_virtual_pipeline_stage", "null"), ("train_samples", "null"),
    ("lr_decay_samples", "null"), ("lr_warmup_samples", "null"), ("wandb_project", "null"),
    ("global_batch_size", 8), ("no_save_optim", "true"))]
RUNS = {  # log → the launch arguments that produced it (docs/benchmarks.md); no TE, no apex on that host
    "h200_345m_1gpu.log": ["345m", "--gpus-per-node", "1"],
    "h200_345m_tp2.log": ["345m", "--gpus-per-node", "2", "--set", "tensor_model_parallel_size=2"],
    "h200_175b_shrunk_tp2.log": ["175b", *SHRUNK_175B],
    "h200_mixtral_8x7b_4layers_memory.log": [str(PRESETS / "mixtral_8x7b_release.yaml"),
                                             *(w for s in MIXTRAL_ONE_GPU for w in ("--set", s))],
}


def measured_peak_gib(log: Path) -> float:
    peaks = re.findall(r"max allocated: ([\d.]+)", log.read_text())
    return max(float(p) for p in peaks) / 1024  # Megatron reports MiB


@pytest.mark.parametrize("log", sorted(RUNS))
def test_memory_estimate_within_20_percent_of_measured_peak(launch, log):
    code, out, err = launch(*RUNS[log], "--set", "transformer_engine=false", "--set", "apex=false",
                            "--set", "gpu=h200-141gb", "--dry-run", "--format", "json", "--megatron-path", MEGATRON)
    assert code == 0, err
    estimate = json.loads(out)["estimate"]["memory_per_gpu_gib"]
    measured = measured_peak_gib(LOGS / log)
    assert abs(estimate - measured) / measured <= 0.20, (estimate, measured)
