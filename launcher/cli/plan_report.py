"""`launch plan`: what a preset costs on a GPU budget, and the best layouts for it (text or JSON).

No torch: everything comes from launcher.estimate.formulas and launcher.estimate.search over the preset's Megatron args.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from launcher.cli.parsing import positive_number
from launcher.errors import Problem, UserError
from launcher.estimate import coverage, duration, ranges
from launcher.estimate import formulas as est
from launcher.estimate import search as ps
from launcher.estimate.steptime import StepTime, step_time
from launcher.estimate.summary import estimate, layout_training

GIB = est.GIB


@dataclass(frozen=True)
class Budget:
    nodes: int
    gpus_per_node: int

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


MAX_GPUS = 1 << 20  # a million GPUs: more than any cluster, and the search's work stays bounded
GPUS_PER_NODE_FOR_GPUS = 8  # --gpus N alone means nodes of 8 GPUs (HGX/DGX), or one node below 8


def resolve_budget(nodes: int | None, gpus_per_node: int | None, gpus: int | None,
                   preset_nodes: int = 1, preset_gpus_per_node: int = 8) -> Budget:
    """--gpus N [--gpus-per-node G], or --nodes/--gpus-per-node, or the preset's own; bad ones are UserErrors."""
    if gpus is not None and nodes is not None:
        raise UserError("--gpus cannot be combined with --nodes",
                        "give either --gpus N [--gpus-per-node G] or --nodes N --gpus-per-node G")
    for flag, value in (("--gpus", gpus), ("--nodes", nodes), ("--gpus-per-node", gpus_per_node)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be at least 1, got {value}")
        if value is not None and value > MAX_GPUS:  # bounded work: the layout search walks the divisors
            raise UserError(f"{flag} {value} is more GPUs than the plan searches (at most {MAX_GPUS:,})",
                            f"give a budget of at most {MAX_GPUS:,} GPUs")
    if gpus is not None:
        per_node = gpus_per_node or GPUS_PER_NODE_FOR_GPUS
        if gpus <= per_node and gpus_per_node is None:
            return Budget(1, gpus)
        if gpus % per_node:
            below = gpus - gpus % per_node
            options = f"--gpus {below} or {below + per_node}" if below else f"--gpus {per_node}"
            raise UserError(f"{gpus} GPUs are not a whole number of nodes of {per_node} GPUs",
                            f"use {options}, or --nodes N --gpus-per-node G")
        return Budget(gpus // per_node, per_node)
    budget = Budget(nodes or preset_nodes, gpus_per_node or preset_gpus_per_node)
    if budget.world_size > MAX_GPUS:
        raise UserError(f"{budget.nodes} nodes × {budget.gpus_per_node} GPUs is more GPUs than the plan searches "
                        f"(at most {MAX_GPUS:,})", f"give a budget of at most {MAX_GPUS:,} GPUs")
    return budget


_SUFFIX = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def parse_tokens(text: str) -> float:
    """'300B', '1.5T', '2e9' → tokens. A bare number (`300`) is refused: it is almost always 300B meant."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)([eE][+-]?[0-9]+)?\s*([KMBGTkmbgt]?)\s*", text)
    if not match:
        raise UserError(f"cannot read a token count from --tokens {text!r}", "write e.g. 300B, 1.5T or 2e9")
    number, exponent, unit = match.groups()
    if not exponent and not unit:
        raise UserError(f"--tokens {number} has no unit",
                        f"write {number}B for {number} billion tokens (units K, M, B or T; or {number}e9)")
    tokens = float(number + (exponent or "")) * (_SUFFIX[unit.upper()] if unit else 1)
    if not 0 < tokens < 1e18:
        raise UserError(f"--tokens {text.strip()} is not a token budget", "give a positive count below 1e18")
    return tokens


def build_plan(name: str, args: Mapping[str, Any], budget: Budget, gpu: est.Gpu, top: int = 5,
               tflops: float | None = None, tokens: float | None = None, allow_sp: bool | None = None,
               rules: ps.Rules | None = None, extra_sets: tuple[str, ...] = (),
               notes: tuple[str, ...] = (), ckpt_write_gbps: float = est.CHECKPOINT_WRITE_GBPS,
               built_parameters: int | None = None, built_padded_vocab: int | None = None,
               own: tuple[Mapping[str, Any], est.Training] | None = None,
               recipe: tuple[str, ...] = (), pinned: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The whole `launch plan` answer as plain data (the JSON output; the text output renders it).

    `rules` judge layouts (launcher.pipeline.checker's, for the target's kernels); `extra_sets` are --set items
    every listed layout needs. `built_parameters` / `built_padded_vocab`: the model the preset's own launch
    builds (est.built_model_parameters), when its entry builds another model than the one `args` describe;
    `own`: that model's args and the preset's layout as its launch resolves it, which "the preset's layout" prices
    (the numbers its dry-run prints), while the layouts below are priced on `args`. `recipe`: the preset as the
    user named it and the user's own --set items, which every listed command starts with; `pinned`: layout
    settings the launcher chose for the preset's own layout (micro batch), which every command sets.
    """
    world = budget.world_size
    rules = rules or ps.Rules(args, budget.gpus_per_node)
    training = est.training_of(args, world)
    shape = est.model_shape(args, training.tp)
    problems = rules.problems(training)
    model_parallel = training.tp * training.pp * training.cp
    plan: dict[str, Any] = {
        "preset": name,
        "gpu": asdict(gpu) | {"memory_gib": round(gpu.memory_bytes / GIB, 1),
                              "usable_fraction": est.USABLE_FRACTION},
        "nodes": budget.nodes,
        "gpus_per_node": budget.gpus_per_node,
        "world_size": world,
        "tokens": tokens,
        "model": {
            "parameters": built_parameters if built_parameters is not None else est.parameter_count(args, training.tp),
            "vocab_size": shape.vocab_size,
            "padded_vocab_size": built_padded_vocab or shape.padded_vocab_size,
            "flops_per_token": est.flops_per_iteration(shape, 1) / shape.seq_length,
        },
        "layout": layout_dict(training) | {"valid": not problems, "problems": problems},
    }
    if problems and world < model_parallel:
        plan["layout"]["minimum_gpus"] = model_parallel
    named = coverage.unmodelled(args)
    spread = ranges.time_range(bool(shape.num_experts), gpu.family, training.fp8, coverage.widening(named))
    length = duration.training_length(args, training.global_batch_size, tokens)
    plan["not_modelled"] = [asdict(n) | {"line": n.line()} for n in named]
    plan["range"] = spread.as_dict()
    plan["length"] = length.as_dict() if length else None
    plan["tokens"] = length.tokens if length else None
    if not problems:
        own_args, own_training = own or (args, training)
        own_shape = est.model_shape(own_args, own_training.tp)
        e = estimate(own_args, own_training, gpu, budget.gpus_per_node, tflops)
        plan["model"] |= {
            "megatron_parameters": e.megatron_params.total,
            "parameters_most_loaded_gpu": max(sp.params for sp in est.stage_parameters(own_shape, own_training)),
            "megatron_most_loaded_shard": e.megatron_params.most_loaded_shard,
            "flops_per_iteration": e.flops_per_iteration,
        }
        plan["memory"] = {
            "megatron": e.megatron.as_dict(),
            "megatron_other_optimizer": e.megatron_other_optimizer.as_dict(),
            "complete": e.complete.as_dict(),
            "difference": [asdict(d) for d in est.memory_difference(own_shape, own_training)],
            "fits": e.fit,
        }
        plan["time"] = time_dict(e.step, own_training, own_shape, spread, length, args, gpu, budget.gpus_per_node,
                                 tflops)
        plan["checkpoint"] = checkpoint_dict(args, plan["model"]["parameters"], e.step.total, ckpt_write_gbps)
    result = ps.search(args, world, gpu, budget.gpus_per_node, top, tflops, allow_sp, rules)
    if not result.best:
        raise ps.no_fit_error(args, (recipe or (name,))[0], world, gpu, budget.gpus_per_node,
                              result.refusals or problems, rules)
    best = [candidate_dict(c, recipe or (name,), args, budget, spread, length, gpu, tflops, extra_sets, pinned)
            | {"tied_with_first": i < result.tied and result.tied > 1} for i, c in enumerate(result.best)]
    replaced = replaced_user_settings(recipe[1:], best)
    plan["search"] = {
        "considered": result.considered,
        "valid": result.valid,
        "fitting": result.fitting,
        "notes": list(notes) + [r["line"] for r in replaced] + result.notes,
        "replaced": replaced,  # the user's own --set items that listed layouts run with another value
        "best": best,
        "tie_band": result.tie_band,  # predictions closer than this to #1 are a tie (the held-back median error)
        # each alternative's predicted step time (None where it cannot run) with the same range as the layouts'
        "alternatives": [asdict(a) | {"seconds_range": list(spread.of(a.seconds)) if a.seconds is not None else None}
                         for a in result.alternatives],
    }
    return plan


def _dest(name: str) -> str:
    """A --set name as the Megatron setting it sets (megatron.X and flag spellings such as no_X included)."""
    from launcher.megatron.args import flag_aliases

    name = name.strip().removeprefix("megatron.")
    return flag_aliases().get(name, (name, True))[0]


def replaced_user_settings(user_sets: tuple[str, ...], best: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The user's own --set items that listed layouts run with another value (the search chooses TP, PP, VPP, the
    micro batch, recompute, sequence parallelism and the distributed optimizer itself): each with the layouts that
    replace it, their values, and one line that says so. Never a user's setting changed without a word."""
    found = []
    for item in dict.fromkeys(user_sets):
        dest = _dest(item.partition("=")[0])
        changed = {number: value for number, c in enumerate(best, 1) for name, _, value in
                   (o.partition("=") for o in c["overrides"]) if _dest(name) == dest}
        if not changed:
            continue
        kept = [f"#{n}" for n in range(1, len(best) + 1) if n not in changed]
        values = ", ".join(f"{dest}={v} in {', '.join(f'#{n}' for n, w in changed.items() if w == v)}"
                           for v in dict.fromkeys(changed.values()))
        found.append({"set": item, "dest": dest, "layouts": list(changed), "values": list(changed.values()),
                      "line": f"your --set {item} is replaced by the search: {values} (each listed command says "
                              f"so); {'kept in ' + ', '.join(kept) if kept else 'no listed layout keeps it'}"})
    return found


def layout_dict(t: est.Training) -> dict[str, Any]:
    d = asdict(t)
    model = t.tp * t.pp * t.cp
    d["dp"] = t.dp if t.world_size % model == 0 else None
    d["num_microbatches"] = t.num_microbatches if d["dp"] else None
    return d


def time_dict(step: StepTime, t: est.Training, m: est.ModelShape, spread: ranges.Range,
              length: duration.Length | None, args: Mapping[str, Any], gpu: est.Gpu, gpus_per_node: int,
              tflops: float | None) -> dict[str, Any]:
    """Step time with its range, throughput, and the run's length in time and GPU-hours with the same range."""
    flops = est.flops_per_iteration(m, t.global_batch_size)
    d: dict[str, Any] = {
        "step": step.as_dict(),
        "seconds_range": list(spread.of(step.total)),
        "model_tflops_per_gpu": flops / (step.total * t.world_size) / 1e12,
        "tokens_per_second": t.global_batch_size * m.seq_length / step.total,
    }
    if length is not None:
        d |= train_dict(step.total, t, m, spread, length, args, gpu, gpus_per_node, tflops)
    return d


def train_dict(seconds: float, t: est.Training, m: est.ModelShape, spread: ranges.Range, length: duration.Length,
               args: Mapping[str, Any], gpu: est.Gpu, gpus_per_node: int, tflops: float | None) -> dict[str, Any]:
    """Time to train (steps by batch phase, and evaluation) and GPU-hours, each with the step time's range."""

    def step_at(batch: int) -> float:
        if batch == t.global_batch_size:
            return seconds
        return step_time(m, replace(t, global_batch_size=batch), gpu, gpus_per_node, tflops).total

    train = duration.train_seconds(length, step_at, args)
    total = train["total"]
    low, high = spread.of(total)
    hours = total * t.world_size / 3600
    return {
        "seconds_to_tokens": total,
        "seconds_to_tokens_range": [low, high],
        "evaluation_seconds": train["evaluation"],
        "gpu_hours": hours,
        "gpu_hours_range": [low * t.world_size / 3600, high * t.world_size / 3600],
    }


def checkpoint_dict(args: Mapping[str, Any], parameters: float, step_seconds: float,
                    write_gbps: float) -> dict[str, Any]:
    """The periodic saves a run of this preset makes (its save_interval, else the launcher's default)."""
    from launcher.pipeline.run_paths import default_save_settings, end_of_training_interval

    interval = args.get("save_interval") or default_save_settings(args)["save_interval"]
    end = end_of_training_interval(args)
    total = end if end < 1_000_000_000 else None
    return est.save_cost(parameters, args, step_seconds, int(interval), total, write_gbps)


def candidate_dict(c: ps.Candidate, recipe: tuple[str, ...], args: Mapping[str, Any], budget: Budget,
                   spread: ranges.Range, length: duration.Length | None, gpu: est.Gpu, tflops: float | None,
                   extra_sets: tuple[str, ...] = (), pinned: frozenset[str] = frozenset()) -> dict[str, Any]:
    """One listed layout; its command is `launch PRESET` (as the user named it), the budget, the user's own --set
    items, then what selects this layout, so that pasted it runs the job priced here. A user's item that the layout
    sets anew is left out: each setting is given once, with the value priced."""
    sets = list(extra_sets) + ps.overrides(c.training, args, pinned)
    preset, user_sets = recipe[0], recipe[1:]
    anew = {item.split("=", 1)[0].strip() for item in sets}
    argv = ["launch", preset, "--nodes", str(budget.nodes), "--gpus-per-node", str(budget.gpus_per_node)]
    for item in [*(u for u in user_sets if u.split("=", 1)[0].strip() not in anew), *sets]:
        argv += ["--set", item]
    m = est.model_shape(args, c.training.tp)
    d = layout_dict(c.training) | {
        # the model and work priced: what the command's dry-run reports as parameters and FLOPs per iteration
        "parameters": est.parameter_count(args, c.training.tp),
        "parameters_most_loaded_gpu": max(sp.params for sp in est.stage_parameters(m, c.training)),
        "flops_per_iteration": est.flops_per_iteration(m, c.training.global_batch_size),
        "memory_gib": c.memory.total / GIB,
        "megatron_memory_gib": c.megatron.total / GIB,
        "fits": c.fit,
        "seconds_per_iteration": c.seconds,
        "seconds_range": list(spread.of(c.seconds)),
        "step": c.step.as_dict(),
        "overrides": sets,
        "command": argv,
    }
    if length is not None:
        d |= train_dict(c.seconds, c.training, m, spread, length, args, gpu, budget.gpus_per_node, tflops)
    return d


# --------------------------------------------------------------------------------------------------- text


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.2f} s"


def _range_source(spread: Mapping[str, Any]) -> str:
    widened = (f", ±{spread['widened_by_unmodelled']:.0%} wider for the settings not modelled below"
               if spread["widened_by_unmodelled"] else "")
    return f"the errors of {spread['runs']} held-back published runs, {spread['family']}{widened}"


def _train_line(plan: Mapping[str, Any], t: Mapping[str, Any]) -> str:
    length = plan["length"]
    low, high = t["seconds_to_tokens_range"]
    hours_low, hours_high = t["gpu_hours_range"]
    evaluation = f", of which evaluation {_duration(t['evaluation_seconds'])}" if t["evaluation_seconds"] else ""
    return (f"{_duration(t['seconds_to_tokens'])} ({_duration(low)} – {_duration(high)}) for "
            f"{est.human(length['tokens'])} tokens in {length['iterations']:,.0f} iterations ({length['source']})"
            f"{evaluation}; {_count(t['gpu_hours'])} GPU-hours ({_count(hours_low)} – {_count(hours_high)})")


def _count(value: float) -> str:
    """GPU-hours: 1.23K, 47, 0.062."""
    return est.human(value) if value >= 1000 else f"{value:.3g}"


def _batch_text(plan: Mapping[str, Any]) -> str:
    """The global batch, or the schedule's batches when a step batch-size schedule drives it."""
    length, batch = plan.get("length"), plan["layout"]["global_batch_size"]
    phases = length["phases"] if length else []
    if len(phases) > 1:
        return " → ".join(str(p["global_batch_size"]) for p in phases) + " (step_batch_size_schedule)"
    return str(batch)


def render_text(plan: dict[str, Any]) -> str:
    import shlex

    lines = []
    gpu = plan["gpu"]
    lay = plan["layout"]
    model = plan["model"]
    lines.append(f"{plan['preset']} on {plan['world_size']} × {gpu['name']} "
                 f"({plan['nodes']} node(s) × {plan['gpus_per_node']} GPUs, {gpu['memory_gib']} GiB each)")
    lines.append("")
    lines.append("Model")
    vocab = (f"vocab {model['vocab_size']}, not padded" if model["padded_vocab_size"] == model["vocab_size"]
             else f"vocab {model['vocab_size']} padded to {model['padded_vocab_size']}")
    lines.append(f"  parameters           {est.human(model['parameters'])} ({vocab})")
    lines.append(f"  FLOPs per token      {model['flops_per_token']:.4g} (Megatron's formula; recompute not counted)")
    lines.append("")
    desc = ps.describe(est.Training(**{k: lay[k] for k in est.Training.__dataclass_fields__}))
    lines.append(f"The preset's layout: {desc}, global batch {_batch_text(plan)}")
    if not lay["valid"]:
        for p in lay["problems"]:
            lines.append(f"  not possible here: {p}")
        if lay.get("minimum_gpus"):
            lines.append(f"  it needs at least TP·PP·CP = {lay['minimum_gpus']} GPUs")
    else:
        lines.append(f"  microbatches         {lay['num_microbatches']} per iteration, DP {lay['dp']}")
        lines.append(f"  parameters per GPU   {est.human(model['parameters_most_loaded_gpu'])} on the most loaded GPU "
                     f"(Megatron's count: {est.human(model['megatron_most_loaded_shard'])})")
        lines.append(f"  FLOPs per iteration  {model['flops_per_iteration']:.4g}")
        lines.append("")
        mem = plan["memory"]
        meg, other, comp = mem["megatron"], mem["megatron_other_optimizer"], mem["complete"]
        unit, size = ("GiB", GIB) if max(meg["total"], comp["total"]) >= GIB / 10 else ("MiB", est.MB)
        lines.append(f"  Memory per GPU, {unit}  {'Megatron':>9} {'complete':>9}   (complete: stage {comp['stage']})")
        for key, label in (("weights", "weights"), ("gradients", "gradients"), ("optimizer", "optimizer state"),
                           ("activations", "activations"), ("optimizer_step", "optimizer step"), ("total", "total")):
            if key == "optimizer_step" and not comp.get(key):
                continue  # the step's peak counts instead of the activations' only where it is the larger
            lines.append(f"    {label:<18} {meg.get(key, 0) / size:9.2f} {comp[key] / size:9.2f}"
                         + ("   the fp32 copy of 16-bit gradients, after the activations are freed: the peak "
                            "holds the larger" if key == "optimizer_step" else ""))
        toggled = "with" if not lay["distributed_optimizer"] else "without"
        lines.append(f"    ({toggled} the distributed optimizer, Megatron's total would be "
                     f"{other['total'] / size:.2f} {unit}: optimizer state {other['optimizer'] / size:.2f})")
        gap = comp["total"] - meg["total"]
        lines.append(f"    complete − Megatron = {gap / size:+.2f} {unit}:")
        for d in mem["difference"]:
            if abs(d["bytes"]) >= size / 200:
                lines.append(f"      {d['what']} {d['bytes'] / size:+.2f} {unit}: {d['why']}")
        lines.append(f"  fits {gpu['name']}?    {mem['fits']} ({comp['total'] / GIB:.2f} of {gpu['memory_gib']} GiB;"
                     f" 'fits' means ≤ {int(gpu['usable_fraction'] * 100)}%, refused above "
                     f"{gpu['memory_gib'] - est.MEMORY_RESERVE_BYTES / GIB:.1f})")
        t = plan["time"]
        s = t["step"]
        lines.append("")
        lines.append("  Time per iteration (steptime model; `--tflops` replaces its compute rate)")
        lines.append(f"    per iteration      {s['total']:.3f} s  (compute {s['compute']:.3f}, recompute "
                     f"{s['recompute']:.3f}, bubble {s['bubble']:.3f}, exposed comm: TP {s['tensor_comm']:.3f}, "
                     f"CP {s['context_comm']:.3f}, PP {s['pipeline_comm']:.3f}, DP {s['data_comm']:.3f}; "
                     f"optimizer {s['optimizer']:.3f})")
        low, high = t["seconds_range"]
        lines.append(f"    likely range       {low:.3f} – {high:.3f} s  ({_range_source(plan['range'])})")
        lines.append(f"    throughput         {t['tokens_per_second']:,.0f} tokens/s, "
                     f"{t['model_tflops_per_gpu']:.0f} model TFLOP/s per GPU")
        if "seconds_to_tokens" in t:
            lines.append(f"    time to train      {_train_line(plan, t)}")
        c = plan["checkpoint"]
        saves = f", {c['saves']:,} saves: {_duration(c['total_seconds'])} in all" if c["saves"] else ""
        lines.append(f"    checkpoints        {est.human_bytes(c['bytes'])} each, ~{_duration(c['seconds_per_save'])} "
                     f"per save at {c['write_gbps']:g} GB/s (--ckpt-write-gbps); every {c['save_interval']:,} "
                     f"iterations = +{100 * c['overhead_fraction']:.1f} % time{saves}")
    search = plan["search"]
    lines.append("")
    lines.append(f"Best layouts for {plan['world_size']} × {gpu['name']} ({search['fitting']} of "
                 f"{search['valid']} valid layouts fit within {int(gpu['usable_fraction'] * 100)}% of memory; "
                 f"each TP·PP once, ranked by estimated step time)")
    head = f"  {'#':>2} {'TP':>3} {'PP':>3} {'VPP':>3} {'DP':>5} {'MBS':>3} {'M':>5} {'SP':>3} {'recompute':>9} " \
           f"{'dist-opt':>8} {'GiB/GPU':>8} {'s/iter':>9}"
    if plan["tokens"]:
        head += f" {'range':>17} {'to ' + est.human(plan['tokens']) + ' (range)':>28} {'GPU-hours (range)':>24}"
    else:
        head += f" {'range':>17}"
    lines.append(head)
    for i, c in enumerate(search["best"], 1):
        tie = "≈" if c.get("tied_with_first") else " "
        row = (f" {tie}{i:>2} {c['tp']:>3} {c['pp']:>3} {c['vpp']:>3} {c['dp']:>5} {c['micro_batch_size']:>3} "
               f"{c['num_microbatches']:>5} {'yes' if c['sequence_parallel'] else 'no':>3} {c['recompute']:>9} "
               f"{'yes' if c['distributed_optimizer'] else 'no':>8} {c['memory_gib']:8.2f} "
               f"{c['seconds_per_iteration']:9.4f}")
        low, high = c["seconds_range"]
        row += f" {f'{low:.3g}–{high:.3g}':>17}"
        if "seconds_to_tokens" in c:
            low, high = c["seconds_to_tokens_range"]
            hours_low, hours_high = c["gpu_hours_range"]
            row += (f" {f'{_duration(c['seconds_to_tokens'])} ({_duration(low)}–{_duration(high)})':>28}"
                    f" {f'{_count(c['gpu_hours'])} ({_count(hours_low)}–{_count(hours_high)})':>24}")
        lines.append(row)
    lines.append("")
    for i, c in enumerate(search["best"], 1):
        lines.append(f"  #{i}: {shlex.join(c['command'])}")
    if search["alternatives"]:
        lines.append("")
        lines.append("Why not")
        for a in search["alternatives"]:
            likely = (f" [likely {a['seconds_range'][0]:.3g}–{a['seconds_range'][1]:.3g} s/iteration]"
                      if a["seconds_range"] else "")
            lines.append(f"  {a['label']}: {a['verdict']}{likely}")
    for note in search["notes"]:
        lines.append(f"note: {note}")
    for named in plan["not_modelled"]:
        lines.append(named["line"])
    lines.append("")
    lines.append("Memory: 'Megatron' is megatron.training.theoretical_memory_usage; 'complete' is the launcher's "
                 "model of the most loaded GPU (docs/plan.md); 'complete − Megatron' names what they differ by.")
    return "\n".join(lines)


def render_json(plan: dict[str, Any]) -> str:
    return json.dumps(plan, indent=2, sort_keys=False)


# --------------------------------------------------------------------------------------------------- CLI


def add_arguments(parser: Any) -> None:
    parser.add_argument("preset", help="preset name in configs/ or a path to a YAML file")
    parser.add_argument("--nodes", type=int, help="nodes in the budget (default: the preset's)")
    parser.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: the preset's)")
    parser.add_argument("--gpus", type=int, help="total GPUs, in nodes of --gpus-per-node, or of 8 when that is "
                                                 "not given (default: the preset's nodes × GPUs per node)")
    parser.add_argument("--gpu", help=f"GPU model (default: the preset's launcher.gpu, {est.DEFAULT_GPU} unless it "
                                      f"says otherwise): {', '.join(sorted(est.GPUS))}")
    parser.add_argument("--tflops", type=positive_number,
                        help="measured model TFLOP/s per GPU for the compute; bubble, "
                                                     "exposed communication and the optimizer step are added "
                                                     "(default: the calibrated kernel model for --gpu)")
    parser.add_argument("--tokens", help="token budget for the time-to-train figures, e.g. 300B "
                                         "(default: what the preset trains for)")
    parser.add_argument("--top", type=int, default=5, help="how many layouts to list (default 5)")
    parser.add_argument("--ckpt-write-gbps", type=positive_number, default=est.CHECKPOINT_WRITE_GBPS,
                        help="aggregate checkpoint write rate in GB/s, for the save times "
                             f"(default {est.CHECKPOINT_WRITE_GBPS:g})")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                        help="override a preset setting first, as for launch")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    measure = parser.add_argument_group("measuring on this machine")
    measure.add_argument("--measure", action="store_true",
                         help="run the best layouts that fit this machine for a few iterations each (as `launch` "
                              "would run them), rank them by the measured step time, print measured vs "
                              "predicted and store the measurements for refitting")
    measure.add_argument("--measure-layouts", type=int, default=4, metavar="N",
                         help="how many layouts to run (default 4)")
    measure.add_argument("--measure-iters", type=int, default=10, metavar="N",
                         help="iterations per layout (default 10; the first 3 are warm-up and not timed)")
    measure.add_argument("--megatron-path", help="Megatron-LM checkout (default: $MEGATRON_LM_PATH or the submodule)")
    measure.add_argument("--no-doctor", action="store_true", help="skip the environment checks before the runs")
    measure.add_argument("--refit", action="store_true",
                         help="rank with step-time constants refitted on the runs --measure stored for --gpu")
    measure.add_argument("--measurements", type=Path, metavar="FILE",
                         help="the measurements file for --refit (default: the one --measure writes)")


@dataclass(frozen=True)
class PlanInputs:
    """What a plan was computed from (for `--measure`, which runs its layouts)."""

    preset: Any  # launcher.pipeline.preset.Preset, as given (its own entry)
    args: dict[str, Any]  # the Megatron settings the layouts are judged on
    budget: Budget
    gpu: est.Gpu
    rules: ps.Rules
    kernels: Any  # launcher.megatron.pin.Kernels
    allow_sp: bool
    extra_sets: tuple[str, ...]


# 345m with the launcher's SDPA spec on one H200, no TE (docs/benchmarks.md, docs/data/h200-bench-micro-345m.json)
SDPA_MEASURED_TFLOPS = 400


def sdpa_note(how: str, time: Mapping[str, Any] | None, gpu: str, tflops: float | None) -> str:
    """Without TE: the attention the layouts run with, the rate measured with it, and this plan's own rate."""
    text = (f"without Transformer Engine ({how}): --transformer-impl local with the launcher's SDPA attention spec; "
            f"345m measured ~{SDPA_MEASURED_TFLOPS} model TFLOP/s with it on one H200 (docs/benchmarks.md)")
    if time is not None:
        text += f", and this plan predicts {time['model_tflops_per_gpu']:.0f} for the preset's layout on {gpu}"
    return text + (" (from your --tflops)" if tflops else "; pass a measured --tflops to plan with your own rate")


def run(ns: Any) -> str:
    """The `plan` subcommand's output for parsed arguments; bad input raises UserError."""
    plan, _ = plan_for(ns)
    return render_json(plan) + "\n" if ns.format == "json" else render_text(plan) + "\n"


def plan_gpu(given: str | None, preset: Any) -> est.Gpu:
    """The GPU a plan prices: --gpu, else the preset's launcher.gpu (what its dry-run estimates on); a --set gpu=
    that --gpu contradicts is refused, not dropped."""
    from launcher.pipeline.preset import override_name

    if given is None:
        return est.gpu_by_name(preset.launcher.gpu)
    gpu = est.gpu_by_name(given)
    set_here = any(override_name(o) == "gpu" for o in preset.overrides)
    if set_here and gpu.name != preset.launcher.gpu:
        raise UserError(f"--gpu {gpu.name} and --set gpu={preset.launcher.gpu} name two GPUs",
                        "give the GPU once: --gpu NAME")
    return gpu


def refuse_world_given_twice(preset: Any, budget: Budget) -> None:
    """A --set nodes= or gpus_per_node= that the budget (--nodes, --gpus-per-node, --gpus) contradicts is refused:
    the plan would price another world than the one the user set."""
    from launcher.pipeline.preset import override_name

    names = {override_name(o) for o in preset.overrides}
    problems = [Problem(f"--set {name}={value} and the budget's {planned} {name.replace('_', ' ')} disagree",
                        f"give the world once: --nodes N --gpus-per-node G (or --gpus N), or --set {name} alone")
                for name, value, planned in (("nodes", preset.launcher.nodes, budget.nodes),
                                             ("gpus_per_node", preset.launcher.gpus_per_node, budget.gpus_per_node))
                if name in names and value != planned]
    if problems:
        raise UserError(problems)


def plan_for(ns: Any, budget: Budget | None = None) -> tuple[dict[str, Any], PlanInputs]:
    """The plan for parsed arguments (on `budget` if given, else the flags' or the preset's) and its inputs."""
    from launcher.cli.job import JobRequest, job_for
    from launcher.pipeline.checker import model_args, required_problems
    from launcher.pipeline.pipeline_layout import layout_string_problem
    from launcher.pipeline.preset import load_preset

    if ns.top < 1:
        raise UserError(Problem(f"--top must be at least 1, got {ns.top}"))
    if ns.tflops is not None and ns.tflops <= 0:
        raise UserError(Problem(f"--tflops must be positive, got {ns.tflops}"))
    if ns.ckpt_write_gbps <= 0:
        raise UserError(Problem(f"--ckpt-write-gbps must be positive, got {ns.ckpt_write_gbps}"))
    tokens = parse_tokens(ns.tokens) if ns.tokens else None
    preset = load_preset(ns.preset, list(ns.overrides))
    gpu = plan_gpu(ns.gpu, preset)
    # the checker's own words, before any estimate divides by a size or unrolls a layout
    layout = layout_string_problem(preset.arg)
    unusable = required_problems(preset.arg, may_be_unset=("micro_batch_size",)) + \
        ([layout] if layout is not None else [])
    if unusable:
        raise UserError(unusable)
    settings = preset.launcher
    budget = budget or resolve_budget(ns.nodes, ns.gpus_per_node, ns.gpus, settings.nodes, settings.gpus_per_node)
    refuse_world_given_twice(preset, budget)
    given = preset
    # The settings the job would pass on this budget (through pretrain_gpt.py: the layouts below choose TP), as
    # resolve decides them for a launch, e.g. without TE the local layers with the launcher's SDPA attention.
    on_budget = JobRequest(budget.nodes, budget.gpus_per_node, run_dir=False, local=False)
    training = replace(preset, launcher=replace(settings, entry="pretrain_gpt"))
    job, _ = job_for(training, on_budget)
    # The model the preset's own launch builds (its entry may be the simple loop, which builds its own)
    own, _ = job_for(preset, on_budget)
    kernels = job.kernels
    preset = job.as_checked()
    args = model_args(job.effective(), job.entry, job.tokenizer_vocab)  # a vocabulary left to the tokenizer
    if args.get("vocab_size") is None and not args.get("padded_vocab_size"):
        tokenizer = args.get("tokenizer_model") or args.get("vocab_file")
        raise UserError(Problem(
            "the model's vocabulary size is not known here: vocab_size is not set, and the tokenizer "
            f"({args.get('tokenizer_type') or 'GPT2BPETokenizer'}{f' {tokenizer}' if tokenizer else ''}) is not "
            "readable here to say it, so the embedding and output layer could not be counted",
            "make the tokenizer's files readable here, or plan with --set vocab_size=N (the tokenizer's "
            "vocabulary; the plan only counts with it)"))
    tp = int(est.megatron_value(args, "tensor_model_parallel_size"))
    own_args = model_args(own.effective(), own.entry, own.tokenizer_vocab)
    built = est.built_model_parameters(own.effective(), own.entry, tp, own.tokenizer_vocab)
    notes: list[str] = []
    extra_sets: tuple[str, ...] = ()
    if gpu.name != settings.gpu:  # the listed commands' dry-runs judge memory on the GPU priced here
        extra_sets = (f"gpu={gpu.name}",)
    if settings.entry == "simple_loop":
        extra_sets = ("entry=pretrain_gpt", *extra_sets)
        notes.append("the preset runs upstream's simple loop, which takes no arguments; the layouts below run "
                     "through pretrain_gpt.py (entry=pretrain_gpt)")
    layouts_build = est.built_model_parameters(job.effective(), job.entry, tp, job.tokenizer_vocab)
    if layouts_build != built:
        differ = []
        if est.padded_vocab_size(own_args, tp) != est.padded_vocab_size(args, tp):
            differ.append(f"vocabulary padded to {est.padded_vocab_size(args, tp)}")
        if bool(own_args.get("untie_embeddings_and_output_weights")) != bool(
                args.get("untie_embeddings_and_output_weights")):
            differ.append("output layer untied" if args.get("untie_embeddings_and_output_weights")
                          else "output layer tied to the embedding")
        notes.append(f"the layouts below run through pretrain_gpt.py, which builds {est.human(layouts_build)} "
                     f"parameters ({', '.join(differ)})")
    rules = ps.Rules(args, budget.gpus_per_node, kernels.transformer_engine, kernels.apex, preset.launcher)
    allow_sp = kernels.transformer_engine or kernels.apex
    refitted: dict[str, Any] | None = None
    constants: AbstractContextManager[None] = nullcontext()
    if ns.refit:  # this machine's measured speed (launch plan --measure) in place of the published runs' constants
        from launcher.cli import plan_refit

        path = ns.measurements or plan_refit.measurements_path()
        result, runs = plan_refit.refit_for(path, gpu)
        notes.insert(0, plan_refit.describe(result, runs, path, gpu))
        refitted = {"runs": runs, "file": str(path), "constants": {k: v[1] for k, v in result.changed().items()},
                    "errors_before": list(result.errors_before), "errors_after": list(result.errors_after)}
        constants = plan_refit.kernels_installed(gpu.family, result.after)
    training_of_budget = est.training_of(args, budget.world_size)
    with constants:
        plan = build_plan(preset.name, args, budget, gpu, ns.top, ns.tflops, tokens, allow_sp=allow_sp, rules=rules,
                          extra_sets=extra_sets, notes=tuple(notes), ckpt_write_gbps=ns.ckpt_write_gbps,
                          built_parameters=built, built_padded_vocab=est.padded_vocab_size(own_args, tp),
                          # a preset whose launch is refused here (no micro batch: the plan's to choose) has no
                          # layout of its own: it is priced as the layouts are
                          own=(own_args, layout_training(own_args, own.layout, kernels=kernels))
                          if own.layout.world_size else None,
                          recipe=(ns.preset, *ns.overrides),
                          pinned=frozenset(job.added) & frozenset(ps.settings(training_of_budget)))
    if not kernels.transformer_engine:  # said with the plan's own number, which it must not contradict
        plan["search"]["notes"].insert(1 if ns.refit else 0, sdpa_note(kernels.how, plan.get("time"), gpu.name,
                                                                       ns.tflops))
    if refitted is not None:
        plan["refit"] = refitted
    return plan, PlanInputs(given, args, budget, gpu, rules, kernels, allow_sp, extra_sets)
