"""User-derived text never runs as shell code: the printed dry-run script, the sbatch file, command.sh.

Only the endpoint the launcher composes (`${MASTER_ADDR}:PORT`, a HostFromEnv) expands; every other word is
quoted or refused, whatever it contains. Each test runs the generated script with bash and checks that the
payload (`touch PWNED…`) did not run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
from pathlib import Path

import jinja2
import pytest

from launcher.backends import slurm
from launcher.errors import UserError
from launcher.pipeline.shell import HostFromEnv, shell_word
from launcher.pipeline.slurm_settings import SlurmSettings, parse_slurm_settings

PAYLOADS = [
    "${MASTER_ADDR}$(touch PWNED1)",
    "`touch PWNED2`",
    "'; touch PWNED3; '",
    "a\ntouch PWNED4\n",
    '"; touch PWNED5; "',
    "$(touch PWNED6)\\",
]


def stub_bin(tmp_path: Path) -> Path:
    """srun, scontrol, scancel and a torchrun that only record what they were given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stubs = {
        "srun": 'printf "%s\\0" "$@" > "$RECORD/srun"',
        "scontrol": 'if [ "$1" = show ]; then echo n1; else echo "$*" >> "$RECORD/scontrol"; fi',
        "scancel": 'echo "$*" >> "$RECORD/scancel"',
        "torchrun-stub": 'printf "%s\\0" "$@" > "$RECORD/torchrun"',
    }
    for name, body in stubs.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/bash\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def run_script(tmp_path: Path, text: str, **env: str) -> subprocess.CompletedProcess:
    """bash -n, then bash, in tmp_path with the stubs first on PATH; PWNED* files mean something ran."""
    script = tmp_path / "script.sh"
    script.write_text(text)
    checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    record = tmp_path / "record"
    record.mkdir(exist_ok=True)
    full_env = {**os.environ, "PATH": f"{stub_bin(tmp_path)}:{os.environ['PATH']}", "RECORD": str(record),
                "MASTER_ADDR": "x", "SLURM_JOB_ID": "7", "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "n1", **env}
    result = subprocess.run(["bash", str(script)], cwd=tmp_path, env=full_env, capture_output=True, text=True,
                            timeout=60, check=False)
    assert not list(tmp_path.glob("PWNED*")), (text, result.stderr)
    return result


@pytest.mark.parametrize("payload", PAYLOADS[:3])
def test_dry_run_script_with_a_hostile_runner_runs_nothing(launch, tmp_path, payload):
    code, out, err = launch("toy", "--nodes", "2", "--dry-run", "--set", f"torchrun={payload}",
                            "--megatron-path", "/opt/megatron-lm", cwd=tmp_path)
    assert code == 0, err
    run_script(tmp_path, out)


def test_dry_run_script_with_a_hostile_preset_file_name_runs_nothing(launch, tmp_path):
    name = "${MASTER_ADDR}$(touch PWNED-name)"
    (tmp_path / f"{name}.yaml").write_text("base: toy\n")
    code, out, err = launch(f"{name}.yaml", "--nodes", "2", "--dry-run", "--set", "torchrun=torchrun-stub",
                            "--megatron-path", "/opt/megatron-lm", cwd=tmp_path)
    assert code == 0, err
    run_script(tmp_path, out)
    argv = (tmp_path / "record" / "torchrun").read_text().split("\0")
    assert "x:29500" in argv  # the launcher's own endpoint did expand
    assert argv[argv.index("--rdzv-id") + 1] == "megatron-launch-_MASTER_ADDR_touch_PWNED-name_"


def test_only_the_composed_endpoint_is_a_shell_expansion():
    word = HostFromEnv(29500)
    assert word == "${MASTER_ADDR}:29500" and word.resolve("n1") == "n1:29500"
    assert word.shell() == '"${MASTER_ADDR}:29500"'
    assert shell_word(word) == word.shell()
    assert shell_word("${MASTER_ADDR}:29500") == "'${MASTER_ADDR}:29500'"  # plain text that looks the same


def _job(tmp_path: Path, **changes) -> slurm.BatchJob:
    settings = changes.pop("settings", SlurmSettings())
    job = slurm.BatchJob(title="t", job_name="ok", nodes=1, gpus_per_node=1, torchrun=("torchrun-stub",),
                         script="/opt/megatron-lm/pretrain_gpt.py", script_args=("--lr", "0.1"),
                         run_dir=tmp_path / "run", settings=settings, env={"A": "1"})
    return dataclasses.replace(job, **changes)


def _hostile_jobs(tmp_path: Path, payload: str):
    """One job per field, that field hostile and the rest plain."""
    yield "title", _job(tmp_path, title=payload)
    yield "job_name", _job(tmp_path, job_name=payload)
    yield "torchrun", _job(tmp_path, torchrun=(payload,))
    yield "script", _job(tmp_path, script=payload)
    yield "script_args", _job(tmp_path, script_args=("--data-path", payload))
    yield "run_dir", _job(tmp_path, run_dir=tmp_path / payload.replace("/", "_"))
    yield "env value", _job(tmp_path, env={"A": payload})
    yield "env name", _job(tmp_path, env={payload: "1"})
    yield "about", _job(tmp_path, about=(payload,))
    yield "unseen_files", _job(tmp_path, unseen_files=(payload,))
    yield "node_requirements", _job(tmp_path, node_requirements=json.dumps([{"modules": [payload],
                                                                             "missing": payload}]))
    for field in ("partition", "account", "qos", "time", "job_name", "container_image", "signal", "extra_sbatch",
                  "container_mounts"):
        try:  # settings reach a job only through their parser, as from a preset
            settings = parse_slurm_settings({field: payload})
        except UserError:
            continue
        yield f"slurm.{field}", _job(tmp_path, settings=settings)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_batch_script_with_hostile_values_in_every_field_runs_nothing(tmp_path, payload):
    rendered = 0
    for field, job in _hostile_jobs(tmp_path, payload):
        try:
            text = slurm.render_batch_script(job)
        except UserError:
            continue  # refused: nothing written, nothing run
        rendered += 1
        first_line_of_title = text.splitlines()[1]
        assert first_line_of_title.startswith("# Generated by megatron-launch:"), field
        result = run_script(tmp_path, text)
        # 2: the script's own check of a data file (named by the payload) may stop it, as it should
        assert result.returncode in ((0, 2) if field == "unseen_files" else (0,)), (field, result.stderr)
    assert rendered >= 4  # at least the comments and the quoted file and module names are kept, not refused


def test_a_template_value_without_a_filter_fails_every_render():
    env = slurm._environment()
    with pytest.raises(slurm.UnfilteredValue):
        env.from_string("echo {{ x }}").render(x="$(touch PWNED)")
    assert env.from_string("echo {{ x | q }} {{ n }}").render(x="$(touch PWNED)", n=3) == "echo '$(touch PWNED)' 3"
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("echo {{ missing | q }}").render()


def test_preset_file_name_with_a_newline_stays_in_the_comment(launch, tmp_path):
    name = "evil\ntouch PWNED-newline\n#"
    (tmp_path / f"{name}.yaml").write_text("base: 345m\n")
    args = (f"{name}.yaml", "--slurm", "--set", "slurm.job_name=ok", "--megatron-path", "/opt/megatron-lm",
            "--set", "run_root=runs")
    code, out, err = launch(*args, "--dry-run", cwd=tmp_path)
    assert code == 0, err
    assert "# Generated by megatron-launch: preset evil touch PWNED-newline #." in out
    run_script(tmp_path, out.replace("srun ", "srun --nodes=1 ", 1))
    # The same name through a run directory's manifest (launch --resume reads it from there).
    code, out, err = launch(*args, cwd=tmp_path)
    assert code == 0, err
    (run_dir,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["preset"] == name
    code, out, err = launch("--resume", str(run_dir), "--slurm", "--megatron-path", "/opt/megatron-lm", cwd=tmp_path)
    assert code == 0, err
    text = (run_dir / "job.sbatch").read_text()
    assert "touch PWNED-newline\n" not in text
    run_script(tmp_path, text)


def test_command_sh_of_a_multi_node_run_expands_only_the_endpoint(tmp_path):
    from tests.runs.test_launch_run_dir import launch as launch_here
    from tests.runs.test_launch_run_dir import only_run_dir, stand_in

    torchrun = stand_in(tmp_path, "toy_fp32_1gpu.log")
    hostile = tmp_path / "${MASTER_ADDR}$(touch PWNED-sh)"
    hostile.symlink_to(torchrun)
    os.environ["MASTER_ADDR"] = "localhost"
    try:
        result = launch_here(tmp_path, "345m", "--nodes", "2", "--set", f"torchrun={hostile}")
    finally:
        del os.environ["MASTER_ADDR"]
    assert "--rdzv-endpoint localhost:29500" in result.stdout, result.stderr
    command = (only_run_dir(tmp_path) / "command.sh").read_text()
    assert '--rdzv-endpoint "${MASTER_ADDR}:29500"' in command
    result = run_script(tmp_path, command)  # the stand-in, under its hostile name, prints its argv
    assert "--rdzv-endpoint x:29500" in result.stdout, result.stderr
