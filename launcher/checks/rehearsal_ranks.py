"""The job's own parallel layout, rehearsed on CPU processes (`launch PRESET --check --rehearse`).

The layout shrinks to at most 16 processes: TP, PP (with its virtual stages), EP and expert TP keep their values
where their product is at most 8, else each becomes min(value, 2); DP is 2 where the job's is above 1. A tiny model
keeps what those sizes divide (heads, query groups, layers per virtual stage, experts per rank) and the job's
features. torchrun starts that many processes (launcher/inside/rehearse_rank.py) over gloo, with the shape of the
job's own torchrun argv and a rendezvous on localhost; they run Megatron's schedule for two steps through the job's
optimizer and save a checkpoint in the job's format; a second torchrun loads it back at another TP·PP where the
format reshards, and the parameters' norm there must equal the one saved.

Bounded: torchrun runs in a session of its own, and at the time limit or when the rehearsal ends, every process of
the run is killed together: torchrun's group and each rank's (torchrun gives every rank a session of its own), found
by the marker their environment inherits. The temporary directory (checkpoint, logs, answers) is removed.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from launcher.checks.rehearsal import (
    HEAD_DIM,
    PARALLEL,
    fit_group_limited_router,
    needing_more_than_one,
    packages_absent_here,
    rehearsal_env,
    rehearsal_python,
    settings_here,
    tiny_settings,
)
from launcher.checks.rehearsal_pipeline import shrink_pipeline_layout
from launcher.checks.rehearsal_split import SPLIT_SETTINGS, shrink_split, wants_middle_stage
from launcher.errors import UserError
from launcher.inside.parent_death import DieWithParent
from launcher.interrupts import signals_interrupt

RANK_SCRIPT = Path(__file__).resolve().parent.parent / "inside" / "rehearse_rank.py"
MAX_PROCESSES = 16
KEPT_PRODUCT = 8  # parallel sizes whose product is at most this are rehearsed at their own values
STEPS = 2
TIME_LIMIT_S = float(os.environ.get("MEGATRON_LAUNCH_REHEARSE_TIMEOUT", "600"))  # per torchrun (train, load)
GRACE_S = 10.0  # torchrun's own shutdown of its ranks, before they are killed
OUT_ENV = "MEGATRON_LAUNCH_REHEARSE_OUT"  # where each rank answers; also the marker of a run's processes
RESHARDING_FORMATS = ("torch_dist", "fsdp_dtensor")  # Megatron's formats that load at another TP·PP
NORM_TOLERANCE = 1e-4  # relative: the same weights, summed in another order
FP16_NORM_TOLERANCE = 2e-3  # fp16 parameters: Megatron's norm rounds each tensor's to fp16 (2^-11) here

# Settings of the job's checkpointing the rehearsal sets itself or cannot honour on the CPU.
SAVE_DROPPED = ("async_save", "use_persistent_ckpt_worker", "async_strategy", "save_interval",
                "save_retain_interval", "non_persistent_save_interval", "non_persistent_ckpt_type",
                "non_persistent_global_ckpt_dir", "non_persistent_local_ckpt_dir", "ckpt_step", "finetune",
                "no_load_optim", "no_load_rng", "auto_detect_ckpt_format")


@dataclass(frozen=True)
class RankLayout:
    """The parallel sizes one torchrun runs: world = TP·PP·CP·DP; EP and expert TP are carved out of TP·CP·DP."""

    tp: int = 1
    pp: int = 1
    vpp: int | None = None
    cp: int = 1
    ep: int = 1
    etp: int | None = None  # expert TP (None: Megatron's default, the TP)
    dp: int = 1

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    def describe(self) -> str:
        vpp = f" (VPP {self.vpp})" if self.vpp else ""
        etp = f" · expert TP {self.etp}" if self.etp is not None and self.etp != self.tp else ""
        return f"TP {self.tp} · PP {self.pp}{vpp} · CP {self.cp} · EP {self.ep}{etp} · DP {self.dp}"

    def short(self) -> str:
        vpp = f" (VPP {self.vpp})" if self.vpp else ""
        return f"TP {self.tp} · PP {self.pp}{vpp}"

    def as_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "pp": self.pp, "vpp": self.vpp, "cp": self.cp, "ep": self.ep, "etp": self.etp,
                "dp": self.dp, "world": self.world}


def _with_data_parallel(layout: RankLayout, dp: int) -> RankLayout:
    """`dp`, raised to the smallest multiple that lets EP · expert TP divide TP·CP·DP (Megatron's expert groups)."""
    experts = layout.ep * (layout.etp or layout.tp)
    need = experts // math.gcd(experts, layout.tp * layout.cp)
    return replace(layout, dp=dp * need // math.gcd(dp, need))


def shrunk_layout(job_layout: Any, megatron: Mapping[str, Any]) -> tuple[RankLayout, list[str]]:
    """The job's layout at most 16 processes; what it could not keep, said."""
    sizes = {"tp": job_layout.tp, "pp": job_layout.pp, "ep": job_layout.ep,
             "etp": megatron.get("expert_tensor_parallel_size") or 1}  # expert TP: where the job sets its own
    notes = []
    if job_layout.cp > 1:
        notes.append(f"CP {job_layout.cp}: context parallelism's attention is Transformer Engine's (CUDA only); "
                     "rehearsed at CP 1")
    vpp = job_layout.vpp or 1  # virtual stages add layers, not processes
    own_etp = megatron.get("expert_tensor_parallel_size") is not None
    job_order = _order(sizes["etp"], sizes["tp"])
    if math.prod(sizes.values()) > KEPT_PRODUCT:
        sizes, vpp = {name: min(value, 2) for name, value in sizes.items()}, min(vpp, 2)
        if own_etp and _order(sizes["etp"], sizes["tp"]) != job_order:
            # expert TP below, at or above TP builds other expert groups: the job's order kept
            sizes["etp"] = sizes["tp"] * 2 if job_order > 0 else max(sizes["tp"] // 2, 1)
    layout = RankLayout(tp=sizes["tp"], pp=sizes["pp"], vpp=vpp if sizes["pp"] > 1 and vpp > 1 else None,
                        ep=sizes["ep"], etp=sizes["etp"] if own_etp else None)
    layout = _with_data_parallel(layout, 2 if job_layout.dp > 1 else 1)
    if layout.world > MAX_PROCESSES:  # the expert groups asked for more data-parallel ranks than that
        layout = _with_data_parallel(replace(layout, tp=min(layout.tp, 2), pp=min(layout.pp, 2),
                                             ep=min(layout.ep, 2), etp=min(layout.etp, 2) if layout.etp else None),
                                     2 if job_layout.dp > 1 else 1)
    if job_layout.pp > 2 and layout.pp == 2 and wants_middle_stage(megatron, layout.vpp) \
            and replace(layout, pp=3).world <= MAX_PROCESSES:
        layout = replace(layout, pp=3)  # a stage between first and last, which the job's split sets apart
    if own_etp and _order(layout.etp or layout.tp, layout.tp) != job_order:
        notes.append(f"expert TP {megatron.get('expert_tensor_parallel_size')} against TP {job_layout.tp}: "
                     f"rehearsed at expert TP {layout.etp} · TP {layout.tp} (at most {MAX_PROCESSES} processes)")
    return layout, notes


def _order(a: int, b: int) -> int:
    return (a > b) - (a < b)


def load_layout(layout: RankLayout, query_groups: int | None) -> RankLayout:
    """Another TP·PP to load the checkpoint at: TP 1 where TP > 1, else TP 2 where the query groups allow it,
    else PP 2 (or PP 1 where PP > 1), with the fewest data-parallel ranks the expert groups allow."""
    if layout.tp > 1:
        other = replace(layout, tp=1, etp=1 if layout.etp else None)
    elif query_groups != 1:
        other = replace(layout, tp=2)
    elif layout.pp > 1:
        other = replace(layout, pp=1, vpp=None)
    else:
        other = replace(layout, pp=2)
    return _with_data_parallel(replace(other, dp=1), 1)


def rank_settings(megatron: Mapping[str, Any], layout: RankLayout, load: RankLayout, *,
                  te_here: bool = False) -> tuple[dict[str, Any], list[str]]:
    """The job's settings with the tiny model (tiny_settings) at `layout`, sized so that `load` divides it too."""
    sizes = {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "context_parallel_size": 1,
             "expert_model_parallel_size": 1, "expert_tensor_parallel_size": None}
    settings, notes = tiny_settings({**megatron, **sizes}, te_here=te_here, saves=True)
    settings = {k: v for k, v in settings.items() if v is not None and k not in SAVE_DROPPED}
    if megatron.get("async_save"):
        notes.append("async save (Megatron's background writer): saved synchronously")
    settings.update(tensor_model_parallel_size=layout.tp, pipeline_model_parallel_size=layout.pp,
                    expert_model_parallel_size=layout.ep)
    if layout.etp is not None:
        settings["expert_tensor_parallel_size"] = layout.etp
    if layout.tp == 1:
        settings.pop("sequence_parallel", None)  # Megatron turns it off at TP 1 too
    for knob in PARALLEL["context_parallel_size"][1]:  # rehearsed at CP 1 (shrunk_layout says why)
        settings.pop(knob, None)
    notes += _pipeline_settings(settings, megatron, layout)
    widest = max(layout.tp, load.tp)
    notes += _attention(settings, megatron, widest)
    _experts(settings, megatron, layout)
    # a vocabulary that pads alike at every TP: the same weights at both layouts, no padding rows to drop
    settings["vocab_size"] = (megatron.get("make_vocab_size_divisible_by") or 128) * widest
    # two microbatches on each replica, PP where more (the interleaved schedule needs a multiple of PP)
    settings["global_batch_size"] = layout.dp * max(layout.pp, 2)
    settings["micro_batch_size"] = 1
    return settings, [_at_size(note, settings) for note in notes]


# Values of a setting that only Transformer Engine implements, with Megatron's own equivalent (a target without
# TE is refused them before launch: target_rules.without_te), and the switches under which they are read.
TE_ONLY_VALUES = {"cross_entropy_fusion_impl": ("te", "native", "language_module.py:179")}
TE_ONLY_VALUES_WHEN = {"cross_entropy_fusion_impl": ("cross_entropy_loss_fusion",)}
# Switches the launcher refuses a target without TE (pipeline/target_rules.py) that Megatron asserts in validate_args.
TE_ONLY_SWITCHES = {"fine_grained_activation_offloading": "arguments.py:1716"}


def without_te_switches(megatron: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The switches only Transformer Engine implements (the requirement table's TE rows whose condition is a
    setting turned on), off for a rehearsal here of a job whose target has TE; each said."""
    from launcher.megatron import requirements
    from launcher.pipeline.feature_settings import FEATURE_ONLY, drop
    from launcher.pipeline.target_rules import checkpointed_without_output

    out, notes = dict(megatron), []
    for row in requirements.applicable(out, ["te"]):
        switches = [dest for dest, test in row.when.items() if test is True and out.get(dest) is True]
        # a row of switches, besides exclusions that hold (use_precision_aware_optimizer unless
        # optimizer_cpu_offload): a condition on a value is no switch to turn off
        if switches and all(test is True or test is False or test is None for test in row.when.values()):
            for dest in switches:
                out[dest] = False
                for assignment in drop(dest, out.get)[1:] if dest in FEATURE_ONLY else ():
                    out.pop(assignment.partition("=")[0], None)  # what only it reads, at Megatron's default
            notes.append(f"{', '.join(switches)}: needs {row.wanted()} (the target's), off here ({row.cite})")
    modules = checkpointed_without_output(out.get)
    if "layernorm" in modules:  # the norms' checkpoint reads TE's FP8 state (target_rules, random.py:714)
        out["recompute_modules"] = [m for m in modules if m != "layernorm"] or None
        if out["recompute_modules"] is None:
            out.pop("recompute_granularity", None)
        notes.append("recompute_modules layernorm: Megatron's checkpoint of the norms needs Transformer Engine (the "
                     "target's) at the pin (tensor_parallel/random.py:714); not recomputed here")
    for dest, cite in TE_ONLY_SWITCHES.items():
        if out.get(dest):
            out[dest] = False
            notes.append(f"{dest}: Transformer Engine's (the target's), off here ({cite})")
    for dest, (value, ours, cite) in TE_ONLY_VALUES.items():
        if out.get(dest) == value and all(out.get(on) for on in TE_ONLY_VALUES_WHEN.get(dest, ())):
            out[dest] = ours
            notes.append(f"{dest} {value}: Transformer Engine's (the target's), Megatron's {ours} here ({cite})")
    if out.get("fp8"):  # FP8 is Transformer Engine's alone (transformer_config.py: fp8 needs TE)
        dropped = [assignment.partition("=")[0] for assignment in drop("fp8", out.get)]
        notes.append(f"fp8 {out['fp8']}: Transformer Engine's (the target's); rehearsed without it here "
                     f"({', '.join(dropped)} at Megatron's defaults)")
        for dest in dropped:
            out.pop(dest, None)
    return out, notes


def _at_size(note: str, settings: Mapping[str, Any]) -> str:
    """tiny_settings' note on the CPU kernels, with the model's size as this rehearsal builds it."""
    if not note.startswith("CUDA kernels:"):
        return note
    return re.sub(r"at \d+ layers × hidden \d+", f"at {settings.get('num_layers')} layers × hidden "
                  f"{settings.get('hidden_size')}", note)


def _pipeline_settings(settings: dict[str, Any], megatron: Mapping[str, Any], layout: RankLayout) -> list[str]:
    """A layout string shrunk with its shape (rehearsal_pipeline.py); uneven first/last stages and the embedding and
    loss counted in the split shrunk with their sizes against the others (rehearsal_split.py); else one layer per
    virtual stage; the job's way of naming virtual stages kept."""
    notes: list[str] = []
    # a per-layer pattern (moe_layer_freq=[0]*1+[1]*15) names every layer: its length stays the number of layers
    patterned = any(isinstance(settings.get(dest), str) and "[" in settings[dest]
                    for dest in ("moe_layer_freq", "no_rope_freq", "linear_attention_freq"))
    settings.pop("num_layers_per_virtual_pipeline_stage", None)
    settings.pop("num_virtual_stages_per_pipeline_rank", None)
    text = settings.pop("pipeline_model_parallel_layout", None)
    if text and layout.pp > 1:
        shrunk = shrink_pipeline_layout(str(text), megatron.get("pipeline_model_parallel_size") or 1, layout.pp,
                                        layout.vpp, settings.get("num_layers") if patterned else None)
        notes += shrunk.notes
        if shrunk.text is not None:  # Megatron derives the virtual stages from its length
            settings.update(pipeline_model_parallel_layout=shrunk.text, num_layers=shrunk.layers)
            for dest in SPLIT_SETTINGS:
                settings.pop(dest, None)  # Megatron refuses them next to a layout
            return notes
    split = shrink_split(megatron, layout.pp, layout.vpp, settings.get("num_layers") if patterned else None)
    for dest in SPLIT_SETTINGS:
        if settings.pop(dest, None) not in (None, False) and layout.pp > 1 and split is None:
            notes.append(f"{dest}: the tiny model's stages are even (one layer per virtual stage): the job's "
                         f"{settings.get('num_layers')} layers named by a per-layer pattern do not split so at "
                         f"PP {layout.pp}")
    if split is not None:  # the first and last stages' sizes against the others kept (rehearsal_split.py)
        settings.update(split.settings)
        return notes + list(split.notes)
    stages = layout.pp * (layout.vpp or 1)
    if layout.pp > 1 and not patterned:
        settings["num_layers"] = max(stages, 2)
    settings.setdefault("num_layers", 2)
    if layout.vpp:
        if megatron.get("num_virtual_stages_per_pipeline_rank") or megatron.get("pipeline_model_parallel_layout"):
            settings["num_virtual_stages_per_pipeline_rank"] = layout.vpp
        else:
            settings["num_layers_per_virtual_pipeline_stage"] = max(settings["num_layers"] // stages, 1)
    return notes


def _attention(settings: dict[str, Any], megatron: Mapping[str, Any], tp: int) -> list[str]:
    """Heads and query groups divisible by the widest TP; multi-head, multi-query or grouped stays so, and so do
    fewer query groups than TP ranks (attention.py's own branch: each rank gathers its group's keys and values)."""
    heads = megatron.get("num_attention_heads") or 4
    groups = megatron.get("num_query_groups")
    job_tp = megatron.get("tensor_model_parallel_size") or 1
    notes = []
    if groups is not None and 1 < groups < heads and groups < job_tp:
        ranks_per_group = job_tp // groups
        settings["num_query_groups"] = max(tp // ranks_per_group, 1)
        settings["num_attention_heads"] = 2 * tp
        if settings["num_query_groups"] == 1:
            notes.append(f"num_query_groups {groups} < TP {job_tp}: at TP {tp} fewer groups than TP ranks is one "
                         "group (grouped-query attention rehearsed as multi-query)")
    elif groups is not None and 1 < groups < heads:  # grouped-query: groups split across TP, two heads per group
        settings["num_query_groups"] = max(2, tp)
        settings["num_attention_heads"] = 2 * settings["num_query_groups"]
    else:
        settings["num_attention_heads"] = max(4, tp)
        if groups is not None:
            settings["num_query_groups"] = 1 if groups == 1 else settings["num_attention_heads"]
    settings["hidden_size"] = settings["num_attention_heads"] * HEAD_DIM
    if settings.get("kv_channels") is not None:
        settings["kv_channels"] = HEAD_DIM
    return notes


def _experts(settings: dict[str, Any], megatron: Mapping[str, Any], layout: RankLayout) -> None:
    """Experts per expert-parallel rank as the job's (at most 2), so EP divides them."""
    experts = megatron.get("num_experts")
    if not experts:
        return
    per_rank = min(max(experts // max(megatron.get("expert_model_parallel_size") or 1, 1), 1), 2)
    settings["num_experts"] = layout.ep * per_rank
    if settings.get("moe_router_topk"):
        settings["moe_router_topk"] = min(megatron.get("moe_router_topk") or 1, settings["num_experts"])
    fit_group_limited_router(settings)  # the one-process rehearsal's rule (deepseek_proxy_fsdp_ep2_fsdp2 at EP 2)


# -- running torchrun ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RankRun:
    """One torchrun's outcome: the ranks' answers (rank-N.json), its exit code, whether it ran out of time."""

    answers: list[dict[str, Any]]
    code: int | None
    timed_out: bool
    log_tail: str
    seconds: float

    def passed(self, world: int) -> bool:
        """torchrun exited 0 and every rank answered that it got through."""
        return not self.timed_out and self.code == 0 and len(self.answers) == world and \
            all(answer.get("ok") for answer in self.answers)

    def first_failure(self) -> dict[str, Any] | None:
        failed = [a for a in self.answers if not a.get("ok")]
        return min(failed, key=lambda a: a.get("time", 0.0)) if failed else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def torchrun_argv(python: str, layout: RankLayout, rdzv_id: str, flags: list[str]) -> list[str]:
    """The job's torchrun shape (one node of `layout.world` processes, a c10d rendezvous), on localhost."""
    return [python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(layout.world),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", "--rdzv-id", rdzv_id,
            "--max-restarts", "0", str(RANK_SCRIPT), *flags]


def run_ranks(argv: list[str], env: Mapping[str, str], workdir: Path, limit_s: float) -> RankRun:
    """Run one torchrun in its own session; at the time limit or at the end, every process it started is killed."""
    out = workdir / "answers"
    out.mkdir()
    start = time.monotonic()
    marker = f"{OUT_ENV}={out}"  # unique to this run: every process it starts inherits it
    with open(workdir / "torchrun.log", "w+b") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env={**env, OUT_ENV: str(out), "TMPDIR": str(workdir)},
                                cwd=workdir, start_new_session=True, preexec_fn=DieWithParent())
        timed_out = False
        try:
            code: int | None = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            timed_out, code = True, None
        finally:
            _kill_all(proc, marker)
        log.seek(0, os.SEEK_END)
        log.seek(max(0, log.tell() - 3000))
        tail = log.read().decode("utf-8", "replace")
    answers = []
    for path in sorted(out.glob("rank-*.json")):
        try:
            answers.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    shutil.rmtree(out, ignore_errors=True)
    return RankRun(sorted(answers, key=lambda a: a.get("rank", 0)), code, timed_out, tail,
                   round(time.monotonic() - start, 1))


def marked_processes(marker: str) -> list[int]:
    """The processes whose environment holds `marker` (NAME=value): torchrun's ranks, each in a session of its own
    (torchrun starts them so), and what they start (the checkpoint writer's manager, the resource tracker), wherever
    they were reparented."""
    needle = marker.encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as environ:
                if needle in environ.read().split(b"\0"):
                    found.append(int(entry.name))
        except OSError:
            continue  # gone, or not ours
    return found


def _kill_all(proc: subprocess.Popen, marker: str) -> None:
    """torchrun first asked to stop its ranks (SIGTERM, as on a failure), then everything of this run killed: its
    process group and every process that carries the run's marker."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=GRACE_S)
    for _ in range(5):  # a process may start another while the sweep runs
        pids = marked_processes(marker)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not pids:
            break
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


# -- the rehearsal ---------------------------------------------------------------------------------------------

STAGES = {"import": "start", "args": "Megatron's arguments", "init": "process groups", "model": "model build",
          "step": "training step", "save": "checkpoint save", "done": "the end"}
# Megatron's files that belong to one setting: a failure raised there points to it when its message names none.
FILE_SETTING = {"distrib_optimizer.py": "use_distributed_optimizer", "moe_layer.py": "num_experts",
                "token_dispatcher.py": "moe_token_dispatcher_type", "router.py": "moe_router_topk",
                "mapping.py": "sequence_parallel", "multi_latent_attention.py": "multi_latent_attention",
                "multi_token_prediction.py": "mtp_num_layers"}
STAGE_SETTING = {"init": "the parallel layout", "model": "the model's settings", "step": "the parallel layout",
                 "save": "ckpt_format", "load": "ckpt_format"}


@dataclass(frozen=True)
class LayoutRehearsal:
    """What the multi-rank rehearsal proved, or where it failed (first failing rank, its error and setting)."""

    ok: bool
    layout: RankLayout | None = None
    load: RankLayout | None = None
    stage: str = "done"
    error: str = ""
    where: str = ""
    rank: int | None = None
    setting: str = ""
    seconds: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)
    not_rehearsed: tuple[str, ...] = ()

    def render(self) -> list[str]:
        if self.ok and self.layout is not None:
            loss = self.facts.get("loss") or []
            losses = " → ".join(f"{x:.3f}" if x is not None else "–" for x in loss)
            processes = f"{self.layout.world} CPU process{'es' if self.layout.world > 1 else ''}"
            skipped = self.facts.get("skipped_steps") or []
            warm_up = (f"; step {', '.join(map(str, skipped))} skipped by fp16's dynamic loss scale, as on the GPU"
                       if skipped else "")
            line = (f"rehearsed: {self.layout.describe()} on {processes}, {len(loss)} steps (loss {losses}{warm_up}), "
                    f"saved {self.facts.get('format')}")
            if self.load is not None:
                line += f" and loaded at {self.load.short()}"
                if self.facts.get("params_norm") is not None:
                    line += f" (parameter norm {self.facts['params_norm']:.4f} at both)"
            lines = [line + f"; {self.seconds:.0f} s"]
        elif self.stage == "setup":
            lines = [f"rehearsal: not run: {self.error}"]
        else:
            who = f" on rank {self.rank}" if self.rank is not None else ""
            where = f" ({self.where})" if self.where else ""
            lines = [f"rehearsal: failed at {STAGES.get(self.stage, self.stage)}{who}: {self.error}{where}"]
            if self.layout is not None:
                lines.append(f"  layout: {self.layout.describe()} on {self.layout.world} CPU processes")
            if self.setting:
                lines.append(f"  points to: {self.setting}")
        return lines + [f"  not rehearsed: {text}" for text in self.not_rehearsed]

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "layout": self.layout.as_dict() if self.layout else None,
                "load_layout": self.load.as_dict() if self.load else None, "stage": self.stage,
                "error": self.error, "where": self.where, "rank": self.rank, "setting": self.setting,
                "seconds": self.seconds, "facts": self.facts, "not_rehearsed": list(self.not_rehearsed)}


def pointed_setting(answer: Mapping[str, Any], settings: Mapping[str, Any], stage: str) -> str:
    """The setting a failure names: the longest of the run's settings that its message (or its last frames)
    mentions, as a dest or a flag; else what the failing stage depends on."""
    text = f"{answer.get('error', '')}\n{str(answer.get('traceback', ''))[-1500:]}"
    named = [dest for dest in settings
             if re.search(rf"(?<![\w-]){re.escape(dest)}(?![\w-])|--{re.escape(dest.replace('_', '-'))}(?![\w-])",
                          text)]
    if named:
        dest = max(named, key=len)
        return f"{dest}={settings[dest]}"
    source = str(answer.get("where", "")).split(":")[0]
    if FILE_SETTING.get(source) in settings:
        return f"{FILE_SETTING[source]}={settings[FILE_SETTING[source]]}"
    return STAGE_SETTING.get(stage, "")


def _failure(run: RankRun, settings: Mapping[str, Any], layout: RankLayout, limit_s: float,
             phase: str) -> dict[str, Any]:
    if run.timed_out:
        return {"stage": phase, "error": f"the {layout.world} processes did not finish within {limit_s:.0f} s "
                                         "(all killed)", "setting": "MEGATRON_LAUNCH_REHEARSE_TIMEOUT"}
    first = run.first_failure()
    if first is None:
        lines = [line for line in run.log_tail.splitlines() if line.strip()]
        return {"stage": phase, "error": f"torchrun exited {run.code} with {len(run.answers)} of {layout.world} "
                                         f"ranks answered: {lines[-1] if lines else 'no output'}"}
    stage = "load" if phase == "load" and first.get("stage") in ("model", "args") else first.get("stage", phase)
    return {"stage": stage, "error": first.get("error", ""), "where": first.get("where", ""),
            "rank": first.get("rank"), "setting": pointed_setting(first, settings, stage)}


def rehearse_layout(job: Any, env: Mapping[str, str], limit_s: float = TIME_LIMIT_S) -> LayoutRehearsal:
    """Rehearse the job's layout, shrunk, on CPU processes: train and save, then load at another TP·PP."""
    from launcher.megatron.pin import detect_kernels
    from launcher.pipeline.command import rdzv_id

    megatron, notes = settings_here(job)
    te_here, apex_here = detect_kernels()
    if job.kernels.transformer_engine and not te_here:
        megatron, te_notes = without_te_switches(megatron)
        notes += te_notes
    layout, layout_notes = shrunk_layout(job.layout, job.megatron)
    notes += layout_notes
    absent = packages_absent_here(job)
    if job.kernels.transformer_engine and not te_here:
        absent += without_te_unbuildable(megatron, replace(job.kernels, transformer_engine=False,
                                                               apex=job.kernels.apex and apex_here))
    if absent:
        return LayoutRehearsal(False, layout, stage="setup", error="this machine lacks what the job needs: "
                               + "; ".join(absent), not_rehearsed=tuple(notes))
    try:
        python = rehearsal_python(Path(job.megatron_path))
    except UserError as exc:
        problem = exc.problems[0]
        return LayoutRehearsal(False, layout, stage="setup", error=f"{problem.message} (hint: {problem.hint})",
                               not_rehearsed=tuple(notes))
    ckpt_format = megatron.get("ckpt_format") or "torch_dist"
    reshards = ckpt_format in RESHARDING_FORMATS
    load = load_layout(layout, megatron.get("num_query_groups")) if reshards else layout
    if not reshards:
        notes.append(f"resharding: ckpt_format {ckpt_format} loads only at the layout it was saved at")
    settings, tiny_notes = rank_settings(megatron, layout, load, te_here=te_here)
    notes += tiny_notes
    base_env = {**rehearsal_env(Path(job.megatron_path)), **env, "CUDA_DEVICE_MAX_CONNECTIONS": "1",
                "MEGATRON_LAUNCH_REHEARSE_STEPS": str(STEPS)}
    target_kernels, optimizer_loads = bool(job.kernels.transformer_engine or job.kernels.apex), True
    if settings.get("use_distributed_optimizer") and target_kernels and not (te_here or apex_here):
        # Megatron's distributed optimizer without apex and TE reads its step count from a state a fresh optimizer
        # does not have yet: loading its checkpoint asserts there, not on the target (whose optimizer is apex's/TE's)
        optimizer_loads = False
        notes.append("loading the distributed optimizer's state: Megatron's path without apex and Transformer "
                     "Engine (this machine's) asserts on a fresh optimizer (distrib_optimizer.py:793, assert "
                     "len(steps) == 1); the target's fused Adam takes another; the weights are loaded")
    if sequence_parallel_somewhere(megatron, layout, load) and not (te_here or apex_here):
        # the launcher refuses sequence parallelism without TE or apex, so the target has one of them
        base_env["MEGATRON_LAUNCH_REHEARSE_NORM_SP"] = "1"
        notes.append("sequence parallelism's LayerNorm: torch's stands in for the target's (Transformer Engine's "
                     "or apex's), its weights' gradients summed across TP as theirs are")
    name = rdzv_id(job.preset.name)
    with signals_interrupt():  # SIGTERM/SIGHUP, like Ctrl-C, still kill the processes and remove the directory
        return _rehearse(python, layout, load, settings, megatron, base_env, name, notes, limit_s, optimizer_loads)


def without_te_unbuildable(megatron: Mapping[str, Any], here: Any) -> list[str]:
    """What no layer spec without Transformer Engine builds (the launcher refuses it for a target without TE:
    pipeline/kernels.fast_path_problems), for a job whose target has TE: this machine cannot rehearse it. Seen:
    multi-latent attention with multi-token prediction (moe/gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed failed at
    model build: the local spec's DotProductAttention takes no k_channels)."""
    from launcher.pipeline.kernels import fast_path_problems

    return [f"{problem.message} (this machine has no Transformer Engine; the target has)"
            for problem in fast_path_problems(megatron, here) if "needs Transformer Engine" in problem.message]


def sequence_parallel_somewhere(megatron: Mapping[str, Any], layout: RankLayout, load: RankLayout) -> bool:
    """Whether the training run or the load run has sequence parallelism on: the job's, at a TP above 1 (seen: a
    job rehearsed at TP 1, where Megatron turns it off, loaded at TP 2, where it is on)."""
    return bool(megatron.get("sequence_parallel")) and max(layout.tp, load.tp) > 1


def _rehearse(python: str, layout: RankLayout, load: RankLayout, settings: dict[str, Any],
              megatron: Mapping[str, Any], base_env: dict[str, str], name: str, notes: list[str],
              limit_s: float, optimizer_loads: bool) -> LayoutRehearsal:
    from launcher.pipeline.command import script_args

    workdir = Path(tempfile.mkdtemp(prefix="megatron-launch-rehearsal-"))
    start = time.monotonic()
    try:
        checkpoint = workdir / "checkpoint"
        train_settings = {**settings, "save": str(checkpoint), "save_interval": 1000}
        train = run_ranks(torchrun_argv(python, layout, name, script_args(train_settings)),
                          {**base_env, "MEGATRON_LAUNCH_REHEARSE_MODE": "train"}, _fresh(workdir, "train"), limit_s)
        if not train.passed(layout.world):
            return LayoutRehearsal(False, layout, load, seconds=round(time.monotonic() - start, 1),
                                   not_rehearsed=tuple(notes), **_failure(train, train_settings, layout, limit_s,
                                                                          "train"))
        facts = _train_facts(train, settings.get("ckpt_format") or "torch_dist")
        load_settings = _load_settings(settings, megatron, layout, load, checkpoint, notes, optimizer_loads)
        loaded = run_ranks(torchrun_argv(python, load, name, script_args(load_settings)),
                           {**base_env, "MEGATRON_LAUNCH_REHEARSE_MODE": "load", "MEGATRON_LAUNCH_REHEARSE_STEPS":
                            "0"}, _fresh(workdir, "load"), limit_s)
        seconds = round(time.monotonic() - start, 1)
        if not loaded.passed(load.world):
            failure = _failure(loaded, load_settings, load, limit_s, "load")
            failure["error"] = f"loading at {load.short()}: {failure['error']}"
            return LayoutRehearsal(False, layout, load, seconds=seconds, facts=facts, not_rehearsed=tuple(notes),
                                   **failure)
        return _compare(layout, load, facts, loaded, seconds, notes, norm_tolerance(settings))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _fresh(workdir: Path, name: str) -> Path:
    path = workdir / name
    path.mkdir()
    return path


def _train_facts(run: RankRun, ckpt_format: str) -> dict[str, Any]:
    """The loss as the last pipeline stage reports it (the same on each of its ranks), the norm saved."""
    with_loss = [a["facts"] for a in run.answers if any(x is not None for x in a["facts"].get("loss") or [])]
    first = run.answers[0]["facts"]
    return {"loss": (with_loss[0] if with_loss else first).get("loss"), "params_norm": first.get("params_norm"),
            "skipped_steps": first.get("skipped_steps") or [],
            "parameters_per_rank": sorted({a["facts"].get("parameters") for a in run.answers}),
            "model_chunks": first.get("chunks"), "decoder_layers_by_pipeline_rank": _layers_by_stage(run),
            "num_microbatches": first.get("num_microbatches"), "format": ckpt_format,
            "seconds_by_stage": first.get("seconds"), "cpu_seconds_by_stage": first.get("cpu_seconds"),
            "train_seconds": run.seconds}


def _layers_by_stage(run: RankRun) -> list[list[int] | None]:
    """Each pipeline rank's decoder layers per model chunk, as its ranks built them (the pipeline split run)."""
    by_rank: dict[int, list[int] | None] = {}
    for answer in run.answers:
        facts = answer["facts"]
        by_rank.setdefault((facts.get("ranks") or {}).get("pp", 0), facts.get("decoder_layers"))
    return [by_rank[rank] for rank in sorted(by_rank)]


def _load_settings(settings: Mapping[str, Any], megatron: Mapping[str, Any], layout: RankLayout, load: RankLayout,
                   checkpoint: Path, notes: list[str], optimizer_loads: bool = True) -> dict[str, Any]:
    """The same job at the load layout, reading the checkpoint; the optimizer's state only where it reshards (and
    where `optimizer_loads`: this machine can load it as the target would)."""
    out = {k: v for k, v in settings.items() if k != "save"}
    if not optimizer_loads:
        out["no_load_optim"] = True
    out.update(load=str(checkpoint), exit_on_missing_checkpoint=True, tensor_model_parallel_size=load.tp,
               pipeline_model_parallel_size=load.pp, global_batch_size=settings["global_batch_size"])
    if load.tp == 1:
        out.pop("sequence_parallel", None)
        # what Megatron allows only at TP > 1 (abci_10b_interleaved's distribute_saved_activations asserted here)
        knobs = (*PARALLEL["tensor_model_parallel_size"][1], *needing_more_than_one("tensor_model_parallel_size"))
        dropped = [knob for knob in knobs if out.pop(knob, None) not in (None, False) and knob != "sequence_parallel"]
        if dropped:
            notes.append(f"{', '.join(dropped)} at {load.short()}: Megatron allows it only at TP > 1; the load "
                         "there runs without it")
    elif megatron.get("sequence_parallel"):
        out["sequence_parallel"] = True
    if load.etp is not None:
        out["expert_tensor_parallel_size"] = load.etp
    if not load.vpp:
        out.pop("num_layers_per_virtual_pipeline_stage", None)
        out.pop("num_virtual_stages_per_pipeline_rank", None)
    if load.pp != layout.pp:  # the split's stage sizes are the training pipeline's; PP 1 has one stage
        for dest in SPLIT_SETTINGS:
            out.pop(dest, None)
    text = out.pop("pipeline_model_parallel_layout", None)
    if text and (load.pp, load.vpp) == (layout.pp, layout.vpp):
        out["pipeline_model_parallel_layout"] = text
    elif text and load.pp > 1:  # the same layers, as the rehearsal's layout would place them at the load's PP
        again = shrink_pipeline_layout(str(text), layout.pp, load.pp, load.vpp, settings["num_layers"]).text
        if again is not None:
            out["pipeline_model_parallel_layout"] = again
    moved = (load.tp, load.pp) != (layout.tp, layout.pp)
    if moved and settings.get("use_distributed_optimizer") and not settings.get("dist_ckpt_optim_fully_reshardable") \
            and not out.get("no_load_optim"):
        out["no_load_optim"] = True
        notes.append(f"the optimizer state at {load.short()}: the distributed optimizer saves it dp_reshardable "
                     "(it loads at another DP only); set dist_ckpt_optim_fully_reshardable=true to resume it at "
                     "another TP·PP")
    return out


def norm_tolerance(settings: Mapping[str, Any]) -> float:
    """How far the loaded parameter norm may be from the saved one, relative. Megatron computes it from fp32 copies
    for bf16 and fp32 parameters, but for fp16 ones without apex and TE from per-tensor norms in fp16
    (calc_params_l2_norm, local_multi_tensor_l2_norm): each rounded to fp16, differently at another TP split
    (seen: gpt3_mcore_tp1_pp2_fp16 loaded at TP 2, 1.6e-4 apart)."""
    return FP16_NORM_TOLERANCE if settings.get("fp16") else NORM_TOLERANCE


def _compare(layout: RankLayout, load: RankLayout, facts: dict[str, Any], loaded: RankRun, seconds: float,
             notes: list[str], tolerance: float = NORM_TOLERANCE) -> LayoutRehearsal:
    """Loaded is proven only when the loaded weights are the saved ones: the same parameter norm, and iteration."""
    answer = loaded.answers[0]["facts"]
    facts = {**facts, "load": {"iteration": answer.get("iteration_loaded"), "params_norm": answer.get("params_norm"),
                               "seconds": loaded.seconds, "seconds_by_stage": answer.get("seconds"),
                               "cpu_seconds_by_stage": answer.get("cpu_seconds")}}
    saved, got = facts.get("params_norm"), answer.get("params_norm")
    if answer.get("iteration_loaded") != STEPS:
        return LayoutRehearsal(False, layout, load, "load", f"loaded iteration {answer.get('iteration_loaded')}, "
                               f"saved {STEPS}", seconds=seconds, facts=facts, setting="ckpt_format",
                               not_rehearsed=tuple(notes))
    if saved is None or got is None or abs(saved - got) > tolerance * max(abs(saved), 1e-12):
        return LayoutRehearsal(False, layout, load, "load", f"the weights loaded at {load.short()} differ from "
                               f"those saved at {layout.short()} (parameter norm {got} vs {saved})",
                               seconds=seconds, facts=facts, setting="ckpt_format", not_rehearsed=tuple(notes))
    return LayoutRehearsal(True, layout, load, seconds=seconds, facts=facts, not_rehearsed=tuple(notes))
