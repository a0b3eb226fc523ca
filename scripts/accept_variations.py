"""Realistic variations of real jobs on one GPU: does "accepted" mean Megatron starts, and does every hint arrive?

    python scripts/accept_variations.py --out DIR [--per-mutation 4] [--seed 34] [--no-megatron] [--ftm 8]

The bases are jobs people run, moved to one GPU as a user would (scripts/import_corpus_gpu.py: one_gpu_moves: nodes
1, parallel sizes 1, at most 4 layers, mock data, no TE/apex, an H200): the shipped presets, the import corpus's
imported presets (docs/data/import-corpus-gpu-plan.json, with the --sets their dry-run ended on) and, with a
Megatron-LM checkout, a sample of its functional-test configurations. Each base is first brought to an accepted
job by following its own hints. Each variation then changes one or two settings the way users do (MUTATIONS: an
fp8 format, MoE, MLA, a sliding window, recompute, the distributed optimizer and its overlaps, FSDP, the
precision-aware optimizer, checkpoint-loading flags with an empty --load, samples instead of iterations, fp16,
flags of older Megatrons) and is judged:

- refused: every problem's first way out (`set X=V` / `drop X` as the hint writes it) is applied alone, then all
  together; each must give an accepted job or strictly fewer problems, and no problem after it may hint at setting
  back what was just set (a circle);
- accepted (as varied, or after the hints): Megatron's own checks at the pin (its parser, validate_args,
  TransformerConfig and the model-build checks: launcher/inside/verdict_worker.py, the worker `launch --check`
  uses) must accept it too; where they refuse, the launcher is missing a rule.

Writes OUT/variations.jsonl (one object per variation) and prints the counts and every finding.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import import_corpus_gpu as corpus_gpu  # noqa: E402

from launcher.cli.job import JobRequest, job_for  # noqa: E402
from launcher.errors import Problem, UserError  # noqa: E402
from launcher.pipeline.preset import load_preset  # noqa: E402

PLAN = REPO / "docs" / "data" / "import-corpus-gpu-plan.json"
SHIPPED = ("toy", "345m", "175b")
EMPTY = "{EMPTY}"  # an empty directory (a new run's --load)

# What users flip on a job that trains, one or two settings at a time; {EMPTY} is an empty directory.
MUTATIONS: dict[str, list[str]] = {
    # fp8 and lower precisions
    "fp8 e4m3": ["fp8_format=e4m3"],
    "fp8 hybrid": ["fp8_format=hybrid"],
    "fp8 mxfp8 recipe": ["fp8_format=e4m3", "fp8_recipe=mxfp8"],
    "fp8 blockwise recipe": ["fp8_format=e4m3", "fp8_recipe=blockwise"],
    "fp8 param gather": ["fp8_format=hybrid", "fp8_param_gather=true"],
    "fp8 reuse grad buffer": ["fp8_format=e4m3", "reuse_grad_buf_for_mxfp8_param_ag=true"],
    "fp4": ["fp4_format=e2m1"],
    "fp16": ["fp16=true", "bf16=false"],
    "fp16 and bf16": ["fp16=true"],
    "fp16 with a loss scale": ["fp16=true", "bf16=false", "loss_scale=1024"],
    "fp16 with a small initial scale": ["fp16=true", "bf16=false", "initial_loss_scale=4096"],
    "fp32": ["bf16=false", "fp16=false"],
    "bf16 gradients reduce": ["bf16=true", "accumulate_allreduce_grads_in_fp32=true"],
    # mixture of experts
    "moe 4 experts": ["num_experts=4"],
    "moe top-1": ["num_experts=8", "moe_router_topk=1"],
    "moe grouped gemm": ["num_experts=4", "moe_grouped_gemm=true"],
    "moe alltoall": ["num_experts=4", "moe_token_dispatcher_type=alltoall"],
    "moe flex dispatcher": ["num_experts=4", "moe_token_dispatcher_type=flex"],
    "moe shared expert": ["num_experts=4", "moe_shared_expert_intermediate_size=512"],
    "moe aux loss": ["num_experts=4", "moe_aux_loss_coeff=0.01"],
    "moe permute fusion": ["num_experts=4", "moe_permute_fusion=true"],
    "moe expert bias": ["num_experts=4", "moe_router_enable_expert_bias=true"],
    "moe sigmoid router": ["num_experts=4", "moe_router_score_function=sigmoid"],
    "moe every other layer": ["num_experts=4", "moe_layer_freq=2"],
    "moe capacity": ["num_experts=4", "moe_expert_capacity_factor=1.0"],
    "moe router dtype": ["num_experts=4", "moe_router_dtype=fp32"],
    "moe group-limited routing": ["num_experts=8", "moe_router_num_groups=2", "moe_router_group_topk=1"],
    "moe expert parallel": ["num_experts=4", "expert_model_parallel_size=2"],
    # attention
    "mla": ["multi_latent_attention=true"],
    "mla with rope": ["multi_latent_attention=true", "position_embedding_type=rope"],
    "mla q lora": ["multi_latent_attention=true", "q_lora_rank=64"],
    "sliding window": ["window_size=(128,0)"],
    "sliding window skip": ["window_size=(128,0)", "window_attn_skip_freq=2"],
    "gqa": ["group_query_attention=true", "num_query_groups=2"],
    "qk layernorm": ["qk_layernorm=true"],
    "rope": ["position_embedding_type=rope"],
    "rope base": ["position_embedding_type=rope", "rotary_base=500000"],
    "rope scaling": ["position_embedding_type=rope", "use_rope_scaling=true"],
    "rope fusion": ["position_embedding_type=rope", "apply_rope_fusion=true"],
    "no positions": ["position_embedding_type=none"],
    "flash attention": ["use_flash_attn=true"],
    "attention backend flash": ["attention_backend=flash"],
    "attention backend local": ["attention_backend=local"],
    "attention backend fused": ["attention_backend=fused"],
    "multi-token prediction": ["mtp_num_layers=1"],
    "swiglu": ["swiglu=true"],
    "rmsnorm": ["normalization=RMSNorm"],
    "untied embeddings": ["untie_embeddings_and_output_weights=true"],
    "no bias": ["add_bias_linear=false"],
    # recompute
    "recompute activations": ["recompute_activations=true"],
    "recompute full": ["recompute_granularity=full"],
    "recompute full uniform": ["recompute_granularity=full", "recompute_method=uniform"],
    "recompute full block": ["recompute_granularity=full", "recompute_method=block", "recompute_num_layers=2"],
    "recompute method alone": ["recompute_method=uniform"],
    "recompute selective modules": ["recompute_granularity=selective", "recompute_modules=[core_attn,mlp]"],
    "recompute layernorm": ["recompute_granularity=selective", "recompute_modules=[layernorm]"],
    "distribute saved activations": ["distribute_saved_activations=true"],
    # optimizer, overlap, FSDP
    "distributed optimizer": ["use_distributed_optimizer=true"],
    "overlap grad reduce": ["overlap_grad_reduce=true"],
    "overlap param gather": ["overlap_param_gather=true"],
    "overlap both": ["use_distributed_optimizer=true", "overlap_grad_reduce=true", "overlap_param_gather=true"],
    "overlap param gather with the step": ["use_distributed_optimizer=true",
                                           "overlap_param_gather_with_optimizer_step=true"],
    "tp comm overlap": ["tp_comm_overlap=true"],
    "sequence parallel": ["sequence_parallel=true"],
    "torch fsdp2": ["use_torch_fsdp2=true"],
    "torch fsdp2 untied": ["use_torch_fsdp2=true", "untie_embeddings_and_output_weights=true"],
    "megatron fsdp": ["use_megatron_fsdp=true"],
    "megatron fsdp dtensor": ["use_megatron_fsdp=true", "ckpt_format=fsdp_dtensor"],
    "precision-aware optimizer": ["use_precision_aware_optimizer=true"],
    "precision-aware distributed": ["use_precision_aware_optimizer=true", "use_distributed_optimizer=true"],
    "optimizer cpu offload": ["optimizer_cpu_offload=true"],
    "main grads bf16": ["main_grads_dtype=bf16"],
    "exp avg bf16": ["exp_avg_dtype=bf16"],
    "sgd": ["optimizer=sgd"],
    "grad accumulation fusion": ["gradient_accumulation_fusion=true"],
    "cross entropy fusion te": ["cross_entropy_loss_fusion=true", "cross_entropy_fusion_impl=te"],
    "cross entropy fusion": ["cross_entropy_loss_fusion=true"],
    "deterministic": ["deterministic_mode=true"],
    "cuda graphs": ["cuda_graph_impl=local"],
    "cuda graphs te": ["cuda_graph_impl=transformer_engine"],
    "per-token loss": ["calculate_per_token_loss=true"],
    "manual gc": ["manual_gc=true", "manual_gc_interval=1"],
    # checkpoints: loading into a new run, formats, async
    "use checkpoint args": ["use_checkpoint_args=true"],
    "exit on missing checkpoint": ["exit_on_missing_checkpoint=true"],
    "no load optim": ["no_load_optim=true"],
    "no load rng": ["no_load_rng=true"],
    "finetune": ["finetune=true"],
    "finetune from an empty load": ["finetune=true", f"load={EMPTY}"],
    "load an empty dir": [f"load={EMPTY}"],
    "checkpoint args from an empty load": ["use_checkpoint_args=true", f"load={EMPTY}"],
    "no initialization": ["perform_initialization=false"],
    "checkpoint step": ["ckpt_step=10"],
    "load main params": ["load_main_params_from_ckpt=true"],
    "async save": ["async_save=true"],
    "torch checkpoint format": ["ckpt_format=torch"],
    "torch_dcp format": ["ckpt_format=torch_dcp"],
    "save every step": ["save_interval=1"],
    "non-persistent local": ["non_persistent_ckpt_type=local"],
    # schedule units
    "train samples": ["train_iters=null", "train_samples=64"],
    "lr decay samples": ["lr_decay_samples=64"],
    "lr warmup samples": ["lr_warmup_samples=16"],
    "wsd in samples": ["lr_decay_style=WSD", "lr_wsd_decay_samples=16"],
    "wsd in iterations": ["lr_decay_style=WSD", "lr_wsd_decay_iters=2"],
    "wsd without a length": ["lr_decay_style=WSD"],
    "samples with wsd iterations": ["train_iters=null", "train_samples=64", "lr_decay_style=WSD",
                                    "lr_wsd_decay_iters=2"],
    "samples with decay iterations": ["train_iters=null", "train_samples=64", "lr_decay_iters=3"],
    "warmup fraction": ["lr_warmup_fraction=0.1"],
    "warmup fraction and iterations": ["lr_warmup_fraction=0.1", "lr_warmup_iters=1"],
    "batch rampup": ["rampup_batch_size=[1,1,16]"],
    "cosine": ["lr_decay_style=cosine"],
    "inverse square root": ["lr_decay_style=inverse-square-root"],
    # flags of older Megatrons and forks' habits
    "checkpoint activations": ["checkpoint_activations=true"],
    "batch size": ["batch_size=2"],
    "warmup": ["warmup=0.01"],
    "model parallel size": ["model_parallel_size=1"],
    "query key layer scaling": ["apply_query_key_layer_scaling=true"],
    "cpu initialization": ["use_cpu_initialization=true"],
    "fp32 residual": ["fp32_residual_connection=true"],
    "post-layernorm residual": ["apply_residual_connection_post_layernorm=true"],
    "openai gelu": ["openai_gelu=true"],
    "squared relu": ["squared_relu=true"],
    "no masked softmax fusion": ["masked_softmax_fusion=false"],
    "no bias gelu fusion": ["bias_gelu_fusion=false"],
    "no position embedding (old)": ["add_position_embedding=false"],
    "legacy tokenizer": ["legacy_tokenizer=true"],
    "enable cuda graph (old)": ["enable_cuda_graph=true"],
    "no async tensor parallel allreduce": ["async_tensor_model_parallel_allreduce=false"],
    "decoupled lr": ["decoupled_lr=1e-3"],
    "embedding multiplier": ["mup_base_hidden_size=128"],
}


@dataclass
class Base:
    name: str
    preset: str  # a preset name or a path
    overrides: list[str]


@dataclass
class Variation:
    base: str
    mutation: str
    sets: list[str]
    launcher: str = ""  # accepted | refused
    problems: list[str] = field(default_factory=list)
    hints: list[dict] = field(default_factory=list)  # each way out followed: its sets, problems before/after
    megatron: str = ""  # ok | the stage and error | not asked
    rehearsal: str = ""  # with --rehearse: ok | the stage and error of one training step on CPU
    findings: list[str] = field(default_factory=list)  # what is wrong: a hint that does not arrive, a disagreement


def problems_of(preset: str, overrides: list[str]) -> tuple[list[Problem], object | None]:
    """The dry-run's problems (empty: accepted) and the job, as `launch PRESET --dry-run` judges a one-node job."""
    try:
        job, problems = job_for(load_preset(preset, overrides), JobRequest(judge=True, local=False))
    except UserError as exc:
        return list(exc.problems), None
    return list(problems), (None if problems else job)


# a value: a bracketed list that ends there (`[core_attn,mlp]`: its commas are its own), else up to a delimiter
# (`[0]*1+[1]*23`, a layer pattern, is one value)
SET = re.compile(r"(?:(?<=\s)|^)(?:--)?(?:set )?([a-z_][a-zA-Z0-9_.]*)=(\[[^\]\s]*\](?![^\s,;)`])|[^\s,;)`]+)")
# not ways out on a machine without them (TE's layers need TE)
TARGET_CHANGES = ("transformer_engine=true", "apex=true", "transformer_impl=transformer_engine")
PLACEHOLDER = re.compile(r"^[A-Z]+$")  # DIR, VALUE, N: the user's own value, not one to follow


def ways_out(hint: str) -> list[list[str]]:
    """Every way out a hint offers as `--set`s (its alternatives split at ", or" / "; or": `set a=1, or b=2 --set
    c=3` is [[a=1], [b=2, c=3]]), each a list of the sets that go together; a parenthesis's sets count only where
    the way names none outside it (`drop layernorm from recompute_modules (--set recompute_modules=[core_attn])`).
    Ways this target cannot take (TE, apex) or that need the user's own value (DIR) are left out."""
    ways = []
    for way in re.split(r"[,;]? or ", hint.removeprefix("unset them: ")):
        outside = re.sub(r"\([^()]*\)", "", way)
        sets = [f"{m[1]}={m[2]}" for m in SET.finditer(outside)] or [f"{m[1]}={m[2]}" for m in SET.finditer(way)]
        if sets and not any(s in TARGET_CHANGES or PLACEHOLDER.match(s.split("=", 1)[1]) for s in sets):
            last = {s.split("=", 1)[0]: s for s in sets}  # a command line's later --set wins
            ways.append(list(last.values()))
    return ways


def way_out(hint: str) -> list[str]:
    """The first way out a hint offers as `--set`s ([] when it offers none this target can take)."""
    return next(iter(ways_out(hint)), [])


def circles(preset: str, overrides: list[str], fixes: list[str], before: list[Problem],
            after: list[Problem]) -> list[str]:
    """Problems after `fixes` whose own first way out sets a fixed setting to another value and so brings back a
    problem the fixes had answered (a hint that goes in a circle)."""
    fixed = dict(f.split("=", 1) for f in fixes)
    answered = {p.message for p in before} - {p.message for p in after}
    found = []
    for problem in after:
        way = way_out(problem.fix)
        undone = [f for f in way if f.split("=", 1)[0] in fixed and fixed[f.split("=", 1)[0]] != f.split("=", 1)[1]]
        if not undone:
            continue
        again, _ = problems_of(preset, [*overrides, *fixes, *way])
        back = [p.message[:120] for p in again if p.message in answered]
        if back:
            found.append(f"`set {' '.join(fixes)}` is answered by `set {' '.join(way)}` ({problem.message[:120]}), "
                         f"which brings back: {' | '.join(back)}")
    return found


def judge_hints(variation: Variation, preset: str, overrides: list[str], before: list[Problem]) -> list[str]:
    """Each way out of each problem alone, then every problem's first way out together; returns the sets of the
    combined round."""
    rounds = [(way, f"problem {i + 1} way {j + 1}") for i, p in enumerate(before)
              for j, way in enumerate(ways_out(p.fix))]
    combined = list(dict.fromkeys(s for p in before for s in way_out(p.fix)))
    if combined and combined not in [r[0] for r in rounds]:
        rounds.append((combined, "all first ways together"))
    for sets, label in rounds:
        after, _ = problems_of(preset, [*overrides, *sets])
        variation.hints.append({"sets": sets, "of": label, "before": len(before), "after": len(after),
                                "problems": [p.message[:200] for p in after]})
        if after and len(after) >= len(before):
            new = [p.message[:160] for p in after if p.message not in {b.message for b in before}]
            variation.findings.append(f"hint does not arrive ({label}: set {' '.join(sets)}): {len(before)} "
                                      f"problem(s) before, {len(after)} after; new: " + " | ".join(new)[:500])
        variation.findings += [f"circle: {c}" for c in circles(preset, overrides, sets, before, after)]
    return combined


class Megatron:
    """Megatron's own checks of an accepted job, through the worker `launch --check` uses."""

    def __init__(self, checkout: Path | None, checker=None):
        from launcher.checks.megatron_verdict import UpstreamChecker

        self.checker = checker or UpstreamChecker(megatron_path=checkout)

    def verdict(self, job) -> str:
        from launcher.checks.megatron_verdict import NORM_FEATURES, target_env, target_packages
        from launcher.megatron.target import AssumedMachine
        from launcher.pipeline.command import script_args
        from launcher.pipeline.environment import uses_megatron_ext

        target = AssumedMachine(job.preset.launcher.gpu, job.kernels.transformer_engine, job.kernels.apex,
                                target_packages(job.preset, job.kernels))
        answer = self.checker.check(script_args(dict(job.megatron)), job.nodes * job.gpus_per_node, target_env(job),
                                    apex=target.apex, te=target.transformer_engine, capability=target.capability,
                                    packages=target.packages,
                                    norm_features=NORM_FEATURES if uses_megatron_ext(job.megatron) else ())
        return "ok" if answer.ok else answer.render().splitlines()[0][:400]

    def close(self) -> None:
        self.checker.close()


def judge(variation: Variation, base: Base, empty: Path, megatron: Megatron | None) -> object | None:
    """Judge one variation; returns the accepted job (as varied or after its hints), None when refused."""
    sets = [s.replace(EMPTY, str(empty)) for s in variation.sets]
    overrides = [*base.overrides, *sets]
    problems, job = problems_of(base.preset, overrides)
    variation.launcher = "refused" if problems else "accepted"
    variation.problems = [p.render()[:400] for p in problems]
    if problems:
        combined = judge_hints(variation, base.preset, overrides, problems)
        _, job = problems_of(base.preset, [*overrides, *combined]) if combined else ([], None)
    if job is not None and megatron is not None:
        variation.megatron = megatron.verdict(job)
        if variation.megatron != "ok" and warned_package(job, variation.megatron):
            # a job meant elsewhere: the dry-run warns that the target needs the package, each node checks it
            variation.megatron = f"needs a package the dry-run warned of: {variation.megatron}"
        elif variation.megatron != "ok":
            how = "as varied" if not problems else "after its hints"
            variation.findings.append(f"accepted {how}, Megatron refuses: {variation.megatron}")
            return None
    return job


def rehearse(pairs: list[tuple[Variation, object]], checkout: Path, limit: int, rng: random.Random) -> None:
    """One training step on CPU (launcher/checks/rehearsal.py, what `launch --check --rehearse` runs) of up to
    `limit` accepted jobs with distinct settings, in one worker: a first step that fails is a finding."""
    from launcher.checks.rehearsal import Rehearser, settings_here

    distinct: dict[str, tuple[Variation, object]] = {}
    for variation, job in pairs:
        distinct.setdefault(json.dumps(settings_here(job)[0], sort_keys=True, default=str), (variation, job))
    chosen = rng.sample(list(distinct.values()), min(limit, len(distinct)))
    with Rehearser(checkout) as worker:
        for variation, job in chosen:
            from launcher.checks.megatron_verdict import target_env

            result = worker.rehearse(settings_here(job)[0], target_env(job))
            variation.rehearsal = "ok" if result.ok else f"{result.stage}: {result.error}"[:300]
            if not result.ok and result.stage != "setup":
                variation.findings.append(f"accepted, its first step on CPU fails: {variation.rehearsal}")
                print(f"{variation.base} + {variation.mutation}: rehearsal: {variation.rehearsal}", flush=True)


def warned_package(job, error: str) -> bool:
    """Megatron's refusal is for a Python package the dry-run's warnings say the target needs."""
    from launcher.megatron import requirements

    rows = {row.package: row for row in requirements.table() if row.kind == "package"}
    warned = [name for name in rows if any(f"needs {name}" in w and "where the job runs" in w for w in job.warnings)]
    return any(str(rows[name].needs.get("module", name)) in error or name in error for name in warned)


def accepted_base(name: str, preset: str, settings: dict) -> Base | None:
    """The preset moved to one GPU, its own `set` hints followed (at most 3 rounds); None if still refused."""
    moves, _ = corpus_gpu.one_gpu_moves(settings)
    extra: list[str] = []
    for _ in range(4):
        problems, _job = problems_of(preset, [*moves, *extra])
        if not problems:
            return Base(name, preset, [*moves, *extra])
        fixes = [f for p in problems for f in way_out(p.fix) if f not in extra]
        if not fixes:
            return None
        extra += list(dict.fromkeys(fixes))
    return None


def bases(workdir: Path, checkout: Path | None, ftm_count: int, rng: random.Random) -> list[Base]:
    found: list[Base] = []
    for name in SHIPPED:
        base = accepted_base(name, name, dict(load_preset(name).megatron))
        if base:
            found.append(base)
    plan = json.loads(PLAN.read_text())
    for row in plan["rows"]:
        if row["launcher"] != "accepted":
            continue
        path = workdir / (re.sub(r"[^A-Za-z0-9_.-]", "_", row["config"]) + ".yaml")
        path.write_text(plan["presets"][row["config"]])
        found.append(Base(row["config"], str(path), list(row["overrides"])))
    if checkout is not None and ftm_count:
        import functional_test_matrix as ftm

        configs = ftm.configurations(checkout)
        for config in rng.sample(configs, min(ftm_count, len(configs))):
            try:
                path, settings = ftm.imported_preset(config, workdir)
            except UserError:
                continue
            base = accepted_base(f"ftm:{config.parent.name}", str(path), settings)
            if base:
                found.append(base)
    return found


def variations(found: list[Base], per_mutation: int, rng: random.Random,
               mutations: dict[str, list[str]] = MUTATIONS, pairs: int = 0) -> list[tuple[Base, Variation]]:
    """Each base as it is, each mutation on `per_mutation` bases drawn at random, and `pairs` mutations two at a
    time on one base each (the same seed, the same draw)."""
    out = [(base, Variation(base.name, "as moved", [])) for base in found]
    for label, sets in mutations.items():
        for base in rng.sample(found, min(per_mutation, len(found))):
            out.append((base, Variation(base.name, label, list(sets))))
    labels = sorted(mutations)
    for _ in range(pairs if len(labels) > 1 else 0):
        first, second = rng.sample(labels, 2)
        out.append((rng.choice(found), Variation("", f"{first} + {second}",
                                                 [*mutations[first], *mutations[second]])))
    for base, variation in out:
        variation.base = base.name
    return out


# Settings no training job sets by value, or that name files and services: a value here is a path or a name, not
# a setting to vary (the odd values below are numbers, choices and switches).
NOT_VARIED = re.compile(r"(path|file|dir|^load$|^save$|wandb|tensorboard|log_|_log|^rank$|^local_rank$|world_size|"
                        r"port|address|^exit_|^inference|^rl_|^export_|straggler|^ft_|^kitchen|^modelopt|"
                        r"^hybrid_|^perform_rl_step$|^sft|^mock_data$|tokenizer|^data_|^split$|^vocab_size$)")
BIG_INT = 2**31  # past a C int
BIG_FLOAT = "1e30"


def odd_values(arg) -> list[str]:
    """Values Megatron's parser takes that presets never write, as `--set` values: zero, negative and very large
    numbers, a float where an int is expected (argparse refuses it: the launcher must too), every other choice of a
    `choices=` flag, and the other side of every switch."""
    if arg.kind in ("true", "false", "bool"):
        return ["false" if arg.default else "true"]
    if arg.nargs is not None:
        return []
    if arg.choices:
        return [str(c) for c in arg.choices if c != arg.default and c is not None]
    if arg.type == "int":
        return ["0", "-1", str(BIG_INT), "2.5"]
    if arg.type == "float":
        return ["0", "-1.0", BIG_FLOAT]
    if arg.type == "layer_pattern":
        return ["0", "-1"]
    return []


def odd_mutations() -> dict[str, list[str]]:
    """Every catalog setting's odd values, one mutation each (the run samples them)."""
    from launcher.megatron.args import catalog

    return {f"odd {dest}={value}": [f"{dest}={value}"] for dest, arg in sorted(catalog().items())
            if not NOT_VARIED.search(dest) for value in odd_values(arg)}


def corpus_mutations() -> dict[str, list[str]]:
    """Each Megatron setting the import corpus's scripts gave (as imported into their presets), one mutation each:
    what real scripts set, moved onto other jobs."""
    import yaml

    from launcher.megatron.args import catalog

    known = catalog()
    found: dict[str, list[str]] = {}
    for text in json.loads(PLAN.read_text())["presets"].values():
        preset = yaml.safe_load(text) or {}
        for section in (preset.get("megatron") or {}).values():
            for dest, value in (section if isinstance(section, dict) else {}).items():
                if dest in known and not NOT_VARIED.search(dest) and isinstance(value, (bool, int, float, str)):
                    shown = ("true" if value else "false") if isinstance(value, bool) else str(value)
                    if shown and not re.search(r"[\s,;()`$]", shown):
                        found.setdefault(f"corpus {dest}={shown}", [f"{dest}={shown}"])
    return found


def wide_variations(found: list[Base], rng: random.Random, odd: int, triples: int) -> list[tuple[Base, Variation]]:
    """`odd` single odd values (odd_mutations, the corpus's settings) on a base each, and `triples` variations
    three mutations at a time drawn from every pool (MUTATIONS, the odd values, the corpus's settings)."""
    pool = {**MUTATIONS, **odd_mutations(), **corpus_mutations()}
    singles = [k for k in pool if k not in MUTATIONS]
    out = [(rng.choice(found), Variation("", label, list(pool[label])))
           for label in rng.sample(singles, min(odd, len(singles)))]
    labels = sorted(pool)
    for _ in range(triples):
        chosen = rng.sample(labels, 3)
        out.append((rng.choice(found), Variation("", " + ".join(chosen), [s for k in chosen for s in pool[k]])))
    for base, variation in out:
        variation.base = base.name
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--per-mutation", type=int, default=4)
    parser.add_argument("--ftm", type=int, default=8, help="functional-test configurations sampled as bases")
    parser.add_argument("--megatron-path", type=Path, default=None)
    parser.add_argument("--no-megatron", action="store_true")
    parser.add_argument("--rehearse", type=int, default=0, metavar="N",
                        help="also train one step on CPU of N accepted jobs (needs --megatron-path; slow: keep N "
                             "small, one worker serves them all, and a killed run may leave that worker behind)")
    parser.add_argument("--pairs", type=int, default=200, help="mutations two at a time")
    parser.add_argument("--only", default="", help="only mutations whose label contains this")
    parser.add_argument("--odd", type=int, default=0, metavar="N",
                        help="also N single odd values (zero, negative, huge, a float for an int, every other "
                             "choice, the other side of a switch) and settings of the import corpus's scripts")
    parser.add_argument("--triples", type=int, default=0, metavar="N",
                        help="also N variations three mutations at a time, from every pool")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    megatron = None if args.no_megatron else Megatron(args.megatron_path)
    counts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        work, empty = Path(tmp) / "presets", Path(tmp) / "empty"
        work.mkdir()
        empty.mkdir()
        found = bases(work, args.megatron_path, args.ftm, rng)
        chosen = {k: v for k, v in MUTATIONS.items() if args.only in k}
        jobs = variations(found, args.per_mutation, rng, chosen, args.pairs)
        jobs += wide_variations(found, random.Random(args.seed + 1), args.odd, args.triples)
        accepted = []
        for base, variation in jobs:
            job = judge(variation, base, empty, megatron)
            if job is not None:
                accepted.append((variation, job))
        if args.rehearse and args.megatron_path:
            rehearse(accepted, args.megatron_path, args.rehearse, rng)
        with (args.out / "variations.jsonl").open("w") as out:
            for _base, variation in jobs:
                out.write(json.dumps(asdict(variation)) + "\n")
                counts[variation.launcher] += 1
                counts["with findings"] += bool(variation.findings)
                counts["disagree with Megatron"] += any("Megatron refuses" in f for f in variation.findings)
                counts["hints that do not arrive"] += sum(not f.startswith("accepted") for f in variation.findings)
                counts["rehearsed"] += bool(variation.rehearsal)
                counts["first step fails"] += any("first step" in f for f in variation.findings)
                for finding in variation.findings:
                    print(f"{variation.base} + {variation.mutation}: {finding}", flush=True)
    if megatron:
        megatron.close()
    print(f"{len(found)} bases, {len(jobs)} variations: {dict(counts)} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
