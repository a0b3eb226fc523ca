"""An elastic Slurm job (--nodes MIN-MAX) at the start of an attempt: the rendered batch script, run by bash with
stand-ins for srun and scontrol, says the DP and micro batches of the count Slurm granted, or refuses a count the
launcher did not find valid before torchrun starts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from slurm_support import render_preset

from launcher.pipeline.node_range import NodeRange


def start_attempt(tmp_path: Path, granted: int) -> tuple[subprocess.CompletedProcess, str, list[str]]:
    """One attempt of the 345m job on --nodes 2-4 x 2 GPUs with `granted` nodes; (result, its log, srun calls)."""
    _, text = render_preset("345m", (), NodeRange(2, 4), 2, run_dir=tmp_path)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"srun": f'echo "srun $*" >> {tmp_path}/calls; exit 0',
                       "scontrol": '[ "$1" = show ] && echo n1; exit 0', "squeue": "exit 0",
                       "scancel": "exit 0"}.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": f"n[1-{granted}]",
           "SLURM_NNODES": str(granted), "SLURM_JOB_NUM_NODES": str(granted), "SLURM_RESTART_COUNT": "0"}
    result = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, check=False)
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return result, result.stdout, calls


@pytest.mark.parametrize("granted, line", [
    (2, "attempt 1 has 2 node(s): world 4, DP 4, 2 micro batch(es) of 4 per step (global batch 32 kept)"),
    (4, "attempt 1 has 4 node(s): world 8, DP 8, 1 micro batch(es) of 4 per step (global batch 32 kept)"),
])
def test_an_attempt_says_the_layout_of_the_count_slurm_granted(tmp_path, granted, line):
    result, log, calls = start_attempt(tmp_path, granted)
    assert result.returncode == 0, result.stderr
    assert f"megatron-launch: {line}" in log
    assert any("torchrun" in call for call in calls)  # training started


def test_a_count_outside_the_valid_set_is_refused_before_torchrun(tmp_path):
    result, log, calls = start_attempt(tmp_path, 3)
    assert result.returncode == 2
    assert ("megatron-launch: attempt 1 ended: not started, Slurm granted 3 node(s) (world 6); the layout holds "
            "with 2, 4 node(s) only") in log
    assert not any("torchrun" in call for call in calls)
