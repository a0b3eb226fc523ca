"""Run `launch 345m` variants on one GPU and print each one's steady ms/iter and tokens/s.

    python scripts/bench_variants.py GPU OUT_DIR '[["name", {"ENV": "value"}, ["setting=value", ...]], ...]'

Each variant is `launch 345m --set train_iters=60 --set eval_iters=0` plus its `--set`s, with its environment
variables. Pair it with the baseline in the same command (`MBS=16 ACCUM=2 COMPILE=1 ITERS=30 python
scripts/torch_gpt345m.py`); docs/benchmarks.md gives the commands. A run with Megatron's PyTorch profiler
(`profile=true`, `use_pytorch_profiler=true`, ...) gets its trace summarised by scripts/trace_summary.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    gpu, out, variants = argv[0], Path(argv[1]), json.loads(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for name, env_extra, sets in variants:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, **env_extra}
        env["PYTHONPATH"] = f"{REPO}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO)
        argv_ = [sys.executable, "-m", "launcher.cli", "345m", "--set", "train_iters=60", "--set", "eval_iters=0",
                 "--set", f"run_root={out / 'runs' / name}", *(w for s in sets for w in ("--set", s))]
        proc = subprocess.run(argv_, env=env, capture_output=True, text=True)
        run_dir = next((line.split(": ", 1)[1].strip() for line in proc.stdout.splitlines()
                        if line.startswith("# run directory: ")), None)
        if proc.returncode or not run_dir:
            (out / f"{name}.err").write_text(proc.stdout[-3000:] + proc.stderr[-3000:])
            print(f"{name}: failed (exit {proc.returncode}), see {out / (name + '.err')}", flush=True)
            continue
        s = json.loads((Path(run_dir) / "summary.json").read_text())
        (out / f"{name}.summary.json").write_text(json.dumps(s, indent=1))
        print(f"{name:28s} {s['steady_tokens_per_s']:>9,.0f} tokens/s {s['steady_ms_per_iter']:6.1f} ms/iter "
              f"peak {s['peak_memory_mb']:.0f} MB loss {s['final_loss']}", flush=True)
        for trace in Path(run_dir).rglob("rank-0.json.gz"):
            report = subprocess.run([sys.executable, str(REPO / "scripts" / "trace_summary.py"), str(trace)],
                                    capture_output=True, text=True)
            (out / f"{name}.trace.txt").write_text(report.stdout + report.stderr)
            print(report.stdout, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
