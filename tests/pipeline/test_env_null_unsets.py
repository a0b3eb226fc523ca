"""A null in launcher.env (`--set env.NAME=null`, or `NAME: null` in a preset) unsets the variable for the ranks:
no launcher value and no inherited value reaches them, every script the launcher writes says `unset NAME`, and the
checks judge the variable as unset."""

import json
from dataclasses import replace
from pathlib import Path

from launcher.backends import slurm
from launcher.cli import render
from launcher.errors import UserError
from launcher.pipeline import resolve
from launcher.pipeline.command import build_command
from launcher.pipeline.environment import CONNECTIONS
from launcher.pipeline.preset import load_preset
from launcher.runs.rundir import command_script


def job_with(*overrides, inherited=None):
    return resolve.resolve(load_preset("345m", list(overrides)), 1, 2, inherited_env=inherited or {})


def test_null_is_unset_not_the_text_null():
    assert load_preset("345m", ["env.NCCL_DEBUG=null"]).launcher.env["NCCL_DEBUG"] is None
    assert load_preset("345m", ["env.NCCL_DEBUG=~"]).launcher.env["NCCL_DEBUG"] is None
    assert load_preset("345m", ["env.NCCL_ALGO=none"]).launcher.env["NCCL_ALGO"] == "none"  # a value, kept


def test_an_inherited_value_does_not_reach_the_ranks():
    job = job_with("env.NCCL_DEBUG=null", inherited={"NCCL_DEBUG": "INFO", "PATH": "/usr/bin"})
    assert job.environment.get("NCCL_DEBUG") is None
    assert "NCCL_DEBUG" not in job.environment.exported
    assert "NCCL_DEBUG" not in job.environment.for_process()
    assert job.environment.for_process()["PATH"] == "/usr/bin"


def test_a_variable_the_launcher_would_export_is_unset_too_and_judged_unset():
    # TP 2 below Blackwell: Megatron asserts CUDA_DEVICE_MAX_CONNECTIONS=1, which the launcher would export
    try:
        job_with("tensor_model_parallel_size=2", f"env.{CONNECTIONS}=null")
    except UserError as err:
        assert f"{CONNECTIONS} unset with TP 2" in str(err) and "None" not in str(err)
    else:
        raise AssertionError("unsetting the connections Megatron asserts on was accepted")


def test_every_script_says_unset_and_never_exports_the_text_null(tmp_path: Path):
    job = job_with("env.NCCL_DEBUG=null", "env.NCCL_IB_DISABLE=1")
    command = build_command(job)
    printed = render.text(job, command)
    recorded = command_script(command.argv, command.env, unset=command.unset)
    batch = slurm.build_job(replace(job, run_dir=tmp_path / "run"), command, slurm.SlurmSettings(), title="t")
    for text in (printed, recorded, "\n".join(batch.export_lines)):
        assert "unset NCCL_DEBUG" in text.splitlines()
        assert "null" not in text
        assert "NCCL_IB_DISABLE=" in text


def test_the_unset_line_clears_an_inherited_value_in_a_shell(tmp_path: Path):
    import subprocess

    job = job_with("env.NCCL_DEBUG=null")
    command = build_command(job)
    script = "\n".join(line for line in render.text(job, command).splitlines()
                       if line.startswith(("export ", "unset "))) + '\necho "${NCCL_DEBUG-unset}"\n'
    out = subprocess.run(["bash", "-c", script], env={"NCCL_DEBUG": "INFO", "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert out.strip() == "unset"


def test_the_attention_check_sees_an_unset_variable_as_unset(launch):
    code, _, err = launch("345m", "--dry-run", env={"NVTE_FUSED_ATTN": "0"})
    assert code == 2 and "NVTE_FUSED_ATTN=0" in err
    code, out, err = launch("345m", "--dry-run", "--set", "env.NVTE_FUSED_ATTN=null", env={"NVTE_FUSED_ATTN": "0"})
    assert code == 0, err
    assert "unset NVTE_FUSED_ATTN" in out.splitlines()
    code, out, err = launch("345m", "--dry-run", "--format", "json", "--set", "env.NVTE_FUSED_ATTN=null")
    assert code == 0, err
    assert json.loads(out)["env_unset"] == ["NVTE_FUSED_ATTN"]
    code, out, err = launch("show", "345m", "--set", "env.NVTE_FUSED_ATTN=null")
    assert code == 0, err
    assert any(line.split() == ["env.NVTE_FUSED_ATTN", "unset"] for line in out.splitlines()), out


def test_a_null_survives_the_run_record_and_resume(tmp_path: Path):
    """preset.yaml keeps the null (not the text "None", not <redacted> for a secret's name), so --resume unsets it
    again without asking for a secret."""
    import yaml

    from launcher.runs import secrets

    recorded = secrets.redact_preset({"launcher": {"env": {"HF_TOKEN": None, "NCCL_DEBUG": None, "A": "1"}}})
    assert recorded["launcher"]["env"] == {"HF_TOKEN": None, "NCCL_DEBUG": None, "A": "1"}
    path = tmp_path / "preset.yaml"
    path.write_text("base: 345m\n" + yaml.safe_dump(recorded))
    env = load_preset(str(path)).launcher.env
    assert env["HF_TOKEN"] is None and env["NCCL_DEBUG"] is None
    assert secrets.restore_from(env, {}) == {"HF_TOKEN": None, "NCCL_DEBUG": None, "A": "1"}
