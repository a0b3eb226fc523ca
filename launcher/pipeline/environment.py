"""The environment of every training process, decided once (by resolve, before any check) and read by all.

`job_environment` is the one place that says what the launcher exports: CUDA_DEVICE_MAX_CONNECTIONS, the
PYTHONPATH the entry script needs, then the preset's launcher.env (NCCL_*, NVTE_*, …), which wins. The ranks also
inherit the environment the launch starts in (a local run's, or the submitting shell's: sbatch exports it), so the
checks judge `JobEnvironment.get`, what a rank sees. The local backend, the Slurm script, the doctor and the
dry-run all read the same JobEnvironment; what is shown masks secrets.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from launcher.inside.megatron_ext import FAST_OPS_ENV
from launcher.pipeline import startup
from launcher.pipeline.runner import ASYNC_ERRORS, rank_environment
from launcher.redaction import REDACTED, is_secret

CONNECTIONS = "CUDA_DEVICE_MAX_CONNECTIONS"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MASKED = REDACTED  # the one secret rule is launcher.redaction's
# The directory holding this `launcher` package: training processes import launcher.inside.megatron_ext from it.
LAUNCHER_ROOT = Path(__file__).resolve().parents[2]


def is_env_name(name: object) -> bool:
    """A name a shell can export: letters, digits and _, not starting with a digit (the whole name: "FOO\\n" is
    not one)."""
    return isinstance(name, str) and ENV_NAME.fullmatch(name) is not None


# Variables that choose what a process runs or loads before (or instead of) its own code: the dynamic loader's
# (LD_PRELOAD, LD_AUDIT, GLIBC_TUNABLES), the shells' (BASH_ENV, ENV, BASH_FUNC_x%%, PS4), the interpreters'
# (PYTHONPATH, PYTHONSTARTUP, PERL5OPT, NODE_OPTIONS), search paths (PATH, CUDA_PATH), plug-ins (NCCL_NET_PLUGIN)
# and homes (HOME: Python's user site-packages; CUDA_HOME: the compiler). Also what names the cache compiled code is
# loaded from without a compile: torch.compile's is TMPDIR/torchinductor_$USER (tempfile.gettempdir(),
# getpass.getuser(): TMPDIR/TEMP/TMP, LOGNAME/USER/LNAME/USERNAME), so `USER=other` loads another user's kernels; a
# config file that sets such variables itself (NCCL_CONF_FILE: NCCL_NET_PLUGIN=…); and a compiler's choice and flags
# (NVCC_PREPEND_FLAGS=-ccbin PROG, CXXFLAGS=-B DIR: the programs a JIT build runs); torch.load's switch to full
# unpickling of every checkpoint (TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: a pickle runs code); where Hugging Face keeps the
# Python of remote-code tokenizers it imports (HF_MODULES_CACHE, the hub caches). Whoever sets one chooses the
# program.
_LOADER_NAME = re.compile(
    r"(?:LD|DYLD|PYTHON|BASH|PERL|RUBY|NODE|LUA|JAVA|JDK|TCL|TK|GCONV|GLIBC|MALLOC|TORCHINDUCTOR|TRITON|"
    r"TORCH_EXTENSIONS|CUDA_CACHE|XDG|ZDOTDIR)|^_JAVA|PATH|PRELOAD|PLUGIN|HOME|LIBRARY|^ENV$|^PS4$|"
    r"^PROMPT_COMMAND$|^SHELLOPTS$|^BASHOPTS$|^IFS$|^CDPATH$|OPTIONS$|^TERMINFO|^HOSTALIASES$|^LOCPATH$|"
    r"^NLSPATH$|^OPENSSL_|^SSL_CERT|^GIT_|^PIP_|^CC$|^CXX$|^LDSHARED$|FLAGS$|CCBIN|^CUDA(?:HOST)?CXX$|^NVCC$|"
    r"^(?:TMPDIR|TEMP|TMP|LOGNAME|USER|LNAME|USERNAME)$|CONF(?:IG)?_?(?:FILE|DIR)S?$|"
    r"^TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD$|^HF_MODULES_CACHE$|^(?:HF_HUB|TRANSFORMERS|HUGGINGFACE_HUB)_CACHE$",
    re.IGNORECASE)


def is_loader_variable(name: str) -> bool:
    """Whether the environment variable `name` decides which program or library code a process runs (so a
    value of it from a file someone else may have written is never taken without the user giving it again)."""
    return _LOADER_NAME.search(name) is not None


def masked(env: Mapping[str, str]) -> dict[str, str]:
    """The environment as it may be shown: each secret's value replaced."""
    return {name: (MASKED if is_secret(name, value) else value) for name, value in env.items()}


def uses_fsdp(arg: Callable[[str], Any]) -> bool:
    """`arg(dest)` reads a setting as Megatron sees it."""
    return bool(arg("use_torch_fsdp2") or arg("use_megatron_fsdp"))


def uses_megatron_ext(settings: Mapping[str, object]) -> bool:
    spec = settings.get("spec")
    return isinstance(spec, list) and bool(spec) and str(spec[0]).startswith("launcher.inside.megatron_ext.")


# apex's fused weight-gradient module in plain torch (launcher/inside/apex_free): on the ranks' PYTHONPATH where the
# launcher's layer spec runs without apex and the preset asks for Megatron's gradient accumulation fusion.
APEX_FREE = LAUNCHER_ROOT / "launcher" / "inside" / "apex_free"


def asks_apex_free_fusion(settings: Mapping[str, object], apex: bool) -> bool:
    """No apex, and the settings ask for Megatron's gradient accumulation fusion (not the default without apex:
    the stand-in, inside/megatron_ext/wgrad_fusion.py, is not yet measured on a GPU: docs/benchmarks.md)."""
    return not apex and settings.get("gradient_accumulation_fusion") is True


def uses_apex_free_fusion(settings: Mapping[str, object], apex: bool) -> bool:
    """Whether the ranks get APEX_FREE: asked for (asks_apex_free_fusion), on the launcher's spec."""
    return uses_megatron_ext(settings) and asks_apex_free_fusion(settings, apex)


def launcher_connections(entry: str, tp: int, cp: int, fsdp: bool) -> str | None:
    """The CUDA_DEVICE_MAX_CONNECTIONS the launcher exports: 1 for TP/CP > 1, which Megatron asserts below
    Blackwell (megatron-432d76b.md §2.3: TP collectives must be queued before the GEMMs they overlap with), and for
    the simple loop (it runs TP 2); none with FSDP, which asserts the opposite (arguments.py:1027, 1139)."""
    return "1" if entry == "simple_loop" or ((tp > 1 or cp > 1) and not fsdp) else None


@dataclass(frozen=True)
class JobEnvironment:
    """What every rank's environment holds: `exported` by the launcher over `inherited` from where it starts."""

    exported: Mapping[str, str] = field(default_factory=dict)
    inherited: Mapping[str, str] = field(default_factory=dict)
    chosen: tuple[str, ...] = ()  # names in `exported` the launcher decided (not the preset's launcher.env)
    unset: tuple[str, ...] = ()  # launcher.env's nulls: removed from every rank's environment, inherited or not

    def __post_init__(self) -> None:
        object.__setattr__(self, "exported", MappingProxyType(dict(self.exported)))
        object.__setattr__(self, "inherited", MappingProxyType(dict(self.inherited)))

    def get(self, name: str) -> str | None:
        """The value a rank sees."""
        if name in self.unset:
            return None
        return self.exported.get(name, self.inherited.get(name))

    def shown(self) -> dict[str, str]:
        """`exported` for printing: secrets masked."""
        return masked(self.exported)

    def for_process(self, path: str | None = None) -> dict[str, str]:
        """The whole environment of a process started here: inherited, then exported; the launcher's PYTHONPATH
        first and the inherited one after it; PATH as given (the local backend's, with this interpreter first)."""
        env = {**self.inherited, **self.exported}
        inherited_path = self.inherited.get("PYTHONPATH")
        if inherited_path and "PYTHONPATH" in self.exported:
            env["PYTHONPATH"] = f"{self.exported['PYTHONPATH']}:{inherited_path}"
        if path is not None:
            env["PATH"] = path
        for name in self.unset:
            env.pop(name, None)
        return env


def job_environment(*, entry: str, tp: int, cp: int, fsdp: bool, megatron_path: Path,
                    settings: Mapping[str, object], preset_env: Mapping[str, str | None],
                    inherited: Mapping[str, str] | None = None, apex: bool = True,
                    direct: bool = False) -> JobEnvironment:
    """Every variable the launcher exports for a job, in the order a script writes them. `direct`: the one process
    starts without torchrun (pipeline/runner.py), so the launcher gives it what torchrun would: its rank variables
    (over the preset's and inherited ones, as torchrun's are) and torchrun's NCCL error handling where none is set."""
    chosen: dict[str, str] = {}
    connections = launcher_connections(entry, tp, cp, fsdp)
    if connections is not None:
        chosen[CONNECTIONS] = connections
    # The simple loop lives in examples/ and imports megatron from the checkout root.
    chosen["PYTHONPATH"] = str(megatron_path)
    if entry == "pretrain_gpt" and uses_megatron_ext(settings):
        # the launcher's package (the spec), then its start-up hook's folder (launcher/pipeline/startup.py)
        chosen["PYTHONPATH"] += f":{LAUNCHER_ROOT}:{LAUNCHER_ROOT.joinpath(*startup.SITE_DIR_PARTS)}"
        if uses_apex_free_fusion(settings, apex):
            chosen["PYTHONPATH"] += f":{APEX_FREE}"
        fast_ops = preset_env.get(FAST_OPS_ENV, (inherited or {}).get(FAST_OPS_ENV))
        chosen.update(startup.startup_variables(settings, fast_ops, inherited))
    if direct and ASYNC_ERRORS not in (inherited or {}):
        chosen[ASYNC_ERRORS] = "1"
    ranks = rank_environment() if direct else {}
    # A null in launcher.env unsets the variable: neither the launcher's value nor an inherited one reaches a rank.
    unset = tuple(name for name, value in preset_env.items() if value is None and name not in ranks)
    given = {name: value for name, value in preset_env.items() if value is not None}
    exported = {name: value for name, value in {**chosen, **given}.items() if name not in unset}
    exported.update(ranks)
    return JobEnvironment(exported, inherited or {},
                          (*(name for name in chosen if name not in preset_env), *ranks), unset)


# What torchrun's agent sets in each worker's environment over anything inherited
# (torch/distributed/elastic/agent/server/local_elastic_agent.py, worker_env), and what the launcher gives the one
# process it starts without torchrun (runner.rank_environment): a value for one of these in launcher.env never
# reaches a rank. MASTER_ADDR is left out: a job run by hand on several nodes reads it for its rendezvous endpoint.
PER_WORKER_VARIABLES = ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
                        "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_PORT",
                        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                        "TORCHELASTIC_USE_AGENT_STORE")


def per_worker_variables_given(preset_env: Mapping[str, str | None]) -> list[str]:
    """A warning naming launcher.env's variables that torchrun (or the launcher) sets for each rank itself."""
    given = [name for name in preset_env if name in PER_WORKER_VARIABLES]
    if not given:
        return []
    one = len(given) == 1
    return [f"env.{', env.'.join(given)} {'never reaches' if one else 'never reach'} a rank: torchrun sets "
            f"{'it' if one else 'them'} "
            "for each rank from the layout (and the launcher, for one process it starts without torchrun); drop "
            f"{'it' if one else 'them'} (the world is --nodes × --gpus-per-node, the rendezvous port "
            "launcher.master_port)"]
