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

ROOT = Path(__file__).resolve().parents[2]


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


def test_read_attempts_hands_the_lines_on_and_keeps_none(tmp_path):
    """`launch report` reads a Slurm log as it goes (it may hold millions of lines), split as str.splitlines()
    splits the whole text: a carriage return, CRLF, a form feed end a line too; a line may be empty."""
    from launcher.runs.report import _split_lines

    tricky = JOB_LOG.replace("\n", "\r\n", 3) + "\n\nprogress 1%\rprogress 2%\x0cpage\x85next\n" + iteration(7, 6)
    (tmp_path / "slurm-7.out").write_bytes(tricky.encode())
    assert list(_split_lines(tmp_path / "slurm-7.out")) == tricky.splitlines()
    starts: list[tuple[str, int]] = []
    taken: list[str] = []
    attempts = slurm_log.read_attempts(tricky.splitlines(), lambda a: starts.append((a.job, a.number)), taken.append)
    kept = slurm_log.split_attempts(tricky)
    assert [(a.job, a.number, a.ended) for a in attempts] == [(a.job, a.number, a.ended) for a in kept]
    assert starts == [("7", 1), ("7", 2), ("7", 3)] and all(not a.lines for a in attempts)
    assert taken == [line for a in kept for line in a.lines]


def test_report_on_a_slurm_run_directory_lists_the_attempts(tmp_path):
    run_dir = write_run_dir(tmp_path / "runs" / "345m-20261201T100000Z", preset={"name": "345m", "megatron": {}},
                            manifest={"checkpoint_dir": str(tmp_path / "ckpt")}, argv=["sbatch", "job.sbatch"],
                            env={})
    (run_dir / "slurm-7.out").write_text(JOB_LOG)
    # no sacct on PATH: the states come from the log alone (tests/runs/test_report_job_states.py adds sacct's)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": str(tmp_path / "no-sacct")}
    result = subprocess.run([sys.executable, "-m", "launcher", "report", str(run_dir), "--format", "json"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120, check=False, env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["summary"]["attempts"] == 3 and report["summary"]["last_iteration"] == 6
    assert report["summary"]["outcome"] == "success"
    assert report["attempts"] == [
        "attempt 1 (job 7): killed without a word (its node failed, or Slurm killed it)",
        "attempt 2 (job 7): training failed with exit status 1; requeued",
        "attempt 3 (job 7): training finished"]
    text = subprocess.run([sys.executable, "-m", "launcher", "report", str(run_dir)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, check=False, env=env).stdout
    assert "in 3 attempts" in text and "attempts:           attempt 1 (job 7): killed without a word" in text


# ---- the batch script's own bookkeeping, run by bash with stand-ins for srun and scontrol ----

def run_batch_script(tmp_path: Path, restart_count: int, srun_status: int = 0,
                     squeue: str = "exit 0") -> subprocess.CompletedProcess:
    from slurm_support import render_preset

    _, text = render_preset("345m", (), 2, 2, run_dir=tmp_path)
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in {"srun": f'echo srun >> {tmp_path}/calls; exit {srun_status}',
                       "scontrol": f'echo "scontrol $*" >> {tmp_path}/calls; [ "$1" = show ] && echo n1; exit 0',
                       "scancel": "exit 0", "squeue": squeue}.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]",
           "SLURM_NNODES": "2", "SLURM_RESTART_COUNT": str(restart_count)}
    with open(tmp_path / "slurm-7.out", "a") as out:  # as sbatch --open-mode=append does
        return subprocess.run(["bash", str(script)], env=env, stdout=out, stderr=subprocess.PIPE, text=True,
                              timeout=60, check=False)


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_an_attempt_past_the_restart_budget_does_not_start(tmp_path):
    """Slurm requeues after a node failure or a preemption on its own; the budget (max_restarts, 3) still holds."""
    result = run_batch_script(tmp_path, restart_count=4)
    assert result.returncode == 1
    log = (tmp_path / "slurm-7.out").read_text()
    assert "megatron-launch: attempt 5 ended: not started, the restart budget is spent (4 of 3 restarts)" in log
    assert "srun" not in calls(tmp_path)


def test_a_failed_attempt_is_requeued_within_the_budget_and_the_next_one_says_so(tmp_path):
    first = run_batch_script(tmp_path, restart_count=0, srun_status=1)
    assert first.returncode == 0, first.stderr
    assert "scontrol requeue 7" in calls(tmp_path)
    second = run_batch_script(tmp_path, restart_count=1)
    assert second.returncode == 0, second.stderr
    attempts = slurm_log.split_attempts((tmp_path / "slurm-7.out").read_text())
    assert [a.ended for a in attempts] == ["training failed with exit status 1; requeued", "training finished"]


def test_the_requeue_waits_until_slurm_lists_no_step_of_the_job_but_the_batch_script(tmp_path):
    """srun may return while its step still stops on another node; a requeue then would start the next attempt's
    step 7.0 beside the old 7.0 there. squeue lists the step for its first three calls here."""
    squeue = (f'echo squeue >> {tmp_path}/calls; n=$(grep -c squeue {tmp_path}/calls); echo 7.batch; '
              '[ "$n" -le 3 ] && echo 7.0; exit 0')
    result = run_batch_script(tmp_path, restart_count=0, srun_status=1, squeue=squeue)
    assert result.returncode == 0, result.stderr
    assert calls(tmp_path) == ["scontrol show hostnames n[1-2]", "srun", *["squeue"] * 4, "scontrol requeue 7"]


def test_an_attempt_that_left_no_word_is_recorded_by_the_next(tmp_path):
    (tmp_path / "slurm-7.out").write_text("megatron-launch: job 7 attempt 1 on n[1-2], rendezvous n1:29500\n")
    run_batch_script(tmp_path, restart_count=1)
    attempts = slurm_log.split_attempts((tmp_path / "slurm-7.out").read_text())
    assert attempts[0].ended == "killed without a word (its node failed, or Slurm killed it)"


def test_failures_past_the_budget_are_not_requeued(tmp_path):
    result = run_batch_script(tmp_path, restart_count=3, srun_status=2)
    assert result.returncode == 2
    assert not any(call.startswith("scontrol requeue") for call in calls(tmp_path))
    assert "attempt 4 ended: training failed with exit status 2; not requeued" in (tmp_path / "slurm-7.out").read_text()
