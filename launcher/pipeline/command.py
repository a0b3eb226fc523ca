"""Plan → the exact torchrun argv and environment for pretrain_gpt.py or the upstream simple loop."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

from launcher.megatron import args as megatron_args
from launcher.megatron.pin import ENTRY_SCRIPTS, Kernels
from launcher.pipeline.layout import Plan
from launcher.pipeline.preset import Preset

# The directory holding this `launcher` package: training processes import launcher.inside.megatron_ext from it.
LAUNCHER_ROOT = Path(__file__).resolve().parents[2]
MASTER_ADDR_REF = "${MASTER_ADDR}"  # multi-node endpoints the user (or Slurm) supplies at run time

# Measured on H200 without Transformer Engine and apex (shared/reference/gpu-measurements.md): each flag turns
# off a default that needs the missing package. Applied only where the preset does not set the value itself.
WITHOUT_TE = {"transformer_impl": "local"}
# Without TE, upstream's local core attention builds the full [b, heads, s, s] score matrix. This layer spec
# (shipped in launcher/megatron_ext) swaps in torch's flash SDPA and faster stand-ins for the no-TE/no-apex
# fallbacks: 1.6x+ on the 345M model (docs/benchmarks.md). SDPA's causal kernel needs no mask tensor, so the
# dataloader stops building one. Used only where the preset sets no spec of its own.
SDPA_SPEC = {
    "spec": ["launcher.inside.megatron_ext.sdpa_spec_fast", "layer_spec"],
    "create_attention_mask_in_dataloader": False,
}
WITHOUT_APEX = {
    "gradient_accumulation_fusion": False,  # apex's fused_weight_gradient_mlp_cuda, needed even with TE
    "masked_softmax_fusion": False,  # apex's scaled_masked_softmax_cuda kernels
    "no_persist_layer_norm": True,  # torch's LayerNorm fallback rejects persistent layer norm
}


@dataclass(frozen=True)
class Command:
    argv: list[str]  # torchrun … script … Megatron flags
    env: dict[str, str]  # exported for every process
    script: str  # the entry script's path
    script_args: list[str]  # Megatron flags only (empty for the simple loop, which takes none)
    kernel_flags: dict[str, object] = field(default_factory=dict)  # settings added for missing TE/apex
    # argv items holding ${VAR} references to expand in the shell (printed in double quotes, not single)
    expand: frozenset[int] = frozenset()


def with_entry(command: Command, script: str, script_args: list[str]) -> Command:
    """The same torchrun, rendezvous and environment running another script (e.g. the preflight check)."""
    at = command.argv.index(command.script)
    return replace(command, argv=[*command.argv[:at], script, *script_args], script=script,
                   script_args=list(script_args))


def megatron_settings(preset: Preset, entry: str, kernels: Kernels) -> tuple[dict[str, object], dict[str, object]]:
    """The preset's Megatron settings plus the fallbacks for a missing TE/apex: (all settings, fallbacks)."""
    settings = dict(preset.megatron)
    added: dict[str, object] = {}
    if entry == "pretrain_gpt":
        fallbacks = {**({} if kernels.transformer_engine else WITHOUT_TE), **({} if kernels.apex else WITHOUT_APEX)}
        local = settings.get("transformer_impl") in (None, "local")
        if not kernels.transformer_engine and settings.get("spec") is None and local:
            fallbacks.update(SDPA_SPEC)  # a spec of the local implementation: never next to an explicit TE impl
        if not kernels.transformer_engine and uses_rope(settings):
            fallbacks["apply_rope_fusion"] = False  # fused RoPE is TE's (transformer_config.py:1947)
        for dest, value in fallbacks.items():
            if settings.get(dest) is None:
                settings[dest] = added[dest] = value
    return settings, added


def uses_rope(settings: dict[str, object]) -> bool:
    """validate_args turns RoPE fusion off unless the position embedding is RoPE (arguments.py:1457-1460)."""
    return settings.get("position_embedding_type") == "rope" or bool(settings.get("use_rotary_position_embeddings"))


def script_args(settings: dict[str, object]) -> list[str]:
    catalog = megatron_args.catalog()
    argv: list[str] = []
    for dest, value in settings.items():
        argv += megatron_args.to_flags(catalog[dest], value)
    return argv


def flag_lines(args: list[str]) -> list[str]:
    """Megatron flags as shell-quoted lines, one `--flag value...` group per line, for reading."""
    groups: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not groups:
            groups.append([])
        groups[-1].append(shlex.quote(arg))
    return [" ".join(words) for words in groups]


def torchrun_args(plan: Plan) -> tuple[list[str], bool]:
    """torchrun's own options; one node uses --standalone (a free local port), several a c10d rendezvous."""
    launcher = plan.preset.launcher
    head = [launcher.torchrun, "--nnodes", str(plan.nodes), "--nproc-per-node", str(plan.gpus_per_node)]
    if plan.nodes == 1:
        return head + ["--standalone"], False
    addr = MASTER_ADDR_REF if launcher.master_addr == "localhost" else launcher.master_addr
    endpoint = f"{addr}:{launcher.master_port}"
    rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", f"megatron-launch-{plan.preset.name}"]
    return head + rdzv, addr == MASTER_ADDR_REF


def uses_megatron_ext(settings: dict[str, object]) -> bool:
    spec = settings.get("spec")
    return isinstance(spec, list) and bool(spec) and str(spec[0]).startswith("launcher.inside.megatron_ext.")


def environment(plan: Plan, megatron_path: Path, settings: dict[str, object] | None = None) -> dict[str, str]:
    env: dict[str, str] = {}
    layout = plan.layout
    fsdp = bool(plan.preset.arg("use_torch_fsdp2") or plan.preset.arg("use_megatron_fsdp"))
    if plan.entry == "simple_loop" or ((layout.tp > 1 or layout.cp > 1) and not fsdp):
        # Megatron asserts this on Hopper and older for TP/CP > 1: TP collectives must be queued before the
        # GEMMs they overlap with (megatron-432d76b.md §2.3). The simple loop runs TP 2. FSDP asserts the
        # opposite (arguments.py:1027, 1139) and Megatron only warns about TP with FSDP.
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    # The simple loop lives in examples/ and imports megatron from the checkout root.
    env["PYTHONPATH"] = str(megatron_path)
    if plan.entry == "pretrain_gpt" and uses_megatron_ext(settings or {}):
        env["PYTHONPATH"] += f":{LAUNCHER_ROOT}"
    env.update(plan.preset.launcher.env)
    return env


def build_command(plan: Plan, megatron_path: Path, kernels: Kernels) -> Command:
    script = str(megatron_path / ENTRY_SCRIPTS[plan.entry])
    settings, added = megatron_settings(plan.preset, plan.entry, kernels)
    flags = script_args(settings) if plan.entry == "pretrain_gpt" else []
    runner, has_ref = torchrun_args(plan)
    argv = [*runner, script, *flags]
    # Only torchrun's own endpoint may expand in the shell; user values never do, whatever they contain.
    expand = frozenset(i for i, word in enumerate(runner) if has_ref and MASTER_ADDR_REF in word)
    return Command(argv=argv, env=environment(plan, megatron_path, settings), script=script, script_args=flags,
                   kernel_flags=added, expand=expand)
