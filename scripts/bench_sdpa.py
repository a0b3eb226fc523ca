"""Which of torch's attention kernels is fastest at a model's attention shape (forward + backward, causal, bf16)?

    python scripts/bench_sdpa.py [--batch 32 --heads 16 --seq 1024 --head-dim 64] [--reps 30]

The compiled layers (launcher/inside/megatron_ext/compiled_layer.py) call F.scaled_dot_product_attention and let
torch pick its kernel. This times each kernel torch has (cuDNN, flash, memory-efficient) on the tensors the layer
hands it: permuted views of Megatron's [s, b, heads, d] QKV split, and contiguous [b, heads, s, d] for comparison.
One line per kernel and layout: milliseconds per forward + backward and TFLOP/s (causal FLOPs: half of 4·b·h·s²·d
forward, 2.5× that for forward + backward). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

KERNELS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
           "efficient": SDPBackend.EFFICIENT_ATTENTION}


def inputs(b: int, h: int, s: int, d: int, layout: str) -> list[torch.Tensor]:
    if layout == "megatron":  # [s, b, heads, 3d] split and permuted, as layer_math does
        qkv = torch.randn(s, b, h, 3 * d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        q, k, v = torch.split(qkv, [d, d, d], dim=3)
        return [qkv, q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3)]
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    return [q, q, k, v]


def time_kernel(kernel: str, layout: str, args: argparse.Namespace) -> float | None:
    leaf, q, k, v = inputs(args.batch, args.heads, args.seq, args.head_dim, layout)
    grad = torch.randn(args.batch, args.heads, args.seq, args.head_dim, device="cuda", dtype=torch.bfloat16)

    def step() -> None:
        with sdpa_kernel([KERNELS[kernel]]):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad, retain_graph=False)

    try:
        for _ in range(5):
            step()
    except RuntimeError as err:  # the kernel does not take these inputs
        print(f"{kernel:10s} {layout:9s} not available: {str(err).splitlines()[0][:120]}")
        return None
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(args.reps):
        step()
    end.record()
    torch.cuda.synchronize()
    del leaf
    return start.elapsed_time(end) / args.reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("batch", 32), ("heads", 16), ("seq", 1024), ("head-dim", 64), ("reps", 30)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    flops = 2.5 * 4 * args.batch * args.heads * args.seq ** 2 * args.head_dim / 2
    rows = []
    for layout in ("megatron", "contiguous"):
        for kernel in KERNELS:
            ms = time_kernel(kernel, layout, args)
            if ms is not None:
                rows.append({"kernel": kernel, "layout": layout, "ms": round(ms, 3),
                             "tflops": round(flops / ms / 1e9, 1)})
                print(f"{kernel:10s} {layout:9s} {ms:7.3f} ms  {flops / ms / 1e9:6.1f} TFLOP/s")
    print(json.dumps({"shape": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
