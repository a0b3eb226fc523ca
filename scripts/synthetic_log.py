"""A long synthetic Megatron log, for measuring `launch report` on it (docs/hostile-input.md, "Measured").

    python scripts/synthetic_log.py LINES OUT.log [--distinct-times]

tests/fixtures/logs/toy_fp32_1gpu.log's start (argument dump and set-up), then LINES iteration lines in its format
(log_interval 1, train_iters LINES; about 360 bytes each), a checkpoint save at the end and the end-of-training
line. Times vary over 200 values (with --distinct-times, each line has its own, printed with 6 decimals: the
worst case for the median), losses decrease with some noise: a plot and a summary have something to show.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "logs" / "toy_fp32_1gpu.log"


def main(argv: list[str]) -> int:
    distinct = "--distinct-times" in argv
    argv = [word for word in argv if word != "--distinct-times"]
    if len(argv) != 2 or not argv[0].isdigit():
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    n, out_path = int(argv[0]), Path(argv[1])
    start = FIXTURE.read_text().splitlines()
    first = next(i for i, line in enumerate(start) if "iteration        1/" in line)
    with out_path.open("w") as out:
        out.writelines(line + "\n" for line in start[:first])
        for it in range(1, n + 1):
            ms = 18912.4 if it == 1 else 19.0 + (it * 1e-6 if distinct else (it * 7919 % 200) / 100)
            loss = 4.8 * math.exp(-it / n) + (it * 104729 % 1000) / 1e5
            out.write(f" [2026-11-29 16:02:50.030432] iteration {it:>8}/{n:>8} | consumed samples: {8 * it:>12} | "
                      f"elapsed time per iteration (ms): {ms:.{6 if distinct else 1}f} | "
                      "throughput per GPU (TFLOP/s/GPU): 0.1 | "
                      f"learning rate: {1e-3 * (1 - it / n):.6E} | global batch size:     8 | "
                      f"lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 0.379 | "
                      "number of skipped iterations:   0 | number of nan iterations:   0 |\n")
        out.write(f"[2026-11-29 16:03:10.971862] saving checkpoint at iteration {n:>7} to /nonexistent/ckpt "
                  "in torch_dist format\n")
        out.write(f"  [2026-11-29 16:03:11.241862] successfully saved checkpoint from iteration {n:>7} to "
                  "/nonexistent/ckpt [ t 1/1, p 1/1 ]\n")
        out.write("[after training is done] datetime: 2026-11-29 16:02:35.013381 \n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
