"""A cluster job before its first log has one state, the same word in `launch runs` and `launch report`: written
(job.sbatch / jobset.yaml never handed to the cluster) or submitted (launch --submit recorded it, or its log
exists)."""

from __future__ import annotations

import pytest

from launcher.errors import UserError
from launcher.runs import cluster_job
from launcher.runs.listing import describe
from launcher.runs.report import summarize
from launcher.runs.rundir import write_run_dir

FILES = {"Slurm": "job.sbatch", "Kubernetes": "jobset.yaml"}


def cluster_run(tmp_path, kind: str):
    return write_run_dir(tmp_path / "175b-20261201T150000Z", preset={"name": "175b"}, argv=["x"], env={},
                         manifest={"preset": "175b", "created": "2026-12-01T15:00:00+00:00"},
                         extra_files={FILES[kind]: "#!/bin/bash\n"})


def report_error(run_dir) -> str:
    with pytest.raises(UserError) as info:
        summarize(run_dir)
    return info.value.render()


@pytest.mark.parametrize("kind", FILES)
def test_a_job_written_and_never_submitted_is_written_in_runs_and_report(tmp_path, kind):
    run_dir = cluster_run(tmp_path, kind)
    row = describe(run_dir)
    assert row.state == "written" and "never submitted" in row.why
    assert f"{kind} " in report_error(run_dir) and "(written)" in report_error(run_dir)


@pytest.mark.parametrize("kind", FILES)
def test_a_submitted_job_is_submitted_in_runs_and_report(tmp_path, kind):
    run_dir = cluster_run(tmp_path, kind)
    cluster_job.record_submission(run_dir, kind.lower(), ["1234"])
    assert describe(run_dir).state == "submitted"
    assert "(submitted)" in report_error(run_dir)
