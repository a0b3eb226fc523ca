"""`--slurm --format json`: the script (dry-run) or the written job's paths as one JSON object, never bash text or a
bare path; notes and warnings go into it instead of standard error."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import MEGATRON


def test_slurm_dry_run_json_holds_the_script(launch, tmp_path):
    code, out, err = launch("345m", "--slurm", "--dry-run", "--format", "json", "--megatron-path", MEGATRON,
                            "--set", f"run_root={tmp_path}")
    assert code == 0 and err == "", err
    data = json.loads(out)
    assert data["dry_run"] is True and data["script"].startswith("#!/bin/bash")
    assert Path(data["script_path"]).name == "job.sbatch" and Path(data["run_dir"]).parent == tmp_path
    assert f"{MEGATRON}/pretrain_gpt.py does not exist here" in " ".join(data["warnings"])
    assert list(tmp_path.iterdir()) == []  # a dry-run writes nothing


def test_slurm_write_json_names_the_written_script(launch, tmp_path):
    code, out, err = launch("345m", "--slurm", "--format", "json", "--megatron-path", MEGATRON,
                            "--set", f"run_root={tmp_path}")
    assert code == 0 and err == "", err
    data = json.loads(out)
    assert data["dry_run"] is False and data["submitted"] == []
    script = Path(data["script_path"])
    assert script.is_file() and script.read_text().startswith("#!/bin/bash")
    assert any(note.startswith("micro batch 32") for note in data["notes"])
