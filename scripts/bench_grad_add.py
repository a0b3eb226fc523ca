"""DDP's fp32 main_grad += bf16 grad adds for the 345m parameter shapes, alone on one GPU (docs/benchmarks.md):
the plain add, with a transposed gradient, after a cast, as one foreach, and fp32 + fp32 for scale.

    python scripts/bench_grad_add.py
"""

import time

import torch

SHAPES = [(3072, 1024), (1024, 1024), (4096, 1024), (1024, 4096)] * 24 + [(50304, 1024), (1024, 1024)]


def timeit(name: str, fn, n: int = 5) -> None:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    print(f"{name:40s} {(time.perf_counter() - start) / n * 1e3:8.2f} ms", flush=True)


def main() -> None:
    torch.manual_seed(0)
    main_grads = [torch.zeros(s, device="cuda", dtype=torch.float32) for s in SHAPES]
    grads = [torch.randn(s, device="cuda", dtype=torch.bfloat16) for s in SHAPES]
    transposed = [torch.randn(s[::-1], device="cuda", dtype=torch.bfloat16).t() for s in SHAPES]
    timeit("mixed add_ (contiguous)", lambda: [m.add_(g) for m, g in zip(main_grads, grads)])
    timeit("mixed add_ (transposed grad)", lambda: [m.add_(g) for m, g in zip(main_grads, transposed)])
    timeit("add_(g.float())", lambda: [m.add_(g.float()) for m, g in zip(main_grads, grads)])
    timeit("_foreach_add_ mixed", lambda: torch._foreach_add_(main_grads, grads))
    timeit("fp32+fp32 add_", lambda: [m.add_(m) for m in main_grads])


if __name__ == "__main__":
    main()
