"""The one GPU catalogue: memory, peak FLOP/s, bandwidths and compute capability of each GPU model the launcher
knows by name (launcher.gpu, `launch plan --gpu`). The estimator reads its numbers, the target rules its
capability; nothing else keeps a table of GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.errors import Problem, UserError, closest

GIB = 1024**3


@dataclass(frozen=True)
class Gpu:
    """A GPU model: memory torch reports, dense peaks, memory bandwidth, link speeds, kernel family."""

    name: str
    memory_bytes: float
    peak_tflops: float  # dense bf16/fp16, vendor datasheet (FP8 is twice this where the GPU has it)
    hbm_tbps: float  # memory bandwidth, TB/s (elementwise kernels and the optimizer step are bound by it)
    nvlink_gbps: float  # bus bandwidth per GPU NCCL reaches inside a node, GB/s
    network_gbps: float  # bus bandwidth per GPU between nodes (one NIC per GPU), GB/s
    family: str  # which kernel-efficiency constants apply (steptime.KERNELS)
    capability: tuple[int, int]  # CUDA compute capability: Megatron's checks ask it (target rules)
    note: str = ""


# Link figures are NCCL bus bandwidths, not link peaks: ~75 % of NVLink (A100 300, H100 450 GB/s per
# direction) and ~90 % of one 200 / 400 Gb/s InfiniBand NIC per GPU.
GPUS: dict[str, Gpu] = {
    g.name: g
    for g in [
        Gpu("a100-40gb", 39.4 * GIB, 312, 1.56, 230, 23, "ampere", (8, 0), "A100 SXM4 40GB, 200 Gb/s IB per GPU"),
        Gpu("a100-80gb", 79.2 * GIB, 312, 2.04, 230, 23, "ampere", (8, 0), "A100 SXM4 80GB, 200 Gb/s IB per GPU"),
        Gpu("h100-80gb", 79.1 * GIB, 989, 3.35, 340, 45, "hopper", (9, 0), "H100 SXM5 80GB, 400 Gb/s IB per GPU"),
        Gpu("h200-141gb", 139.8 * GIB, 989, 4.8, 340, 45, "hopper", (9, 0), "H200 SXM 141GB, 400 Gb/s IB per GPU"),
        Gpu("b200-180gb", 178.4 * GIB, 2250, 8.0, 680, 45, "blackwell", (10, 0), "B200 180GB, 400 Gb/s IB per GPU"),
        Gpu("gh200-96gb", 94.5 * GIB, 989, 4.0, 340, 45, "hopper", (9, 0), "GH200 Grace Hopper 96GB HBM3"),
        Gpu("l40s-48gb", 44.4 * GIB, 362, 0.86, 24, 23, "ada", (8, 9), "L40S 48GB, PCIe only"),
    ]
}
DEFAULT_GPU = "h100-80gb"


def gpu_by_name(name: str) -> Gpu:
    """Look a GPU up by catalogue name; raises UserError listing the known names."""
    key = name.strip().lower()
    if key in GPUS:
        return GPUS[key]
    # a model without its memory (h100, a100) names the catalogue's sizes of it; else the closest spelling
    sizes = [known for known in sorted(GPUS) if key and known.startswith(key.rstrip("-") + "-")]
    near = sizes or closest(key, GPUS)
    mean = f"did you mean {' or '.join(near)}? " if near else ""
    raise UserError(Problem(f"unknown GPU {name!r}", f"{mean}known GPUs: {', '.join(sorted(GPUS))}"))
