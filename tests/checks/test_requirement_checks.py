"""What the settings need (the requirements table), checked where the packages are installed: before a local
launch, on every Slurm node at job start (the same message), and in `launch --check` against the target's
declared packages."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.checks.doctor import Context, check_before_launch, requirement_findings
from launcher.errors import UserError
from launcher.megatron import requirements
from launcher.megatron.pin import Kernels
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve

MUON = ("error: optimizer muon needs emerging-optimizers >= 0.2, which is not installed{where} "
        "(megatron/core/optimizer/__init__.py:757)\n  hint: set optimizer=adam or install emerging-optimizers")
NVRX = ("async_save with async_strategy nvrx (Megatron's default) needs nvidia-resiliency-ext >= 0.6.0, which is not "
        "installed{where} (megatron/core/dist_checkpointing/strategies/torch.py:1078)")
needs_absent = pytest.mark.skipif(
    any(importlib.util.find_spec(m) for m in ("emerging_optimizers", "nvidia_resiliency_ext")),
    reason="this Python has emerging-optimizers or nvidia-resiliency-ext")


@needs_absent
def test_a_local_launch_refuses_nvrx_async_saves_without_nvidia_resiliency_ext(tmp_path):
    given = {"async_save": True, "use_persistent_ckpt_worker": True, "transformer_impl": "local",
             "gradient_accumulation_fusion": False, "masked_softmax_fusion": False, "tokenizer_type": "NullTokenizer"}
    (finding,) = requirement_findings(given, Context(megatron_path=tmp_path))
    assert (finding.check, finding.status, finding.detail, finding.fix) == (
        "nvidia-resiliency-ext", "fail", NVRX.format(where=""),
        "set async_strategy=mcore or install nvidia-resiliency-ext")
    # Megatron drops async_save without the persistent writer, and then needs no nvrx (effective settings)
    assert requirement_findings({**given, "use_persistent_ckpt_worker": False}, Context(megatron_path=tmp_path)) == []
    assert requirement_findings({**given, "async_strategy": "mcore"}, Context(megatron_path=tmp_path)) == []


@needs_absent
def test_a_local_launch_stops_before_torchrun_with_the_message():
    job = resolve(load_preset("345m", ["optimizer=muon"]), kernels=Kernels(False, False, "preset"))
    with pytest.raises(UserError) as err:
        check_before_launch(job, dict(os.environ))
    assert MUON.format(where="").replace("error: ", "error: emerging-optimizers: ", 1) in err.value.render()



@pytest.mark.skipif(importlib.util.find_spec("pydantic") is not None, reason="this Python has pydantic")
def test_rl_training_names_every_package_megatron_rl_imports(tmp_path):
    # NVIDIA's GRPO configurations crashed at the first step: training.py guards `from megatron.rl import
    # rl_utils`, which imports pydantic (and more) that neither megatron-core nor torch brings
    given = {"perform_rl_step": True, "transformer_impl": "local", "gradient_accumulation_fusion": False,
             "masked_softmax_fusion": False, "tokenizer_type": "NullTokenizer"}
    findings = {f.check: f for f in requirement_findings(given, Context(megatron_path=tmp_path))}
    assert "pydantic" in findings and findings["pydantic"].status == "fail"
    assert "perform_rl_step needs pydantic" in findings["pydantic"].detail
    assert "fastapi, httpx, openai, pydantic, uvicorn, wandb" in findings["pydantic"].fix
    assert requirement_findings({**given, "perform_rl_step": False}, Context(megatron_path=tmp_path)) == []


def _node_check(items: list[dict]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", requirements.NODE_CHECK, json.dumps(items)], capture_output=True,
                          text=True, timeout=60, check=False)


@needs_absent
def test_a_node_prints_the_launchers_own_message_and_exits_2():
    started = time.monotonic()
    node = _node_check(requirements.node_items({"optimizer": "muon"}, {"optimizer": "muon"}))
    assert time.monotonic() - started < 10  # seconds, not a model build
    assert node.returncode == 2
    assert node.stderr == MUON.format(where=f" on {socket.gethostname()}") + "\n"


def test_a_node_names_a_version_that_is_too_old():
    import packaging

    item = {"modules": ["packaging"], "distributions": ["packaging"], "min_version": "999.0", "missing": "absent",
            "old": "error: packaging >= 999.0 needed, but {found} is installed on {host}"}
    node = _node_check([item])
    assert (node.returncode, node.stderr) == (
        2, f"error: packaging >= 999.0 needed, but {packaging.__version__} is installed on {socket.gethostname()}\n")
    assert _node_check([{**item, "min_version": "1.0"}]).returncode == 0


def _fake_slurm(tmp_path: Path) -> dict[str, str]:
    """srun that runs its command here (its options dropped), scontrol naming one node, a torchrun that only says
    it started: the batch script's own start-up runs for real, on this Python (no nvidia-resiliency-ext)."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nexec "$@"\n')
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho node-0\n")
    (bin_dir / "torchrun").write_text("#!/bin/bash\necho TRAINING STARTED\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    path = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "PATH": path, "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "node-0", "SLURM_NNODES": "1"}


@needs_absent
def test_a_slurm_job_lacking_nvidia_resiliency_ext_stops_at_job_start_with_the_message(launch, tmp_path):
    code, out, err = launch("345m", "--slurm", "--dry-run", "--set", "async_strategy=nvrx",
                            "--set", f"run_root={tmp_path}/runs")
    assert code == 0, err
    script = tmp_path / "job.sbatch"
    script.write_text(out)
    started = time.monotonic()
    job = subprocess.run(["bash", str(script)], env=_fake_slurm(tmp_path), cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, check=False)
    assert time.monotonic() - started < 60
    assert job.returncode == 2 and "TRAINING STARTED" not in job.stdout
    assert ("error: " + NVRX.format(where=f" on {socket.gethostname()}").replace(" (Megatron's default)", "")
            + "\n  hint: set async_strategy=mcore or install nvidia-resiliency-ext\n") in job.stderr
    assert "megatron-launch: attempt 1 ended: not started, a node lacks what the settings need" in job.stdout


def test_launcher_packages_are_distribution_names(launch):
    code, _, err = launch("345m", "--dry-run", "--set", "packages=nvidia-resiliency-ext;reboot")
    assert code == 2
    assert ("error: launcher.packages (--set packages) holds names that are not Python distribution names: "
            "'nvidia-resiliency-ext;reboot'") in err
    preset = load_preset("345m", ["packages=nvidia_resiliency_ext, emerging-optimizers"])
    assert preset.launcher.packages == ("nvidia-resiliency-ext", "emerging-optimizers")


@pytest.mark.megatron
@needs_absent
def test_check_judges_the_packages_the_target_declares(capsys):
    from upstream_support import shared_checker

    from launcher.checks.megatron_verdict import check_preset
    from launcher.pipeline.resolve import attempt

    checker = shared_checker()
    def check(overrides: list[str]) -> int:
        job, problems = attempt(load_preset("345m", overrides), kernels=Kernels(False, False, "preset"),
                                megatron_path=Path("/opt/megatron-lm"))
        return check_preset(job, problems, checker=checker)

    assert check(["async_strategy=nvrx"]) == 2
    out = capsys.readouterr().out
    assert "no apex, no other packages (GPU from launcher.gpu; kernels declared by the preset)" in out
    assert ("  error: " + NVRX.format(where=" on the target").replace(" (Megatron's default)", "") +
            "\n    hint: set async_strategy=mcore or install nvidia-resiliency-ext; or, if the target has it, "
            "declare it: launcher.packages: [nvidia-resiliency-ext]") in out
    assert check(["async_strategy=nvrx", "packages=nvidia-resiliency-ext"]) == 0
    assert "no apex, nvidia-resiliency-ext (GPU from launcher.gpu" in capsys.readouterr().out


@needs_absent
def test_the_rehearsal_is_not_run_where_this_machine_lacks_a_package_the_target_declares():
    # the target has emerging-optimizers (declared); building muon here would only crash on the import
    from launcher.checks.rehearsal import rehearse_job

    job = resolve(load_preset("345m", ["optimizer=muon", "launcher.packages=[emerging-optimizers]"]),
                  kernels=Kernels(False, False, "preset"))
    rehearsal = rehearse_job(job, {})
    assert rehearsal.render() == [
        "rehearsal: not run: this machine lacks what the job needs: optimizer muon needs emerging-optimizers >= 0.2, "
        "which is not installed here (megatron/core/optimizer/__init__.py:757)"]
    # and only where the rehearsal meets the package: an nvrx async save is never made by it
    from launcher.checks.rehearsal import REHEARSAL_IMPORTS, packages_absent_here

    assert REHEARSAL_IMPORTS <= {row.id for row in requirements.table()}
    saving = resolve(load_preset("345m", ["async_save=true", "use_persistent_ckpt_worker=true"]),
                     kernels=Kernels(False, False, "preset"))
    assert packages_absent_here(saving) == []


@pytest.mark.skipif(importlib.util.find_spec("einops") is not None, reason="this Python has einops")
def test_several_distributed_optimizer_instances_need_einops_which_megatron_core_does_not_install(tmp_path):
    """Megatron builds the instances' two-level data-parallel groups with einops (megatron-core's "dev" extra only),
    at start-up and only where DP > 1; found rehearsing NVIDIA's multi_dist_optimizer_instances configuration on
    CPU ranks (failed at the process groups), now refused before launch."""
    given = {"num_distributed_optimizer_instances": 2, "use_distributed_optimizer": True,
             "transformer_impl": "local", "gradient_accumulation_fusion": False, "masked_softmax_fusion": False,
             "tokenizer_type": "NullTokenizer"}
    (finding,) = requirement_findings(given, Context(megatron_path=tmp_path))
    assert (finding.check, finding.status) == ("einops", "fail")
    assert finding.detail.startswith("num_distributed_optimizer_instances 2 needs einops, which is not installed")
    assert finding.fix == "set num_distributed_optimizer_instances=1 or install einops"
    assert requirement_findings({**given, "num_distributed_optimizer_instances": 1},
                                Context(megatron_path=tmp_path)) == []
    # the layout rehearsal builds those groups, so it is not run here without einops, and says why
    from launcher.checks.rehearsal import packages_absent_here

    job = resolve(load_preset("345m", ["use_distributed_optimizer=true", "num_distributed_optimizer_instances=2",
                                       "launcher.packages=[einops]"]), 1, 4, kernels=Kernels(False, False, "preset"))
    assert [m.split(",")[0] for m in packages_absent_here(job)] == [
        "num_distributed_optimizer_instances 2 needs einops"]


def test_the_assumed_target_has_the_torchao_the_dry_run_found_whoever_declares_the_kernels():
    from launcher.checks.megatron_verdict import target_packages

    preset = load_preset("345m", [])
    assert "torchao" in target_packages(preset, Kernels(False, False, "preset", None, torchao=True))
    assert "torchao" not in target_packages(preset, Kernels(False, False, "preset", None, torchao=False))
