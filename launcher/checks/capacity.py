"""Before a launch on this machine: do the job's memory per GPU and its checkpoints fit what is here?

Both figures are the dry-run's (`estimate.summary.job_facts`): the memory per GPU it printed, and one checkpoint's
bytes. Seen on one H200: an imported Mixtral 8x22B moved to one GPU, estimated at 184 GiB, ran out of memory at
its first step; the 8x7B one trained (estimated 109.1 GiB, peak 109.0 GiB allocated) and then its first save
(~87 GB of weights and Adam state) failed on a 64 GiB disk and hung the run. Both are known before any GPU work.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.checks.finding import Finding, Status
from launcher.estimate.formulas import GIB, MEMORY_RESERVE_BYTES, USABLE_FRACTION, human_bytes, memory_fit
from launcher.estimate.summary import job_facts

SUBPROCESS_TIMEOUT_S = 20
# Docker's default /dev/shm is 64 MiB: data-loader workers die with a bus error and NCCL's intra-node transport
# fails there; NVIDIA's containers ask for --ipc=host or --shm-size of gigabytes.
SMALL_SHM_BYTES = 1024**3


@dataclass(frozen=True)
class GpuMemory:
    total: int  # bytes of the smallest visible GPU
    used: int  # bytes other processes hold on the fullest visible GPU


def gpu_memory(env: Mapping[str, str]) -> GpuMemory | None:
    """The memory of the GPUs a job here sees (CUDA_VISIBLE_DEVICES by index narrows them), from nvidia-smi; None
    without nvidia-smi or when it answers nothing readable."""
    if shutil.which("nvidia-smi", path=env.get("PATH")) is None:
        return None
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.total,memory.used",
                               "--format=csv,noheader,nounits"], env=dict(env), capture_output=True, text=True,
                              timeout=SUBPROCESS_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    sizes: dict[str, tuple[int, int]] = {}
    for line in done.stdout.splitlines()[:1024]:
        index, total, used = ([*(part.strip() for part in line.split(",")), "", ""])[:3]
        if index.isdigit() and total.isdigit():
            sizes[index] = (int(total) * 1024**2, int(used) * 1024**2 if used.isdigit() else 0)
    visible = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if visible and all(d.isdigit() for d in visible):  # UUIDs or MIG names: every GPU listed counts
        sizes = {i: b for i, b in sizes.items() if i in visible}
    if done.returncode != 0 or not sizes:
        return None
    return GpuMemory(min(t for t, _ in sizes.values()), max(u for _, u in sizes.values()))


def free_bytes(path: Path, levels: int | None = None) -> int | None:
    """Free bytes on the file system that holds `path` (its nearest existing ancestor: the run makes the rest),
    looking at most `levels` directories up (None: up to the root)."""
    for candidate in (path, *path.parents)[:None if levels is None else levels + 1]:
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def unmodelled_memory_settings(arg: Callable[[str], Any], data_parallel: int | None = None) -> list[str]:
    """Settings that take memory off the GPU in ways the estimate does not count (docs/plan.md): with one of
    them an estimate above the GPU is only a warning. FSDP shards over the data-parallel ranks (DP·CP): with
    `data_parallel` 1 it holds everything on the one GPU and saves nothing (seen: a DeepSeek-V3 script with
    Megatron FSDP, moved to one GPU, estimated at 255 GiB and passed as "not counted")."""
    sharding = ["use_torch_fsdp2", "use_megatron_fsdp"] if data_parallel is None or data_parallel > 1 else []
    names = [*sharding, "optimizer_cpu_offload", "fine_grained_activation_offloading"]
    found = [name for name in names if arg(name)]
    return found + (["cpu_offloading_num_layers"] if (arg("cpu_offloading_num_layers") or 0) > 0 else [])


def sharded_over(job: Any) -> int:
    """The ranks FSDP shards a job's parameters, gradients and optimizer state over: its DP·CP."""
    return job.layout.dp * job.layout.cp


def memory_finding(needed_bytes: float, gpu: GpuMemory | None,
                   unmodelled: Sequence[str] = ()) -> tuple[Status, str, str] | None:
    """(status, detail, fix) for the memory per GPU, or None when there is no GPU here to hold it to. The verdict is
    the one memory rule's (formulas.memory_fit, as the dry-run's) on this GPU's memory."""
    if gpu is None:
        return None
    have = gpu.total
    detail = (f"the job needs ~{needed_bytes / GIB:.1f} GiB per GPU (the dry-run's estimate); the GPU here has "
              f"{have / GIB:.1f} GiB")
    fix = ("lower micro_batch_size, recompute activations (recompute_granularity=full), use the distributed "
           "optimizer or more TP/PP; `launch plan` lists layouts that fit")
    reserve = (f"{(have - MEMORY_RESERVE_BYTES) / GIB:.1f} GiB usable: {MEMORY_RESERVE_BYTES / GIB:.1f} GiB go to "
               "CUDA's context, NCCL and the allocator's fragmentation")
    fits = memory_fit(needed_bytes, have)
    if not fits and unmodelled:
        return "warn", detail + f" ({reserve}), but the estimate does not count what {', '.join(unmodelled)} saves", fix
    if not fits:
        return "fail", detail + f" ({reserve}): it would run out of memory at its first step", fix
    if needed_bytes > USABLE_FRACTION * have:
        return "warn", detail + f": above {USABLE_FRACTION:.0%}, little room for the estimate's error", fix
    if not memory_fit(needed_bytes, have - gpu.used):
        return ("warn", detail + f", of which other processes use {gpu.used / GIB:.1f} GiB now: the job fits only "
                "once they end", "see nvidia-smi for the processes, or choose other GPUs (CUDA_VISIBLE_DEVICES)")
    return "ok", detail, ""


def checkpoint_finding(save: str, checkpoint: float, kept: int, free: int | None) -> tuple[Status, str, str] | None:
    """(status, detail, fix) for the `kept` checkpoints under --save, or None when the free space is unknown."""
    if free is None:
        return None
    detail = (f"one checkpoint (weights and optimizer state) is ~{human_bytes(checkpoint)}; the file system of "
              f"{save} has {human_bytes(free)} free")
    fix = ("free space there, point save at a larger file system (--set save=PATH), or save the weights without "
           "the optimizer state (--set no_save_optim=true: ~1/7 of the size; a resume then restarts Adam)")
    if checkpoint > free:
        return "fail", detail + ": the first save would fail (and leave a broken checkpoint)", fix
    if kept > 1 and kept * checkpoint > free:
        return ("warn", detail + f": room for {int(free // checkpoint)} of the {kept} checkpoints this run keeps",
                "set save_retain_interval (older checkpoints are deleted), a longer save_interval, or free space")
    return "ok", detail, ""


def kept_checkpoints(job: Any) -> int:
    """How many checkpoints the run leaves on disk: one per save_interval, or with save_retain_interval the
    multiples of it and the newest."""
    iterations = job.arg("train_iters") or 0
    interval = job.arg("save_interval") or iterations or 1
    saves = max(1, -(-iterations // interval)) if iterations else 1
    retain = job.arg("save_retain_interval")
    if not retain or not iterations:
        return saves
    return min(saves, iterations // retain + (1 if iterations % retain else 0))


def shared_memory_finding(total: int | None, workers: int, gpus: int) -> tuple[Status, str, str] | None:
    """(status, detail, fix) for /dev/shm, or None when it is unknown or nothing of the job uses it."""
    if total is None or (workers <= 0 and gpus <= 1):
        return None
    if total >= SMALL_SHM_BYTES:
        return "ok", f"/dev/shm has {human_bytes(total)}", ""
    users = " and ".join(([f"{workers} data-loader worker(s) per rank"] if workers > 0 else [])
                         + (["NCCL between this node's GPUs"] if gpus > 1 else []))
    return ("warn", f"/dev/shm has only {human_bytes(total)}, which {users} share: a bus error or an NCCL error is "
            "likely", "in a container run it with --ipc=host or --shm-size=16g; or set num_workers=0")


def shm_bytes() -> int | None:
    try:
        return shutil.disk_usage("/dev/shm").total
    except OSError:
        return None


def capacity_findings(job: Any, env: Mapping[str, str]) -> list[Finding]:
    """GPU memory, shared memory and checkpoint space on this machine, for the job."""
    facts = job_facts(job)
    found = []
    needed = facts["estimate"]["memory_per_gpu_bytes"]
    unmodelled = unmodelled_memory_settings(job.arg, sharded_over(job))
    if (memory := memory_finding(needed, gpu_memory(env), unmodelled)) is not None:
        found.append(Finding("gpu memory", *memory))
    if (shm := shared_memory_finding(shm_bytes(), int(job.arg("num_workers") or 0), job.gpus_per_node)) is not None:
        found.append(Finding("shared memory", *shm))
    if (disk := checkpoint_space(job, facts["checkpoint_bytes"])) is not None:
        found.append(disk)
    return found


def checkpoint_space(job: Any, checkpoint: float | None = None, levels: int | None = None) -> Finding | None:
    """The checkpoints under the job's `save` against the free space there, or None when that is not known here:
    no `save`, object storage (Megatron's msc:// paths), or no existing directory within `levels` of it (a login
    node may not have a compute node's local disk)."""
    save = job.megatron.get("save")
    if not save or "://" in str(save):
        return None
    size = job_facts(job)["checkpoint_bytes"] if checkpoint is None else checkpoint
    disk = checkpoint_finding(str(save), size, kept_checkpoints(job), free_bytes(Path(save), levels))
    return None if disk is None else Finding("checkpoint space", *disk)
