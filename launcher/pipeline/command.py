"""ResolvedJob → the exact argv and environment: torchrun (or, for one process here, python3 directly: see
pipeline/runner.py) with pretrain_gpt.py, the upstream simple loop, or the preflight all-reduce. A pure
translation: every Megatron setting was decided by resolve."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from launcher.errors import Problem, UserError, clip
from launcher.megatron import args as megatron_args
from launcher.megatron.pin import ENTRY_SCRIPTS
from launcher.pipeline.environment import LAUNCHER_ROOT
from launcher.pipeline.resolve import PREFLIGHT, ResolvedJob
from launcher.pipeline.shell import HostFromEnv, SlurmWord, expands, shell_word, shell_words

PREFLIGHT_SCRIPT = LAUNCHER_ROOT / "launcher" / "inside" / "allreduce.py"
# torchrun --max-restarts of an elastic job run by hand (--nodes MIN-MAX without a scheduler): restarts of the
# worker group after a failure (a node leaving or joining restarts it too)
ELASTIC_MAX_RESTARTS = 3


@dataclass(frozen=True)
class Command:
    argv: list[str]  # torchrun … script … Megatron flags (or python3 -u script … for a direct run)
    env: dict[str, str]  # exported for every process
    script: str  # the entry script's path
    script_args: list[str]  # Megatron flags only (empty for the simple loop and the all-reduce)
    unset: tuple[str, ...] = ()  # removed from every process's environment (launcher.env's nulls)
    direct: bool = False  # argv starts the one rank itself, not torchrun (pipeline/runner.py)

    @property
    def expand(self) -> frozenset[int]:
        """Positions of the words the shell expands at run time (HostFromEnv); every other word is quoted."""
        return frozenset(i for i, word in enumerate(self.argv) if expands(word))

    def shell_words(self) -> list[str]:
        """argv quoted for a shell; the launcher's own ${MASTER_ADDR} endpoint expands on each node."""
        return shell_words(self.argv)


def script_args(settings: Mapping[str, object]) -> list[str]:
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
        groups[-1].append(shell_word(arg))
    return [" ".join(words) for words in groups]


def torchrun_args(job: ResolvedJob) -> tuple[list[str], bool]:
    """torchrun's own options; one node here uses --standalone (a free local port), several a c10d rendezvous on
    job.rdzv_port. On Slurm, the batch script's one torchrun per node learns the node count, the first node and
    the job id from the allocation. (options, whether a word expands at run time)"""
    launcher = job.preset.launcher
    if job.target.slurm:
        return slurm_torchrun(job.runtime.torchrun, job.gpus_per_node), True
    head = [job.runtime.torchrun, "--nnodes", str(job.nodes), "--nproc-per-node", str(job.gpus_per_node)]
    elastic = job.elastic
    if elastic is not None and elastic.low != elastic.high:
        # torchrun's own elasticity: the rendezvous forms with MIN to MAX nodes (every count in it was checked,
        # pipeline/elastic.py) and restarts the workers when a node leaves or joins
        head[2] = f"{elastic.low}:{elastic.high}"
        head += ["--max-restarts", str(ELASTIC_MAX_RESTARTS)]
    elif job.nodes == 1:
        return head + ["--standalone"], False
    from_env = launcher.master_addr == "localhost"
    endpoint = HostFromEnv(job.rdzv_port) if from_env else f"{launcher.master_addr}:{job.rdzv_port}"
    rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id(job.preset.name)]
    return head + rdzv, from_env


def slurm_torchrun(torchrun: str, gpus_per_node: int) -> list[str]:
    """torchrun in a Slurm batch script, one per node: the node count, the first node ($head_node, with the
    script's $rdzv_port) and the job id come from the allocation."""
    return [torchrun, SlurmWord("--nnodes", "$SLURM_NNODES"), f"--nproc-per-node={gpus_per_node}",
            "--rdzv-backend=c10d", SlurmWord("--rdzv-endpoint", "$head_node:$rdzv_port"),
            SlurmWord("--rdzv-id", "$SLURM_JOB_ID")]


def rdzv_id(preset_name: str) -> str:
    """torchrun's --rdzv-id for a preset: its name in the characters a job id needs, whatever the file is called."""
    return "megatron-launch-" + (re.sub(r"[^A-Za-z0-9._-]+", "_", preset_name) or "run")


def entry_script(job: ResolvedJob) -> str:
    return str(PREFLIGHT_SCRIPT if job.entry == PREFLIGHT else job.megatron_path / ENTRY_SCRIPTS[job.entry])


def build_command(job: ResolvedJob) -> Command:
    script = entry_script(job)
    flags = script_args(job.megatron) if job.entry == "pretrain_gpt" else []
    # -u: torchrun starts its workers so (unbuffered output: progress arrives as it happens)
    runner = [job.runtime.python, "-u"] if job.runner.direct else torchrun_args(job)[0]
    argv = [*runner, script, *flags]
    env = dict(job.environment.exported)
    check_exec_limits(argv, env)
    return Command(argv=argv, env=env, script=script, script_args=flags, unset=job.environment.unset,
                   direct=job.runner.direct)


# Linux's bound on one argv word or one NAME=value of the environment (MAX_ARG_STRLEN: 32 pages, with its NUL);
# exec fails with E2BIG ("Argument list too long") past it, whatever ARG_MAX says.
MAX_EXEC_STRING = 32 * 4096 - 1
# Of ARG_MAX (argv + environment together), what the launcher's own words may take: the rest is left to the
# environment the job inherits.
MAX_EXEC_TOTAL = 1 << 20


def check_exec_limits(argv: Sequence[str], env: dict[str, str]) -> None:
    """Refuse, naming the setting, an argv or environment that exec would refuse with E2BIG at launch."""
    problems = []
    for name, value in env.items():
        size = len(f"{name}={value}".encode("utf-8", "surrogateescape"))
        if size > MAX_EXEC_STRING:
            problems.append(Problem(
                f"env.{name} is {size:,} bytes; the system passes at most {MAX_EXEC_STRING:,} bytes per environment "
                "variable to a program (MAX_ARG_STRLEN)", f"put the value in a file and pass its path in env.{name}"))
    for word in argv:
        size = len(str(word).encode("utf-8", "surrogateescape"))
        if size > MAX_EXEC_STRING:
            problems.append(Problem(
                f"the argument {clip(str(word), 60)!r} is {size:,} bytes; the system passes at most "
                f"{MAX_EXEC_STRING:,} bytes per argument to a program (MAX_ARG_STRLEN)",
                "shorten that setting's value (a long list belongs in a file, e.g. data_args_path)"))
    total = sum(len(str(w).encode("utf-8", "surrogateescape")) + 1 for w in argv) + sum(
        len(f"{k}={v}".encode("utf-8", "surrogateescape")) + 1 for k, v in env.items())
    if not problems and total > MAX_EXEC_TOTAL:
        problems.append(Problem(f"the command and its environment are {total:,} bytes; at most {MAX_EXEC_TOTAL:,} "
                                "are passed on safely (ARG_MAX)", "move long values into files (e.g. data_args_path)"))
    if problems:
        raise UserError(problems)


def kernel_summary(job: ResolvedJob) -> str:
    """`kernels (how): with/without TE and apex → the flags added for what is missing`, for headers."""
    kernels = job.kernels
    found = (("Transformer Engine", kernels.transformer_engine), ("NVIDIA apex", kernels.apex))
    text = f"kernels ({kernels.how}): " + ", ".join(
        [f"with {n}" for n, on in found if on] + [f"without {n}" for n, on in found if not on])
    if job.kernel_flags:
        text += " → " + " ".join(script_args(dict(job.kernel_flags)))
    return text
