"""Plan → the exact torchrun argv and environment for pretrain_gpt.py or the upstream simple loop."""

from __future__ import annotations

import re
import shlex
import unicodedata
from dataclasses import dataclass, field, replace
from pathlib import Path

from launcher.errors import MAX_MESSAGE, clip
from launcher.megatron import args as megatron_args
from launcher.megatron.pin import ENTRY_SCRIPTS, Kernels
from launcher.pipeline.layout import Plan
from launcher.pipeline.preset import Preset

# The directory holding this `launcher` package: training processes import launcher.inside.megatron_ext from it.
LAUNCHER_ROOT = Path(__file__).resolve().parents[2]


class HostFromEnv(str):
    """The one argv word the shell may expand: the rendezvous endpoint the launcher composes itself,
    `${MASTER_ADDR}:PORT`, when each node learns the first node's name at run time.

    A distinct type, so a user's value that merely contains "${MASTER_ADDR}" (a torchrun path, a preset name
    in --rdzv-id) is never mistaken for it: printers quote every other word in single quotes.
    """

    variable = "MASTER_ADDR"

    def __new__(cls, port: int) -> HostFromEnv:
        word = super().__new__(cls, f"${{{cls.variable}}}:{int(port)}")
        word.port = int(port)
        return word

    def shell(self) -> str:
        """The word for a bash script: the variable expands, nothing else is there to."""
        return f'"${{{self.variable}}}:{self.port}"'  # the port is an int: nothing else can expand

    def resolve(self, host: str) -> str:
        return f"{host}:{self.port}"


def shell_word(word: str) -> str:
    """One argv word for a bash script: quoted, except the endpoint the launcher composes (HostFromEnv)."""
    return word.shell() if isinstance(word, HostFromEnv) else shlex.quote(word)


def shell_comment(text: object, limit: int = MAX_MESSAGE) -> str:
    """Text for a `#` comment line: one line (a newline would end the comment and start a command), no control
    characters (terminal escapes), cut in the middle when long."""
    flat = "".join(" " if unicodedata.category(ch)[0] in "CZ" else ch for ch in str(text))
    return clip(" ".join(flat.split()), limit)


MASTER_ADDR_REF = "${MASTER_ADDR}"  # how printed scripts name the first node's host (see HostFromEnv)

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

    @property
    def expand(self) -> frozenset[int]:
        """Positions of the words the shell expands at run time (HostFromEnv); every other word is quoted."""
        return frozenset(i for i, word in enumerate(self.argv) if isinstance(word, HostFromEnv))


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
        if not kernels.transformer_engine and settings.get("spec") is None:
            fallbacks.update(SDPA_SPEC)
        for dest, value in fallbacks.items():
            if settings.get(dest) is None:
                settings[dest] = added[dest] = value
    return settings, added


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
    from_env = launcher.master_addr == "localhost"
    endpoint = HostFromEnv(launcher.master_port) if from_env else f"{launcher.master_addr}:{launcher.master_port}"
    rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id(plan.preset.name)]
    return head + rdzv, from_env


def rdzv_id(preset_name: str) -> str:
    """torchrun's --rdzv-id for a preset: its name in the characters a job id needs, whatever the file is called."""
    return "megatron-launch-" + (re.sub(r"[^A-Za-z0-9._-]+", "_", preset_name) or "run")


def uses_megatron_ext(settings: dict[str, object]) -> bool:
    spec = settings.get("spec")
    return isinstance(spec, list) and bool(spec) and str(spec[0]).startswith("launcher.inside.megatron_ext.")


def environment(plan: Plan, megatron_path: Path, settings: dict[str, object] | None = None) -> dict[str, str]:
    env: dict[str, str] = {}
    layout = plan.layout
    if plan.entry == "simple_loop" or layout.tp > 1 or layout.cp > 1:
        # Megatron asserts this on Hopper and older for TP/CP > 1: TP collectives must be queued before the
        # GEMMs they overlap with (megatron-432d76b.md §2.3). The simple loop runs TP 2.
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
    runner, _ = torchrun_args(plan)
    argv = [*runner, script, *flags]
    return Command(argv=argv, env=environment(plan, megatron_path, settings), script=script, script_args=flags,
                   kernel_flags=added)
