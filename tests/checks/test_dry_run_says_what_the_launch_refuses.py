"""The dry-run of a job meant for this machine (a launch here: one node, a GPU here) refuses what the launch here
would refuse before torchrun, with the same messages, for every row of the requirements table; a job meant
elsewhere gets a warning naming the package and the setting; the memory estimate is held to the job's GPU."""

from __future__ import annotations

import json
from typing import Any

import pytest

from launcher.checks import doctor
from launcher.checks.finding import Finding
from launcher.cli import main
from launcher.megatron import requirements

ROWS = [row for row in requirements.table() if row.kind in requirements.PACKAGE_KINDS]


def value_for(test: Any) -> Any:
    """A value of a setting that makes the row's test hold."""
    if isinstance(test, dict):
        return test["in"][0] if "in" in test else test["gt"] + 1 if "gt" in test else None
    return test


def given_value(dest: str) -> Any:
    """A value that sets `dest` ({"given": true}): its first choice, or 1."""
    from launcher.megatron import args as megatron_args

    choices = getattr(megatron_args.catalog()[dest], "choices", None)
    return choices[0] if choices else 1


def overrides_for(row: requirements.Requirement) -> list[str]:
    settings = {dest: given_value(dest) if isinstance(test, dict) and test.get("given") else value_for(test)
                for dest, test in row.when.items()}
    if settings.get("wandb_project") is True:
        settings["wandb_project"] = "project"
    if settings.get("hierarchical_context_parallel_sizes") is True:  # a list of sizes whose product is CP
        settings["hierarchical_context_parallel_sizes"] = [1, 1]
    if settings.get("async_save"):
        settings["use_persistent_ckpt_worker"] = True  # else Megatron drops async_save (effective settings)
    kernels = {"transformer_engine": row.kind == "te", "apex": row.kind == "apex"}  # what the preset declares
    return [f"{dest}={json.dumps(value) if not isinstance(value, str) else value}"
            for dest, value in {**kernels, **settings}.items() if value is not None]


@pytest.fixture
def bare_machine(monkeypatch, tmp_path):
    """One GPU here, and none of the table's packages, TE or apex extensions installed."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(requirements, "packages_here", lambda: {})
    monkeypatch.setattr(requirements, "apex_modules_here", lambda job_paths=(): frozenset())
    monkeypatch.setattr(requirements, "te_version_here", lambda: None)
    monkeypatch.setattr(doctor, "check_transformer_engine",
                        lambda ctx: [Finding("transformer-engine", "warn", "not installed")])
    monkeypatch.setattr(doctor, "has_module", lambda name: False)
    checkout = tmp_path / "megatron-lm"
    checkout.mkdir()
    (checkout / "pretrain_gpt.py").touch()
    return checkout


def errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error: ")]


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.id)
def test_the_dry_run_refuses_what_the_launch_here_refuses(capsys, bare_machine, tmp_path, row):
    args = ["345m", "--megatron-path", str(bare_machine), "--set", f"run_root={tmp_path / 'runs'}",
            *(word for setting in overrides_for(row) for word in ("--set", setting))]
    dry = main([*args, "--dry-run"])
    said = capsys.readouterr().err
    launched = main(args)
    refused = capsys.readouterr().err
    assert (dry, launched) == (2, 2), said + refused
    assert errors(refused) and set(errors(refused)) <= set(errors(said)), said
    if "problem" not in refused:  # the launch reached its checks: the row is among what it said
        assert row.wanted() in said


def test_a_job_meant_elsewhere_names_the_package_and_the_setting(capsys, bare_machine):
    for where in (["--slurm"], ["--k8s"], ["--nodes", "2"]):
        assert main(["345m", "--set", "optimizer=muon", "--set", "wandb_project=p", *where, "--dry-run",
                     "--megatron-path", str(bare_machine), "--format", "json"]) == 0, where
        out, err = capsys.readouterr()
        warnings = json.loads(out)["warnings"] if where[0] != "--k8s" else err  # the manifest is the JSON there
        assert "optimizer muon needs emerging-optimizers >= 0.2 where the job runs" in str(warnings), where
        assert "wandb_project p needs wandb where the job runs" in str(warnings), where


def test_a_declared_package_is_no_warning_elsewhere(capsys, bare_machine):
    assert main(["345m", "--set", "optimizer=muon", "--set", "packages=[emerging-optimizers]", "--nodes", "2",
                 "--dry-run", "--megatron-path", str(bare_machine), "--format", "json"]) == 0
    assert "emerging-optimizers" not in " ".join(json.loads(capsys.readouterr().out)["warnings"])


def test_no_gpu_here_means_the_job_is_meant_elsewhere(capsys, bare_machine, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert main(["345m", "--set", "optimizer=muon", "--dry-run", "--megatron-path", str(bare_machine)]) == 0
    assert "# warning: optimizer muon needs emerging-optimizers >= 0.2 where the job runs" in capsys.readouterr().out


def test_no_doctor_skips_the_checks_in_the_dry_run_as_in_the_launch(capsys, bare_machine):
    assert main(["345m", "--set", "optimizer=muon", "--dry-run", "--no-doctor",
                 "--megatron-path", str(bare_machine)]) == 0


def test_a_memory_estimate_within_the_gpu_less_its_reserve_is_a_warning_and_above_it_a_refusal(capsys,
                                                                                                 bare_machine):
    # 345m at micro batch 128 on an H200 (139.8 GiB, 136.5 usable): 24 layers ~132.9 GiB (tight: a warning),
    # 25 layers ~137.3 GiB (above the line: refused)
    args = ["345m", "--nodes", "2", "--set", "micro_batch_size=128", "--set", "global_batch_size=256",
            "--set", "gpu=h200-141gb", "--megatron-path", str(bare_machine)]
    assert main([*args, "--dry-run", "--format", "json"]) == 0
    (memory,) = [w for w in json.loads(capsys.readouterr().out)["warnings"] if "memory estimate" in w]
    assert "~132.9 GiB per GPU, is within 10 % of the 139.8 GiB of h200-141gb" in memory
    assert main([*args, "--set", "num_layers=25", "--dry-run", "--format", "json"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error.startswith("the memory estimate, ~137.3 GiB per GPU, is above the 136.5 GiB a job can use of the "
                            "139.8 GiB of h200-141gb (3.3 GiB go to CUDA's context, NCCL and the allocator's "
                            "fragmentation)")


def test_a_memory_estimate_wholly_above_the_gpu_is_refused(capsys, bare_machine):
    code = main(["345m", "--nodes", "2", "--set", "micro_batch_size=128", "--set", "global_batch_size=256",
                 "--dry-run", "--megatron-path", str(bare_machine), "--format", "json"])
    assert code == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error.startswith("the memory estimate, ~132.9 GiB per GPU, is above the 75.8 GiB a job can use of the "
                            "79.1 GiB of h100-80gb")


def test_the_memory_rule_refuses_only_above_the_gpu_less_the_reserve():
    from launcher.estimate.formulas import GIB, MEMORY_RESERVE_BYTES, memory_fit

    gpu = 139.8 * GIB
    assert memory_fit(gpu - MEMORY_RESERVE_BYTES, gpu)
    assert not memory_fit(gpu - MEMORY_RESERVE_BYTES + 1, gpu)
    assert memory_fit(130.3 * GIB, gpu)  # a 1-layer model at sequence 262144 that trained on one H200
    assert not memory_fit(146.8 * GIB, gpu)  # the 175B shape at 4 layers in fp16 that ran out of memory there


def test_a_memory_estimate_above_the_gpu_is_said_with_the_problems_of_the_first_step(capsys, bare_machine):
    # seen by varying imported jobs: an MoE refused for its linear biases (a first-step failure) was then refused
    # for its memory once the hint was followed: every problem at once, the estimate included
    code = main(["345m", "--nodes", "2", "--set", "micro_batch_size=128", "--set", "global_batch_size=256",
                 "--set", "num_experts=4", "--dry-run", "--megatron-path", str(bare_machine), "--format", "json"])
    assert code == 2
    messages = [p["message"] for p in json.loads(capsys.readouterr().out)["problems"]]
    assert any("with linear biases fail at the first training step" in m for m in messages)
    assert any(m.startswith("the memory estimate, ~") for m in messages)


def test_a_memory_estimate_above_the_gpu_is_said_with_megatrons_argument_refusals(capsys, bare_machine):
    # the layout adds up, so its memory is said beside a value Megatron's validate_args refuses
    code = main(["345m", "--nodes", "2", "--set", "micro_batch_size=128", "--set", "global_batch_size=256",
                 "--set", "batch_size=4", "--dry-run", "--megatron-path", str(bare_machine), "--format", "json"])
    assert code == 2
    messages = [p["message"] for p in json.loads(capsys.readouterr().out)["problems"]]
    assert any(m.startswith("batch_size is a flag of an older Megatron") for m in messages)
    assert any(m.startswith("the memory estimate, ~") for m in messages)
