"""CPU minutes per GiB that the failure triage spends reading a log (`AttemptReader.feed`, line by line): 64 KiB lines
of a text repeated that the triage's patterns look for (the costliest kind of line), ordinary lines (iteration
lines, traceback frames, NCCL INFO) and ordinary lines behind a tool's own prefix.

    python scripts/bench_triage_feed.py
"""

from __future__ import annotations

import time

from launcher.runs.triage import AttemptReader

LINE = 64 * 1024 - 1
REPEATED = {
    "NCCL error invalid": "NCCL error invalid ",
    "Cuda failure without its quote": "Cuda failure 1 '" + " " * 100,
    "Megatron's NaN check": "found NaN in local ",
    "the kernel's OOM words": "oom Out of memory: ",
    "a rank's CUDA crash words": "illegal memory _STATUS_ misaligned ",
    "a traceback header late": "x" * 300 + "Traceback (most recent call last): ",
}
ORDINARY = [" [2026-12-01 10:00:00] iteration       10/     100 | consumed samples:          80 | elapsed time per "
            "iteration (ms): 100.0 | lm loss: 5.000000E+00 |",
            '  File "/mlm/megatron/core/transformer/transformer_layer.py", line 474, in forward',
            "gpu-1:4242:4300 [3] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"]
PREFIX = "2026-12-01 10:00:00.977 [177/train/578 (pid 28936)] "


def minutes_per_gib(lines: list[str]) -> float:
    reader = AttemptReader()
    start = time.process_time()
    for line in lines:
        reader.feed(line)
    return (time.process_time() - start) / (sum(map(len, lines)) / 2**30) / 60


def main() -> None:
    for name, text in REPEATED.items():
        line = (text * (LINE // len(text) + 1))[:LINE] + "\n"
        print(f"64 KiB lines, {name}: {minutes_per_gib([line] * 32):.1f} min/GiB")
    ordinary = [ORDINARY[i % len(ORDINARY)] + "\n" for i in range(30_000)]
    print(f"ordinary lines: {minutes_per_gib(ordinary):.1f} min/GiB")
    prefixed = [PREFIX + "Traceback (most recent call last):\n", *(PREFIX + line for line in ordinary)]
    print(f"ordinary lines behind a learnt prefix: {minutes_per_gib(prefixed):.1f} min/GiB")


if __name__ == "__main__":
    main()
