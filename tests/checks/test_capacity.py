"""Before a launch here: the job's memory per GPU against this machine's GPUs (nvidia-smi), and its checkpoints
against the free space where they are saved. Faults planted: a fake nvidia-smi reporting a small GPU, a file
system reported full."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from launcher.checks import capacity
from launcher.checks.doctor import Context, job_findings
from launcher.estimate.formulas import GIB, MEMORY_RESERVE_BYTES, fit_status, gpu_by_name
from launcher.megatron.pin import Kernels
from launcher.pipeline import resolve
from launcher.pipeline.preset import load_preset

REPO = Path(__file__).resolve().parents[2]
H200 = capacity.GpuMemory(143771 * 1024**2, 0)


def fake_nvidia_smi(bin_dir: Path, mib: list[int], used: list[int] | None = None) -> Path:
    """An nvidia-smi that lists GPUs of the given memory (MiB; `used` by other processes) and answers the query."""
    bin_dir.mkdir(exist_ok=True)
    listing = "\\n".join(f"GPU {i}: NVIDIA Fake (UUID: GPU-{i})" for i in range(len(mib)))
    query = "\\n".join(f"{i}, {m}, {(used or [0] * len(mib))[i]}" for i, m in enumerate(mib))
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\n"
                      f'case "$*" in *--query-gpu*) printf "{query}\\n";; *) printf "{listing}\\n";; esac\n')
    script.chmod(0o755)
    return bin_dir


def test_the_smallest_visible_gpu_is_the_one_that_counts(tmp_path):
    bin_dir = fake_nvidia_smi(tmp_path / "bin", [143771, 81559, 143771], used=[0, 0, 2048])
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    assert capacity.gpu_memory(env) == capacity.GpuMemory(81559 * 1024**2, 2048 * 1024**2)
    assert capacity.gpu_memory({**env, "CUDA_VISIBLE_DEVICES": "0,2"}) == capacity.GpuMemory(143771 * 1024**2,
                                                                                              2048 * 1024**2)
    assert capacity.gpu_memory({**env, "CUDA_VISIBLE_DEVICES": "GPU-0"}).total == 81559 * 1024**2  # UUIDs: all
    assert capacity.gpu_memory({"PATH": str(tmp_path / "nothing")}) is None


@pytest.mark.parametrize(("needed_gib", "status"), [(184.2, "fail"), (146.8, "fail"), (130.3, "warn"),
                                                    (109.1, "ok")])
def test_memory_above_the_gpu_is_refused_and_near_it_warned(needed_gib, status):
    """184.2 GiB: the Mixtral 8x22B moved to one H200 that ran out of memory; 146.8: the 175B shape at 4 layers in
    fp16 that ran out of memory at its first step; 130.3: a 1-layer model at sequence 262144 that trained;
    109.1: the 8x7B one that trained (peak 109.0)."""
    found = capacity.memory_finding(needed_gib * GIB, H200)
    assert found is not None and found[0] == status
    assert capacity.memory_finding(needed_gib * GIB, None) is None


def test_the_launch_refuses_just_above_the_gpu_less_the_reserve_and_accepts_at_it():
    line = H200.total - MEMORY_RESERVE_BYTES
    at, above = capacity.memory_finding(line, H200), capacity.memory_finding(line + 1, H200)
    assert at is not None and at[0] == "warn"
    assert above is not None and above[0] == "fail" and "GiB usable" in above[1]


@pytest.mark.parametrize("gpu", ["h200-141gb", "h100-80gb", "a100-40gb"])
def test_the_dry_run_and_the_launch_give_one_memory_verdict(gpu):
    """The dry-run's `fits` (on the catalogue's GPU) and the launch's check (on the GPU nvidia-smi reports) are one
    rule: on a GPU of the same memory they refuse the same estimates, also a byte either side of the line."""
    memory = gpu_by_name(gpu).memory_bytes
    here = capacity.GpuMemory(int(memory), 0)
    line = here.total - MEMORY_RESERVE_BYTES
    for needed in (0.5 * memory, 0.95 * memory, line - 1, line, line + 1, memory, 1.2 * memory):
        dry_run_refuses = fit_status(needed, replace(gpu_by_name(gpu), memory_bytes=here.total)) == "does not fit"
        found = capacity.memory_finding(needed, here)
        assert found is not None and (found[0] == "fail") == dry_run_refuses, (gpu, needed / GIB)


def test_memory_other_processes_hold_now_is_warned():
    """Seen on the H200: a run started beside another that held 108 GiB ran out of memory."""
    found = capacity.memory_finding(51.4 * GIB, capacity.GpuMemory(H200.total, 108 * GIB))
    assert found is not None and found[0] == "warn" and "other processes use 108.0 GiB" in found[1]


def test_memory_the_estimate_does_not_count_turns_the_refusal_into_a_warning():
    """FSDP and CPU offloading take memory off the GPU; the estimate does not model them (docs/plan.md)."""
    found = capacity.memory_finding(184.2 * GIB, H200, ["use_megatron_fsdp"])
    assert found is not None and found[0] == "warn" and "use_megatron_fsdp" in found[1]
    assert capacity.unmodelled_memory_settings(job(*OFFLOAD).arg) == ["optimizer_cpu_offload"]
    assert capacity.unmodelled_memory_settings(job().arg) == []


def test_fsdp_on_one_data_parallel_rank_saves_nothing_so_the_refusal_stands():
    # seen: a DeepSeek-V3 script with Megatron FSDP, moved to one GPU, estimated at 255 GiB and accepted because
    # FSDP was "not counted"; FSDP shards over DP·CP, and at 1 it holds everything
    fsdp = job("use_megatron_fsdp=true", "use_distributed_optimizer=true", "ckpt_format=fsdp_dtensor",
                "async_save=false")
    assert capacity.sharded_over(fsdp) == 1
    assert capacity.unmodelled_memory_settings(fsdp.arg, capacity.sharded_over(fsdp)) == []
    assert capacity.unmodelled_memory_settings(fsdp.arg, 8) == ["use_megatron_fsdp"]
    assert capacity.unmodelled_memory_settings(lambda name: name == "use_torch_fsdp2", 1) == []
    offload = job(*OFFLOAD)  # offloading saves GPU memory at any data-parallel size
    assert capacity.unmodelled_memory_settings(offload.arg, 1) == ["optimizer_cpu_offload"]


def test_a_checkpoint_larger_than_the_free_space_is_refused_and_too_many_warned():
    size = 87e9
    fail = capacity.checkpoint_finding("/ckpt", size, 1, int(60 * GIB))
    assert fail is not None and fail[0] == "fail" and "the first save would fail" in fail[1]
    warn = capacity.checkpoint_finding("/ckpt", size, 10, int(300e9))
    assert warn is not None and warn[0] == "warn" and "room for 3 of the 10 checkpoints" in warn[1]
    ok = capacity.checkpoint_finding("/ckpt", size, 1, int(300e9))
    assert ok is not None and ok[0] == "ok"


# CPU offloading of the optimizer as Megatron accepts it: the precision-aware, distributed optimizer
OFFLOAD = ("optimizer_cpu_offload=true", "use_precision_aware_optimizer=true", "use_distributed_optimizer=true")


def job(*overrides: str):
    # nothing inherited: a CUDA_DEVICE_MAX_CONNECTIONS of the shell (or left by Megatron in this process) would
    # decide FSDP's refusal instead of the memory rule under test
    return resolve.resolve(load_preset("345m", overrides), 1, 1, kernels=Kernels(False, False, "preset"),
                           run_dir=Path("/nonexistent/run"), inherited_env={})


@pytest.mark.parametrize(("overrides", "kept"), [
    (("train_iters=10000", "save_interval=1000"), 10),
    (("train_iters=10000", "save_interval=1000", "save_retain_interval=5000"), 2),
    (("train_iters=10500", "save_interval=500", "save_retain_interval=5000"), 3),
    (("train_iters=100",), 1),
])
def test_kept_checkpoints_follow_save_and_retain_intervals(overrides, kept):
    assert capacity.kept_checkpoints(job(*overrides)) == kept


def test_the_launch_checks_hold_the_job_to_the_disk_and_the_gpu(tmp_path, monkeypatch):
    """The same figures as the dry-run's header: its memory per GPU and one checkpoint's bytes."""
    from launcher.estimate.summary import job_facts

    bin_dir = fake_nvidia_smi(tmp_path / "bin", [16 * 1024])
    monkeypatch.setattr(capacity, "free_bytes", lambda path, levels=None: 10**9)
    the_job = job("train_iters=100")
    ctx = Context(megatron_path=tmp_path, env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    found = {f.check: f for f in job_findings(the_job, ctx)}
    facts = job_facts(the_job)
    assert found["gpu memory"].status == "fail"
    assert f"~{facts['estimate']['memory_per_gpu_gib']:.1f} GiB per GPU" in found["gpu memory"].detail
    assert found["checkpoint space"].status == "fail"
    assert "the first save would fail" in found["checkpoint space"].detail
    assert "no_save_optim=true" in found["checkpoint space"].fix


def test_no_save_optim_makes_the_checkpoint_the_weights_only():
    from launcher.estimate.summary import job_facts

    full, weights = job_facts(job()), job_facts(job("no_save_optim=true"))
    assert weights["checkpoint_bytes"] == pytest.approx(full["checkpoint_bytes"] * 2 / 14)


def test_launch_on_a_gpu_too_small_stops_before_torchrun(tmp_path):
    """`launch 345m` where nvidia-smi reports a 16 GiB GPU: exit 2 with the estimate and the fix, nothing run."""
    checkout = tmp_path / "megatron"
    checkout.mkdir()
    (checkout / "pretrain_gpt.py").write_text("raise SystemExit('must not run')\n")
    bin_dir = fake_nvidia_smi(tmp_path / "bin", [16 * 1024])
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "MEGATRON_LM_PATH": str(checkout)}
    workdir = tmp_path / "work"
    workdir.mkdir()
    proc = subprocess.run([sys.executable, "-m", "launcher", "345m", "--gpus-per-node", "1",
                           "--set", f"run_root={workdir / 'runs'}"], check=False, capture_output=True, text=True,
                          env=env, cwd=workdir, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "error: gpu memory: the job needs ~" in proc.stderr
    assert ("the GPU here has 16.0 GiB (12.7 GiB usable: 3.3 GiB go to CUDA's context, NCCL and the allocator's "
            "fragmentation): it would run out of memory at its first step") in proc.stderr
    assert "must not run" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (workdir / "runs").exists() or not any((workdir / "runs").iterdir())


def test_a_docker_sized_shared_memory_is_warned_when_workers_or_nccl_use_it():
    small = capacity.shared_memory_finding(64 * 1024**2, 2, 8)
    assert small is not None and small[0] == "warn"
    assert "2 data-loader worker(s) per rank and NCCL between this node's GPUs" in small[1]
    assert "--shm-size" in small[2]
    big = capacity.shared_memory_finding(64 * GIB, 2, 8)
    assert big is not None and big[0] == "ok"
    assert capacity.shared_memory_finding(64 * 1024**2, 0, 1) is None  # nothing of the job uses it


def test_a_checkpoint_on_object_storage_is_not_held_to_this_machines_disk(monkeypatch):
    monkeypatch.setattr(capacity, "free_bytes", lambda path, levels=None: 10**9)
    found = {f.check for f in capacity.capacity_findings(job("save=msc://bucket/run"), {"PATH": "/nonexistent"})}
    assert "checkpoint space" not in found


def test_free_space_is_looked_up_only_as_far_up_as_asked(tmp_path):
    assert capacity.free_bytes(tmp_path / "run" / "checkpoints", levels=2) is not None  # tmp_path exists
    assert capacity.free_bytes(tmp_path / "a" / "b" / "c", levels=2) is None  # a compute node's disk, unseen here
    assert capacity.free_bytes(tmp_path / "a" / "b" / "c") is not None


def test_slurm_submit_stops_before_sbatch_when_the_first_save_cannot_fit(tmp_path, monkeypatch):
    """175B: ~2.4 TB per checkpoint; the login node sees the shared file system under run_root."""
    from launcher.backends import slurm
    from launcher.errors import UserError

    big = resolve.resolve(load_preset("175b", [f"run_root={tmp_path}"]), kernels=Kernels(True, True, "preset"),
                          run_dir=tmp_path / "175b-run")
    monkeypatch.setattr(capacity, "free_bytes", lambda path, levels=None: 500 * 10**9)
    with pytest.raises(UserError) as caught:
        slurm.check_checkpoint_space(big)
    assert "checkpoint space: one checkpoint (weights and optimizer state) is ~2.4" in str(caught.value)
    monkeypatch.setattr(capacity, "free_bytes", lambda path, levels=None: None)  # not visible from here
    assert slurm.check_checkpoint_space(big) is None
