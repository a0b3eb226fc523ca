"""`launch plan 345m --measure` on one real GPU (issue 27): the layouts run through the launcher, the fastest
measured micro batch is #1, and measured and predicted are printed side by side (skipped without CUDA)."""

from __future__ import annotations

import json
import subprocess

from tests.gpu.conftest import RUN_TIMEOUT_S, launch_argv, launch_env, needs_gpus

pytestmark = needs_gpus(1)


def test_measure_345m_on_one_gpu_ranks_by_measurement(tmp_path):
    env = {**launch_env(1, tmp_path), "MEGATRON_LAUNCH_DATA_DIR": str(tmp_path / "data")}
    argv = launch_argv("plan", "345m", "--measure", "--gpu", "h200-141gb", "--measure-layouts", "4",
                       "--measure-iters", "12", "--format", "json", run_root=tmp_path / "runs")
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=4 * RUN_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    measured = json.loads(proc.stdout)["measurements"]
    steps = [m["step_s"] for m in measured]
    assert all(s is not None for s in steps) and steps == sorted(steps)
    assert all(m["peak_gib"] and m["peak_gib"] < 139.8 for m in measured)
    # the model's prediction is within 30 % of the measurement for the layout it ranks first
    assert min(abs(m["error"]) for m in measured) < 0.3
    stored = json.loads((tmp_path / "data" / "measurements.json").read_text())
    assert len(stored) == len(measured)
