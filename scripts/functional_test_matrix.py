"""Megatron-LM's own functional-test configurations, moved to one GPU without TE/apex as a user would, judged.

    python scripts/functional_test_matrix.py --megatron-path DIR --out DIR [--doc docs/functional-test-matrix.md]
    python scripts/functional_test_matrix.py --megatron-path DIR --out DIR --gpu --no-rehearsal --jobs 6 \
        [--part 1/2] [--previous OUT/matrix.json ...]                                  # on a machine with a GPU

Every tests/functional_tests/test_cases/{gpt,moe,mixtral}/*/model_config.yaml of the checkout goes through `launch
import` (the same reader), then the moves a user makes for one GPU: one node, one GPU, every parallel size 1 (and the
settings that name pipeline stages dropped), 4 layers, 4 iterations (the sample-based schedule unset),
transformer_impl dropped, transformer_engine=false and apex=false; the async checkpoint settings stay as the
configuration has them. For each: the launcher's verdict (accepted, or refused with its `error:` lines), and for an
accepted one the CPU rehearsal (launcher/checks/rehearsal.py: the model and optimizer at a tiny size through
pretrain_gpt.py's model provider, one training step) in ONE worker process; identical rehearsal argvs are
rehearsed once. With --gpu, each accepted configuration also trains its 4 iterations through `launch` on the GPU
and must end with a finite loss no higher than it started (+0.05); configurations whose Megatron command is the
same after the move train once, `--jobs` at a time after the first (which builds the dataset helpers alone), each
in its own process group under a hard timeout. `--part i/n` trains the i-th of n slices of those distinct commands
(a matrix too big for one GPU session), `--previous` folds earlier matrix.json files in (their GPU and rehearsal
verdicts where this run has none). Writes matrix.json into --out and the table (configuration, launcher verdict,
rehearsal verdict, GPU verdict, reason) into --doc.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from launcher.checks.megatron_verdict import target_env  # noqa: E402
from launcher.checks.rehearsal import Rehearser, packages_absent_here, tiny_settings, verdict  # noqa: E402
from launcher.errors import UserError  # noqa: E402
from launcher.estimate.summary import job_facts  # noqa: E402
from launcher.importer.build import import_source  # noqa: E402
from launcher.megatron.pin import Kernels  # noqa: E402
from launcher.pipeline.command import script_args  # noqa: E402
from launcher.pipeline.preset import load_preset  # noqa: E402
from launcher.pipeline.resolve import ResolvedJob, resolve  # noqa: E402
from launcher.runs import logparse  # noqa: E402

SUITES = ("gpt", "moe", "mixtral")
NO_KERNELS = Kernels(False, False, "preset")
PARALLEL_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                  "expert_model_parallel_size", "expert_tensor_parallel_size")
# Settings that name pipeline stages or virtual stages: meaningless at PP 1, so a user moving to one GPU drops them.
PATTERN_SETTINGS = ("moe_layer_freq", "no_rope_freq", "linear_attention_freq", "window_attn_skip_freq")
STAGE_SETTINGS = ("num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
                  "pipeline_model_parallel_layout", "decoder_first_pipeline_num_layers",
                  "decoder_last_pipeline_num_layers")
SAMPLE_SCHEDULE = ("train_samples", "lr_decay_samples", "lr_warmup_samples", "lr_wsd_decay_samples")
# trains: exit 0, a finite loss that does not rise; refused: exit 2 at launch; no update: fp16's warm-up skipped
# every step (warned); fault: stopped by the fault its error_injection_rate injects (warned); failed; timeout
GPU_VERDICTS = ("trains", "refused", "no update", "fault", "failed", "timeout")
# Megatron's rerun state machine stops a job whose injected fault it caught (rerun_state_machine.py:37-40)
INJECTED_FAULT_EXIT_CODES = (16, 17)
GPU_BUDGET_GIB = 110.0  # runs share one GPU: start one only while the estimates of those running leave room


@dataclass
class Row:
    config: str  # suite/name
    launcher: str = ""  # accepted | refused
    rehearsal: str = ""  # ok | crashed | not run
    reason: str = ""
    gpu: str = ""  # one of GPU_VERDICTS (empty: not run)
    gpu_reason: str = ""
    gpu_seconds: float = 0.0
    overrides: tuple[str, ...] = ()


def configurations(checkout: Path) -> list[Path]:
    root = checkout / "tests" / "functional_tests" / "test_cases"
    return sorted(p for suite in SUITES for p in (root / suite).glob("*/model_config.yaml"))


def one_gpu_overrides(settings: dict) -> list[str]:
    """The `--set`s a user types to move the imported preset to one GPU without TE/apex."""
    # 4 layers, unless a per-layer pattern names every layer (its length must stay the layer count)
    patterned = any("[" in str(settings.get(dest) or "") for dest in PATTERN_SETTINGS)
    sets = ["nodes=1", "gpus_per_node=1", "transformer_engine=false", "apex=false",
            *([] if patterned else ["num_layers=4"]), "train_iters=4", "transformer_impl=null"]
    sets += [f"{dest}=1" for dest in PARALLEL_SIZES if dest in settings]
    sets += [f"{dest}=null" for dest in (*STAGE_SETTINGS, *SAMPLE_SCHEDULE) if dest in settings]
    return sets


def imported_preset(config: Path, workdir: Path) -> tuple[Path, dict]:
    imported = import_source(config.read_text(), str(config))
    name = f"{config.parent.parent.name}-{config.parent.name}"
    path = workdir / f"{name}.yaml"
    path.write_text(imported.text)
    return path, imported.settings


def judge_launcher(row: Row, preset_path: Path, checkout: Path, run_root: Path):
    """The launcher's verdict, in process: the same resolve a dry-run runs. Returns the job when accepted."""
    try:
        preset = load_preset(str(preset_path), list(row.overrides))
        job = resolve(preset, 1, 1, kernels=NO_KERNELS, megatron_path=checkout, run_dir=run_root / preset.name)
    except UserError as exc:
        row.launcher = "refused"
        row.reason = "; ".join(p.message for p in exc.problems)
        return None
    row.launcher = "accepted"
    return job


def rehearse_all(rows_jobs: list[tuple[Row, ResolvedJob]], checkout: Path) -> None:
    """Every accepted job's rehearsal in one worker; identical argvs once."""
    requests: dict[tuple, list[Row]] = {}
    notes: dict[tuple, list[str]] = {}
    envs: dict[tuple, dict] = {}
    for row, job in rows_jobs:
        absent = packages_absent_here(job)
        if absent:  # as `launch --check --rehearse` says: not this machine's to rehearse
            row.rehearsal, row.reason = "not run", "not rehearsed: this machine lacks " + "; ".join(absent)
            continue
        settings, not_rehearsed = tiny_settings(job.megatron)
        # what Megatron's checks see of the job's environment (validate_args reads NCCL_ALGO): a WORLD_SIZE the
        # script exported is torchrun's to set, not the rank's
        env = target_env(job)
        key = (tuple(script_args(settings)), tuple(sorted(env.items())))
        requests.setdefault(key, []).append(row)
        notes[key], envs[key] = not_rehearsed, env
    keys = list(requests)
    print(f"rehearsing {len(keys)} distinct jobs for {len(rows_jobs)} accepted configurations", flush=True)
    start = time.monotonic()
    with Rehearser(checkout) as worker:
        for i, key in enumerate(keys):
            reply = worker.rehearse_many([(list(key[0]), envs[key])])[0]
            result = verdict(reply, notes[key])
            for row in requests[key]:
                if result.ok:
                    row.rehearsal = "ok"
                    layers = result.facts.get("compiled_layers")
                    row.reason = f"one step, loss {result.facts.get('loss') or float('nan'):.2f}" + (
                        f"; compiled layers {layers}" if layers else "")
                else:
                    row.rehearsal = "crashed"
                    row.reason = f"{result.stage}: {result.error[:300]}" + (f" ({result.where})" if result.where
                                                                             else "")
            print(f"  [{i + 1}/{len(keys)}] {requests[key][0].config}: {requests[key][0].rehearsal} "
                  f"{result.seconds:.1f} s {'' if result.ok else requests[key][0].reason[:150]}", flush=True)
    print(f"rehearsals took {time.monotonic() - start:.0f} s", flush=True)


LAYOUT_WORLD = (1, 8)  # the functional tests' machine: one node of 8 GPUs


def layout_overrides(settings: dict) -> list[str]:
    """The configuration on its own machine (Transformer Engine and apex, as Megatron's CI has them), 4 iterations;
    the rehearsal then takes the settings the launcher gives a target without them, as `--check --rehearse` does."""
    sets = ["transformer_engine=true", "apex=true", "train_iters=4"]
    return sets + [f"{dest}=null" for dest in SAMPLE_SCHEDULE if dest in settings]


def rehearse_layouts(configs: list[tuple[Row, Path, dict]], checkout: Path, out: Path) -> None:
    """Each configuration in its own layout (8 GPUs), shrunk, on CPU processes (checks/rehearsal_ranks.py); one
    JSON line per configuration in OUT/layouts.jsonl (layout: ok, failed, refused, or not run where this machine
    lacks a package the target has), and where the one-GPU verdict says it trains, whether the
    layout rehearsal agrees."""
    from launcher.checks.rehearsal_ranks import rehearse_layout

    with open(out / "layouts.jsonl", "a") as sink:
        for i, (row, preset_path, settings) in enumerate(configs):
            record: dict = {"config": row.config, "one_gpu": row.rehearsal or row.launcher, "gpu": row.gpu}
            try:
                job = resolve(load_preset(str(preset_path), layout_overrides(settings)), *LAYOUT_WORLD,
                              kernels=Kernels(True, True, "preset"), megatron_path=checkout)
            except UserError as exc:
                record.update(layout="refused", reason="; ".join(p.message for p in exc.problems)[:400])
            else:
                result = rehearse_layout(job, target_env(job))
                # not run: this machine lacks a package the job's target has (the rehearsal says which)
                outcome = "ok" if result.ok else "not run" if result.stage == "setup" else "failed"
                record.update(layout=outcome, reason=result.render()[0][:400],
                              rehearsal=result.as_dict())
            record["agrees"] = record["layout"] != "failed" or row.gpu != "trains"
            sink.write(json.dumps(record) + "\n")
            sink.flush()
            print(f"  [{i + 1}/{len(configs)}] {row.config}: layout {record['layout']}: {record['reason'][:200]}",
                  flush=True)


def injected_fault_exits(output: str, log_lines: list[str]) -> list[int]:
    """The exit codes of training processes (torchrun's `exitcode : N` report) that mean "stopped on an injected
    fault"; torchrun itself then exits 1."""
    text = output + "\n" + "\n".join(log_lines)
    return [code for code in map(int, re.findall(r"exitcode\s*:\s*(-?\d+)", text)) if code in INJECTED_FAULT_EXIT_CODES]


@dataclass
class Launched:
    """One `launch PRESET --set …` run to its end: what it printed, its attempt's log, how long it took."""

    argv: list[str]
    returncode: int  # -1: killed (with its process group) at the timeout
    stdout: str
    stderr: str
    log_lines: list[str]
    seconds: float


def launch(preset_path: Path, overrides: list[str], run_root: Path, timeout_s: float,
           options: tuple[str, ...] = ()) -> Launched:
    """`launch PRESET --set … [options]` as a user types it, in its own process group, killed with it after
    `timeout_s`; the run's checkpoints are deleted once it ends (the verdict is in; checkpoints of many runs would
    fill the disk)."""
    argv = [sys.executable, "-m", "launcher", str(preset_path), *(w for s in overrides for w in ("--set", s)),
            "--set", f"run_root={run_root}", *options]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=run_root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
        returncode = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        returncode = -1
    seconds = round(time.monotonic() - start, 1)
    run_dir = next((Path(line.removeprefix("# run directory: ").strip()) for line in stdout.splitlines()
                    if line.startswith("# run directory: ")), None)
    log = run_dir / "logs" / "attempt-1.log" if run_dir else None
    lines = log.read_text(errors="replace").splitlines() if log and log.is_file() else []
    if run_dir is not None:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    return Launched(argv, returncode, stdout, stderr, lines, seconds)


def train_on_gpu(row: Row, preset_path: Path, run_root: Path, timeout_s: float) -> None:
    """4 iterations through `launch` as a user types it; the loss must be finite and not rise."""
    run = launch(preset_path, list(row.overrides), run_root, timeout_s)
    argv, returncode, stdout, stderr, lines = run.argv, run.returncode, run.stdout, run.stderr, run.log_lines
    row.gpu_seconds = run.seconds
    losses = [e.lm_loss for e in logparse.parse_lines(lines)
              if isinstance(e, logparse.IterationLine) and e.lm_loss is not None]
    finite = bool(losses) and all(math.isfinite(x) for x in losses)
    if returncode == 0 and finite and losses[-1] <= losses[0] + 0.05:
        row.gpu, row.gpu_reason = "trains", f"loss {losses[0]:.2f} → {losses[-1]:.2f} ({row.gpu_seconds:.0f} s)"
    elif returncode == 0 and not losses and "fp16 starts its dynamic loss scale" in stdout + stderr:
        row.gpu = "no update"  # every step skipped while the loss scale came down, as the launcher warned
        row.gpu_reason = "exit 0; every iteration skipped by fp16's loss scale warm-up (the launcher's warning)"
    elif "error_injection_rate" in stdout + stderr and (faults := injected_fault_exits(stdout + stderr, lines)):
        row.gpu = "fault"  # the configuration asked for it, and the launcher's warning said so
        row.gpu_reason = (f"the training process exited {faults[0]} (Megatron's rerun state machine on the injected "
                          f"fault, as the launcher warned), torchrun {returncode}; losses {losses}")
    elif returncode == 2 and "error:" in stderr:
        row.gpu = "refused"  # at launch (the doctor on the target): before any GPU work
        row.gpu_reason = " ".join(line for line in stderr.splitlines() if line.startswith(("error:", "hint:")))[:300]
    else:
        row.gpu = "failed" if returncode != -1 else "timeout"
        tail = [line for line in (stdout + stderr + "\n".join(lines[-40:])).splitlines()
                if "Error" in line or "error" in line or "Traceback" in line][-3:]
        row.gpu_reason = f"exit {returncode}, losses {losses}: " + " ".join(tail)[:300]
        with (run_root.parent / "gpu-failures.txt").open("a") as out:  # the whole story, for the one who fixes it
            out.write(f"===== {row.config}: {row.gpu} (exit {returncode})\n$ {' '.join(argv)}\n"
                      + "\n".join((stdout + stderr).splitlines()[-30:] + lines[-60:]) + "\n")


def train_distinct(accepted: list[tuple[Row, ResolvedJob, Path]], run_root: Path, jobs: int, part: tuple[int, int],
                   progress: Path, deadline: float, timeout_s: float, also: tuple[str, ...] = ()) -> None:
    """One GPU run per distinct Megatron command (the first alone), the others take its verdict. Each verdict is
    appended to `progress` (JSON lines) as it comes, and no run starts after `deadline` (time.monotonic()).
    A command whose configurations all have a GPU verdict already (from --previous) is not run again."""
    groups: dict[tuple, list[tuple[Row, Path]]] = {}
    jobs_of: dict[tuple, ResolvedJob] = {}
    for row, job, preset_path in accepted:
        run_dir = str(run_root / job.preset.name)  # the only place two moved configurations may differ harmlessly
        argv = tuple(arg.replace(run_dir, "RUN") for arg in script_args(job.megatron))
        key = (argv, tuple(sorted(job.preset.launcher.env.items())))
        groups.setdefault(key, []).append((row, preset_path))
        jobs_of.setdefault(key, job)
    keys = [key for key, members in groups.items() if not all(row.gpu for row, _ in members)]
    index, count = part
    keys = keys[index - 1::count]
    print(f"GPU: {len(keys)} distinct commands (part {index}/{count}), {jobs} at a time", flush=True)

    estimates = {key: job_facts(jobs_of[key])["estimate"] for key in keys}
    need = {key: max(4.0, 1.5 * estimates[key]["memory_per_gpu_gib"]) for key in keys}
    # the first runs alone (below): the shortest; then the longest first, so that few stragglers end the pass
    keys.sort(key=lambda key: -estimates[key]["seconds_per_iteration"])
    keys = keys[-1:] + keys[:-1]

    def one(key: tuple) -> None:
        if time.monotonic() > deadline:
            return
        (first, preset_path), *same = groups[key]
        train_on_gpu(first, preset_path, run_root, timeout_s)
        if also:
            first.gpu_reason = f"with {' '.join(also)}: {first.gpu_reason}"
        for row, _ in same:
            row.gpu, row.gpu_reason, row.gpu_seconds = first.gpu, f"as {first.config}: {first.gpu_reason}", 0.0
        with progress.open("a") as out:
            out.writelines(json.dumps(asdict(r)) + "\n" for r in (first, *(row for row, _ in same)))
        print(f"  GPU {first.config} (+{len(same)}): {first.gpu} {first.gpu_reason[:200]}", flush=True)

    done = 0
    while done < len(keys):  # alone until one run got past the checks: it builds the dataset helpers
        one(keys[done])
        done += 1
        if groups[keys[done - 1]][0][0].gpu not in ("refused", ""):
            break
    within_budget(keys[done:], need.__getitem__, one, jobs)


def within_budget(items: list, need_gib: Callable[[Any], float], work: Callable[[Any], None], jobs: int,
                  budget_gib: float = GPU_BUDGET_GIB) -> None:
    """work(item) for each item, `jobs` at a time, each started only while the GPU memory that those running need
    (the launcher's estimates) leaves room for it in `budget_gib` (a run needing more starts alone)."""
    free = [budget_gib]
    room = threading.Condition()

    def one(item: Any) -> None:
        need = min(need_gib(item), budget_gib)
        with room:
            room.wait_for(lambda: free[0] >= need)
            free[0] -= need
        try:
            work(item)
        finally:
            with room:
                free[0] += need
                room.notify_all()

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, items))


def _json_line(line: str) -> dict | None:
    try:
        return json.loads(line)
    except ValueError:  # a line cut off (a full disk, a kill)
        return None


def fold_previous(rows: list[Row], paths: list[Path], rerun: tuple[str, ...] = ()) -> None:
    """Earlier parts' verdicts where this run has none (same configuration name); a GPU verdict named in `rerun`
    is not taken (those train again: "refused" with the hint followed through --also, "timeout" with a longer
    --run-timeout-s)."""
    by_name = {r.config: r for r in rows}
    for path in paths:
        text = path.read_text()
        olds = json.loads(text) if path.suffix == ".json" else list(filter(None, map(_json_line, text.splitlines())))
        for old in olds:
            row = by_name.get(str(old.get("config")))
            if row is None:
                continue
            if not row.gpu and old.get("gpu") and old["gpu"] not in rerun:
                row.gpu, row.gpu_reason, row.gpu_seconds = old["gpu"], old["gpu_reason"], old.get("gpu_seconds", 0.0)
            if not row.rehearsal and old.get("rehearsal"):
                row.rehearsal = old["rehearsal"]
                if row.launcher == "accepted" and old.get("launcher") == "accepted":
                    row.reason = old.get("reason", row.reason)


def markdown(rows: list[Row], command: str, seconds: float, provenance: str = "") -> str:
    accepted = [r for r in rows if r.launcher == "accepted"]
    crashed = [r for r in accepted if r.rehearsal == "crashed"]
    not_run = [r for r in accepted if r.rehearsal == "not run"]
    gpu = any(r.gpu for r in rows)
    lines = [
        "# Megatron-LM's functional-test configurations on one GPU without TE/apex",
        "",
        "Every `tests/functional_tests/test_cases/{gpt,moe,mixtral}/*/model_config.yaml` of the pinned Megatron-LM, "
        "read by `launch import` and moved to one GPU as a user would (one node, one GPU, every parallel size 1, the "
        "settings that name pipeline stages dropped, 4 layers, 4 iterations, `transformer_impl` dropped, "
        "`transformer_engine=false apex=false`; async checkpoint settings as the configuration has them). "
        "**Launcher**: the verdict of a dry-run (accepted, or refused before launch with exit 2). **Rehearsal**: "
        "for an accepted one, `launch --check --rehearse`'s CPU rehearsal (the model and optimizer at a tiny size "
        "through pretrain_gpt.py's model provider and the job's `--spec`, one training step)."
        + (" **GPU**: 4 iterations through `launch` on one H200 (trains: exit 0 and a finite loss that does not rise; "
           "refused: exit 2 at launch, before any GPU work; a configuration whose Megatron command equals another's "
           "after the move takes that one's verdict, `as …`)." if gpu else
           " The GPU column (`--gpu`: train 4 iterations, finite loss that does not rise) was not run: no GPU "
           "this session."),
        "",
        f"Made by `{command}` in {seconds:.0f} s on a 2-core machine.",
        "",
        *([provenance.strip(), ""] if provenance else []),
        f"{len(rows)} configurations: {len(accepted)} accepted, {len(rows) - len(accepted)} refused before launch; "
        f"of the accepted, {len(accepted) - len(crashed) - len(not_run)} rehearse a training step, {len(not_run)} "
        f"are not rehearsed (a package the job needs is not installed on this machine) and **{len(crashed)} crash "
        "in the rehearsal**.",
        "",
    ]
    if gpu:
        ran = [r for r in accepted if r.gpu]
        tally = {v: sum(r.gpu == v for r in ran) for v in GPU_VERDICTS}
        lines += [f"GPU: {len(ran)} of the {len(accepted)} accepted run; " + ", ".join(
            f"{count} {name}" for name, count in tally.items()) + ".", ""]
    classes: dict[str, int] = {}
    for r in crashed:
        text = r.reason.split(" (")[0]
        classes[text[:160]] = classes.get(text[:160], 0) + 1
    if classes:
        lines += ["Crashes after acceptance, by message:", ""]
        lines += [f"- {count} × {text}" for text, count in sorted(classes.items(), key=lambda item: -item[1])]
        lines.append("")
    lines += [
        "| configuration | launcher | rehearsal | " + ("GPU | " if gpu else "") + "reason |",
        "|---|---|---|" + ("---|" if gpu else "") + "---|",
    ]
    for r in rows:
        reason = "; ".join(filter(None, [r.reason, f"GPU: {r.gpu_reason}" if r.gpu_reason else ""]))
        reason = reason.replace("|", "/").replace("\n", " ")
        lines.append(f"| {r.config} | {r.launcher} | {r.rehearsal or '–'} | " + (f"{r.gpu or '–'} | " if gpu else "")
                     + f"{reason[:400]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megatron-path", type=Path, default=os.environ.get("MEGATRON_LM_PATH"), required=False)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--doc", type=Path, help="write the markdown table here (e.g. docs/functional-test-matrix.md)")
    parser.add_argument("--only", default="", help="configurations whose name contains this text")
    parser.add_argument("--config", action="append", default=[],
                        help="exactly this configuration (suite/name; repeatable): a chosen subset, e.g. one of each "
                             "layout shape for --layouts")
    parser.add_argument("--gpu", action="store_true", help="also train each accepted configuration on the GPU")
    parser.add_argument("--no-rehearsal", action="store_true", help="skip the CPU rehearsal (e.g. on the GPU host)")
    parser.add_argument("--jobs", type=int, default=1, help="GPU runs at a time (after the first)")
    parser.add_argument("--part", default="1/1", help="i/n: train only the i-th of n slices of the distinct commands")
    parser.add_argument("--previous", type=Path, nargs="*", default=[],
                        help="earlier matrix.json (or gpu-progress.jsonl) files to fold in")
    parser.add_argument("--deadline-s", type=float, default=float("inf"), help="start no GPU run after this long")
    parser.add_argument("--also", action="append", default=[],
                        help="one more --set for every configuration (e.g. a hint followed: async_strategy=mcore)")
    parser.add_argument("--rerun", action="append", default=[], choices=GPU_VERDICTS,
                        help="train again what --previous gave this GPU verdict (repeatable; e.g. refused, timeout)")
    parser.add_argument("--run-timeout-s", type=float, default=420, help="kill a GPU run (its process group) after")
    parser.add_argument("--layouts", action="store_true",
                        help="also rehearse each configuration in its own parallel layout (8 GPUs), shrunk, on CPU "
                             "processes (1-4 minutes each on 2 cores; use --only): OUT/layouts.jsonl")
    args = parser.parse_args(argv)
    if args.megatron_path is None or not (args.megatron_path / "pretrain_gpt.py").is_file():
        parser.error("--megatron-path (or MEGATRON_LM_PATH) must be a Megatron-LM checkout")
    checkout = args.megatron_path.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    rows: list[Row] = []
    accepted = []
    imported: list[tuple[Row, Path, dict]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        run_root = (args.out / "runs").absolute()
        for config in configurations(checkout):
            name = f"{config.parent.parent.name}/{config.parent.name}"
            if (args.only and args.only not in name) or (args.config and name not in args.config):
                continue
            row = Row(name)
            rows.append(row)
            try:
                preset_path, settings = imported_preset(config, workdir)
            except UserError as exc:
                row.launcher, row.reason = "refused", "import: " + "; ".join(p.message for p in exc.problems)
                continue
            row.overrides = tuple(one_gpu_overrides(settings)) + tuple(args.also)
            imported.append((row, preset_path, settings))
            job = judge_launcher(row, preset_path, checkout, run_root)
            if job is not None:
                accepted.append((row, job, preset_path))
        unknown = sorted(set(args.config) - {row.config for row in rows})
        if unknown:
            parser.error(f"--config: no such configuration in the checkout: {', '.join(unknown)}")
        print(f"launcher: {len(accepted)} of {len(rows)} accepted in {time.monotonic() - start:.0f} s", flush=True)
        if accepted and not args.no_rehearsal:
            rehearse_all([(row, job) for row, job, _ in accepted], checkout)
        fold_previous(rows, args.previous, tuple(args.rerun))
        if args.layouts:
            rehearse_layouts(imported, checkout, args.out)
        if args.gpu:
            run_root.mkdir(parents=True, exist_ok=True)
            index, count = (int(x) for x in args.part.split("/"))
            train_distinct(accepted, run_root, args.jobs, (index, count), args.out / "gpu-progress.jsonl",
                           start + args.deadline_s, args.run_timeout_s, tuple(args.also))
    seconds = time.monotonic() - start
    (args.out / "matrix.json").write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    command = "python scripts/functional_test_matrix.py --megatron-path third_party/megatron-lm --out OUT " \
              + "".join(f"--previous {path} " for path in args.previous) \
              + (f"--doc {args.doc}" if args.doc else "") + (" --gpu" if args.gpu else "") \
              + (" --no-rehearsal" if args.no_rehearsal else "") + (f" --jobs {args.jobs}" if args.gpu else "") \
              + (f" --part {args.part}" if args.part != "1/1" else "") \
              + "".join(f" --also {extra}" for extra in args.also) \
              + "".join(f" --rerun {verdict}" for verdict in args.rerun) \
              + (f" --only {args.only}" if args.only else "") \
              + "".join(f" --config {name}" for name in args.config) + (" --layouts" if args.layouts else "")
    # how an earlier GPU part was made: a .md beside its .jsonl, quoted verbatim
    provenance = "\n\n".join(path.with_suffix(".md").read_text() for path in args.previous
                               if path.with_suffix(".md").is_file())
    text = markdown(rows, command, seconds, provenance)
    if args.doc:
        args.doc.write_text(text)
    crashed = [r.config for r in rows if r.launcher == "accepted" and r.rehearsal == "crashed"]
    failed = [r.config for r in rows if r.gpu in ("failed", "timeout")]
    print(f"{len(rows)} configurations, {len(crashed)} accepted but crash in the rehearsal: {crashed}; "
          f"{len(failed)} failed on the GPU", flush=True)
    return 1 if crashed or failed else 0


if __name__ == "__main__":
    sys.exit(main())
