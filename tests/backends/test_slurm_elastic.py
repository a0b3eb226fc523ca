"""An elastic Slurm job (--nodes MIN-MAX) at the start of an attempt: the rendered batch script, run by bash with
stand-ins for srun and scontrol, says the DP and micro batches of the count Slurm granted, or refuses a count the
launcher did not find valid before torchrun starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from slurm_support import render_preset

from launcher.pipeline.node_range import NodeRange


def start_attempt(tmp_path: Path, granted: int, srun: str = "exit 0"
                  ) -> tuple[subprocess.CompletedProcess, str, list[str]]:
    """One attempt of the 345m job on --nodes 2-4 x 2 GPUs with `granted` nodes of 4 (srun's stand-in ends with
    `srun`); (result, its log, the calls to srun and scontrol)."""
    _, text = render_preset("345m", (), NodeRange(2, 4), 2, run_dir=tmp_path)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "manifest.json").write_text("{}")
    for name, body in {"srun": f'echo "srun $*" >> {tmp_path}/calls; {srun}',
                       # `scontrol show hostnames n[1-N]`: the granted nodes
                       "scontrol": f'echo "scontrol $*" >> {tmp_path}/calls; [ "$1" = show ] && seq 1 {granted} | '
                                   'sed s/^/n/; exit 0',
                       "squeue": "exit 0", "scancel": "exit 0", "sinfo": "printf 'n1\\nn2\\nn3\\nn4\\n'",
                       "python3": f'exec {sys.executable} -S "$@"'}.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": f"n[1-{granted}]",
           "SLURM_NNODES": str(granted), "SLURM_JOB_NUM_NODES": str(granted), "SLURM_RESTART_COUNT": "0"}
    with open(tmp_path / "slurm-7.out", "w") as out, open(tmp_path / "slurm-7.err", "w") as err:
        result = subprocess.run(["bash", str(script)], env=env, stdout=out, stderr=err, text=True, timeout=60,
                                check=False)
    result.stderr = (tmp_path / "slurm-7.err").read_text()
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return result, (tmp_path / "slurm-7.out").read_text(), calls


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


def test_a_failed_host_is_left_out_down_to_the_fewest_nodes_the_job_may_start_with(tmp_path):
    """4 nodes granted of 4 responding, one fails: the next attempt may start with 2, so the host is left out (a
    fixed 4-node job could not spare it)."""
    result, log, calls = start_attempt(tmp_path, 4, srun="echo 'srun: error: Node failure on n3' >&2; exit 1")
    assert result.returncode == 0, result.stderr
    assert "scontrol update JobId=7 ExcNodeList=n3" in calls, log
    assert "megatron-launch: the next attempt leaves out n3 (ExcNodeList)" in log
