"""`launch report` on a Kubernetes run directory: each attempt read from the pod log with the iteration lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.errors import UserError
from launcher.runs import k8s_log
from launcher.runs.report import summarize
from launcher.runs.rundir import write_run_dir

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"


def k8s_run_dir(tmp_path: Path, logs: dict[str, str]) -> Path:
    run_dir = write_run_dir(tmp_path / "runs" / "toy-20261129T160150Z", preset={"name": "toy", "megatron": {
        "seq_length": 64}}, manifest={"checkpoint_dir": str(tmp_path / "ckpt")}, argv=["kubectl"], env={},
        extra_files={"jobset.yaml": "kind: JobSet\n"})
    (run_dir / k8s_log.LOG_DIR).mkdir(parents=True)
    for name, fixture in logs.items():
        text = (FIXTURES / fixture).read_text() if fixture else "megatron-launch: pod 0 of 2, attempt 1\n"
        (run_dir / k8s_log.LOG_DIR / name).write_text(text)
    return run_dir


def test_each_attempt_is_read_from_the_pod_that_logged_the_iterations(tmp_path):
    run_dir = k8s_run_dir(tmp_path, {
        "node-0-attempt-1.log": "", "node-1-attempt-1.log": "toy_fp32_1gpu.log",
        "node-0-attempt-2.log": "", "node-1-attempt-2.log": "toy_resume_sigterm.log"})
    assert k8s_log.attempt_logs(run_dir) == [run_dir / "logs/k8s/node-1-attempt-1.log",
                                             run_dir / "logs/k8s/node-1-attempt-2.log"]
    summary = summarize(run_dir)
    # as for the same logs of a run here: logged up to 80, then saved at 83 on SIGTERM
    assert summary.attempts == 2 and summary.last_iteration == 83


def test_a_jobset_that_never_started_says_how_to_apply_and_find_it(tmp_path):
    run_dir = k8s_run_dir(tmp_path, {})
    with pytest.raises(UserError) as info:
        summarize(run_dir)
    assert info.value.render() == (
        f"error: {run_dir} holds a Kubernetes JobSet (written) whose pods have written no log yet (logs/k8s/)\n"
        f"  hint: apply it with: kubectl apply --server-side -f {run_dir / 'jobset.yaml'}; if it is applied, "
        "kubectl get jobsets -A -l app.kubernetes.io/managed-by=megatron-launch shows it")
