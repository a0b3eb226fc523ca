"""Real failure logs (tests/fixtures/failure_logs: excerpts of public issue threads, trimmed to the lines that matter,
each with its source in index.json) through the path the batch script's requeue policy runs: the log of a Slurm job's
attempt, read and decided by `python3 -m launcher.runs.requeue_policy`, twice (the same failure again). Each must land
in the class its failure calls for and be requeued only where a retry can fix it. The same lines as a plain log
(`launch report` of a run without Slurm, the monitor) get the same end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.runs import requeue_policy
from launcher.runs.triage import triage_lines

FIXTURES = Path(__file__).parents[1] / "fixtures" / "failure_logs"
INDEX = json.loads((FIXTURES / "index.json").read_text(encoding="utf-8"))["logs"]
JOB = "4242"
# what the policy does the first time and the second time the attempt ends so
RETRY = {"requeue": ("requeue", "requeue"), "once": ("requeue", "stop"), "stop": ("stop", "stop")}


def attempt(number: int, text: str) -> str:
    return f"megatron-launch: job {JOB} attempt {number} on gpu-1\n{text}"


def policy(run_dir: Path, number: int, capsys) -> tuple[str, dict]:
    """The batch script's call after attempt `number` failed (srun's exit status 1), and the decision it recorded."""
    assert requeue_policy.main([str(run_dir), JOB, str(number), "1"], environ={}) == 0
    action = capsys.readouterr().out.splitlines()[0]
    recorded = json.loads((run_dir / "manifest.json").read_text())["requeue_decisions"][-1]
    return action, recorded


def test_the_index_names_every_log_once_with_a_known_class_and_retry():
    logs = {case["log"] for case in INDEX}
    assert logs == {path.name for path in FIXTURES.glob("*.log")} and len(logs) == len(INDEX)
    assert all(case["class"] in ("infrastructure", "training", "data") and case["retry"] in RETRY
               and case["source"].startswith("https://github.com/") for case in INDEX)


@pytest.mark.parametrize("case", INDEX, ids=[case["log"].removesuffix(".log") for case in INDEX])
def test_a_real_failure_log_is_classed_and_requeued_as_its_failure_calls_for(case, tmp_path, capsys):
    text = (FIXTURES / case["log"]).read_text(encoding="utf-8")
    (tmp_path / "manifest.json").write_text("{}\n")
    out, err = tmp_path / f"slurm-{JOB}.out", tmp_path / f"slurm-{JOB}.err"
    # srun's errors, the tracebacks and NCCL's lines go to the job's standard error (#SBATCH --error)
    out.write_text(attempt(1, ""))
    err.write_text(attempt(1, text))
    first, record = policy(tmp_path, 1, capsys)
    assert record["class"] == case["class"], record
    out.write_text(attempt(1, "") + attempt(2, ""))
    err.write_text(attempt(1, text) + attempt(2, text))
    second, _ = policy(tmp_path, 2, capsys)
    assert (first, second) == RETRY[case["retry"]], record

    plain = triage_lines(text.splitlines(), 1)
    assert (plain.cls, plain.persistent) == (record["class"], record.get("persistent", False)), plain


def test_the_nodes_own_python_decides_the_real_logs_alike(tmp_path):
    """The batch script runs the policy with the node's python3, no site-packages (`-S`): the same decisions."""
    import subprocess
    import sys

    root = Path(__file__).parents[2]
    for number, case in enumerate(INDEX):
        run_dir = tmp_path / str(number)
        run_dir.mkdir()
        (run_dir / "manifest.json").write_text("{}\n")
        (run_dir / f"slurm-{JOB}.out").write_text(attempt(1, ""))
        (run_dir / f"slurm-{JOB}.err").write_text(attempt(1, (FIXTURES / case["log"]).read_text(encoding="utf-8")))
        done = subprocess.run([sys.executable, "-S", "-m", "launcher.runs.requeue_policy", str(run_dir), JOB, "1", "1"],
                              capture_output=True, text=True, timeout=60, check=False, cwd=root,
                              env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert done.stdout.splitlines()[0] == RETRY[case["retry"]][0], (case["log"], done.stdout)
