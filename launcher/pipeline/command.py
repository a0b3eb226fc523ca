"""ResolvedJob → the exact torchrun argv and environment: pretrain_gpt.py, the upstream simple loop, or the
preflight all-reduce. A pure translation: every Megatron setting was decided by resolve."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from launcher.megatron import args as megatron_args
from launcher.megatron.pin import ENTRY_SCRIPTS
from launcher.pipeline.kernels import uses_megatron_ext
from launcher.pipeline.resolve import PREFLIGHT, ResolvedJob
from launcher.pipeline.shell import HostFromEnv, shell_words

# The directory holding this `launcher` package: training processes import launcher.inside.megatron_ext from it.
LAUNCHER_ROOT = Path(__file__).resolve().parents[2]
PREFLIGHT_SCRIPT = LAUNCHER_ROOT / "launcher" / "inside" / "allreduce.py"


@dataclass(frozen=True)
class Command:
    argv: list[str]  # torchrun … script … Megatron flags
    env: dict[str, str]  # exported for every process
    script: str  # the entry script's path
    script_args: list[str]  # Megatron flags only (empty for the simple loop and the all-reduce)

    @property
    def expand(self) -> frozenset[int]:
        """Positions of the words the shell expands at run time (HostFromEnv); every other word is quoted."""
        return frozenset(i for i, word in enumerate(self.argv) if isinstance(word, HostFromEnv))

    def shell_words(self) -> list[str]:
        """argv quoted for a shell; the launcher's own ${MASTER_ADDR} endpoint expands on each node."""
        return shell_words(self.argv)


def script_args(settings: dict[str, object]) -> list[str]:
    catalog = megatron_args.catalog()
    argv: list[str] = []
    for dest, value in settings.items():
        argv += megatron_args.to_flags(catalog[dest], value)
    return argv


def flag_lines(args: Sequence[str]) -> list[str]:
    """Megatron flags as shell-quoted lines, one `--flag value...` group per line, for reading."""
    groups: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not groups:
            groups.append([])
        groups[-1].append(shlex.quote(arg))
    return [" ".join(words) for words in groups]


def torchrun_args(job: ResolvedJob) -> tuple[list[str], bool]:
    """torchrun's own options; one node uses --standalone (a free local port), several a c10d rendezvous."""
    launcher = job.preset.launcher
    head = [launcher.torchrun, "--nnodes", str(job.nodes), "--nproc-per-node", str(job.gpus_per_node)]
    if job.nodes == 1:
        return head + ["--standalone"], False
    from_env = launcher.master_addr == "localhost"
    endpoint = HostFromEnv(launcher.master_port) if from_env else f"{launcher.master_addr}:{launcher.master_port}"
    rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id(job.preset.name)]
    return head + rdzv, from_env


def rdzv_id(preset_name: str) -> str:
    """torchrun's --rdzv-id for a preset: its name in the characters a job id needs, whatever the file is called."""
    return "megatron-launch-" + (re.sub(r"[^A-Za-z0-9._-]+", "_", preset_name) or "run")


def environment(job: ResolvedJob) -> dict[str, str]:
    env: dict[str, str] = {}
    layout = job.layout
    fsdp = bool(job.preset.arg("use_torch_fsdp2") or job.preset.arg("use_megatron_fsdp"))
    if job.entry == "simple_loop" or ((layout.tp > 1 or layout.cp > 1) and not fsdp):
        # Megatron asserts this on Hopper and older for TP/CP > 1: TP collectives must be queued before the
        # GEMMs they overlap with (megatron-432d76b.md §2.3). The simple loop runs TP 2. FSDP asserts the
        # opposite (arguments.py:1027, 1139), and Megatron only warns about TP with FSDP.
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    # The simple loop lives in examples/ and imports megatron from the checkout root.
    env["PYTHONPATH"] = str(job.megatron_path)
    if job.entry == "pretrain_gpt" and uses_megatron_ext(job.preset.megatron):
        env["PYTHONPATH"] += f":{LAUNCHER_ROOT}"
    env.update(job.preset.launcher.env)
    return env


def entry_script(job: ResolvedJob) -> str:
    return str(PREFLIGHT_SCRIPT if job.entry == PREFLIGHT else job.megatron_path / ENTRY_SCRIPTS[job.entry])


def build_command(job: ResolvedJob) -> Command:
    script = entry_script(job)
    flags = script_args(job.preset.megatron) if job.entry == "pretrain_gpt" else []
    runner, _ = torchrun_args(job)
    argv = [*runner, script, *flags]
    return Command(argv=argv, env=environment(job), script=script, script_args=flags)


def kernel_summary(job: ResolvedJob) -> str:
    """`kernels (how): with/without TE and apex → the flags added for what is missing`, for headers."""
    kernels = job.kernels
    found = (("Transformer Engine", kernels.transformer_engine), ("NVIDIA apex", kernels.apex))
    text = f"kernels ({kernels.how}): " + ", ".join(
        [f"with {n}" for n, on in found if on] + [f"without {n}" for n, on in found if not on])
    if job.kernel_flags:
        text += " → " + " ".join(script_args(dict(job.kernel_flags)))
    return text
