"""The batch script's requeue policy on a real Slurm cluster (scripts/slurm-local.sh up): a GPU failure requeues the
job without its node (Slurm's ExcNodeList, the manifest's excluded_nodes, the next attempt elsewhere in sacct); the
same Python error at the same iteration twice stops the chain with its reason; the time-limit warning requeues;
`launch runs` shows each class. The ranks run tests/slurm_jobs/faulty_trainer.py under the job's real torchrun, so
the failure reaches the policy as it would from Megatron: the traceback and torchrun's root cause on the job's
standard error, srun's error line naming Slurm's node; Megatron's exit code 16 leaves out the node its rerun state
machine names.

Each job is one node with one GPU, so the cluster's other node is free for the next attempt. Every wait is for a
state (scontrol's job state, a record in sacct); the bound only ends a test that would otherwise hang.
Skipped when no cluster answers."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from slurm_support import (
    REPO,
    cluster_env,
    cluster_shape,
    free_port,
    job_fields,
    venv_torchrun,
    wait_for_job,
    wait_for_sacct,
)

pytestmark = pytest.mark.slurm
FAULTY_TRAINER = REPO / "tests" / "slurm_jobs" / "faulty_trainer.py"
JOB_SECONDS = 300  # bound on a job and its requeues on a 2-core machine that other work keeps busy
SHARED_NODES = ("slurm.exclusive=false", "slurm.cpus_per_task=1", "slurm.mem=500M")


@pytest.fixture(scope="module")
def two_nodes() -> dict[str, str]:
    env = cluster_env()
    if env is None:
        pytest.skip("no local Slurm cluster (start one with: scripts/slurm-local.sh up)")
    nodes, gpus = cluster_shape(env)
    if nodes < 2 or gpus < 1:
        pytest.skip(f"needs 2 nodes with a GPU each, the cluster has {nodes} x {gpus}")
    return env


def submit(launch, env: dict[str, str], tmp_path: Path, faults: str, *settings: str,
           nodes: str = "1") -> tuple[str, Path]:
    """345m on one node (or `nodes`) and one GPU, its attempts ending as `faults` says; (job id, run directory)."""
    megatron = tmp_path / "megatron-lm"
    megatron.mkdir()
    shutil.copy(FAULTY_TRAINER, megatron / "pretrain_gpt.py")
    sets = [word for setting in (f"torchrun={venv_torchrun()}", f"run_root={tmp_path}/runs",
                                 f"slurm.job_name=policy-{uuid.uuid4().hex[:8]}", f"slurm.rdzv_port={free_port()}",
                                 "slurm.time=00:10:00",
                                 "slurm.max_restarts=3", f"env.TRAINER_FAULTS={faults}", *SHARED_NODES, *settings)
            for word in ("--set", setting)]
    code, out, err = launch("345m", "--submit", "--nodes", nodes, "--gpus-per-node", "1", "--megatron-path",
                            str(megatron), *sets, env=env)
    assert code == 0, err
    (run_dir,) = (tmp_path / "runs").iterdir()
    return out.strip(), run_dir


def sacct_attempts(job_id: str, env: dict[str, str]) -> list[tuple[str, str]]:
    """(state, node list) of each attempt in Slurm's accounting, oldest first."""
    out = subprocess.run(["sacct", "-j", job_id, "--duplicates", "--allocations", "--noheader", "--parsable2",
                          "--format=Start,State,NodeList"], env=env, capture_output=True, text=True, timeout=30,
                         check=False).stdout
    return [(state.split()[0], nodes) for _, state, nodes in sorted(line.split("|") for line in out.splitlines()
                                                                      if line.count("|") == 2)]


def logs(run_dir: Path, job_id: str) -> str:
    return "".join((run_dir / f"slurm-{job_id}.{kind}").read_text(errors="replace") for kind in ("out", "err")
                   if (run_dir / f"slurm-{job_id}.{kind}").exists())


def runs_row(launch, run_dir: Path) -> tuple[dict, str]:
    code, out, err = launch("runs", "--run-root", str(run_dir.parent), "--format", "json")
    assert code == 0, err
    (row,) = json.loads(out)
    code, text, err = launch("runs", "--run-root", str(run_dir.parent))
    assert code == 0, err
    return row, text


def test_a_gpu_failure_requeues_the_job_without_its_node(launch, two_nodes, tmp_path):
    job_id, run_dir = submit(launch, two_nodes, tmp_path, "gpu,none")
    fields = wait_for_job(job_id, two_nodes, timeout=JOB_SECONDS)
    log = logs(run_dir, job_id)
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1", log
    states = wait_for_sacct(job_id, two_nodes, 2, JOB_SECONDS)
    assert states == ["REQUEUED", "COMPLETED"], log
    (first, failed_on), (_, second_on) = sacct_attempts(job_id, two_nodes)
    assert failed_on != second_on, sacct_attempts(job_id, two_nodes)  # the next attempt ran elsewhere
    assert fields["ExcNodeList"] == failed_on
    assert f"megatron-launch: the next attempt leaves out {failed_on} (ExcNodeList)" in log
    assert re.search(rf"attempt 1 ended: training failed with exit status \d+ \(infrastructure: GPU error "
                     rf"\(CUDA/Xid\) at iteration 3, first failing rank 0 on {failed_on}; leaving out {failed_on}\); "
                     "requeued", log), log
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["excluded_nodes"] == [failed_on]
    assert manifest["requeue_decisions"][0]["class"] == "infrastructure"
    row, text = runs_row(launch, run_dir)
    assert row["failure"]["class"] == "infrastructure" and row["failure"]["host"] == failed_on
    assert f"infrastructure rank 0 on {failed_on}: GPU error" in text
    code, report, err = launch("report", str(run_dir), env=two_nodes)
    assert ("failures:           attempt 1: infrastructure: GPU error (CUDA/Xid) at iteration 3, first failing "
            f"rank 0 on {failed_on}") in report, report + err


def test_megatrons_request_to_rerun_elsewhere_requeues_the_job_without_its_node(launch, two_nodes, tmp_path):
    """Exit code 16 (the rerun state machine): the node its line names is left out, the next attempt runs on the
    other one."""
    job_id, run_dir = submit(launch, two_nodes, tmp_path, "rerun,none")
    fields = wait_for_job(job_id, two_nodes, timeout=JOB_SECONDS)
    log = logs(run_dir, job_id)
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1", log
    assert wait_for_sacct(job_id, two_nodes, 2, JOB_SECONDS) == ["REQUEUED", "COMPLETED"], log
    (_, failed_on), (_, second_on) = sacct_attempts(job_id, two_nodes)
    assert failed_on != second_on and fields["ExcNodeList"] == failed_on, sacct_attempts(job_id, two_nodes)
    assert f"requeued as Megatron asks; leaving out {failed_on}, where the rerun must not run again); requeued" in log
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["excluded_nodes"] == [failed_on]
    (decision,) = manifest["requeue_decisions"]
    assert (decision["resume_asked"], decision["host"], decision["left_out"][0]["host"]) == (True, failed_on,
                                                                                             failed_on)


def test_the_same_python_error_twice_stops_the_chain_with_the_reason(launch, two_nodes, tmp_path):
    job_id, run_dir = submit(launch, two_nodes, tmp_path, "keyerror,keyerror,none")
    fields = wait_for_job(job_id, two_nodes, timeout=JOB_SECONDS)
    log = logs(run_dir, job_id)
    assert fields["JobState"] == "FAILED" and fields["Restarts"] == "1", log  # budget 3, one retry used
    assert wait_for_sacct(job_id, two_nodes, 2, JOB_SECONDS) == ["REQUEUED", "FAILED"], log
    assert "attempt 1 ended: training failed with exit status 1 (training: Python exception: KeyError: 'tokens' at " \
           "iteration 3, first failing rank 0" in log
    assert re.search(r"attempt 2 ended: training failed with exit status 1 \(training: Python exception: KeyError: "
                     r"'tokens' at iteration 3, .*a second time: a retry does not fix it\); not requeued, the chain "
                     "stops", log), log
    decisions = json.loads((run_dir / "manifest.json").read_text())["requeue_decisions"]
    assert [(d["attempt"], d["decision"], d["class"]) for d in decisions] == [(1, "requeue", "training"),
                                                                               (2, "stop", "training")]
    assert json.loads((run_dir / "manifest.json").read_text())["excluded_nodes"] == []  # no node to blame
    row, text = runs_row(launch, run_dir)
    assert row["failure"]["class"] == "training"
    assert row["failure"]["reason"].startswith("chain stopped: Python exception: KeyError: 'tokens'")
    assert "training rank 0" in text and "chain stopped: Python exception: KeyError" in text


def test_the_time_limit_warning_requeues_and_is_recorded(launch, two_nodes, tmp_path):
    """Slurm's warning before the limit (#SBATCH --signal=B:USR1@N; sent here at once with scancel, as Slurm
    sends it): the ranks get SIGTERM and end, the job is requeued, the next attempt finishes."""
    job_id, run_dir = submit(launch, two_nodes, tmp_path, "wait,none")
    out_log = run_dir / f"slurm-{job_id}.out"
    deadline_fields = _wait_for_iteration(out_log, job_id, two_nodes)
    assert deadline_fields, logs(run_dir, job_id)
    subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], env=two_nodes, check=True, timeout=30)
    fields = wait_for_job(job_id, two_nodes, timeout=JOB_SECONDS)
    log = logs(run_dir, job_id)
    assert fields["JobState"] == "COMPLETED" and fields["Restarts"] == "1", log
    assert wait_for_sacct(job_id, two_nodes, 2, JOB_SECONDS) == ["REQUEUED", "COMPLETED"], log
    assert "attempt 1 ended: time limit near (SIGUSR1)" in log and "; requeued" in log
    (decision,) = json.loads((run_dir / "manifest.json").read_text())["requeue_decisions"]
    assert (decision["class"], decision["reason"], decision["host"]) == (
        "infrastructure", "time limit near (SIGUSR1 before the limit)", None)
    row, text = runs_row(launch, run_dir)
    assert row["failure"]["class"] == "infrastructure" and "time limit near" in text


def test_an_elastic_job_starts_with_the_nodes_slurm_grants(launch, two_nodes, tmp_path):
    """--nodes 1-2: Slurm grants one or two nodes; the attempt says its world and DP, torchrun runs that many."""
    job_id, run_dir = submit(launch, two_nodes, tmp_path, "none", nodes="1-2")
    assert "#SBATCH --nodes=1-2\n" in (run_dir / "job.sbatch").read_text()
    fields = wait_for_job(job_id, two_nodes, timeout=JOB_SECONDS)
    log = logs(run_dir, job_id)
    assert fields["JobState"] == "COMPLETED", log
    granted = int(fields["NumNodes"])
    assert (f"megatron-launch: attempt 1 has {granted} node(s): world {granted}, DP {granted}, "
            f"{2 // granted} micro batch(es) of 16 per step (global batch 32 kept)") in log


def _wait_for_iteration(out_log: Path, job_id: str, env: dict[str, str]) -> bool:
    """Until the first attempt has logged an iteration (training runs), or the job ended."""
    import time

    deadline = time.monotonic() + JOB_SECONDS
    while time.monotonic() < deadline:
        if out_log.exists() and " iteration        1/" in out_log.read_text(errors="replace"):
            return True
        if job_fields(job_id, env).get("JobState") not in ("PENDING", "RUNNING", "CONFIGURING"):
            return False
        time.sleep(0.2)
    return False
