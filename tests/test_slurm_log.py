"""A Slurm job's log split into attempts, and `launch report` on a Slurm run directory (no cluster needed: the
log is written here the way the batch script writes it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from launcher.runs import slurm_log
from launcher.runs.rundir import write_run_dir

ROOT = Path(__file__).resolve().parent.parent


def iteration(n: int, total: int) -> str:
    return (f" [2026-12-01 10:00:{n:02d}.000000] iteration {n:8d}/{total:8d} | consumed samples: {n * 8:12d} | "
            f"elapsed time per iteration (ms): 300.0 | learning rate: 1.0E-04 | global batch size:     8 | "
            f"lm loss: {10.0 / n:.6E} | loss scale: 1.0 | number of skipped iterations:   0 | "
            f"number of nan iterations:   0 |")


JOB_LOG = "\n".join([
    "megatron-launch: job 7 attempt 1 on n[1-2], rendezvous n1:29500",
    *(iteration(n, 6) for n in range(1, 4)),
    "megatron-launch: job 7 attempt 2 on n[1-2], rendezvous n1:29500",  # attempt 1 died without a word
    "megatron-launch: attempt 1 ended: killed without a word (its node failed, or Slurm killed it)",
    " successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 2",
    *(iteration(n, 6) for n in range(3, 5)),
    "megatron-launch: attempt 2 ended: training failed with exit status 1; requeued",
    "megatron-launch: requeueing job 7 (restart 2 of 3)",
    "megatron-launch: job 7 attempt 3 on n[1-2], rendezvous n1:29500",
    *(iteration(n, 6) for n in range(5, 7)),
    "megatron-launch: attempt 3 ended: training finished",
]) + "\n"


def test_attempts_and_how_each_ended():
    attempts = slurm_log.split_attempts(JOB_LOG)
    assert [(a.job, a.number) for a in attempts] == [("7", 1), ("7", 2), ("7", 3)]
    assert [a.ended for a in attempts] == ["killed without a word (its node failed, or Slurm killed it)",
                                           "training failed with exit status 1; requeued", "training finished"]
    assert all(not line.startswith("megatron-launch: attempt") for a in attempts for line in a.lines)
    assert len(attempts[1].lines) == 4  # the load line and two iterations, and the requeue note


def test_report_on_a_slurm_run_directory_lists_the_attempts(tmp_path):
    run_dir = write_run_dir(tmp_path / "runs" / "345m-20261201T100000Z", preset={"name": "345m", "megatron": {}},
                            manifest={"checkpoint_dir": str(tmp_path / "ckpt")}, argv=["sbatch", "job.sbatch"],
                            env={})
    (run_dir / "slurm-7.out").write_text(JOB_LOG)
    result = subprocess.run([sys.executable, "-m", "launcher", "report", str(run_dir), "--format", "json"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["summary"]["attempts"] == 3 and report["summary"]["last_iteration"] == 6
    assert report["summary"]["outcome"] == "success"
    assert report["attempts"] == [
        "attempt 1 (job 7): killed without a word (its node failed, or Slurm killed it)",
        "attempt 2 (job 7): training failed with exit status 1; requeued",
        "attempt 3 (job 7): training finished"]
    text = subprocess.run([sys.executable, "-m", "launcher", "report", str(run_dir)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert "in 3 attempts" in text and "attempts:           attempt 1 (job 7): killed without a word" in text
