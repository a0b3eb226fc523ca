"""The job's environment is decided once, in pipeline/environment.py, and every consumer reads the job's."""

from pathlib import Path

import pytest

from launcher.checks import doctor
from launcher.errors import UserError
from launcher.pipeline import resolve
from launcher.pipeline.command import build_command
from launcher.pipeline.environment import CONNECTIONS, is_env_name
from launcher.pipeline.preset import load_preset
from launcher.pipeline.slurm_settings import check_environment

# 345m with FSDP and TP 2 (issue 23, item 1): Megatron wants CUDA_DEVICE_MAX_CONNECTIONS unset or > 1. Megatron-FSDP:
# torch FSDP2 is refused outright at this pin (its finish_grad_sync TypeError), before this rule matters.
# async_save off: fsdp_dtensor's async save needs nvidia-resiliency-ext's planner (row fsdp-dtensor-async-mcore).
FSDP_TP2 = ["use_megatron_fsdp=true", "ckpt_format=fsdp_dtensor", "gradient_accumulation_fusion=false",
             "tensor_model_parallel_size=2", "async_save=false"]


def fsdp_tp2_job(**inputs):
    """The job as resolved in a clean environment unless the test gives the inherited one."""
    return resolve.resolve(load_preset("345m", FSDP_TP2), 1, 2, **{"inherited_env": {}, **inputs})


def test_fsdp_with_tp2_exports_no_connections_setting():
    job = fsdp_tp2_job()
    assert CONNECTIONS not in job.environment.exported
    assert CONNECTIONS not in build_command(job).env


def test_doctor_agrees_with_the_job_on_connections_for_fsdp_with_tp2(tmp_path):
    job = fsdp_tp2_job(inherited_env={"PATH": "/usr/bin"})
    ctx = doctor.Context(megatron_path=tmp_path, env=job.environment.for_process())
    findings = [f for f in doctor.job_findings(job, ctx) if f.check == CONNECTIONS]
    assert [(f.status, f.detail) for f in findings] == [
        ("ok", "unset, as the job leaves it (FSDP wants it unset or > 1)")]


def test_doctor_finds_what_tp2_needs_set_by_the_job(tmp_path):
    job = resolve.resolve(load_preset("345m", ["tensor_model_parallel_size=2"]), 1, 2)
    ctx = doctor.Context(megatron_path=tmp_path, env=job.environment.for_process())
    findings = [f for f in doctor.job_findings(job, ctx) if f.check == CONNECTIONS]
    assert [(f.status, f.detail) for f in findings] == [("ok", "1, as the job sets it")]


def test_an_inherited_connections_value_is_judged_before_launch():
    with pytest.raises(UserError) as caught:
        fsdp_tp2_job(inherited_env={CONNECTIONS: "1"})
    assert [p.message for p in caught.value.problems] == [
        f"use_megatron_fsdp: FSDP requires {CONNECTIONS} > 1 or unset, but it is 1"]


def test_an_inherited_variable_the_launcher_exports_is_overridden_not_judged():
    job = resolve.resolve(load_preset("345m", ["tensor_model_parallel_size=2"]), 1, 2,
                          inherited_env={CONNECTIONS: "8"})
    assert job.environment.get(CONNECTIONS) == "1"


def test_checks_read_the_inherited_environment_of_the_job_not_the_process_one(monkeypatch):
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    preset = load_preset("345m", ["deterministic_mode=true"])
    with pytest.raises(UserError) as caught:
        resolve.resolve(preset, 1, 1, inherited_env={})
    assert "deterministic_mode needs NCCL_ALGO in Tree, Ring, CollnetDirect, CollnetChain, ^NVLS, got None" in [
        p.message for p in caught.value.problems]
    assert resolve.resolve(preset, 1, 1, inherited_env={"NCCL_ALGO": "Tree"}).environment.get("NCCL_ALGO") == "Tree"


def test_the_process_environment_puts_the_launchers_pythonpath_first():
    job = resolve.resolve(load_preset("345m"), 1, 1, megatron_path=Path("/opt/m"),
                          inherited_env={"PYTHONPATH": "/mine", "HOME": "/home/u"})
    env = job.environment.for_process(path="/bin")
    assert env["PYTHONPATH"].split(":")[0] == "/opt/m"
    assert env["PYTHONPATH"].split(":")[-1] == "/mine"
    assert (env["HOME"], env["PATH"]) == ("/home/u", "/bin")


def test_secrets_are_masked_where_the_environment_is_shown():
    job = resolve.resolve(load_preset("345m", ["env.WANDB_API_KEY=abc123"]), 1, 1)
    assert job.environment.shown()["WANDB_API_KEY"] == "<redacted>"
    assert job.environment.exported["WANDB_API_KEY"] == "abc123"


@pytest.mark.parametrize("name", ["FOO\n", "FOO BAR", "1FOO", "", "FOO=1", "FÖO"])
def test_one_env_name_rule_refuses_what_a_shell_cannot_export(name):
    assert not is_env_name(name)


def test_a_preset_env_name_with_a_trailing_newline_is_refused_like_slurm_does(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text('base: 345m\nlauncher:\n  env:\n    "FOO\\n": 1\n')
    with pytest.raises(UserError) as caught:
        load_preset(str(path))
    assert [p.message for p in caught.value.problems] == [
        f"'FOO\\n' in launcher.env ({path}) is not a valid environment variable name"]
    assert [p.message for p in check_environment({"FOO\n": "1"})] == [
        "environment variable name 'FOO\\n' is not a valid shell name"]
