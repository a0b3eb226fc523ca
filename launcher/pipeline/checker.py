"""The parallel layout and every pre-launch check, mirroring Megatron's own rules at 432d76b2b8bf.

World size = nodes × GPUs per node = TP·PP·CP·DP. Each rule cites where Megatron enforces it
(arguments.py validate_args, the microbatch calculator, TransformerConfig, or the schedules at run time),
and each problem names every factor and a fix. All problems are reported at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from launcher.errors import Problem
from launcher.inside.megatron_ext import FAST_OPS_ENV, selected_ops
from launcher.megatron import args as megatron_args
from launcher.megatron import layer_pattern
from launcher.megatron.args import default_ffn_hidden_size
from launcher.megatron.effective import EMERGING_OPTIMIZERS, Effective, effective_settings
from launcher.megatron.model_families import other_families
from launcher.megatron.target import DECLARED_TE_VERSION
from launcher.pipeline import cuda_graph_rules, target_rules, update_rules
from launcher.pipeline.divisors import divisors
from launcher.pipeline.environment import JobEnvironment, job_environment, uses_fsdp
from launcher.pipeline.feature_settings import drop, with_drops
from launcher.pipeline.load_rules import training_iterations
from launcher.pipeline.pipeline_layout import (
    LAYER_LETTERS,
    layout_limit,
    layout_string_problem,
    unroll_pipeline_layout,
    virtual_pipeline_size,
)
from launcher.pipeline.preset import Preset
from launcher.pipeline.value_rules import check_values

SIMPLE_LOOP_TP = 2  # examples/run_simple_mcore_train_loop.py hard-codes initialize_model_parallel(2, 1)
SIMPLE_LOOP_UNFUSED = {"bias_gelu_fusion": False, "bias_dropout_fusion": False}  # its TransformerConfig's defaults


def _at_least_one(dest: str, arg: Callable[[str], Any]) -> str:
    """A way out for a size below 1 that lands on a job the other rules take: Megatron's default where it has one
    (or the launcher chooses: the micro batch), else a value consistent with the sizes beside it."""
    from launcher.megatron import args as megatron_args

    default = megatron_args.catalog()[dest].default if dest in megatron_args.catalog() else None
    if dest in _REQUIRED_VALUE:
        return f"--set {dest}={_REQUIRED_VALUE[dest]} (or another value of at least 1)"
    if default is None and dest not in _CONSISTENT:
        return f"--set {dest}=null (Megatron's default)"
    if isinstance(default, int) and not isinstance(default, bool) and default >= 1:
        return f"--set {dest}=null (Megatron's default, {default})"

    def sound(name: str) -> int | None:
        value = arg(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None

    heads, hidden = sound("num_attention_heads"), sound("hidden_size")
    seq, positions = sound("seq_length"), sound("max_position_embeddings")
    tp, pp = sound("tensor_model_parallel_size") or 1, sound("pipeline_model_parallel_size") or 1
    groups = sound("num_query_groups") if arg("group_query_attention") else None
    fits = head_counts(hidden, tp, groups) if hidden is not None else [math.lcm(tp, groups or 1)]
    value = {"hidden_size": (heads or 1) * (sound("kv_channels") or 64),
             "num_attention_heads": fits[0] if fits else 1,
             "seq_length": positions or 1024, "max_position_embeddings": seq or 1024,
             "num_layers": pp}.get(dest, 1)
    return f"--set {dest}={value} (or another value of at least 1)"


# sizes the launcher requires although Megatron's default is None
def head_counts(hidden: int, tp: int, groups: int | None) -> list[int]:
    """Attention head counts a model takes: multiples of TP and of the query groups (GQA, None without) that
    divide the hidden size, smallest first."""
    step = math.lcm(tp, groups or 1)
    return [h for h in divisors(hidden) if h % step == 0]


_REQUIRED_VALUE = {"micro_batch_size": 1, "eval_interval": 1000}
# sizes without a default, each with a value the sizes beside it decide (_at_least_one)
_CONSISTENT = ("hidden_size", "num_attention_heads", "seq_length", "max_position_embeddings", "num_layers")


# The sizes required_problems refuses below 1 (the first also when not set), and the divisors that Megatron divides
# by or asserts positive, each with the stage that refuses it.
REQUIRED_SIZES = ("num_layers", "hidden_size", "num_attention_heads", "max_position_embeddings", "seq_length",
                  "micro_batch_size")
PARALLEL_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                  "expert_model_parallel_size")
DIVISORS = (("global_batch_size", "validate"), ("num_layers_per_virtual_pipeline_stage", "validate"),
            ("num_virtual_stages_per_pipeline_rank", "validate"), ("make_vocab_size_divisible_by", "validate"),
            ("log_interval", "runtime"), ("eval_interval", "runtime"), ("save_interval", "validate"),
            ("eval_micro_batch_size", "validate"), ("eval_global_batch_size", "validate"),
            ("num_dataset_builder_threads", "validate"), ("save_retain_interval", "validate"))


def required_problems(arg: Callable[[str], Any], may_be_unset: Collection[str] = ()) -> list[Problem]:
    """Settings pretrain_gpt.py cannot start without (those in `may_be_unset` only when set), and sizes it divides
    by: a value below 1 is a crash, not a setting (every reader that computes with them, the plan included, asks
    this first; the plan chooses the micro batch when it is not set, but not the model's shape)."""
    problems: list[Problem] = []
    for dest in REQUIRED_SIZES:
        value = arg(dest)
        if value is None and dest not in may_be_unset:
            problems.append(Problem(f"{dest} is not set", f"Megatron requires it: add {dest} to the preset"))
        elif value is not None and value < 1:
            problems.append(Problem(f"{dest} must be at least 1, got {value}", _at_least_one(dest, arg)))
    for dest in PARALLEL_SIZES:
        if arg(dest) < 1:
            problems.append(Problem(f"{dest} must be at least 1, got {arg(dest)}", _at_least_one(dest, arg)))
    # Megatron divides by these (or asserts them positive): 0 or less is a crash, not a setting.
    for dest, stage in DIVISORS:
        value = arg(dest)
        if value is not None and value < 1:
            problems.append(Problem(f"{dest} must be at least 1, got {value}",
                                    with_drops(_at_least_one(dest, arg), arg), stage))
    return problems


def refused_sizes(arg: Callable[[str], Any]) -> set[str]:
    """The settings required_problems refuses (not set where required, or below 1)."""
    def below_one(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value < 1

    return {d for d in REQUIRED_SIZES if arg(d) is None or below_one(arg(d))} | \
        {d for d in (*PARALLEL_SIZES, *(d for d, _ in DIVISORS)) if below_one(arg(d))}


# The optimizer state's precisions that only the precision-aware optimizer may lower (optimizer_config.py:457-469).
PRECISION_AWARE_DTYPES = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")


@dataclass(frozen=True)
class Layout:
    world_size: int
    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    vpp: int | None
    micro_batch_size: int
    global_batch_size: int
    num_microbatches: int
    sequence_parallel: bool
    # step_batch_size_schedule's batch sizes in order (empty without one): the batch a step really has, where
    # global_batch_size stays Megatron's MBS·DP
    batch_schedule: tuple[int, ...] = ()

    @property
    def model_parallel_size(self) -> int:
        """GPUs that hold one copy of the model: TP·PP·CP (EP is carved out of DP, not added)."""
        return self.tp * self.pp * self.cp

    def as_dict(self) -> dict[str, Any]:
        return {
            "tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep, "dp": self.dp, "vpp": self.vpp,
            "world_size": self.world_size, "micro_batch_size": self.micro_batch_size,
            "global_batch_size": self.global_batch_size, "num_microbatches": self.num_microbatches,
            "sequence_parallel": self.sequence_parallel,
            **({"batch_schedule": list(self.batch_schedule)} if self.batch_schedule else {}),
        }


def _valid_node_counts(gpus_per_node: int, model_parallel: int, at_least: int = 1, count: int = 3) -> str:
    step = model_parallel // math.gcd(model_parallel, gpus_per_node)
    first = max(step, math.ceil(at_least / step) * step)
    options = [first + i * step for i in range(count)]
    return ", ".join(f"{n} ({n * gpus_per_node} GPUs)" for n in options)


def _nearest_multiples(value: int, step: int) -> str:
    below = (value // step) * step
    above = below + step
    return f"{below} or {above}" if below > 0 else f"{above}"


class _Checker:
    """Collects problems while deriving the layout, in the order Megatron would hit them."""

    def __init__(self, preset: Preset, world_size: int, gpus_per_node: int, te_available: bool,
                 apex_available: bool = False, micro_batch_picked: bool = False, env: JobEnvironment | None = None,
                 te_version: str | None = None):
        self.preset = preset
        # what every rank's environment holds; for a preset judged on its own (the layout search), the launcher's
        # exports for it and nothing inherited
        self.env = env if env is not None else job_environment(
            entry=preset.launcher.entry, tp=preset.arg("tensor_model_parallel_size"),
            cp=preset.arg("context_parallel_size"), fsdp=uses_fsdp(preset.arg), megatron_path=Path("."),
            settings=preset.megatron, preset_env=preset.launcher.env)
        self.micro_batch_picked = micro_batch_picked  # chosen by choose_micro_batch, not by the user
        self.world = world_size
        self.gpus_per_node = gpus_per_node
        self.te = te_available
        self.apex = apex_available
        self.te_version = (te_version or DECLARED_TE_VERSION) if te_available else None
        self.torchao = False  # torchao at the target (FP8 without TE), set by check()
        self.problems: list[Problem] = []
        self.warnings: list[str] = []
        # Megatron's settings after its silent rewrites, once the virtual pipeline size is known (layout());
        # until then the rules that run first (sizes, shapes) read the job's values, which no rewrite touches.
        self.effective: Effective | None = None

    def arg(self, dest: str) -> Any:
        """The value Megatron will use: after validate_args' rewrites (launcher.megatron.effective)."""
        if self.effective is not None:
            return self.effective[dest] if dest in self.effective.settings else self.preset.arg(dest)
        return self.preset.arg(dest)

    def fail(self, message: str, hint: str = "", stage: str = "validate") -> None:
        # a way out that turns a feature off drops what only that feature reads (feature_settings)
        self.problems.append(Problem(message, with_drops(hint, self.arg), stage))

    def model_family(self) -> None:
        """A configuration made for another Megatron model (launcher.megatron.model_families): pretrain_gpt.py
        would build a GPT model that ignores what makes it that model."""
        catalog = megatron_args.catalog()

        def default(dest: str) -> Any:
            return catalog[dest].default if dest in catalog else None

        for family, names in other_families(self.preset.megatron, default).items():
            them = "them" if len(names) > 1 else "it"
            self.fail(f"{', '.join(names)}: read only by {family}; pretrain_gpt.py, which the launcher runs, would "
                      f"build a GPT model that ignores {them}", "the launcher trains GPT models: use that model's "
                      f"own script, or drop {them} if {them} came along by mistake", "launcher")

    # -- required values -------------------------------------------------------------------------------------
    def required(self) -> bool:
        """Settings pretrain_gpt.py cannot start without; False stops further checks that need them."""
        problems = required_problems(self.arg)
        self.problems.extend(problems)
        return not problems

    def training_settings(self) -> None:
        """Settings every run needs whatever its layout."""
        if self.arg("lr") is None:
            self.fail("lr is not set", "Megatron's LR scheduler needs a learning rate, e.g. --set lr=3e-4",
                      stage="runtime")
        local_rank = self.preset.megatron.get("local_rank")
        if local_rank is not None and (self.gpus_per_node > 1 or local_rank != 0):
            self.fail(f"local_rank {local_rank} is given to every rank: Megatron sets each process's GPU from it "
                      "(initialize.py:262, torch.cuda.set_device(args.local_rank)), so "
                      + (f"the {self.gpus_per_node} ranks of a node would all take GPU {local_rank}"
                         if self.gpus_per_node > 1 else f"the one rank of a node would take GPU {local_rank}"),
                      "drop it (--set local_rank=null): its default is the LOCAL_RANK the launcher gives each process",
                      stage="runtime")
        if self.arg("skip_train") and not self.arg("perform_rl_step"):
            self.warnings.append(
                "skip_train: Megatron trains nothing (training.py: 'skipping training (--skip-train is on)'): it "
                "evaluates the model it starts from (the checkpoint in load, else random weights) and exits 0, and "
                "the run's summary says no iteration was logged; drop skip_train to train")
        if self.arg("eval_interval") is None and not self.arg("skip_train"):
            self.fail("eval_interval is not set",
                      "without it pretrain_gpt.py crashes computing sample counts (train_iters // None); "
                      "set eval_interval, and eval_iters small (its default is 100)", stage="runtime")

    # -- world size and model parallelism --------------------------------------------------------------------
    def world_size(self, tp: int, pp: int, cp: int) -> bool:
        model = tp * pp * cp
        if self.world % model == 0:
            return True
        nodes = self.world // self.gpus_per_node
        self.fail(
            f"world size {self.world} = {nodes} node(s) × {self.gpus_per_node} GPUs is not divisible by "
            f"TP·PP·CP = {tp}·{pp}·{cp} = {model}", self._world_fixes(nodes, tp, pp, cp))
        return False

    def _world_fixes(self, nodes: int, tp: int, pp: int, cp: int) -> str:
        """Fixes that work: more GPUs (`--nodes`, a world TP·PP·CP divides, whichever of the three sizes made it
        not divide) when the model needs more than the world has or nothing else fits; otherwise the same GPUs with
        fewer per node; and one size that divides the world with the others kept (and that the heads, layers or
        sequence also take)."""
        model = tp * pp * cp
        fixes = []
        # the most GPUs per node below today's whose world the model divides: a multiple of model / gcd(model, nodes)
        # (computed, not searched: gpus_per_node comes from input)
        step = model // math.gcd(model, nodes)
        fewer = (self.gpus_per_node - 1) // step * step or None
        if model <= self.world and fewer is not None:
            fixes.append(f"--gpus-per-node {fewer} (world {nodes * fewer})")
        sizes = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp, "context_parallel_size": cp}
        for name, size in sizes.items():
            others = model // size
            if self.world % others:
                continue
            options = [v for v in divisors(self.world // others) if v != size and self._size_fits(name, v)]
            if options:
                fixes.append(" or ".join(f"--set {name}={v}" for v in options))
        if model > self.world or not fixes:
            # a node count whose world holds the experts' grid (ETP·EP·PP) too, so the next round is not its refusal
            experts = (self.arg("expert_tensor_parallel_size") or tp) * self.arg("expert_model_parallel_size") * pp
            fixes.insert(0, f"--nodes {_valid_node_counts(self.gpus_per_node, math.lcm(model, experts))}")
        return "use " + ", or ".join(fixes)

    def _size_fits(self, name: str, value: int) -> bool:
        """A tensor-, pipeline- or context-parallel size that the model's own divisibility rules take too (a way
        out that only trades the world-size refusal for another is none)."""
        if name == "tensor_model_parallel_size":
            groups = self.arg("num_query_groups") if self.arg("group_query_attention") else None
            return (self.arg("num_attention_heads") or 0) % value == 0 and (groups or value) % value == 0
        if name == "pipeline_model_parallel_size":
            return value == 1 or ((self.arg("num_layers") or 0) % value == 0 and value <= (self.arg("num_layers") or 0))
        return value == 1 or (self.te and (self.arg("seq_length") or 1) % (2 * value) == 0)

    def experts(self, tp: int, pp: int) -> None:
        ep = self.arg("expert_model_parallel_size")
        etp = self.arg("expert_tensor_parallel_size") or tp
        experts = self.arg("num_experts")
        if ep > 1 and experts is None:
            self.fail(f"expert_model_parallel_size {ep} needs num_experts", "set num_experts (a multiple of EP)")
        elif experts is not None and ep > 1 and experts % ep:
            self.fail(f"num_experts {experts} is not a multiple of expert_model_parallel_size {ep}",
                      f"use expert_model_parallel_size in {[d for d in divisors(experts) if d > 1]}")
        pattern = layer_pattern.parse(self.arg("moe_layer_freq") or 1) if experts else 1
        if isinstance(pattern, list) and len(pattern) != self.arg("num_layers"):
            # gpt_layer_specs.py:648 asserts it at model build; validate_args does not look
            self.fail(f"moe_layer_freq lists {len(pattern)} layers, and the model has num_layers "
                      f"{self.arg('num_layers')}", "--set moe_layer_freq=" + (
                          f"[0]*1+[1]*{self.arg('num_layers') - 1}" if self.arg("num_layers") > 1 else "[1]")
                      + " (a 0 for each dense layer, a 1 for each MoE layer, one per layer)", stage="runtime")
        if experts is not None and self.arg("add_bias_linear") and etp > 1:
            # TransformerConfig.__post_init__: "Bias in Moe is only supported when ETP==1".
            self.fail(f"MoE ({experts} experts) with linear biases needs expert tensor parallel size 1, got "
                      f"{etp}" + (" (it defaults to tensor_model_parallel_size)" if
                                  self.arg("expert_tensor_parallel_size") is None else ""),
                      "set expert_tensor_parallel_size=1, or add_bias_linear=false (--disable-bias-linear)")
        if (ep > 1 or etp != tp) and self.world % (etp * ep * pp):
            # the world must hold both grids: the dense one (TP·PP·CP) and the experts' (ETP·EP·PP)
            both = math.lcm(etp * ep * pp, tp * pp * self.arg("context_parallel_size"))
            smaller = [e for e in divisors(experts or ep) if self.world % (etp * e * pp) == 0 and e < ep]
            # ETP too: a world its size divides (biases in the experts need ETP 1)
            etps = [t for t in divisors(self.world // (ep * pp)) if t != etp and (t == 1 or not self.arg(
                "add_bias_linear"))] if self.world % (ep * pp) == 0 else []
            self.fail(f"world size {self.world} is not divisible by expert TP·EP·PP = {etp}·{ep}·{pp}",
                      f"use --nodes {_valid_node_counts(self.gpus_per_node, both)}"
                      + (f", or --set expert_model_parallel_size={max(smaller)}" if smaller else "")
                      + (f", or --set expert_tensor_parallel_size={tp if tp in etps else min(etps)}" if etps else ""),
                      stage="runtime")
        cp = self.arg("context_parallel_size")
        if self.arg("use_tp_pp_dp_mapping") and pp > 1 and etp * ep != tp * cp:
            # initialize_model_parallel asserts it (parallel_state.py:803) for any rank order that does not end in
            # PP; its data-parallel sizes are world/(TP·CP·PP) and world/(ETP·EP·PP). Found by the CPU rehearsal of
            # the layout (moe/gpt3_mcore_tp2_pp2_ep2_etp2_te_4experts2parallel_dp_last at 8 GPUs).
            self.fail(f"use_tp_pp_dp_mapping (data-parallel ranks last) with PP {pp} needs the MoE layers' data-"
                      f"parallel size to equal the attention's: expert TP·EP = {etp}·{ep} = {etp * ep} is not "
                      f"TP·CP = {tp}·{cp} = {tp * cp}",
                      "drop use_tp_pp_dp_mapping (Megatron's default order puts PP last), or choose "
                      f"expert_tensor_parallel_size · expert_model_parallel_size = {tp * cp}", stage="runtime")

    def context_parallel(self, cp: int, tp: int) -> None:
        if cp == 1:
            return
        seq = self.arg("seq_length")
        if seq % (2 * cp):
            self.fail(f"seq_length {seq} is not a multiple of 2·CP = 2·{cp} = {2 * cp}",
                      f"use a seq_length that is a multiple of {2 * cp}, or context_parallel_size in "
                      f"{[c for c in divisors(seq // 2) if c <= 16]}")
        if not self.te:
            self.fail(f"context_parallel_size {cp} needs Transformer Engine, which is not available",
                      "Megatron's local attention asserts CP == 1; set context_parallel_size=1 or install TE",
                      stage="runtime")

    # -- layers vs pipeline ----------------------------------------------------------------------------------
    def pipeline(self, pp: int) -> int | None:
        """Returns the virtual pipeline size (None when not interleaved)."""
        layers = self.arg("num_layers")
        per_vstage = self.arg("num_layers_per_virtual_pipeline_stage")
        vstages = self.arg("num_virtual_stages_per_pipeline_rank")
        pp_layout = self.arg("pipeline_model_parallel_layout")
        first = self.arg("decoder_first_pipeline_num_layers")
        last = self.arg("decoder_last_pipeline_num_layers")
        extra = int(bool(self.arg("account_for_embedding_in_pipeline_split"))) + int(
            bool(self.arg("account_for_loss_in_pipeline_split")))
        counted = layers + extra
        counted_text = f"num_layers {layers}" + (f" + {extra} (embedding/loss accounted)" if extra else "")
        given = [n for n, v in (("num_layers_per_virtual_pipeline_stage", per_vstage),
                                ("num_virtual_stages_per_pipeline_rank", vstages),
                                ("pipeline_model_parallel_layout", pp_layout)) if v is not None]
        if len(given) > 1:
            self.fail(f"only one of {', '.join(given)} may be set", "keep one way of choosing the virtual pipeline")
            return None
        vpp = None
        if pp_layout is not None:
            too_long = layout_string_problem(self.arg)
            if too_long is not None:
                self.problems.append(too_long)
                return None
            stages = unroll_pipeline_layout(pp_layout, layout_limit(layers, self.arg("mtp_num_layers") or 0))
            if len(stages) % pp:
                self.fail(f"pipeline_model_parallel_layout has {len(stages)} stages, not a multiple of PP {pp}",
                          "write one |-separated stage per pipeline rank (times the virtual pipeline size)")
                return None
            if first is not None or last is not None or extra:
                self.fail("pipeline_model_parallel_layout cannot be combined with decoder_first/last_pipeline_"
                          "num_layers or account_for_embedding/loss_in_pipeline_split",
                          "the layout already places every layer: drop the other pipeline settings")
                return None
            self.pipeline_layout_contents(pp_layout, "".join(stages), layers)
            vpp = virtual_pipeline_size(self.arg)
        elif per_vstage is not None:
            if first is not None or last is not None:
                self.fail("num_layers_per_virtual_pipeline_stage cannot be combined with uneven first/last "
                          "pipeline stages", "use num_virtual_stages_per_pipeline_rank instead")
                return None
            if counted % pp:
                self.fail(f"{counted_text} is not divisible by PP {pp}",
                          f"use pipeline_model_parallel_size in {divisors(counted)}")
                return None
            per_stage = counted // pp
            if per_stage % per_vstage:
                # a divisor smaller than the stage interleaves, which this PP cannot: only dropping it helps then
                interleaves = pp > 1 if self.arg("overlap_p2p_comm") else pp > 2
                self.fail(f"{per_stage} layers per pipeline stage ({counted_text} / PP {pp}) is not divisible "
                          f"by num_layers_per_virtual_pipeline_stage {per_vstage}",
                          f"use num_layers_per_virtual_pipeline_stage in {divisors(per_stage)}" if interleaves else
                          f"set num_layers_per_virtual_pipeline_stage=null (PP {pp} has no interleaved schedule)")
                return None
            vpp = virtual_pipeline_size(self.arg)
        elif vstages is not None:
            vpp = virtual_pipeline_size(self.arg)
            # validate_args checks neither; TransformerBlock's get_num_layers_to_build asserts both at build.
            if first is None and last is None and counted % pp:
                self.fail(f"{counted_text} is not divisible by pipeline_model_parallel_size {pp}",
                          f"use pipeline_model_parallel_size in {divisors(counted)}, or set decoder_first_"
                          "pipeline_num_layers / decoder_last_pipeline_num_layers for uneven stages",
                          stage="runtime")
            elif first is None and last is None and pp > 1 and (counted // pp) % vstages:
                self.fail(f"{counted // pp} layers per pipeline rank ({counted_text} / PP {pp}) is not "
                          f"divisible by num_virtual_stages_per_pipeline_rank {vstages}",
                          f"use num_virtual_stages_per_pipeline_rank in {divisors(counted // pp)}",
                          stage="runtime")
        elif first is None and last is None and counted % pp:
            self.fail(f"{counted_text} is not divisible by pipeline_model_parallel_size {pp}",
                      f"use pipeline_model_parallel_size in {divisors(counted)}, or set "
                      "decoder_first_pipeline_num_layers / decoder_last_pipeline_num_layers for uneven stages")
        if vpp == 1:  # Megatron's virtual_pipeline_model_parallel_size: None when not interleaved
            vpp = None
        if first is not None or last is not None:
            self.uneven_stages(layers, pp, vpp, first, last, extra)
        if vpp is not None:
            drop = " ".join(f"--set {name}=null" for name in given)
            if self.arg("overlap_p2p_comm") and pp <= 1:
                self.fail(f"the interleaved schedule (virtual pipeline size {vpp}) needs PP > 1, got PP {pp}",
                          f"drop the virtual pipeline: {drop}, or raise pipeline_model_parallel_size")
            elif not self.arg("overlap_p2p_comm") and pp <= 2:
                self.fail(f"the interleaved schedule without overlap_p2p_comm needs PP > 2, got PP {pp}",
                          f"drop the virtual pipeline: {drop}, or raise pipeline_model_parallel_size, or re-enable "
                          "p2p overlap")
        return vpp

    def pipeline_layout_contents(self, text: str, flat: str, layers: int) -> None:
        """PipelineParallelLayerLayout: checked when TransformerConfig is built (validate_layer_layout)."""
        unknown = sorted(set(flat) - set(LAYER_LETTERS))
        if unknown:
            self.fail(f"pipeline_model_parallel_layout {text!r} has unknown layer characters {unknown}",
                      "use " + ", ".join(f"{c} ({name})" for c, name in LAYER_LETTERS.items()))
            return
        decoders, mtp = flat.count("t"), flat.count("m")
        if not flat.startswith("E") or not flat.endswith("L") or flat.count("E") != 1 or flat.count("L") != 1:
            self.fail(f"pipeline_model_parallel_layout {text!r} must start with the embedding E and end with "
                      "the loss L, each exactly once", 'for example "Et*3|t*4|t*4|t*3L"')
        if decoders != layers:
            self.fail(f"pipeline_model_parallel_layout {text!r} places {decoders} transformer layers (t), "
                      f"but num_layers is {layers}", f"make the layout hold {layers} t's, or set num_layers {decoders}")
        if mtp != (self.arg("mtp_num_layers") or 0):
            self.fail(f"pipeline_model_parallel_layout {text!r} has {mtp} MTP layers (m), but mtp_num_layers is "
                      f"{self.arg('mtp_num_layers')}")

    def uneven_stages(self, layers: int, pp: int, vpp: int | None, first: int | None, last: int | None,
                      extra: int) -> None:
        if extra:
            self.fail("uneven first/last pipeline stages cannot be combined with "
                      "account_for_embedding/loss_in_pipeline_split",
                      "keep one: --set decoder_first_pipeline_num_layers=null --set decoder_last_pipeline_num_layers="
                      "null, or --set account_for_embedding_in_pipeline_split=false --set "
                      "account_for_loss_in_pipeline_split=false")
            return
        middle_layers, middle_stages = layers, pp
        for name, value in (("decoder_first_pipeline_num_layers", first), ("decoder_last_pipeline_num_layers", last)):
            if value is None:
                continue
            if value <= 0:
                self.fail(f"{name} must be larger than 0, got {value}")
                return
            if vpp is not None and value % vpp:
                self.fail(f"{name} {value} is not divisible by the virtual pipeline size {vpp}")
            middle_layers -= value
            middle_stages -= 1
        given = [f"{name}={value}" for name, value in (("decoder_first_pipeline_num_layers", first),
                                                       ("decoder_last_pipeline_num_layers", last)) if value is not None]
        drop = " ".join(f"--set {text.partition('=')[0]}=null" for text in given)
        if bool(middle_layers) != bool(middle_stages):
            self.fail(f"{middle_layers} middle layers remain for {middle_stages} middle pipeline stages "
                      f"(num_layers {layers}, PP {pp}, first {first}, last {last})",
                      f"at PP 1 the one stage holds every layer: {drop}" if pp == 1 else
                      "make first + last + middle layers add up with at least one layer per stage")
        elif middle_stages > 0 and middle_layers < 0:  # Megatron's config lets it pass; its middle ranks get < 0
            self.fail(f"{' + '.join(given)} exceed num_layers {layers}: {middle_layers} layers are left for the "
                      f"{middle_stages} middle pipeline stages", "make first + last less than num_layers")
        elif pp == 1 and middle_stages < 0 and last != layers:
            # both set at PP 1: TransformerConfig takes it and get_num_layers_to_build gives the one rank `last`
            self.warnings.append(
                f"at PP 1 the one pipeline rank is both first and last: Megatron builds decoder_last_pipeline_"
                f"num_layers {last} decoder layers (get_num_layers_to_build), not num_layers {layers}; "
                f"the memory and step-time estimates count {last} ({drop} to build all {layers})")
        elif middle_stages and middle_layers % middle_stages:
            self.fail(f"{middle_layers} middle layers are not divisible by {middle_stages} middle stages "
                      f"(num_layers {layers}, PP {pp}, first {first}, last {last})")
        elif middle_stages and vpp is not None and (middle_layers // middle_stages) % vpp:
            self.fail(f"{middle_layers // middle_stages} layers per middle pipeline rank are not divisible by "
                      f"the virtual pipeline size {vpp}")

    # -- attention shapes vs TP ------------------------------------------------------------------------------
    def heads(self, tp: int) -> None:
        heads = self.arg("num_attention_heads")
        hidden = self.arg("hidden_size")
        allowed = [t for t in divisors(heads) if t <= 64]
        if heads % tp:
            self.fail(f"num_attention_heads {heads} is not a multiple of tensor_model_parallel_size {tp}",
                      f"use tensor_model_parallel_size in {allowed}")
        if self.arg("group_query_attention"):
            groups = self.arg("num_query_groups")
            if groups % tp and tp % groups:
                fits = sorted(set(divisors(groups)) | {groups * k for k in (2, 4, 8)})
                self.fail(f"num_query_groups {groups} must be a multiple or divisor of TP {tp}",
                          f"use tensor_model_parallel_size in {fits}")
        if self.arg("kv_channels") is None and hidden % heads:
            sizes = " or ".join(f"--set hidden_size={h}" for h in _nearest_multiples(hidden, heads).split(" or "))
            # more heads than the hidden size has units: a head count that divides it is the way (a hidden size
            # that many heads divide is a model many times larger than the one asked for)
            groups = self.arg("num_query_groups") if self.arg("group_query_attention") else None
            counts = head_counts(hidden, tp, groups)
            ways = [f"--set num_attention_heads={max(counts)}"] if heads > hidden and counts else [sizes]
            self.fail(f"hidden_size {hidden} is not divisible by num_attention_heads {heads}",
                      "use " + ", or ".join(ways) + ", or set kv_channels (head dimension) explicitly")
        ffn = self.arg("ffn_hidden_size") or default_ffn_hidden_size(hidden, bool(self.arg("swiglu")))
        if ffn % tp:
            self.fail(f"ffn_hidden_size {ffn} is not divisible by TP {tp}",
                      "Megatron splits the MLP across TP ranks; choose an ffn_hidden_size divisible by TP",
                      stage="runtime")

    # -- batch sizes -----------------------------------------------------------------------------------------
    def batches(self, dp: int, pp: int, vpp: int | None) -> tuple[int, int]:
        self.batch_schedule: tuple[int, ...] = ()
        mbs = self.arg("micro_batch_size")
        schedule = self.arg("step_batch_size_schedule")
        gbs_given = self.preset.megatron.get("global_batch_size")
        if schedule is not None:
            if gbs_given is not None:
                self.fail("global_batch_size cannot be set together with step_batch_size_schedule",
                          "remove global_batch_size; the schedule's last entry is the final batch size")
            sizes = self.schedule(schedule, mbs, dp)
            self.batch_schedule = tuple(sizes)
            # Megatron keeps args.global_batch_size at MBS·DP while a schedule drives the real batch.
            gbs = mbs * dp
            first = sizes[0] if sizes else gbs
            return gbs, max(1, first // (mbs * dp))
        gbs = gbs_given if gbs_given is not None else mbs * dp
        if gbs < 1:
            self.fail(f"global_batch_size must be at least 1, got {gbs}")
            return gbs, 1
        eval_mbs = self.arg("eval_micro_batch_size") or mbs
        eval_gbs = self.arg("eval_global_batch_size") or gbs
        step = mbs * dp
        if (eval_gbs, eval_mbs) == (gbs, mbs) and gbs % step:
            self.fail(*self._batch_problem(gbs, mbs, dp))
            return gbs, max(1, gbs // step)
        if eval_gbs % (eval_mbs * dp):
            # validate_args checks the eval batch first; with the defaults it is the training batch.
            self.fail(
                f"eval_global_batch_size {eval_gbs} is not divisible by eval_micro_batch_size {eval_mbs} × "
                f"data-parallel size {dp} = {eval_mbs * dp}",
                f"use eval_global_batch_size {_nearest_multiples(eval_gbs, eval_mbs * dp)}",
            )
            return gbs, max(1, gbs // step)
        if gbs % step:
            self.fail(*self._batch_problem(gbs, mbs, dp))
            return gbs, max(1, gbs // step)
        microbatches = gbs // step
        if vpp is not None:
            self.interleaved_microbatches(microbatches, pp, vpp, gbs, mbs, dp)
        return gbs, microbatches

    def _batch_problem(self, gbs: int, mbs: int, dp: int) -> tuple[str, str]:
        """Global batch vs micro batch × DP, with the smallest changes that work (never blaming a micro batch
        the user did not choose)."""
        world_text = f"DP = world {self.world} / model-parallel {self.world // dp}"
        if self.micro_batch_picked:
            # No micro batch can help: DP itself does not divide the global batch.
            return (f"global batch size {gbs} is not divisible by data-parallel size {dp} ({world_text}), so no "
                    f"micro batch fits (the launcher picks it, up to max_micro_batch_size "
                    f"{self.preset.launcher.max_micro_batch_size})",
                    f"use global_batch_size {_nearest_multiples(gbs, dp)}" + self._smaller_world(gbs, dp))
        options = []
        if gbs % dp == 0:
            per_rank = gbs // dp
            fits = max(d for d in divisors(per_rank) if d <= mbs)
            options.append(f"micro_batch_size {fits} (global batch {gbs} / DP {dp} = {per_rank} per rank)")
        options.append(f"global_batch_size {_nearest_multiples(gbs, mbs * dp)}")
        below = (gbs // dp) * dp
        nearer = [n for n in (below, below + dp) if n > 0 and n % (mbs * dp) and abs(n - gbs) < mbs * dp]
        if gbs % dp and nearer:
            options.append(f"global_batch_size {' or '.join(map(str, nearer))} with micro_batch_size 1")
        return (f"global batch size {gbs} is not divisible by micro batch {mbs} × data-parallel size {dp} = "
                f"{mbs * dp}", "use " + ", or ".join(options) + f" ({world_text})")

    def _smaller_world(self, gbs: int, dp: int) -> str:
        """', or --nodes N' for the largest DP below this one that divides the global batch, if nodes allow it."""
        model = self.world // dp
        for d in sorted(divisors(gbs), reverse=True):
            if d < dp and (d * model) % self.gpus_per_node == 0:
                nodes = d * model // self.gpus_per_node
                return f", or --nodes {nodes} ({d * model} GPUs, DP {d})"
        return ""

    def interleaved_microbatches(self, m: int, pp: int, vpp: int, gbs: int, mbs: int, dp: int) -> None:
        """schedules.forward_backward_pipelining_with_interleaving: checked at the first step, not before."""
        group = self.arg("microbatch_group_size_per_vp_stage") or pp
        if not pp <= group <= m or (m % group and m % group < pp):
            want = pp * mbs * dp
            self.fail(
                f"the interleaved schedule (PP {pp}, virtual pipeline {vpp}) needs the number of microbatches "
                f"{m} = global batch {gbs} / (micro batch {mbs} × DP {dp}) to be a multiple of PP {pp}",
                f"use global_batch_size {_nearest_multiples(max(gbs, want), want)}, or drop the virtual "
                "pipeline; Megatron only finds this at the first training step",
                stage="runtime",
            )

    def schedule(self, text: str, mbs: int, dp: int) -> list[int]:
        """--step-batch-size-schedule "THRESHOLD:BS ..." (thresholds in tokens, K/M/B/T suffixes)."""
        entries = [e for e in re.split(r"[,\s]+", text.strip()) if e]
        units = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
        thresholds, sizes = [], []
        for entry in entries:
            threshold, sep, size = entry.partition(":")
            match = re.fullmatch(r"([0-9]{1,15}(?:\.[0-9]{0,15})?|\.[0-9]{1,15})([KMBT]?)", threshold.strip().upper())
            if not sep or not match or not re.fullmatch(r"[0-9]{1,12}", size.strip()):
                self.fail(f"step_batch_size_schedule entry {entry!r} is not THRESHOLD:BATCH",
                          'for example "0:16 2.4B:320 4.8B:624"')
                return []
            thresholds.append(float(match.group(1)) * units.get(match.group(2), 1))
            sizes.append(int(size))
        if not entries:
            self.fail("step_batch_size_schedule is empty", "set step_batch_size_schedule=null")
            return []
        if thresholds[0] != 0:
            self.fail("step_batch_size_schedule must start at threshold 0", f'begin with "0:{sizes[0]}"')
        if any(b <= a for a, b in zip(thresholds, thresholds[1:])):
            self.fail("step_batch_size_schedule thresholds must strictly increase", "set step_batch_size_schedule=null")
        if any(b < a for a, b in zip(sizes, sizes[1:])):
            self.fail("step_batch_size_schedule batch sizes must not decrease", "set step_batch_size_schedule=null")
        step = mbs * dp
        bad = [s for s in sizes if s <= 0 or s % step]
        if bad:
            self.fail(f"step_batch_size_schedule batch sizes {bad} are not multiples of micro batch {mbs} × "
                      f"DP {dp} = {step}", "Megatron checks each size only when it becomes active, mid-run",
                      stage="runtime")
        if self.arg("train_iters") is not None:
            self.warnings.append(
                "step_batch_size_schedule with iteration-based training sizes the LR schedule and dataset with "
                "global batch = MBS·DP; use train_samples and lr_*_samples instead")
        return sizes

    # -- sequence parallel, precision, optimizer flags -------------------------------------------------------
    def sequence_parallel(self, tp: int, cp: int, apex: bool) -> bool:
        sp = bool(self.arg("sequence_parallel"))  # off at TP 1: Megatron's rewrite, warned by target_rules
        if sp and (self.arg("seq_length") // cp) % tp:
            self.fail(f"sequence parallel needs seq_length {self.arg('seq_length')} / CP {cp} divisible by TP {tp}",
                      stage="runtime")
        no_kernels = not self.te and not apex
        moe_tp = tp > 1 and bool(self.arg("num_experts"))  # moe_layer.py:620, in training only
        if sp and no_kernels:
            self.fail("sequence_parallel needs Transformer Engine or NVIDIA apex (torch's LayerNorm fallback "
                      "asserts 'sequence parallel not supported')",
                      # without it MoE at TP > 1 raises (below): the way out that trains here is TP 1
                      "set tensor_model_parallel_size=1 (MoE experts at TP > 1 need sequence_parallel)" if moe_tp
                      else "set sequence_parallel=false", stage="runtime")
        if not sp and moe_tp:
            self.fail(f"MoE experts with TP {tp} need sequence_parallel: Megatron's MoE layer raises at the first "
                      "training step ('performance may degrade if MoE and tensor parallelism are enabled without "
                      "also enabling sequence parallelism', moe_layer.py:621)",
                      "set tensor_model_parallel_size=1, or transformer_engine=true sequence_parallel=true "
                      "(a target with TE)"
                      if no_kernels else "set sequence_parallel=true", stage="runtime")
        if self.arg("tp_comm_overlap") and not sp:  # arguments.py:1386, after SP is turned off at TP 1
            if tp == 1:
                self.fail("tp_comm_overlap needs sequence_parallel, which Megatron turns off at TP 1 "
                          "(arguments.py:1384) before it asserts that TP overlap needs it",
                          "set tp_comm_overlap=false (there is no TP communication to overlap at TP 1)")
            else:
                self.fail("tp_comm_overlap needs sequence_parallel", "set sequence_parallel=true")
        return sp

    def precision(self) -> None:
        if self.arg("fp16") and self.arg("bf16"):
            self.fail("fp16 and bf16 are both set", "choose one")
        if self.arg("fp16_lm_cross_entropy") and not self.arg("fp16"):
            self.fail("fp16_lm_cross_entropy needs fp16", "set fp16_lm_cross_entropy=false")
        if self.arg("fp32_residual_connection") and not (self.arg("fp16") or self.arg("bf16")):
            self.fail("fp32_residual_connection needs fp16 or bf16", "set fp32_residual_connection=false")
        self.fp16_warm_up()

    def fp16_warm_up(self) -> None:
        """fp16's dynamic loss scale starts at 2^32 and halves on every overflow, skipping that step; grads of
        order 1-10 stop overflowing near 2^12, so about log2(scale) - 12 steps update nothing (seen: a 4-iteration
        fp16 run skipped all 4 and reported no loss). A checkpoint inside those steps is refused where it crashes
        (the distributed optimizer without TE/apex), a run no longer than half of them is refused (it ends with no
        update), one no longer than them warned."""
        scale, iters = self.arg("initial_loss_scale"), self.arg("train_iters")
        if not self.arg("fp16") or self.arg("loss_scale") is not None or not iters or not scale or scale <= 1 \
                or iters < 1:  # a length below 1 is its own problem
            return
        skipped = max(0, int(math.log2(scale)) - 12)
        shown = f"2^{int(math.log2(scale))}" if math.log2(scale).is_integer() else f"{scale:g}"
        first_save = min(self.arg("save_interval") or iters, iters) if self.arg("save") else None
        if (first_save is not None and first_save <= skipped and self.arg("use_distributed_optimizer")
                and not self.te and not self.apex):
            # seen on one H200: fp16 + distributed optimizer, 4 iterations all skipped, then the save asserted
            self.fail(f"fp16's loss scale warm-up (initial_loss_scale {shown}) skips about the first {skipped} "
                      f"iterations, and the first checkpoint comes at iteration {first_save}: the distributed "
                      "optimizer without Transformer Engine or apex cannot save before its first step "
                      "(distrib_optimizer.py:793 asserts one Adam step count among no states)",
                      f"set initial_loss_scale=4096, or save_interval above {skipped}, or use bf16", stage="runtime")
            return
        # Each overflow halves the scale only once hysteresis (2) overflows came: even grads of order 100 overflow
        # for the first half of the warm-up, so a run that short updates nothing (refused: it would end "failed"
        # with no loss); one within the warm-up's second half may update a little (warned).
        if iters <= skipped // 2:
            self.fail(f"fp16's loss scale warm-up (initial_loss_scale {shown}) skips about the first {skipped} "
                      f"iterations (each overflow halves the scale), so train_iters {iters} ends without one weight "
                      "update and no loss is logged",
                      f"set initial_loss_scale=4096 (gradients of order 1-10 do not overflow there), or train longer "
                      f"than {skipped} iterations, or use bf16", stage="runtime")
        elif iters <= skipped:
            self.warnings.append(
                f"fp16 starts its dynamic loss scale at initial_loss_scale {shown} and halves it on each step whose "
                f"gradients overflow, skipping that step: the first ~{skipped} iterations usually update nothing, so "
                f"train_iters {iters} may end without one weight update (set initial_loss_scale, e.g. 4096, or "
                "train longer)")

    def optimizer_overlap(self, vpp: int | None) -> None:
        dist_opt = self.arg("use_distributed_optimizer")
        # with torch FSDP2 the distributed optimizer is refused (target_rules.torch_fsdp2), and an emerging optimizer
        # (soap, muon, …) turns it into its layer-wise one (arguments.py): the way out is the overlap
        emerging = self.arg("optimizer") in EMERGING_OPTIMIZERS and self.arg("optimizer") != "dist_muon"
        turn_on = "" if self.arg("use_torch_fsdp2") or emerging else "use_distributed_optimizer=true, or "
        if self.arg("overlap_param_gather"):
            if not (dist_opt or self.arg("use_megatron_fsdp")):
                self.fail("overlap_param_gather needs use_distributed_optimizer (it gathers the parameters the "
                          "distributed optimizer shards)", f"set {turn_on}overlap_param_gather=false")
            if not self.arg("overlap_grad_reduce"):
                self.fail("overlap_param_gather needs overlap_grad_reduce", "set overlap_grad_reduce=true")
        if self.arg("overlap_param_gather_with_optimizer_step"):
            off = "overlap_param_gather_with_optimizer_step=false"
            if not dist_opt:
                self.fail("overlap_param_gather_with_optimizer_step needs use_distributed_optimizer",
                          f"set {off}, or use_distributed_optimizer=true")
            if not self.arg("overlap_param_gather"):
                self.fail("overlap_param_gather_with_optimizer_step needs overlap_param_gather", f"set {off}")
            if vpp is None:
                self.fail("overlap_param_gather_with_optimizer_step needs the interleaved pipeline schedule",
                          f"set {off} (or use a virtual pipeline at PP > 1)")
            if self.arg("ckpt_format") != "torch":
                self.fail("overlap_param_gather_with_optimizer_step needs ckpt_format torch", f"set {off}")
        if self.arg("fp8_param_gather") and not (dist_opt or self.arg("use_megatron_fsdp")):
            self.fail("fp8_param_gather needs use_distributed_optimizer",
                      f"set {turn_on}fp8_param_gather=false")
        if self.arg("fp8_param_gather") and not self.arg("fp8"):  # TransformerConfig: fp8_param needs fp8 mode
            unset = " ".join(f"--set {a}" for a in drop("fp8", self.arg)[1:])
            self.fail("fp8_param_gather needs fp8 (fp8_format)", f"drop it and what only fp8 reads: {unset}, or set "
                      "fp8 (--fp8-format)")
        if self.arg("use_precision_aware_optimizer") and not (dist_opt or self.arg("use_megatron_fsdp")):
            # optimizer_config.py: "--use-precision-aware-optimizer only supported with distributed optimizer"
            self.fail("use_precision_aware_optimizer needs the distributed optimizer: Megatron asserts it when it "
                      "creates the optimizer", "set use_distributed_optimizer=true, or use_precision_aware_optimizer="
                      "false", stage="runtime")
        with_dist_opt = "" if dist_opt or self.arg("use_megatron_fsdp") else " --set use_distributed_optimizer=true"
        lowered = [f"{name} {self.arg(name)}" for name in PRECISION_AWARE_DTYPES
                   if self.arg(name) not in (None, "fp32")]
        if lowered and not self.arg("use_precision_aware_optimizer"):
            # optimizer_config.py:457-469 (seen: a script's main_grads_dtype bf16 left behind when the hint
            # "set use_precision_aware_optimizer=false" was followed on a target without TE)
            self.fail(f"{', '.join(lowered)} needs use_precision_aware_optimizer: Megatron asserts each of them is "
                      "fp32 otherwise when it creates the optimizer",
                      " ".join(f"--set {name}=fp32" for name in PRECISION_AWARE_DTYPES
                               if self.arg(name) not in (None, "fp32")) + (
                          # that optimizer needs the distributed one, and TE's FusedAdam (requirements row)
                          f", or use_precision_aware_optimizer=true{with_dist_opt}" if self.te else ""),
                      stage="runtime")
        if self.arg("reuse_grad_buf_for_mxfp8_param_ag") and not self.arg("fp8_param_gather"):
            # distributed_data_parallel_config.py: "Reuse grad buffer only when keeping params in MXFP8."
            self.fail("reuse_grad_buf_for_mxfp8_param_ag needs fp8_param_gather (MXFP8 parameters): Megatron asserts "
                      "it when it wraps the model", "set reuse_grad_buf_for_mxfp8_param_ag=false" + (
                          f", or fp8_param_gather=true{with_dist_opt}" if self.arg("fp8") else ""), stage="runtime")

    # -- the whole layout -------------------------------------------------------------------------------------
    def layout(self, apex: bool) -> Layout:
        """Every rule that depends on the parallel layout (sizes, batches, schedule, sequence parallel,
        optimizer overlap), in the order Megatron meets them."""
        tp = self.arg("tensor_model_parallel_size")
        pp = self.arg("pipeline_model_parallel_size")
        cp = self.arg("context_parallel_size")
        world_ok = self.world_size(tp, pp, cp)
        dp = self.world // (tp * pp * cp) if world_ok else 1
        self.experts(tp, pp)
        self.context_parallel(cp, tp)
        vpp = self.pipeline(pp)
        self.effective = effective_settings(self.preset.megatron, vpp)
        self.heads(tp)
        self.batch_schedule = ()
        gbs, microbatches = self.batches(dp, pp, vpp) if world_ok else (self.arg("global_batch_size") or 0, 0)
        sp = self.sequence_parallel(tp, cp, apex)
        self.optimizer_overlap(vpp)
        return Layout(
            world_size=self.world, tp=tp, pp=pp, cp=cp, ep=self.arg("expert_model_parallel_size"), dp=dp, vpp=vpp,
            micro_batch_size=self.arg("micro_batch_size"), global_batch_size=gbs, num_microbatches=microbatches,
            sequence_parallel=sp, batch_schedule=self.batch_schedule,
        )

    # -- sequence length, training length, misc --------------------------------------------------------------
    def lengths(self) -> None:
        seq, max_pos = self.arg("seq_length"), self.arg("max_position_embeddings")
        if max_pos < seq:
            self.fail(f"max_position_embeddings {max_pos} is smaller than seq_length {seq}",
                      f"set max_position_embeddings to at least {seq}")

    def training_length(self) -> None:
        iters, samples = self.arg("train_iters"), self.arg("train_samples")
        for name, value, other in (("train_iters", iters, samples), ("train_samples", samples, iters)):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 1:
                # no step to train (Megatron's `if args.train_iters:` even reads 0 as unset)
                self.fail(f"{name} must be at least 1, got {value}",
                          f"set {name}=null (the job trains for its other length)" if other is not None else
                          f"set {name}=1000 (or another length of at least 1)", stage="validate")
                return
        if iters is None and samples is None:
            self.fail("neither train_iters nor train_samples is set", "set exactly one of them", stage="runtime")
            return
        if iters is not None and samples is not None:
            # The user switched (e.g. 175b: --set train_iters=1000): the one the user set last is the choice.
            chosen = self._last_overridden("train_iters", "train_samples")
            if chosen is None:
                self.fail("train_iters and train_samples are both set", "set exactly one of them (--set "
                          "train_samples=null or --set train_iters=null unsets the other)")
                return
            based = chosen.removeprefix("train_")
        else:
            based = "iters" if iters is not None else "samples"
        other = "samples" if based == "iters" else "iters"
        # validate_args asserts the other unit's lengths are None (0 is set too) and its warm-up is 0
        conflicts = [name for name in (f"train_{other}", f"lr_decay_{other}", f"lr_warmup_{other}",
                                       f"lr_wsd_decay_{other}")
                     if (self.arg(name) if name.startswith("lr_warmup_") else self.arg(name) is not None)]
        if conflicts:
            self._training_length_conflicts(based, other, conflicts)
            return
        if self.arg("lr_decay_style") == "WSD" and self.arg(f"lr_wsd_decay_{based}") is None:
            # OptimizerParamScheduler asserts wsd_decay_steps, which training.py takes from lr_wsd_decay_{based} only
            total = self.arg(f"train_{based}")
            self.fail(f"lr_decay_style WSD needs lr_wsd_decay_{based} (the training length is in {based}): Megatron "
                      "asserts it when it builds the LR scheduler", f"set lr_wsd_decay_{based}, e.g. --set "
                      f"lr_wsd_decay_{based}={max(1, total // 10)} (the last tenth of train_{based})", stage="runtime")
        if self.arg("lr_warmup_fraction") is not None and self.arg(f"lr_warmup_{based}"):
            self.fail(f"lr_warmup_fraction and lr_warmup_{based} are both set", "keep one")
        lr, min_lr = self.arg("lr"), self.arg("min_lr")
        if lr is not None and min_lr > lr:
            self.fail(f"min_lr {min_lr} is larger than lr {lr}", f"set min_lr={lr} (or lower)")
        total = iters if iters is not None else samples
        decay = self.arg(f"lr_decay_{based}") or total
        fraction = self.arg("lr_warmup_fraction")
        warmup = fraction * decay if fraction is not None else self.arg(f"lr_warmup_{based}")
        if warmup >= decay:
            self.fail(f"LR warmup ({warmup:g} {based}) must be shorter than LR decay ({decay:g} {based})",
                      f"shorten lr_warmup_{based} or lengthen lr_decay_{based}", stage="runtime")

    def _last_overridden(self, *names: str) -> str | None:
        given = [o.partition("=")[0].strip().removeprefix("megatron.") for o in self.preset.overrides]
        for name in reversed(given):
            if name in names and self.preset.megatron.get(name) is not None:
                return name
        return None

    def sample_budget(self, layout: Layout) -> None:
        """Megatron turns a sample budget into iterations by floor division (training.py update_train_iters, a
        constant batch): fewer samples than one global batch is 0 iterations, a run that updates nothing."""
        samples, gbs = self.arg("train_samples"), layout.global_batch_size
        if self.arg("train_iters") is not None or layout.batch_schedule or isinstance(samples, bool) \
                or not isinstance(samples, int) or not isinstance(gbs, int) or gbs < 1:
            return
        if 1 <= samples < gbs:
            self.fail(f"train_samples {samples} is less than one global batch of {gbs}: Megatron trains "
                      f"train_samples // global_batch_size = 0 iterations (training.py update_train_iters), so "
                      "the run would update nothing",
                      f"set train_samples={gbs} or more (a multiple of {gbs}: the samples past the last whole "
                      "batch are not trained)", stage="runtime")

    def updates(self, layout: Layout | None) -> None:
        """update_rules: steps at learning rate 0, skipped iterations, early exits; the training length in iterations
        where exactly one length is set (else training_length says what to fix first)."""
        lengths = {name: self.arg(name) for name in ("train_iters", "train_samples")}
        iterations = None
        if layout is not None and sum(v is not None for v in lengths.values()) == 1:
            iterations = training_iterations(lengths, layout.global_batch_size, bool(layout.batch_schedule))
        batch = layout.global_batch_size if layout is not None and not layout.batch_schedule else None
        update_rules.check(self.arg, self.fail, self.warnings.append, iterations, batch)

    def _training_length_conflicts(self, based: str, other: str, conflicts: list[str]) -> None:
        """Every setting of the other unit at once, and the one command that unsets them all."""
        shown = ", ".join(f"{name} {self.arg(name)}" for name in conflicts)
        unset = [f"{name}=null" for name in conflicts]
        gbs = self.preset.megatron.get("global_batch_size")
        wsd = f"lr_wsd_decay_{other}"
        if self.arg("lr_decay_style") == "WSD" and wsd in conflicts and gbs:
            # WSD needs its decay length in the unit of the training length: convert it in the same round
            value = self.arg(wsd)
            unset.append(f"lr_wsd_decay_{based}={-(-value // gbs) if based == 'iters' else value * gbs}")
        command = " ".join(["launch", self._preset_ref(), *(f"--set {o}" for o in self.preset.overrides),
                            *(f"--set {u}" for u in unset)])
        text = (f"train_{based} {self.arg(f'train_{based}')} is set, so these {other}-based settings conflict "
                f"with it: {shown}")
        hint = f"unset them: {command}"
        gbs = self.preset.megatron.get("global_batch_size")
        # a length of 0 (or less) has no same schedule in the other unit: unsetting it is the way
        schedule = [n for n in conflicts if n.startswith("lr_") and isinstance(self.arg(n), int)
                    and self.arg(n) > 0]
        if schedule and gbs:
            # the same LR schedule in the other unit, at a constant global batch
            def convert(value: int) -> int:
                return -(-value // gbs) if based == "iters" else value * gbs
            same = " ".join(f"--set {n.replace(other, based)}={convert(self.arg(n))}" for n in schedule)
            hint += (f" (the LR then decays over train_{based} without warmup; the same schedule in {based} at "
                     f"global batch {gbs}: {same})")
        self.fail(text, hint)

    def _preset_ref(self) -> str:
        from launcher.pipeline.preset import CONFIGS_DIR

        source = self.preset.sources[-1] if self.preset.sources else self.preset.name
        return self.preset.name if Path(source).resolve() == (CONFIGS_DIR / f"{self.preset.name}.yaml").resolve() \
            else source

    def misc(self) -> None:
        if self.arg("save") is not None and not self.arg("save_interval"):
            self.fail("save is set without save_interval", "set save_interval (iterations between checkpoints)")
        retain = self.arg("save_retain_interval")
        if retain is not None and self.arg("save_interval") and retain % self.arg("save_interval"):
            self.fail(f"save_retain_interval {retain} is not a multiple of save_interval {self.arg('save_interval')}",
                      "set save_retain_interval=null")
        mem = self.arg("log_memory_interval")
        if mem is not None and mem % self.arg("log_interval"):
            self.fail(f"log_memory_interval {mem} is not a multiple of log_interval {self.arg('log_interval')}",
                      f"set log_memory_interval={self.arg('log_interval')}")
        if self.arg("recompute_granularity") == "selective" and self.arg("recompute_method") is not None:
            # recompute_activations is Megatron's spelling of selective recompute (arguments.py:605)
            how = "recompute_activations" if self.preset.arg("recompute_activations") else "selective recompute"
            layers = "" if self.arg("recompute_num_layers") is not None else " --set recompute_num_layers=1"
            full_recompute = {"recompute_granularity": "full",
                              "recompute_num_layers": self.arg("recompute_num_layers") or 1}
            # full recompute, which recompute_method is for, where the job's per-layer CUDA graphs take it
            full = "" if self.preset.arg("recompute_activations") or cuda_graph_rules.refuses(
                self.arg, full_recompute) else (
                f", or recompute_granularity=full{layers} (full recompute, which recompute_method is for)")
            self.fail(f"{how} cannot be combined with recompute_method {self.arg('recompute_method')}: Megatron "
                      "asserts \"recompute method is not yet supported for selective recomputing granularity\" "
                      "(arguments.py:1371)", f"set recompute_method=null{full}")
        given_type = self.preset.arg("position_embedding_type")
        if (self.arg("mtp_num_layers") or 0) > 0 and given_type not in ("rope", "none") and \
                self.arg("position_embedding_type") in ("rope", "none"):
            # validate_args checks MTP's position embedding (arguments.py:872) before it turns the old
            # --use-rotary-position-embeddings into rope (arguments.py:1457): the check sees the type as given
            self.fail(f"multi-token prediction (mtp_num_layers {self.arg('mtp_num_layers')}) with "
                      f"use_rotary_position_embeddings and position_embedding_type {given_type}: Megatron checks MTP's "
                      "position embedding before it turns the old flag into rope and asserts \"Multi-Token Prediction "
                      f"(MTP) is not supported with {given_type} position embedding type\" (arguments.py:872)",
                      "set position_embedding_type=rope --set use_rotary_position_embeddings=false")
        if self.arg("recompute_granularity") == "full" and (
                self.arg("recompute_method") is None or self.arg("recompute_num_layers") is None):
            # name only what is missing, each as a `--set` that a user (or a script) can follow
            missing = {k: v for k, v in (("recompute_method", "uniform"), ("recompute_num_layers", 1))
                       if self.arg(k) is None}
            self.fail(f"full recompute needs {' and '.join(missing)} (Megatron's TransformerConfig asserts it)",
                      " ".join(f"--set {k}={v}" for k, v in missing.items())
                      + " (uniform chunks of 1 layer: the least memory)")
        for dest, value in self.preset.megatron.items():
            warning = megatron_args.deprecation_warning(dest) if value not in (None, False) else None
            if warning:
                self.warnings.append(warning)
        if self.arg("yaml_cfg") is not None:
            self.fail(f"yaml_cfg {self.arg('yaml_cfg')}: at the pin Megatron then builds every setting from that YAML "
                      "file and ignores the command line (arguments.py:147, yaml_arguments.load_yaml: \"argparse "
                      "arguments will be ignored\"), so nothing this preset sets, and nothing checked here, would "
                      "apply to the run",
                      "write the file's settings into the preset (launch import takes a flag list or a YAML mapping "
                      "of flags) and drop the file: --set yaml_cfg=null")
        if self.arg("fim_data") and self.arg("mock_data"):
            self.fail("fim_data needs a real dataset: Megatron's mock dataset has no fill-in-the-middle variant "
                      "(arguments.py:1523)", "set data_path to a prepared dataset (launch prepare-data), or drop "
                      "fim_data")
        if self.arg("error_injection_rate") and self.arg("rerun_mode") != "disabled":
            self.warnings.append(
                f"error_injection_rate {self.arg('error_injection_rate')} injects a {self.arg('error_injection_type')} "
                "into the loss on purpose (Megatron's rerun tests): the rerun state machine then re-runs the step and "
                "may stop the job with exit code 16 (a persistent error: it saves a checkpoint, to be resumed on "
                "another GPU) or 17 (result validation failed), to be resumed from the last checkpoint")
        if self.arg("rampup_batch_size") is not None:
            self.warnings.append("rampup_batch_size is parsed but ignored by Megatron at this commit; "
                                 "use step_batch_size_schedule")
        fast_ops = self.env.get(FAST_OPS_ENV)
        try:
            selected_ops(fast_ops)
        except ValueError as error:  # would stop every rank at model build
            self.fail(f"{FAST_OPS_ENV}={fast_ops}: {error}", f"e.g. --set env.{FAST_OPS_ENV}=none", "launcher")


def check(preset: Preset, world_size: int, gpus_per_node: int, te_available: bool = False,
          apex_available: bool = False, micro_batch_picked: bool = False, env: JobEnvironment | None = None,
          te_version: str | None = None, torchao_available: bool = False
          ) -> tuple[Layout | None, list[Problem], list[str]]:
    """Every check for one world size: (layout or None, problems, warnings). `env`: the job's environment;
    `te_version`: the target's TE (None with TE: the declared NGC container's); `torchao_available`: the target
    has torchao (FP8 without TE)."""
    c = _Checker(preset, world_size, gpus_per_node, te_available, apex_available, micro_batch_picked, env,
                 te_version)
    c.torchao = torchao_available
    c.model_family()
    ok = c.required()
    c.training_settings()
    if not ok:
        _without_sizes(c)
        return None, c.problems, c.warnings
    layout = c.layout(apex_available)
    c.precision()
    c.lengths()
    c.training_length()
    c.sample_budget(layout)
    c.updates(layout)
    c.misc()
    check_values(c.arg, c.fail, c.te)
    target_rules.check(c, layout.tp, layout.cp, layout.vpp)
    return layout, c.problems, c.warnings


_NAMED_VPP = 2  # a virtual pipeline the preset names, of a size the refused sizes leave unknown


def _without_sizes(c: _Checker) -> None:
    """The rules that judge settings rather than sizes, for a job whose sizes are refused (a hidden size of 0):
    every problem is said at once, not one more after each fix. A rule that still computes with a refused size
    is skipped; it speaks once the size is fixed."""
    def size(dest: str) -> int:
        value = c.arg(dest)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1

    # the optimizer's rules read only the virtual pipeline, known here when the preset names none
    no_vpp = c.arg("num_layers_per_virtual_pipeline_stage") is None and \
        c.arg("num_virtual_stages_per_pipeline_rank") is None and c.arg("pipeline_model_parallel_layout") is None
    # the rules below judge what Megatron sees after validate_args' rewrites (--use-rotary-position-embeddings makes
    # the model RoPE, so --no-position-embedding stands), as layout() has them once the sizes are known; of the
    # virtual pipeline only whether there is one matters to those rewrites
    c.effective = effective_settings(c.preset.megatron, None if no_vpp else _NAMED_VPP)
    optimizer = [lambda: c.optimizer_overlap(None)] if no_vpp else []
    for rule in (c.precision, c.training_length, lambda: c.updates(None), *optimizer,
                 lambda: check_values(c.arg, c.fail, c.te),
                 lambda: target_rules.check(c, size("tensor_model_parallel_size"), size("context_parallel_size"),
                                            None)):
        try:
            rule()
        except (ArithmeticError, TypeError, ValueError, KeyError, IndexError):
            continue
    _layout_rules_without(c, refused_sizes(c.arg))


def _layout_rules_without(c: _Checker, refused: set[str]) -> None:
    """The layout's rules (layers per stage, the virtual pipeline, the experts, heads, lengths) that read none of
    the refused sizes: each runs with every setting it reads recorded, and what one that read a refused size found
    is dropped (it computed with the refused value; it speaks once that is fixed)."""
    method = c.arg
    state: dict[str, Any] = {}

    def pipeline() -> None:
        state["vpp"] = c.pipeline(c.arg("pipeline_model_parallel_size"))

    def tp() -> Any:
        return c.arg("tensor_model_parallel_size")

    def sound_tp() -> int:
        """TP for the rules that only also divide by it (heads, the experts' default ETP): a refused TP read as 1
        (untracked), so the hidden size's rule against the heads still speaks; TP's own rules wait for TP."""
        value = method("tensor_model_parallel_size")
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1

    rules: list[Callable[[], Any]] = [
        lambda: c.world_size(tp(), c.arg("pipeline_model_parallel_size"), c.arg("context_parallel_size")),
        lambda: c.experts(sound_tp(), c.arg("pipeline_model_parallel_size")),
        lambda: c.context_parallel(c.arg("context_parallel_size"), sound_tp()),
        pipeline, lambda: c.heads(sound_tp()),
        lambda: c.sequence_parallel(tp(), c.arg("context_parallel_size"), c.apex), c.lengths, c.misc]
    for rule in rules:
        read: set[str] = set()

        def tracked(dest: str, read: set[str] = read) -> Any:
            read.add(dest)
            return method(dest)

        before, warned = len(c.problems), len(c.warnings)
        c.arg = tracked  # type: ignore[method-assign]
        try:
            rule()
        except (ArithmeticError, TypeError, ValueError, KeyError, IndexError, AttributeError):
            read.add("(failed)")
        finally:
            c.arg = method  # type: ignore[method-assign]
        if read & (refused | {"(failed)"}):
            del c.problems[before:]
            del c.warnings[warned:]
    # a rule already run above (check_values, the target's) may say a problem again: once is enough
    c.problems[:] = list({p.message: p for p in reversed(c.problems)}.values())[::-1]


# What examples/run_simple_mcore_train_loop.py hard-codes (model_provider, its DataLoader, its loop); it takes no
# arguments. configs/toy.yaml states exactly these, so the plain toy runs upstream's script; any other Megatron
# setting can only take effect through pretrain_gpt.py.
SIMPLE_LOOP_SETTINGS: dict[str, Any] = {
    "num_layers": 2, "hidden_size": 12, "num_attention_heads": 4, "seq_length": 64,
    "max_position_embeddings": 64, "vocab_size": 100, "tensor_model_parallel_size": 2,
    "pipeline_model_parallel_size": 1, "micro_batch_size": 8, "train_iters": 5, "lr": 0.001,
    "lr_decay_style": "constant", "eval_interval": 1000, "eval_iters": 0, "mock_data": True,
    "tokenizer_type": "NullTokenizer", "log_interval": 1,
    "ckpt_format": "torch",  # like the eval and data settings: for the one-GPU pretrain_gpt.py fallback only
}


def simple_loop_differences(preset: Preset) -> list[str]:
    """Megatron settings of the preset that upstream's simple loop would not apply (it takes no arguments)."""
    names = dict.fromkeys([*preset.megatron, *SIMPLE_LOOP_SETTINGS])
    return [name for name in names if preset.megatron.get(name) != SIMPLE_LOOP_SETTINGS.get(name)]


def model_args(effective: Mapping[str, Any], entry: str, tokenizer_vocab: int | None = None) -> dict[str, Any]:
    """The arguments describing the model that will really be built, for parameter and memory estimates, from
    every argument as Megatron sees it (ResolvedJob.effective()). A vocabulary the settings leave to the
    tokenizer is the tokenizer's where it is known here (ResolvedJob.tokenizer_vocab).

    Upstream's simple loop builds GPTModel directly: vocabulary 100 as given (no padding) and untied output
    weights (GPTModel's share_embeddings_and_output_weights defaults to False)."""
    args = dict(effective)
    if entry == "simple_loop":
        args.update(untie_embeddings_and_output_weights=True, padded_vocab_size=args["vocab_size"])
    elif args.get("vocab_size") is None and not args.get("padded_vocab_size"):
        args["vocab_size"] = tokenizer_vocab
    return args


def layout_problems(preset: Preset, world_size: int, gpus_per_node: int, te_available: bool = False,
                    apex_available: bool = False) -> list[Problem]:
    """The rules of `check` that depend on the parallel layout (see _Checker.layout): what the layout search
    (launcher.estimate.search) asks of each candidate. The others judge the preset whatever its layout."""
    c = _Checker(preset, world_size, gpus_per_node, te_available, apex_available)
    if c.required():
        layout = c.layout(apex_available)
        check_values(c.arg, c.fail, c.te)
        target_rules.check(c, layout.tp, layout.cp, layout.vpp)
    return c.problems


def choose_entry(preset: Preset, world: int) -> tuple[Preset, str, list[str], list[Problem]]:
    """The entry script that will run: the preset's, except that upstream's simple loop runs only what it
    hard-codes, on an even number of GPUs: with other Megatron settings, or on one GPU, the same model trains
    through pretrain_gpt.py, where every setting applies (never a setting silently dropped).
    (preset, entry, notes, problems)"""
    if preset.launcher.entry != "simple_loop":
        return preset, preset.launcher.entry, [], []
    differ = simple_loop_differences(preset)
    asked_for_loop = any(o.replace(" ", "").startswith(("entry=simple_loop", "launcher.entry=simple_loop"))
                         for o in preset.overrides)
    if differ and asked_for_loop:
        return preset, "simple_loop", [], [Problem(
            f"entry simple_loop runs upstream run_simple_mcore_train_loop.py, which takes no arguments: "
            f"{', '.join(differ)} would not apply",
            "drop --set entry=simple_loop (the toy then trains through pretrain_gpt.py, where they apply), "
            "or drop those settings", stage="launcher")]
    if differ:
        megatron = dict(preset.megatron)
        if world == 1 and "tensor_model_parallel_size" not in differ:
            megatron["tensor_model_parallel_size"] = 1
        note = (f"{', '.join(differ)} differ from what run_simple_mcore_train_loop.py hard-codes (it takes no "
                "arguments), so the model trains through pretrain_gpt.py, where they apply")
        return replace(preset, megatron=megatron), "pretrain_gpt", [note], []
    if world == 1:
        # upstream's TransformerConfig fuses neither bias + GeLU (exact GeLU, not the fused tanh approximation)
        # nor bias + dropout + add; pretrain_gpt.py's flags would (each compiled with torch.compile at start)
        megatron = {**SIMPLE_LOOP_UNFUSED, **preset.megatron, "tensor_model_parallel_size": 1}
        note = ("one GPU: run_simple_mcore_train_loop.py needs 2 (it hard-codes TP 2), so the same 2-layer "
                "model trains through pretrain_gpt.py with TP 1, unfused as upstream's TransformerConfig "
                "(bias_gelu_fusion and bias_dropout_fusion false: exact GeLU)")
        return replace(preset, megatron=megatron), "pretrain_gpt", [note], []
    if world % SIMPLE_LOOP_TP:
        return preset, "simple_loop", [], [Problem(
            f"run_simple_mcore_train_loop.py hard-codes TP {SIMPLE_LOOP_TP}, so it needs an even number of GPUs; "
            f"world size is {world}", "use --gpus-per-node 2 (or 1 for the pretrain_gpt.py fallback)",
            stage="launcher")]
    return preset, "simple_loop", [], []


def data_parallel_size(preset: Preset, world: int) -> int | None:
    """world / (TP·PP·CP), where that is a whole number of replicas; None where not (the layout checks say why)."""
    model = preset.arg("tensor_model_parallel_size") * preset.arg("pipeline_model_parallel_size") * preset.arg(
        "context_parallel_size")
    return world // model if model > 0 and world % model == 0 and world >= model else None


def microbatches_per_step(preset: Preset, world: int) -> int | None:
    """Microbatches each model replica runs per step, where the batch settings decide it (no ramp-up schedule)."""
    dp, batch, micro = data_parallel_size(preset, world), preset.megatron.get("global_batch_size"), preset.arg(
        "micro_batch_size") or 1
    if dp is None or not isinstance(batch, int) or preset.megatron.get("rampup_batch_size") or micro < 1:
        return None  # undecided here, or a layout the checks refuse with their own message
    return batch // (micro * dp) or None


def choose_micro_batch(preset: Preset, world: int, notes: list[str]) -> tuple[Preset, list[str]]:
    """Fill in micro_batch_size from launcher.max_micro_batch_size when the preset leaves it open."""
    limit = preset.launcher.max_micro_batch_size
    if limit is None or preset.megatron.get("micro_batch_size") is not None:
        return preset, notes
    dp = data_parallel_size(preset, world) or 1
    gbs = preset.megatron.get("global_batch_size")
    per_rank = gbs // dp if gbs and gbs > 0 and gbs % dp == 0 else None
    # A global batch that DP does not divide has no valid micro batch: 1, and the batch check says why.
    micro = max(d for d in divisors(per_rank) if d <= limit) if per_rank else (1 if gbs else limit)
    note = (f"micro batch {micro}: the largest divisor of global batch {gbs} / DP {dp} up to "
            f"max_micro_batch_size {limit} (pin it with --set micro_batch_size=N)" if per_rank else
            f"micro batch {micro} = max_micro_batch_size")
    return replace(preset, megatron={**preset.megatron, "micro_batch_size": micro}), [*notes, note]
