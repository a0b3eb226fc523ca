"""Search the parallel layouts of a preset for a GPU budget: valid, fitting, ranked by estimated step time.

The space: TP (within a node), PP (dividing the layers, or the layers plus the embedding and/or the loss
counted as layers), interleaved virtual stages, DP (what is left), micro batch, activation recompute
(none/selective/full), sequence parallel, distributed optimizer. CP, the overlap and precision knobs and the
global batch stay as the preset says. Each parallel layout (TP, PP) is shown once, with its fastest choice of
VPP, micro batch and the other knobs that fits within the usable memory (a layout above it is never
ranked); ranking uses steptime.step_time (its docstring says the model).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from launcher.errors import Problem, UserError
from launcher.estimate import formulas as est
from launcher.estimate.ranges import tie_band
from launcher.estimate.stages import SplitError
from launcher.estimate.steptime import StepTime, step_time
from launcher.pipeline import checker as pipeline_checker
from launcher.pipeline.divisors import divisors
from launcher.pipeline.preset import LauncherSettings, Preset

MICRO_BATCHES = (1, 2, 4, 8, 16, 32)
RECOMPUTE = ("none", "selective", "full")
# Virtual stages per pipeline rank: every divisor of a rank's layers up to this (published runs use 10-24)
MAX_VPP = 64
# minimum_gpus stops after this many GPU counts on which layouts fit in memory but every one is refused
REFUSED_WORLDS = 4


class Rules:
    """Which layouts are valid: launcher.pipeline.checker's own layout rules (the ones `launch` checks), for one
    model on one kind of machine. This is the search's only rule set. Answers are kept per layout, since the
    knob the rules do not read (activation recompute) multiplies the candidates."""

    def __init__(self, args: Mapping[str, Any], gpus_per_node: int = 8, te: bool = True, apex: bool = True,
                 launcher: LauncherSettings | None = None):
        self.megatron = {name: value for name, value in args.items() if value is not None}
        self.launcher = launcher or LauncherSettings()  # the target (GPU, kernels) some rules depend on
        self.gpus_per_node = gpus_per_node
        self.te = te
        self.apex = apex
        self._known: dict[tuple[Any, ...], list[str]] = {}

    def problems(self, t: est.Training) -> list[str]:
        """What `launch` would refuse about layout `t`; empty when valid."""
        key = (t.world_size, t.tp, t.pp, t.cp, t.vpp, t.micro_batch_size, t.global_batch_size,
               t.sequence_parallel, t.distributed_optimizer)
        if key not in self._known:
            chosen = {name: value for name, value in settings(t).items() if not name.startswith("recompute")}
            if self.megatron.get("step_batch_size_schedule"):  # the schedule sets the batch (Megatron refuses both)
                chosen.pop("global_batch_size")
            preset = Preset(name="candidate", description="", launcher=self.launcher,
                            megatron={**self.megatron, **chosen, "context_parallel_size": t.cp})
            found = pipeline_checker.layout_problems(preset, t.world_size, min(self.gpus_per_node, t.world_size),
                                                    self.te, self.apex)
            self._known[key] = [p.message for p in found]
        return self._known[key]


def shape_settings(m: est.ModelShape) -> dict[str, Any]:
    """The Megatron settings of a model shape (for rules asked about a shape alone)."""
    return {
        "num_layers": m.num_layers, "hidden_size": m.hidden_size, "num_attention_heads": m.num_attention_heads,
        "kv_channels": m.kv_channels, "group_query_attention": m.num_query_groups != m.num_attention_heads,
        "num_query_groups": m.num_query_groups, "ffn_hidden_size": m.ffn_hidden_size, "swiglu": m.swiglu,
        "seq_length": m.seq_length, "max_position_embeddings": max(m.position_embeddings, m.seq_length),
        "vocab_size": m.vocab_size,
    }


def layout_problems(m: est.ModelShape, t: est.Training, args: Mapping[str, Any] | None = None,
                    gpus_per_node: int = 8, te: bool = True, apex: bool = True) -> list[str]:
    """The pipeline's layout rules for model `args` (or shape `m`) at layout `t`; empty when valid."""
    return Rules(shape_settings(m) if args is None else args, gpus_per_node, te, apex).problems(t)


@dataclass(frozen=True)
class Candidate:
    training: est.Training
    memory: est.Memory  # the complete model, most loaded GPU
    megatron: est.Memory  # Megatron's own figure, for comparison
    step: StepTime
    fit: str

    @property
    def seconds(self) -> float:
        return self.step.total


def evaluate(m: est.ModelShape, t: est.Training, gpu: est.Gpu, gpus_per_node: int,
             tflops: float | None = None) -> Candidate:
    mem = est.complete_memory(m, t)
    return Candidate(t, mem, est.megatron_memory(m, t), step_time(m, t, gpu, gpus_per_node, tflops),
                     est.fit_status(mem.total, gpu))


def structural_layouts(m: est.ModelShape, base: est.Training, gpus_per_node: int) -> Iterable[est.Training]:
    """Every (TP, PP, VPP, MBS) with TP inside a node; other knobs as in `base`. Where PP does not divide
    the layers, the split that counts the embedding and/or the loss as layers (as Megatron can) is tried."""
    world = base.world_size
    for tp in divisors(min(world, gpus_per_node)):
        for pp in divisors(world // tp):
            if (world // tp) % (pp * base.cp):
                continue
            split = pipeline_split(m, base, pp)
            if split is None:
                continue
            for vpp in vpp_choices(m, split):
                for mbs in MICRO_BATCHES:
                    yield replace(split, tp=tp, pp=pp, vpp=vpp, micro_batch_size=mbs)


def vpp_choices(m: est.ModelShape, split: est.Training) -> list[int]:
    """The virtual stages per pipeline rank worth trying for `split` (its PP and pipeline split): 1 and every
    divisor of a rank's layers (the embedding and loss counted where the split counts them) up to MAX_VPP; a
    layout string fixes its own."""
    if split.pipeline_layout:
        return [split.vpp]
    if split.pp == 1:
        return [1]
    per_rank = max(st.layers + st.embedding * split.embedding_in_split + st.loss * split.loss_in_split
                   for st in est.pipeline_stages(m, replace(split, vpp=1)))
    return [1] + [v for v in divisors(per_rank) if 1 < v <= MAX_VPP]


def pipeline_split(m: est.ModelShape, base: est.Training, pp: int) -> est.Training | None:
    """`base` at PP `pp` with a split Megatron accepts: the preset's own, else the embedding and/or the loss
    counted as layers; None when neither divides."""
    at_pp = replace(base, pp=pp, vpp=1)
    if base.pipeline_layout and base.pp != pp:
        at_pp = replace(at_pp, pipeline_layout=None)
    if at_pp.pipeline_layout:
        at_pp = replace(at_pp, vpp=base.vpp)
    tries = [at_pp]
    if not (at_pp.first_stage_layers or at_pp.last_stage_layers or at_pp.pipeline_layout):
        tries += [replace(at_pp, embedding_in_split=e, loss_in_split=lo)
                  for e, lo in ((False, True), (True, True), (False, False))]
    for t in tries:
        try:
            est.pipeline_stages(m, t)
        except SplitError:
            continue
        return t
    return None


def knob_variants(t: est.Training, allow_sp: bool) -> Iterable[est.Training]:
    for recompute in recompute_choices(t):
        for sp in ([True, False] if allow_sp and t.tp > 1 else [False]):
            for dist_opt in ([True, False] if t.dp > 1 else [t.distributed_optimizer]):
                yield replace(t, recompute=recompute, sequence_parallel=sp, distributed_optimizer=dist_opt)


def recompute_choices(t: est.Training) -> tuple[str, ...]:
    """The recompute choices Megatron accepts with `t`'s other settings: overlap_moe_expert_parallel_comm
    refuses full recomputation (transformer_config.py)."""
    return tuple(r for r in RECOMPUTE if not (r == "full" and t.moe_a2a_overlap))


@dataclass(frozen=True)
class Alternative:
    label: str
    verdict: str
    seconds: float | None = None  # its predicted step time, where it can run


@dataclass(frozen=True)
class SearchResult:
    best: list[Candidate]
    considered: int
    valid: int
    fitting: int
    alternatives: list[Alternative]
    notes: list[str]
    refusals: list[str] = field(default_factory=list)  # why launch's checks refused fitting candidates
    tie_band: float = 0.0  # relative step-time difference the model cannot resolve (ranges.tie_band)
    tied: int = 0  # the first `tied` of the ranking (#1 included) are within tie_band of #1: a tie


def tied_with_first(ranked: list[Candidate], band: float) -> int:
    """How many of `ranked` (fastest first) are predicted within `band` of #1: the model cannot order them."""
    if not ranked:
        return 0
    return sum(c.seconds <= ranked[0].seconds * (1 + band) for c in ranked)


def sequence_parallel_allowed(args: Mapping[str, Any]) -> bool:
    # Measured: without TE or apex, torch's LayerNorm asserts "sequence parallel not supported".
    return est.megatron_value(args, "transformer_impl") != "local"


def search(args: Mapping[str, Any], world_size: int, gpu: est.Gpu, gpus_per_node: int = 8,
           top: int = 5, tflops: float | None = None, allow_sp: bool | None = None,
           rules: Rules | None = None) -> SearchResult:
    """Rank the layouts of `args` on world_size GPUs. Candidates must pass `rules` (the pipeline's layout rules;
    by default for a machine with Transformer Engine and apex)."""
    rules = rules or Rules(args, gpus_per_node)
    m = est.model_shape(args)
    base = replace(est.training_of(args, world_size), torch_adam=est.uses_torch_adam(args, rules.te, rules.apex))
    allow_sp = sequence_parallel_allowed(args) if allow_sp is None else allow_sp
    notes = []
    if not allow_sp:
        notes.append("sequence parallel not tried: without Transformer Engine or apex, torch's LayerNorm "
                     "cannot do it")
    best_by_layout: dict[tuple[int, int], Candidate] = {}
    shapes: dict[int, est.ModelShape] = {}
    refusals: dict[str, None] = {}
    considered = valid = fitting = 0
    for layout in structural_layouts(m, base, gpus_per_node):
        # The shape (padded vocab) depends on TP.
        shape = shapes.get(layout.tp) or shapes.setdefault(layout.tp, est.model_shape(args, layout.tp))
        for t in knob_variants(layout, allow_sp):
            considered += 1
            problems = rules.problems(t)
            if problems:
                if est.fit_status(est.complete_memory(shape, t).total, gpu) == "fits":
                    refusals.setdefault(problems[0], None)  # why launch's checks refused a fitting layout
                continue
            valid += 1
            mem = est.complete_memory(shape, t)
            if est.fit_status(mem.total, gpu) != "fits":  # above the usable fraction: never recommended
                continue
            c = evaluate(shape, t, gpu, gpus_per_node, tflops)
            fitting += 1
            key = (t.tp, t.pp)
            old = best_by_layout.get(key)
            if old is None or rank_key(c) < rank_key(old):
                best_by_layout[key] = c
    ranked = sorted(best_by_layout.values(), key=rank_key)
    band = tie_band()
    tied = tied_with_first(ranked, band)
    labels: dict[est.Training, list[str]] = {}
    for label, t in popular_alternatives(args, base, gpus_per_node, ranked):
        labels.setdefault(t, []).append(label)  # one verdict for alternatives that coincide
    alternatives = [judge(" = ".join(names), t, args, ranked, gpu, gpus_per_node, tflops, rules)
                    for t, names in labels.items()]
    if tied > 1 and top > 1:
        notes.append(f"#1-#{min(tied, top)} (marked ≈) are within {band:.1%} of #1's estimate, the median error "
                     f"of the held-back published runs: a tie the model cannot order. They are listed fastest first; "
                     f"published runs in such ties often took the one with more memory headroom or more "
                     f"pipeline stages (docs/plan.md), a choice the estimate does not price")
    return SearchResult(ranked[:top], considered, valid, fitting, alternatives, notes, list(refusals), band, tied)


def rank_key(c: Candidate) -> tuple[float, float]:
    # Faster first; at equal speed less memory.
    return (c.seconds, c.memory.total)


def popular_alternatives(args: Mapping[str, Any], base: est.Training, gpus_per_node: int,
                         ranked: list[Candidate]) -> list[tuple[str, est.Training]]:
    """The layouts people try first, to say why they lost (or were rejected)."""
    alts = [("the preset's own layout", base)]
    one_stage = pipeline_split(est.model_shape(args, base.tp), base, 1) or replace(base, pp=1, vpp=1)
    alts.append(("pure data parallel (TP1 PP1)", replace(one_stage, tp=1, sequence_parallel=False)))
    alts.append((f"TP{gpus_per_node} (one node), PP1", replace(one_stage, tp=gpus_per_node)))
    if ranked:
        top = ranked[0].training
        if top.recompute != "none":
            alts.append(("#1 without activation recompute", replace(top, recompute="none")))
        if top.distributed_optimizer and top.dp > 1:
            alts.append(("#1 without the distributed optimizer", replace(top, distributed_optimizer=False)))
        if top.vpp > 1:
            alts.append(("#1 without interleaving (VPP 1)", replace(top, vpp=1)))
    return alts


def judge(label: str, t: est.Training, args: Mapping[str, Any], ranked: list[Candidate], gpu: est.Gpu,
          gpus_per_node: int, tflops: float | None, rules: Rules | None = None) -> Alternative:
    shape = est.model_shape(args, t.tp)
    name = f"{label} [{describe(t)}]"
    problems = (rules or Rules(args, gpus_per_node)).problems(t)
    if problems:
        return Alternative(name, "invalid: " + "; ".join(problems))
    c = evaluate(shape, t, gpu, gpus_per_node, tflops)
    if c.fit == "does not fit":
        usable = (gpu.memory_bytes - est.MEMORY_RESERVE_BYTES) / est.GIB
        return Alternative(name, f"does not fit: needs {c.memory.total / est.GIB:.1f} GiB per GPU "
                                 f"(stage {c.memory.stage}) > {usable:.1f} GiB usable of the "
                                 f"{gpu.memory_bytes / est.GIB:.1f} GiB of {gpu.name}")
    if c.fit == "tight":
        return Alternative(name, f"too tight: {c.memory.total / est.GIB:.1f} GiB per GPU (stage {c.memory.stage}) "
                                 f"is above {est.USABLE_FRACTION:.0%} of {gpu.memory_bytes / est.GIB:.1f} GiB "
                                 f"({c.seconds:.3f} s/iteration if it ran)", c.seconds)
    if not ranked:
        return Alternative(name, f"fits, {c.seconds:.3f} s/iteration", c.seconds)
    best = ranked[0].seconds
    if c.seconds <= best * 1.0005:
        return Alternative(name, f"as fast as #1 ({c.seconds:.3f} s/iteration)", c.seconds)
    slower = (c.seconds / best - 1) * 100
    why = dominant_cost(c.step, ranked[0].step)
    return Alternative(name, f"{slower:.1f}% slower than #1 ({c.seconds:.3f} vs {best:.3f} s/iteration; "
                             f"{why})", c.seconds)


def dominant_cost(mine: StepTime, best: StepTime) -> str:
    parts = {
        "compute": mine.compute - best.compute,
        "recompute": mine.recompute - best.recompute,
        "pipeline bubble": mine.bubble - best.bubble,
        "TP communication": mine.tensor_comm - best.tensor_comm,
        "CP communication": mine.context_comm - best.context_comm,
        "DP communication": mine.data_comm - best.data_comm,
        "PP communication": mine.pipeline_comm - best.pipeline_comm,
        "optimizer step": mine.optimizer - best.optimizer,
    }
    name, extra = max(parts.items(), key=lambda kv: kv[1])
    return f"mostly {name}, +{extra:.3f} s"


def describe(t: est.Training) -> str:
    vpp = f" VPP{t.vpp}" if t.vpp > 1 else ""
    vpp += f" CP{t.cp}" if t.cp > 1 else ""
    model = t.tp * t.pp * t.cp
    dp = f" DP{t.dp}" if t.world_size % model == 0 else ""
    return (f"TP{t.tp} PP{t.pp}{vpp}{dp} MBS{t.micro_batch_size} recompute={t.recompute}"
            f"{' SP' if t.sequence_parallel else ''}{' dist-opt' if t.distributed_optimizer else ''}")


def settings(t: est.Training) -> dict[str, Any]:
    """The Megatron settings that select layout `t` (dest → value)."""
    wanted: dict[str, Any] = {
        "tensor_model_parallel_size": t.tp,
        "pipeline_model_parallel_size": t.pp,
        # a layout string sets the virtual stages itself; Megatron refuses both
        "num_virtual_stages_per_pipeline_rank": t.vpp if t.vpp > 1 and not t.pipeline_layout else None,
        "num_layers_per_virtual_pipeline_stage": None,
        "micro_batch_size": t.micro_batch_size,
        "sequence_parallel": t.sequence_parallel,
        "recompute_granularity": None if t.recompute == "none" else t.recompute,
        "recompute_activations": False,
        "recompute_method": "uniform" if t.recompute == "full" else None,
        "recompute_num_layers": 1 if t.recompute == "full" else None,
        "use_distributed_optimizer": t.distributed_optimizer,
        "account_for_embedding_in_pipeline_split": t.embedding_in_split,
        "account_for_loss_in_pipeline_split": t.loss_in_split,
        "global_batch_size": t.global_batch_size,
        # a layout string names the stages of one PP size: another PP unsets it (pipeline_split)
        "pipeline_model_parallel_layout": t.pipeline_layout,
    }
    return wanted


def overrides(t: est.Training, args: Mapping[str, Any], pinned: Iterable[str] = ()) -> list[str]:
    """`--set NAME=VALUE` items that turn the preset into layout `t` (only what differs, and always the `pinned`
    ones: settings the launcher chose for the preset's own layout, which it would choose anew for another)."""
    wanted = settings(t)
    always = set(pinned)
    out = []
    for name, value in wanted.items():
        if name in always and name != "global_batch_size":
            out.append(f"{name}={format_value(value)}")
            continue
        if name == "global_batch_size":
            if args.get("step_batch_size_schedule"):  # the schedule sets the batch; Megatron refuses both
                continue
            # Unset, Megatron uses MBS·DP; pin it whenever that would change the batch.
            given = args.get(name)
            if given != value and not (given is None and t.micro_batch_size * t.dp == value):
                out.append(f"{name}={value}")
            continue
        if name in ("recompute_activations", "num_layers_per_virtual_pipeline_stage"):
            if args.get(name) and args.get(name) != value:
                out.append(f"{name}={format_value(value)}")
            continue
        current = est.megatron_value(args, name)
        if name == "recompute_granularity":
            current = None if est.recompute_of(args) == "none" else est.recompute_of(args)
        if name == "num_virtual_stages_per_pipeline_rank":
            current = est.virtual_stages_of(args)
            # with a layout string the flag itself is unset: its VPP comes from the string
            current = current if current > 1 and not est.megatron_value(args, "pipeline_model_parallel_layout") \
                else None
        if current != value:
            out.append(f"{name}={format_value(value)}")
    return out


def format_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def minimum_gpus(args: Mapping[str, Any], gpu: est.Gpu, gpus_per_node: int, limit: int = 1 << 16,
                 rules: Rules | None = None) -> int | None:
    """Fewest GPUs on which some valid layout fits, trying the most memory-frugal knobs (micro batch 1,
    full recompute, sequence parallel where allowed, distributed optimizer)."""
    rules = rules or Rules(args, gpus_per_node)
    base = replace(est.training_of(args, 1), torch_adam=est.uses_torch_adam(args, rules.te, rules.apex))
    allow_sp = sequence_parallel_allowed(args)
    floor = memory_floor(args, base, gpu, gpus_per_node, allow_sp)
    if floor.fewest_gpus is None or floor.fewest_gpus > limit:
        return None  # no world up to the limit can hold it: say so before trying any (bounded work)
    worlds = [w for w in (1, 2, 4) if w < gpus_per_node] + list(range(gpus_per_node, limit + 1, gpus_per_node))
    worlds = [w for w in worlds if w >= floor.fewest_gpus]
    memory_fits: list[int] = []  # worlds where some layout fits in memory but launch's checks refuse them all
    for world in worlds:
        if len(memory_fits) == REFUSED_WORLDS:
            return memory_fits[0]  # the refusal is the preset's own, whatever the GPU count: the caller names it
        for tp in divisors(min(world, gpus_per_node)):
            for pp in divisors(world // tp):
                shape = est.model_shape(args, tp)
                split = pipeline_split(shape, replace(base, world_size=world), pp)
                if split is None:
                    continue
                t = replace(split, tp=tp, micro_batch_size=1, recompute="full",
                            sequence_parallel=allow_sp and tp > 1, distributed_optimizer=True)
                if world % (tp * t.pp * t.cp):  # no data-parallel group: not a layout
                    continue
                # memory first: it is cheaper than the rules, and most small worlds fail it
                if est.fit_status(est.complete_memory(shape, t).total, gpu) != "fits":
                    continue
                if not rules.problems(t):
                    return world
                if not memory_fits or memory_fits[-1] != world:
                    memory_fits.append(world)
    return memory_fits[0] if memory_fits else None


@dataclass(frozen=True)
class MemoryFloor:
    """What no layout can get below: the bytes some GPU always holds, whatever the world size (one layer's
    working set at micro batch 1 with full recompute and TP = one node; the last stage's logits and their
    gradient, 2 bytes each with the fused loss), and the model state (at least 12 bytes per parameter
    somewhere), hence the fewest GPUs worth trying."""

    per_gpu: float
    state: float
    fewest_gpus: int | None  # None: not even one layer fits, on any number of GPUs


def memory_floor(args: Mapping[str, Any], base: est.Training, gpu: est.Gpu, gpus_per_node: int,
                 allow_sp: bool) -> MemoryFloor:
    tp = gpus_per_node
    shape = est.model_shape(args, tp)
    t = replace(base, world_size=tp * base.cp, tp=tp, pp=1, vpp=1, micro_batch_size=1, recompute="full",
                sequence_parallel=allow_sp, pipeline_layout=None, first_stage_layers=None, last_stage_layers=None)
    layer = est.layer_activation_bytes(shape, t)
    logits = 2 * 2 * shape.seq_length / t.cp * shape.padded_vocab_size / tp
    per_gpu = max(layer, logits)
    state = 12.0 * est.parameter_count(args, tp)
    room = est.USABLE_FRACTION * gpu.memory_bytes - per_gpu
    if room <= 0:
        return MemoryFloor(per_gpu, state, None)
    return MemoryFloor(per_gpu, state, max(1, int(min(state / room, 1e18))))


def no_fit_error(args: Mapping[str, Any], preset: str, world: int, gpu: est.Gpu, gpus_per_node: int,
                 problems: list[str] | None = None, rules: Rules | None = None) -> UserError:
    """Why the search came back empty: too few GPUs (the minimum is given), or, when memory is not the reason,
    the preset's own problem that every candidate inherits."""
    need = minimum_gpus(args, gpu, gpus_per_node, rules=rules)
    if problems and need is not None and need <= world:
        return UserError(Problem(f"no layout of {preset} on {world} × {gpu.name} passes launch's checks: "
                                 f"{problems[0]}",
                                 f"fix that setting first (`launch {preset} --dry-run` lists every problem)"))
    if need is None:
        floor = memory_floor(args, est.training_of(args, 1), gpu, gpus_per_node, sequence_parallel_allowed(args))
        if floor.fewest_gpus is None:
            why = (f"one layer's activations or the logits alone need {floor.per_gpu / est.GIB:,.1f} GiB per GPU "
                   f"(micro batch 1, full recompute, TP {gpus_per_node}); check the model's settings")
        elif floor.fewest_gpus > 1 << 16:
            why = (f"its weights, gradients and optimizer state alone need {floor.state / est.GIB:,.0f} GiB, more "
                   f"than 65,536 GPUs hold; check the model's settings")
        else:
            why = "check the global batch size: DP must divide it"
        return UserError(Problem(f"no layout of {preset} fits on any number of {gpu.name} GPUs tried", why))
    nodes = -(-need // gpus_per_node)
    return UserError(Problem(
        f"no valid layout of {preset} fits on {world} × {gpu.name}",
        f"at least {need} GPUs are needed ({nodes} node(s) of {gpus_per_node}); "
        f"try --gpus {need} or a GPU with more memory"))
