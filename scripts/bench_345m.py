"""Benchmark: the shipped 345m preset through `launch` against compiled plain PyTorch, back-to-back on one GPU.

    python scripts/bench_345m.py [--iters 60] [--parts baseline,1gpu,dp2] [--out DIR]

1. baseline: scripts/torch_gpt345m.py (GPT-2 345M in plain PyTorch, SDPA flash attention, torch.compile,
   fused AdamW) at micro batch 16 × 2 accumulation steps = global batch 32, the preset's global batch;
2. 1gpu: `launch 345m` on the first GPU, as shipped (only train_iters and eval_iters changed);
3. dp2: `launch 345m` on two GPUs with the global batch doubled to 64 (same micro batch and work per GPU),
   for the data-parallel scaling efficiency = tokens/s(DP2) / (2 × tokens/s(1 GPU)).
Prints each figure, the ratio preset / baseline, and writes bench.json into --out.
Needs CUDA GPUs, torch, and the Megatron-LM checkout (MEGATRON_LM_PATH or the submodule).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASELINE = re.compile(r"torch345m .*iter_ms=([\d.]+) tok_s=(\d+) TFLOPs=([\d.]+) maxmem_GB=([\d.]+)")


def gpu_ids() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [d.strip() for d in visible.split(",") if d.strip()]
    sys.path.insert(0, str(REPO))
    from launcher.backends.local import visible_gpus

    return [str(i) for i in range(visible_gpus())]


def run_baseline(gpu: str, log: Path) -> dict:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, "MBS": "16", "ACCUM": "2", "COMPILE": "1", "ITERS": "30"}
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "torch_gpt345m.py")], env=env,
                          capture_output=True, text=True)
    log.write_text(proc.stdout + proc.stderr)
    match = BASELINE.search(proc.stdout)
    if proc.returncode != 0 or not match:
        raise SystemExit(f"baseline failed (exit {proc.returncode}); see {log}")
    return {"ms_per_iter": float(match[1]), "tokens_per_s": float(match[2]), "tflops_per_gpu": float(match[3]),
            "peak_memory_gb": float(match[4]), "command": "MBS=16 ACCUM=2 COMPILE=1 ITERS=30 "
            "python scripts/torch_gpt345m.py"}


def run_launch(gpus: list[str], extra: list[str], iters: int, run_root: Path, log: Path,
               env_extra: dict[str, str] | None = None) -> dict:
    args = ["345m", "--gpus-per-node", str(len(gpus)), "--set", f"train_iters={iters}", "--set", "eval_iters=0",
            *extra, "--set", f"run_root={run_root}"]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(gpus), "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    env["PYTHONPATH"] = f"{REPO}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO)
    proc = subprocess.run([sys.executable, "-m", "launcher", *args], env=env, capture_output=True, text=True)
    log.write_text(proc.stdout + proc.stderr)
    run_dir = next((line.removeprefix("# run directory: ").strip() for line in proc.stdout.splitlines()
                    if line.startswith("# run directory: ")), None)
    if proc.returncode != 0 or run_dir is None:
        raise SystemExit(f"launch {' '.join(args)} failed (exit {proc.returncode}); see {log}")
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    return {"ms_per_iter": summary["steady_ms_per_iter"], "tokens_per_s": summary["steady_tokens_per_s"],
            "tflops_per_gpu": summary["steady_tflops_per_gpu"], "peak_memory_mb": summary["peak_memory_mb"],
            "final_loss": summary["final_loss"], "run_dir": run_dir, "command": "launch " + " ".join(args[:-2])}


def report(label: str, result: dict) -> None:
    print(f"{label:36s} {result['tokens_per_s']:>9,.0f} tokens/s  {result['ms_per_iter']:7.1f} ms/iter", flush=True)


def save(out_file: Path, results: dict) -> None:
    """bench.json after every part, so a run cut short keeps what it measured."""
    out_file.write_text(json.dumps(results, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=60, help="training iterations of each launch run")
    parser.add_argument("--parts", default="baseline,1gpu,dp2", help="which measurements, comma-separated")
    parser.add_argument("--out", type=Path, default=Path("bench-out"), help="logs, run dirs and bench.json")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    out_file = args.out / "bench.json"
    results = json.loads(out_file.read_text()) if out_file.is_file() else {}
    gpus = gpu_ids()
    if not gpus:
        raise SystemExit("no CUDA GPU visible")
    if "baseline" in parts:
        results["baseline"] = run_baseline(gpus[0], args.out / "baseline.log")
        report("baseline, compiled plain PyTorch:", results["baseline"])
        save(out_file, results)
    if "1gpu" in parts:
        results["preset_1gpu"] = run_launch(gpus[:1], [], args.iters, args.out / "runs", args.out / "launch-1gpu.log")
        report("345m preset, 1 GPU, via launch:", results["preset_1gpu"])
    if "baseline" in results and "preset_1gpu" in results:
        results["ratio_preset_over_baseline"] = results["preset_1gpu"]["tokens_per_s"] / results["baseline"][
            "tokens_per_s"]
        print(f"ratio preset / baseline: {results['ratio_preset_over_baseline']:.3f}", flush=True)
        save(out_file, results)
    if "dp2" in parts:
        if len(gpus) < 2:
            print("dp2: skipped, fewer than 2 GPUs", flush=True)
        else:
            results["preset_dp2"] = run_launch(gpus[:2], ["--set", "global_batch_size=64"], args.iters,
                                               args.out / "runs", args.out / "launch-dp2.log")
            report("345m preset, DP 2 (batch 64):", results["preset_dp2"])
    if "preset_1gpu" in results and "preset_dp2" in results:
        results["dp2_scaling_efficiency"] = results["preset_dp2"]["tokens_per_s"] / (
            2 * results["preset_1gpu"]["tokens_per_s"])
        print(f"DP 2 scaling efficiency: {results['dp2_scaling_efficiency']:.3f}")
    save(out_file, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
