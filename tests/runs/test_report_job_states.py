"""`launch report` on a Slurm run directory takes each attempt's state from Slurm's accounting (sacct) where it
can, and says where the states came from. sacct here is a stand-in on PATH that prints what a cluster with
slurmdbd prints (`sacct --duplicates` gives one record per attempt), or fails as sacct does without accounting;
tests/backends/test_slurm_faults.py sees the real one report NODE_FAIL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from launcher.runs.rundir import write_run_dir
from tests.backends.test_slurm_attempts import JOB_LOG

ROOT = Path(__file__).resolve().parents[2]
# what sacct --duplicates --allocations --noheader --parsable2 prints for job 7 (newest first, as it may)
RECORDS = ("7|COMPLETED|0:0|2026-12-01T10:02:00|2026-12-01T10:03:00|n[1-2]\n"
           "7|NODE_FAIL|0:0|2026-12-01T10:00:00|2026-12-01T10:00:40|n[1-2]\n"
           "7|REQUEUED|1:0|2026-12-01T10:01:00|2026-12-01T10:01:30|n[1-2]\n")


def fake_sacct(tmp_path: Path, body: str) -> dict[str, str]:
    """PATH with a stand-in sacct (writing its arguments to tmp_path/sacct-args) and the system's tools."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text(f'#!/bin/bash\necho "$*" > {tmp_path}/sacct-args\n{body}\n')
    (bin_dir / "sacct").chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


def slurm_run_dir(tmp_path: Path) -> Path:
    run_dir = write_run_dir(tmp_path / "runs" / "345m-20261201T100000Z", preset={"name": "345m", "megatron": {}},
                            manifest={"checkpoint_dir": str(tmp_path / "ckpt")}, argv=["sbatch", "job.sbatch"],
                            env={})
    (run_dir / "slurm-7.out").write_text(JOB_LOG)
    return run_dir


def report(run_dir: Path, env: dict[str, str], *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launcher", "report", str(run_dir), *options],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})


def test_each_attempt_shows_its_state_from_sacct_in_the_order_the_attempts_ran(tmp_path):
    run_dir = slurm_run_dir(tmp_path)
    result = report(run_dir, fake_sacct(tmp_path, f"printf '{RECORDS}'"), "--format", "json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["attempts"] == [
        "attempt 1 (job 7): killed without a word (its node failed, or Slurm killed it) "
        "(Slurm: NODE_FAIL, exit code 0:0, on n[1-2])",
        "attempt 2 (job 7): training failed with exit status 1; requeued (Slurm: REQUEUED, exit code 1:0, on n[1-2])",
        "attempt 3 (job 7): training finished (Slurm: COMPLETED, exit code 0:0, on n[1-2])"]
    assert out["job_states"] == "from Slurm's accounting (sacct) and the job log"
    assert (tmp_path / "sacct-args").read_text().split() == [
        "--jobs=7", "--duplicates", "--allocations", "--noheader", "--parsable2",
        "--format=JobIDRaw,State,ExitCode,Start,End,NodeList"]


def test_without_accounting_the_report_says_the_states_come_from_the_log_only(tmp_path):
    run_dir = slurm_run_dir(tmp_path)
    disabled = fake_sacct(tmp_path, 'echo "Slurm accounting storage is disabled" >&2; exit 1')
    result = report(run_dir, disabled)
    assert result.returncode == 0, result.stderr
    assert "job states:         from the job log only (sacct: Slurm accounting storage is disabled)" in result.stdout
    assert "attempts:           attempt 1 (job 7): killed without a word (its node failed, or Slurm killed it)\n" \
        in result.stdout


def test_without_sacct_the_report_says_so(tmp_path):
    run_dir = slurm_run_dir(tmp_path)
    result = report(run_dir, {"PATH": str(tmp_path / "empty")}, "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["job_states"] == "from the job log only (sacct is not installed here)"


def test_a_cancelled_attempt_is_named_by_its_state_and_a_pending_one_comes_last(tmp_path):
    run_dir = slurm_run_dir(tmp_path)
    records = ("7|PENDING|0:0|Unknown|Unknown|None assigned\n"
               "7|CANCELLED by 0|0:15|2026-12-01T10:01:00|2026-12-01T10:01:30|n[1-2]\n"
               "7|PREEMPTED|0:15|2026-12-01T10:00:00|2026-12-01T10:00:30|n[1-2]\n")
    result = report(run_dir, fake_sacct(tmp_path, f"printf '{records}'"), "--format", "json")
    assert result.returncode == 0, result.stderr
    assert [line.rsplit(" (Slurm: ", 1)[1].split(",")[0] for line in json.loads(result.stdout)["attempts"]] == [
        "PREEMPTED", "CANCELLED", "PENDING"]


def test_a_sacct_that_hangs_does_not_hold_up_the_report(tmp_path, monkeypatch):
    from launcher.runs import slurm_accounting

    monkeypatch.setattr(slurm_accounting, "SACCT_SECONDS", 0.5)
    monkeypatch.setenv("PATH", fake_sacct(tmp_path, "exec sleep 30")["PATH"])
    accounting = slurm_accounting.job_accounting(["7"])
    assert accounting.unavailable == "sacct did not answer within 0.5 s"
    assert accounting.describe() == "from the job log only (sacct did not answer within 0.5 s)"
