"""FP8 without Transformer Engine (torchao float8 in the compiled layers) against bf16, on one GPU.

    python scripts/bench_fp8.py --parts layer,loss,launch175 --out DIR [--budget-s 230] [--loss-iters 300]

- layer: the compiled layer math (compiled_layer.layer_math, what each layer of the fast path runs) at the 175b
  layer shape (hidden 12288, 96 heads, seq 2048, micro batch 1, 2 layers, TP 1), forward + backward, bf16 against
  FP8 hybrid (tensorwise scaling) and FP8 rowwise, interleaved rounds in this one process: tokens/s and TFLOP/s;
- loss: `launch 345m` in bf16 and with `--set fp8_format=hybrid`, both at once on the one GPU (losses, not
  speed, are compared: same seed, same mock data), log interval 1; every iteration's loss goes to
  DIR/loss_345m.json (scripts/plot_fp8_loss.py draws docs/fp8-loss-345m.svg from it);
- launch175: `launch 175b` shrunk to one GPU as in docs/benchmarks.md (2 layers, TP 1, global batch 16), bf16
  then FP8: Megatron's own steady tokens/s and TFLOP/s for each.
Each part stops at the budget; results are written to DIR/bench_fp8.json after every part.
Needs CUDA (compute capability 8.9+ for FP8), torch, torchao, megatron-core / the Megatron-LM checkout
(MEGATRON_LM_PATH).
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

REPO = Path(__file__).resolve().parent.parent
LOSS = re.compile(r"iteration\s+(\d+)/\s*\d+ \|.*?lm loss: ([0-9.Ee+-]+)")
THROUGHPUT = re.compile(r"throughput per GPU \(TFLOP/s/GPU\): ([\d.]+)")
ITERATION = re.compile(r"iteration\s+(\d+)/\s*(\d+) \|.*?elapsed time per iteration \(ms\): ([\d.]+)"
                       r"(?:.*?throughput per GPU \(TFLOP/s/GPU\): ([\d.]+))?")
START = time.monotonic()
# Run directories (checkpoints: 8.5 GB for the 175b shape) stay outside --out; their logs are copied into it.
RUNS = Path(os.environ.get("BENCH_FP8_RUNS", "/tmp/bench-fp8-runs"))


def left(budget: float) -> float:
    return budget - (time.monotonic() - START)


def save(out: Path, results: dict) -> None:
    (out / "bench_fp8.json").write_text(json.dumps(results, indent=1) + "\n")


# -- layer: the compiled layer math at the 175b shape -------------------------------------------------------------

def layer_part(results: dict, out: Path, budget: float, hidden: int = 12288, heads: int = 96, seq: int = 2048,
               layers: int = 2, iters: int = 10, dev: str = "cuda", only: str | None = None) -> None:
    import functools

    import torch

    sys.path.insert(0, str(REPO))
    for extra in filter(None, [os.environ.get("MEGATRON_LM_PATH")]):
        sys.path.append(extra)
    from launcher.inside.megatron_ext import float8
    from launcher.inside.megatron_ext.compiled_layer import layer_math

    torch.manual_seed(0)
    dt = torch.bfloat16
    emulate = dev != "cuda"  # a CPU smoke test of this script

    def weight(*shape):
        return (torch.randn(*shape, device=dev, dtype=dt) * 0.006).requires_grad_(True)

    def bias(n, value=0.0):
        return torch.full((n,), value, device=dev, dtype=dt, requires_grad=True)

    params = [[bias(hidden, 1.0), bias(hidden), weight(3 * hidden, hidden), bias(3 * hidden),
               weight(hidden, hidden), bias(hidden), bias(hidden, 1.0), bias(hidden),
               weight(4 * hidden, hidden), bias(4 * hidden), weight(hidden, 4 * hidden), bias(hidden)]
              for _ in range(layers)]
    head_dim = hidden // heads
    constants = dict(eps=1e-5, rms=False, zero_centered=False, heads=heads, groups=heads, head_dim=head_dim,
                     scale=head_dim ** -0.5, activation="gelu_tanh", hidden_dropout=0.0, attention_dropout=0.0)
    hybrid = torch.compile(functools.partial(layer_math, linear=float8.float8_linear("hybrid", emulate),
                                             **constants), fullgraph=True, dynamic=False)
    variants = {
        "bf16": torch.compile(functools.partial(layer_math, **constants), fullgraph=True, dynamic=False),
        # what the compiled layer runs: each weight cast to FP8 once per optimizer step (here: per timed round of
        # `iters` microbatches; the 175b launch has 16 per step), float8.WeightCache
        "fp8 hybrid tensorwise, cached weights": hybrid,
        "fp8 hybrid tensorwise": hybrid,  # torchao's own: every weight cast twice per microbatch
        "fp8 rowwise": torch.compile(functools.partial(
            layer_math, linear=float8.float8_linear("e4m3", emulate, "rowwise"), **constants),
            fullgraph=True, dynamic=False),
    }
    if only:  # ';'-separated variant names (e.g. bf16,fp8 hybrid tensorwise, cached weights)
        variants = {name: fn for name, fn in variants.items() if name in only.split(";")}
    caches = [float8.WeightCache() for _ in params]
    x = torch.randn(seq, 1, hidden, device=dev, dtype=dt, requires_grad=True)
    grad = torch.randn_like(x)
    current: list[str] = []

    def arguments(i, p):
        if current and current[0].endswith("cached weights"):
            p = list(p)
            for k in (2, 4, 8, 10):  # qkv, proj, fc1, fc2 weights
                p[k] = caches[i].get(str(k), p[k], "hybrid")
        return p

    def step(fn):
        y = x
        for i, p in enumerate(params):
            y = fn(y, *arguments(i, p))
        y.backward(grad)
        for p in params:
            for t in p:
                t.grad = None
        x.grad = None

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    # Megatron's GPT formula per layer (forward + backward = 3 × forward), no logit/embedding term
    flops = 3 * layers * (24 * seq * hidden * hidden + 4 * seq * seq * hidden)
    figures: dict[str, list[float]] = {name: [] for name in variants}
    compiled = []
    for name, fn in variants.items():
        if left(budget) < (30 if dev == "cuda" else 0):
            break
        t0 = time.monotonic()
        current[:] = [name]
        for _ in range(3):
            step(fn)
        sync()
        compiled.append(name)
        print(f"layer {name}: compiled and warm in {time.monotonic() - t0:.1f} s", flush=True)
    for _round in range(3):  # interleaved rounds: drift shows, and hits every variant alike
        for name in compiled:
            if left(budget) < 10:
                break
            sync()
            current[:] = [name]
            float8._count_step()  # a new optimizer step: the cached variant casts its weights again
            t0 = time.perf_counter()
            for _ in range(iters):
                step(variants[name])
            sync()
            figures[name].append((time.perf_counter() - t0) * 1000 / iters)
    rows = {}
    for name in compiled:
        if not figures[name]:
            continue
        ms = min(figures[name])
        rows[name] = {"ms_per_step": round(ms, 2), "rounds_ms": [round(v, 2) for v in figures[name]],
                      "tokens_per_s": round(seq / (ms / 1000), 1), "tflops": round(flops / (ms / 1000) / 1e12, 1)}
    if "bf16" in rows:
        for row in rows.values():
            row["speedup_vs_bf16"] = round(rows["bf16"]["ms_per_step"] / row["ms_per_step"], 3)
    results["layer"] = {"shape": f"hidden {hidden}, {heads} heads, seq {seq}, micro batch 1, {layers} layers",
                        "variants": rows}
    if dev == "cuda":
        results["layer"].update(peak_memory_gb=round(torch.cuda.max_memory_allocated() / 1e9, 1),
                                device=torch.cuda.get_device_name())
    for name, row in rows.items():
        print(f"layer {name:24s} {row['ms_per_step']:8.2f} ms  {row['tokens_per_s']:9.0f} tokens/s  "
              f"{row['tflops']:6.1f} TFLOP/s  ×{row.get('speedup_vs_bf16')}", flush=True)
    save(out, results)


# -- launches ---------------------------------------------------------------------------------------------------

def start_launch(args: list[str], run_root: Path, log: Path) -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = f"{REPO}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(REPO)
    handle = log.open("w")
    proc = subprocess.Popen([sys.executable, "-m", "launcher", *args, "--set", f"run_root={run_root}"], env=env,
                            stdout=handle, stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=REPO)
    return proc, log


def finish(proc: subprocess.Popen, timeout: float, log: Path | None = None) -> int | str | None:
    """The launch's exit code; None when it ran past `timeout`; "stopped" when `log` is given and its training
    logged the last iteration (what follows, the end-of-run save of 8.5 GB at the 175b shape, is not measured)."""
    deadline = time.monotonic() + max(timeout, 1)
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            return code
        if log is not None and last_iteration_logged(log):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "stopped"
        time.sleep(1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return None


def run_dir_of(text: str) -> str | None:
    return next((line.removeprefix("# run directory: ").strip() for line in text.splitlines()
                 if line.startswith("# run directory: ")), None)


def training_log(run_dir: str) -> str:
    logs = sorted((Path(run_dir) / "logs").glob("attempt-*.log"))
    return "\n".join(p.read_text(errors="replace") for p in logs)


def last_iteration_logged(log: Path) -> bool:
    run_dir = run_dir_of(log.read_text(errors="replace"))
    if not run_dir:
        return False
    done = [m for m in ITERATION.finditer(training_log(run_dir)) if m[1] == m[2]]
    return bool(done)


def read_run(log: Path, code: int | None) -> dict:
    """What a launch printed and its run's summary: per-iteration losses from its training log."""
    text = log.read_text(errors="replace")
    run_dir = run_dir_of(text)
    result: dict = {"exit": code, "log": str(log)}
    training = text
    if run_dir:
        result["run_dir"] = run_dir
        training = training_log(run_dir) or text
        (log.parent / f"{log.stem}.training.log").write_text(training)
        summary = Path(run_dir) / "summary.json"
        if summary.exists():
            data = json.loads(summary.read_text())
            result.update({k: data.get(k) for k in ("outcome", "steady_ms_per_iter", "steady_tokens_per_s",
                                                     "steady_tflops_per_gpu", "peak_memory_mb", "final_loss")})
    losses = {int(m[1]): float(m[2]) for m in LOSS.finditer(training)}
    result["losses"] = [losses[i] for i in sorted(losses)]
    result["tflops_lines"] = [float(v) for v in THROUGHPUT.findall(training)]
    # steady state from the log itself (a stopped launch writes no summary): iterations 3 and later
    timed = [(int(m[1]), float(m[3]), float(m[4]) if m[4] else None) for m in ITERATION.finditer(training)]
    steady = [t for t in timed if t[0] >= 3]
    if steady:
        ms = sorted(t[1] for t in steady)[len(steady) // 2]
        tflops = sorted(t[2] for t in steady if t[2] is not None)
        result["log_steady_ms_per_iter"] = ms
        result["log_steady_tflops"] = tflops[len(tflops) // 2] if tflops else None
        result["log_ms_per_iter"] = [t[1] for t in timed]
    notes = [line for line in (text + "\n" + training).splitlines()
             if "megatron-launch fp8" in line or "compiled layers:" in line or line.startswith("# note: fp8")]
    result["fp8_lines"] = sorted(set(notes))[:6]
    return result


def loss_part(results: dict, out: Path, budget: float, iters: int) -> None:
    common = ["345m", "--gpus-per-node", "1", "--no-doctor", "--set", f"train_iters={iters}", "--set",
              "eval_iters=0", "--set", "log_interval=1", "--set", "global_batch_size=8", "--set",
              "micro_batch_size=8", "--set", "tensorboard_log_interval=1000"]
    runs = {"bf16": [], "fp8": ["--set", "fp8_format=hybrid"]}
    procs = {name: start_launch(common + extra, RUNS / f"loss-{name}", out / f"loss-{name}.log")
             for name, extra in runs.items()}
    done = {name: read_run(log, finish(proc, left(budget) - 3)) for name, (proc, log) in procs.items()}
    part = {"command": "launch " + " ".join(common) + " [--set fp8_format=hybrid]", "runs": done}
    a, b = done["bf16"]["losses"], done["fp8"]["losses"]
    n = min(len(a), len(b))
    if n:
        tail = max(1, min(20, n // 10))  # the end loss: mean of the last iterations both logged
        end_bf16, end_fp8 = sum(a[n - tail:n]) / tail, sum(b[n - tail:n]) / tail
        part.update({"iterations_compared": n, "end_loss_bf16": round(end_bf16, 4), "end_loss_fp8": round(end_fp8, 4),
                     "end_loss_relative_difference": round((end_fp8 - end_bf16) / end_bf16, 4),
                     "end_over_last": tail})
    results["loss"] = part
    (out / "loss_345m.json").write_text(json.dumps({"bf16": a, "fp8": b, "command": part["command"]}) + "\n")
    print(json.dumps({k: v for k, v in part.items() if k != "runs"}, indent=1), flush=True)
    for name, run in done.items():
        print(name, {k: v for k, v in run.items() if k != "losses"}, flush=True)
    save(out, results)


def launch175_part(results: dict, out: Path, budget: float, samples: int) -> None:
    common = ["175b", "--nodes", "1", "--gpus-per-node", "1", "--no-doctor", "--set", "num_layers=2", "--set",
              "tensor_model_parallel_size=1", "--set", "pipeline_model_parallel_size=1", "--set",
              "global_batch_size=16", "--set", f"train_samples={samples}", "--set", "transformer_engine=auto",
              "--set", "apex=auto", "--set", "no_save_optim=true", "--set", "no_save_rng=true", "--set",
              "log_interval=1", "--set", "sequence_parallel=false", "--set", "eval_iters=0", "--set",
              "tensorboard_log_interval=1000"]
    part: dict = {"command": "launch " + " ".join(common) + " [--set fp8_format=hybrid]", "runs": {}}
    results["launch175"] = part
    for name, extra, share in (("fp8", ["--set", "fp8_format=hybrid"], 0.55), ("bf16", [], 1.0)):
        if left(budget) < 60:
            part["runs"][name] = {"skipped": "budget"}
            continue
        proc, log = start_launch(common + extra, RUNS / f"175b-{name}", out / f"175b-{name}.log")
        run = read_run(log, finish(proc, left(budget) * share - 3, log))  # the first leaves the second its time
        if run.get("log_steady_ms_per_iter"):
            run["tokens_per_s"] = round(16 * 2048 / (run["log_steady_ms_per_iter"] / 1000), 1)
        run["losses"] = run["losses"][:20]
        part["runs"][name] = run
        print(name, run, flush=True)
        save(out, results)
    runs = part["runs"]
    if all(runs.get(k, {}).get("tokens_per_s") for k in ("bf16", "fp8")):
        part["fp8_over_bf16"] = round(runs["fp8"]["tokens_per_s"] / runs["bf16"]["tokens_per_s"], 3)
        print(f"175b shape, launch: fp8/bf16 = {part['fp8_over_bf16']}", flush=True)
    save(out, results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="layer,loss,launch175")
    parser.add_argument("--out", type=Path, default=Path("bench-fp8-out"))
    parser.add_argument("--budget-s", type=float, default=230.0, help="wall seconds for all parts together")
    parser.add_argument("--loss-iters", type=int, default=300)
    parser.add_argument("--samples-175b", type=int, default=128, help="train_samples of each 175b-shape launch")
    parser.add_argument("--layer-variants", help="';'-separated variant names of the layer part (default: all)")
    ns = parser.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    results: dict = {"parts": ns.parts}
    for part in ns.parts.split(","):
        try:
            if part == "layer":
                layer_part(results, ns.out, ns.budget_s, only=ns.layer_variants)
            elif part == "loss":
                loss_part(results, ns.out, ns.budget_s, ns.loss_iters)
            elif part == "launch175":
                launch175_part(results, ns.out, ns.budget_s, ns.samples_175b)
            else:
                print(f"unknown part {part}", file=sys.stderr)
                return 2
        except Exception as error:  # noqa: BLE001 - one failed part must not lose the others' figures
            results[f"{part}_error"] = repr(error)
            print(f"{part} failed: {error!r}", flush=True)
            save(ns.out, results)
    save(ns.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
