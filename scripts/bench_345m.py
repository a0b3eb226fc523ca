"""Benchmark: the shipped 345m preset through `launch` against the best-tuned compiled plain PyTorch, on one GPU.

    python scripts/bench_345m.py [--iters 60] [--parts startup,toy,interleaved,micro,dp2] [--out DIR]

1. startup, first (its first launches meet the caches as the command found them): where a launch's wall time
   goes (scripts/startup_timing.py's milestones): `launch 345m --gpus-per-node 1 --set train_iters=5 --set
   log_interval=1` and `launch toy --gpus-per-node 1`, each once to fill the compile caches, then timed
   --startup-repeats times, interleaved; prints a table of seconds from the command's start to
   the run directory, the rank's start, its imports done, Megatron initialized, iteration 1, training done, exit;
2. toy: `launch toy --gpus-per-node 1` (the one-GPU fallback), wall time from command to summary and its start-up;
3. interleaved, back to back on the first GPU: the baseline scripts/torch_gpt345m.py (GPT-2 345M in plain
   PyTorch, SDPA flash attention, torch.compile, fused AdamW) at each micro-batch choice for the preset's global
   batch 32 (32 × 1, 16 × 2, 8 × 4), with `launch 345m` runs between them, so drift shows: baseline 32 × 1,
   preset, baseline 16 × 2, preset with async_save=false (the synchronous save, for comparison; the save comes
   after the measured iterations), baseline 8 × 4. The ratio is the best preset run over the best baseline;
4. micro: `launch 345m` at each micro batch of the global batch 32 (32, 16, 8, 4), back to back: the fastest is
   what `launch plan 345m --measure` must rank first (its trials are shorter);
5. dp2: `launch 345m` on two GPUs with the global batch doubled to 64 (same micro batch and work per GPU),
   for the data-parallel scaling efficiency = tokens/s(DP2) / (2 × tokens/s(1 GPU)).
Prints every figure (throughput, start-up breakdown, blocking save time) and writes bench.json into --out.
Needs CUDA GPUs, torch, and the Megatron-LM checkout (MEGATRON_LM_PATH or the submodule).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from startup_timing import breakdown_table, time_command  # scripts/, this file's directory

REPO = Path(__file__).resolve().parent.parent
SETUP_TIMER = re.compile(r"(model-and-optimizer-setup|train/valid/test-data-iterators-setup)"
                         r"\s*(?:\.+:\s*\(([\d.]+), ([\d.]+)\))")
BASELINE = re.compile(r"torch345m .*iter_ms=([\d.]+) tok_s=(\d+) TFLOPs=([\d.]+) maxmem_GB=([\d.]+)")


def gpu_ids() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [d.strip() for d in visible.split(",") if d.strip()]
    sys.path.insert(0, str(REPO))
    from launcher.backends.local import visible_gpus

    return [str(i) for i in range(visible_gpus())]


def run_baseline(gpu: str, log: Path, mbs: int = 16, accum: int = 2) -> dict:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, "MBS": str(mbs), "ACCUM": str(accum), "COMPILE": "1",
           "ITERS": "30"}
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "torch_gpt345m.py")], env=env,
                          capture_output=True, text=True)
    log.write_text(proc.stdout + proc.stderr)
    match = BASELINE.search(proc.stdout)
    if proc.returncode != 0 or not match:
        raise SystemExit(f"baseline failed (exit {proc.returncode}); see {log}")
    return {"ms_per_iter": float(match[1]), "tokens_per_s": float(match[2]), "tflops_per_gpu": float(match[3]),
            "peak_memory_gb": float(match[4]), "micro_batch": f"{mbs} x {accum}",
            "command": f"MBS={mbs} ACCUM={accum} COMPILE=1 ITERS=30 python scripts/torch_gpt345m.py"}


def launcher_run(args: list[str], gpus: list[str], run_root: Path, log: Path,
                 env_extra: dict[str, str] | None = None, timeout_s: float = 300) -> tuple[dict, Path, float]:
    """`launch ARGS` as a subprocess: (its summary.json, its run directory, wall seconds from command to exit)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(gpus), "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    env["PYTHONPATH"] = f"{REPO}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO)
    start = time.monotonic()
    # Its own process group, so that a run past its time limit goes with torchrun and the training processes.
    proc = subprocess.Popen([sys.executable, "-m", "launcher", *args, "--set", f"run_root={run_root}"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        log.write_text(output)
        raise SystemExit(f"launch {' '.join(args)} still running after {timeout_s} s; see {log}") from None
    wall = time.monotonic() - start
    log.write_text(output)
    run_dir = next((line.removeprefix("# run directory: ").strip() for line in output.splitlines()
                    if line.startswith("# run directory: ")), None)
    if proc.returncode != 0 or run_dir is None:
        raise SystemExit(f"launch {' '.join(args)} failed (exit {proc.returncode}); see {log}")
    return json.loads((Path(run_dir) / "summary.json").read_text()), Path(run_dir), wall


def megatron_setup_timers(run_dir: Path) -> dict[str, float]:
    """Megatron's own set-up timers from the log (`model-and-optimizer-setup`, data iterators), in seconds."""
    found = {}
    for log in sorted((run_dir / "logs").glob("attempt-*.log")):
        for match in SETUP_TIMER.finditer(log.read_text(errors="replace")):
            found[match[1]] = float(match[3]) / 1000.0
    return found


def run_launch(gpus: list[str], extra: list[str], iters: int, run_root: Path, log: Path,
               env_extra: dict[str, str] | None = None) -> dict:
    args = ["345m", "--gpus-per-node", str(len(gpus)), "--set", f"train_iters={iters}", "--set", "eval_iters=0",
            *extra]
    summary, run_dir, wall = launcher_run(args, gpus, run_root, log, env_extra, timeout_s=200)
    return {"ms_per_iter": summary["steady_ms_per_iter"], "tokens_per_s": summary["steady_tokens_per_s"],
            "tflops_per_gpu": summary["steady_tflops_per_gpu"], "peak_memory_mb": summary["peak_memory_mb"],
            "final_loss": summary["final_loss"], "startup": summary.get("startup"), "wall_s": round(wall, 1),
            "megatron_setup_s": megatron_setup_timers(run_dir), "run_dir": str(run_dir),
            "command": "launch " + " ".join(args)}


def run_toy(gpu: str, run_root: Path, log: Path) -> dict:
    summary, run_dir, wall = launcher_run(["toy", "--gpus-per-node", "1"], [gpu], run_root, log, timeout_s=120)
    return {"wall_s": round(wall, 1), "outcome": summary["outcome"], "startup": summary.get("startup"),
            "megatron_setup_s": megatron_setup_timers(run_dir), "command": "launch toy --gpus-per-node 1"}


def report(label: str, result: dict) -> None:
    startup = result.get("startup") or {}
    extra = ""
    if startup:
        extra = (f"  start-up {startup.get('start_to_first_iteration_s')} s to iteration 1 "
                 f"(init {startup.get('start_to_initialized_s')} + model/opt/data "
                 f"{startup.get('model_optimizer_data_s')} + first {startup.get('first_iteration_s')}), "
                 f"save blocked {startup.get('last_save_blocking_s')} s, wall {result.get('wall_s')} s, "
                 f"Megatron set-up timers {result.get('megatron_setup_s')}")
    print(f"{label:44s} {result['tokens_per_s']:>9,.0f} tokens/s  {result['ms_per_iter']:7.1f} ms/iter{extra}",
          flush=True)


def save(out_file: Path, results: dict) -> None:
    """bench.json after every part, so a run cut short keeps what it measured."""
    out_file.write_text(json.dumps(results, indent=2) + "\n")


# (label, baseline micro batch × accumulation) or (label, extra launch settings): back to back, in this order.
INTERLEAVED = [
    ("baseline 32x1", (32, 1)), ("preset", []), ("baseline 16x2", (16, 2)),
    ("preset, async_save=false", ["--set", "async_save=false"]), ("baseline 8x4", (8, 4)),
    # the launcher's two sync-free defaults undone: what they are worth, in the same command
    ("without the launcher's defaults (rerun_mode validate_results, TensorBoard every step)",
     ["--set", "rerun_mode=validate_results", "--set", "tensorboard_log_interval=1"]),
]


def interleaved(gpu: str, iters: int, out: Path, results: dict, out_file: Path) -> None:
    runs = results.setdefault("interleaved", [])
    for n, (label, what) in enumerate(INTERLEAVED):
        try:
            if isinstance(what, tuple):
                result = run_baseline(gpu, out / f"{n}-baseline.log", *what)
            else:
                result = run_launch([gpu], what, iters, out / "runs", out / f"{n}-launch.log")
        except SystemExit as failure:  # one failed run does not lose the others
            print(f"{label}: {failure}", flush=True)
            runs.append({"label": label, "failed": str(failure)})
            continue
        runs.append({"label": label, **result})
        report(f"{label}:", result)
        save(out_file, results)
    baselines = [r for r in runs if r["label"].startswith("baseline") and "failed" not in r]
    # The save comes after the measured iterations, so both preset runs measure the shipped training step.
    presets = [r for r in runs if r["label"].startswith("preset") and "failed" not in r]
    if baselines and presets:
        best_baseline = max(baselines, key=lambda r: r["tokens_per_s"])
        best_preset = max(presets, key=lambda r: r["tokens_per_s"])
        results["best_baseline"] = best_baseline["label"]
        results["ratio_best_preset_over_best_baseline"] = best_preset["tokens_per_s"] / best_baseline["tokens_per_s"]
        print(f"best baseline: {best_baseline['label']} {best_baseline['tokens_per_s']:,.0f} tokens/s; "
              f"best preset {best_preset['tokens_per_s']:,.0f} tokens/s; "
              f"ratio {results['ratio_best_preset_over_best_baseline']:.3f}", flush=True)
        results["preset_1gpu"] = best_preset


# The start-up launches (the targets: 345m <= 10 s to iteration 1 and <= 20 s to exit, toy <= 10 s warm), as
# `launch` arguments; LAUNCH is how the command starts.
LAUNCH = [sys.executable, "-m", "launcher"]
STARTUP_LAUNCHES = (
    ("m345", ["345m", "--gpus-per-node", "1", "--set", "train_iters=5", "--set", "log_interval=1"]),
    ("toy", ["toy", "--gpus-per-node", "1"]),
)


def startup_breakdown(gpu: str, out: Path, results: dict, out_file: Path, repeats: int = 2,
                      timeout_s: float = 120.0) -> None:
    """Each start-up launch once (it fills the compile caches: cold on a fresh machine, since this part runs first),
    then `repeats` rounds of all of them; the breakdown table of every launch, printed and kept in bench.json."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu}
    env["PYTHONPATH"] = f"{REPO}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO)
    runs = results["startup"] = []
    for round_ in range(repeats + 1):
        for name, args in STARTUP_LAUNCHES:
            label = f"{name}-{'first' if round_ == 0 else f'warm{round_}'}"
            command = [*LAUNCH, *args, "--set", f"run_root={out / 'runs'}"]
            result = time_command(command, label, out / "startup", timeout_s, env=env)
            runs.append({**result, "command": "launch " + " ".join(args)})
            save(out_file, results)
    print(f"start-up, seconds from the command's start (logs and milestones in {out / 'startup'}):", flush=True)
    print(breakdown_table(runs), flush=True)


MICRO_BATCHES = (32, 16, 8, 4)


def micro_batches(gpu: str, iters: int, out: Path, results: dict, out_file: Path) -> None:
    runs = results.setdefault("micro_batches", [])
    for mbs in MICRO_BATCHES:
        label = f"preset, micro batch {mbs}"
        try:
            result = run_launch([gpu], ["--set", f"micro_batch_size={mbs}"], iters, out / "runs",
                                out / f"micro-{mbs}.log")
        except SystemExit as failure:
            print(f"{label}: {failure}", flush=True)
            runs.append({"label": label, "micro_batch_size": mbs, "failed": str(failure)})
            continue
        runs.append({"label": label, "micro_batch_size": mbs, **result})
        report(f"{label}:", result)
        save(out_file, results)
    done = [r for r in runs if "failed" not in r]
    if done:
        results["fastest_micro_batch"] = max(done, key=lambda r: r["tokens_per_s"])["micro_batch_size"]
        print(f"fastest micro batch: {results['fastest_micro_batch']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--iters", type=int, default=60, help="training iterations of each launch run")
    parser.add_argument("--parts", default="startup,toy,interleaved,micro,dp2",
                        help="which measurements, comma-separated")
    parser.add_argument("--startup-repeats", type=int, default=2, help="timed rounds of the start-up launches")
    parser.add_argument("--out", type=Path, default=Path("bench-out"), help="logs, run dirs and bench.json")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    out_file = args.out / "bench.json"
    results = json.loads(out_file.read_text()) if out_file.is_file() else {}
    gpus = gpu_ids()
    if not gpus:
        raise SystemExit("no CUDA GPU visible")
    if "startup" in parts:
        startup_breakdown(gpus[0], args.out, results, out_file, args.startup_repeats)
    if "toy" in parts:
        try:
            results["toy_1gpu"] = toy = run_toy(gpus[0], args.out / "runs", args.out / "toy.log")
            startup = toy["startup"] or {}
            print(f"toy, 1 GPU: {toy['wall_s']} s wall from command to summary ({toy['outcome']}); start-up "
                  f"{startup.get('start_to_first_iteration_s')} s to iteration 1, save blocked "
                  f"{startup.get('last_save_blocking_s')} s", flush=True)
        except SystemExit as failure:
            print(f"toy: {failure}", flush=True)
        save(out_file, results)
    if "interleaved" in parts:
        interleaved(gpus[0], args.iters, args.out, results, out_file)
    if "micro" in parts:
        micro_batches(gpus[0], args.iters, args.out, results, out_file)
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
