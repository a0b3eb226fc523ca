"""The state of a cluster job (Slurm or Kubernetes) before its first log: one word for `launch runs` and `launch
report` alike.

    written    `launch --slurm` / `launch --k8s` wrote job.sbatch / jobset.yaml and never handed it to the cluster
    submitted  `launch --submit` handed it over (submitted.json records when and the job ids), or its log exists

Without submitted.json a job may still have been submitted by hand (sbatch job.sbatch, kubectl apply): once it starts
it writes its log (slurm-<id>.out, logs/k8s/), and the state follows that.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from launcher.runs.atomic import write_text_atomic

SUBMITTED_FILE = "submitted.json"
SLURM_SCRIPT = "job.sbatch"
JOBSET = "jobset.yaml"


def record_submission(run_dir: Path, cluster: str, ids: list[str]) -> None:
    """submitted.json after sbatch / kubectl apply accepted the job. Best effort: the job is queued either way."""
    record = {"cluster": cluster, "ids": ids, "submitted": datetime.now(UTC).isoformat(timespec="seconds")}
    try:
        write_text_atomic(run_dir / SUBMITTED_FILE, json.dumps(record) + "\n")
    except OSError:
        pass


def kind_of(run_dir: Path) -> str | None:
    """'Slurm' or 'Kubernetes' for a run directory that holds a cluster job, else None."""
    if (run_dir / SLURM_SCRIPT).is_file():
        return "Slurm"
    if (run_dir / JOBSET).is_file():
        return "Kubernetes"
    return None


def has_log(run_dir: Path) -> bool:
    return any(run_dir.glob("slurm-*.out")) or any((run_dir / "logs" / "k8s").glob("*.log"))


def state_before_summary(run_dir: Path) -> tuple[str, str] | None:
    """('written' | 'submitted', why) for a cluster job without a summary yet; None for no cluster job."""
    kind = kind_of(run_dir)
    if kind is None:
        return None
    if (run_dir / SUBMITTED_FILE).is_file() or has_log(run_dir):
        return "submitted", f"a {kind} job: launch report RUN_DIR reads its log"
    what = "sbatch job.sbatch" if kind == "Slurm" else "kubectl apply --server-side -f jobset.yaml"
    return "written", f"a {kind} job written and never submitted ({what}, or launch --submit)"
