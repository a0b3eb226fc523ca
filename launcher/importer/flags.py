"""A training command's words → the launcher's settings: torchrun's options, and Megatron's flags read by the
argument catalog as Megatron's own parser would read them (no torch)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from launcher.errors import UserError, did_you_mean, shown
from launcher.megatron import args as megatron_args
from launcher.pipeline.preset import type_megatron_value

ENTRY_SCRIPTS = ("pretrain_gpt.py",)
# torchrun / torch.distributed.run options → launcher settings (both spellings, --opt=value too)
TORCHRUN_SETTINGS = {"nproc_per_node": "gpus_per_node", "nnodes": "nodes", "master_addr": "master_addr",
                     "master_port": "master_port"}
TORCHRUN_DROPPED = {"node_rank": "the launcher gives each node its rank (torchrun rendezvous)",
                    "rdzv_endpoint": "the launcher sets the rendezvous endpoint",
                    "rdzv_backend": "the launcher sets the rendezvous backend",
                    "rdzv_id": "the launcher names the rendezvous", "standalone": "the launcher picks it for one node"}
TORCHRUN_SWITCHES = {"standalone", "no_python", "module", "run_path"}


@dataclass
class Flags:
    """Megatron settings in the order given, and what could not become a setting."""

    settings: dict[str, Any] = field(default_factory=dict)
    flag_of: dict[str, str] = field(default_factory=dict)  # dest → the flag the script spelled
    unknown: list[str] = field(default_factory=list)  # "--flag value…: why"
    repeated: list[str] = field(default_factory=list)


def flag_table() -> dict[str, megatron_args.MegatronArg]:
    return {flag: arg for arg in megatron_args.catalog().values() for flag in arg.flags}


def _is_flag(word: str) -> bool:
    return word.startswith("--") and len(word) > 2


def read_flags(words: list[str], raw: bool = False) -> Flags:
    """Megatron flags → dest → typed value, as argparse would (last one wins; --x=value accepted).
    With raw, values stay the words given (for comparing two argvs without typing)."""
    table = flag_table()
    out = Flags()
    i = 0
    while i < len(words):
        word = words[i]
        if not _is_flag(word):
            j = i
            while j < len(words) and not _is_flag(words[j]):
                j += 1
            after = " before any flag"
            if i > 0:
                k = i - 1
                while k > 0 and not _is_flag(words[k]):
                    k -= 1
                after = f" after {words[k]}'s value" if _is_flag(words[k]) else ""
            out.unknown.append(f"{' '.join(words[i:j])}: word(s) without a flag{after}; Megatron's parser refuses "
                               "them (unrecognized arguments)")
            i = j
            continue
        flag, eq, inline = word.partition("=")
        arg = table.get(flag)
        if arg is None:
            j = i + 1
            while j < len(words) and not _is_flag(words[j]):
                j += 1
            near = did_you_mean(flag.removeprefix("--").replace("-", "_"), megatron_args.catalog(), n=3, cutoff=0.75)
            out.unknown.append(" ".join(words[i:j]) + ": not an argument of pretrain_gpt.py at the pin"
                               + (f" ({near})" if near else ""))
            i = j
            continue
        if arg.kind in ("true", "false", "bool"):
            on = arg.kind == "true" or (arg.kind == "bool" and not flag.startswith("--no-"))
            value: Any = on
            i += 1
        elif eq:
            value, i = inline, i + 1
        elif arg.nargs is None:
            if i + 1 >= len(words):
                out.unknown.append(f"{flag}: no value follows")
                break
            value, i = words[i + 1], i + 2
        else:
            j = i + 1
            count = arg.nargs if isinstance(arg.nargs, int) else None
            while j < len(words) and (count is None or j - i - 1 < count) and not _is_flag(words[j]):
                j += 1
            value, i = words[i + 1:j], j
        if arg.dest in out.settings:
            out.repeated.append(flag)
            del out.settings[arg.dest]  # argparse keeps the last; so does the preset, in the last place
        if not raw:
            try:
                _, value = type_megatron_value(arg.dest, value, f"flag {flag}")
            except UserError as exc:
                out.unknown.append(f"{flag} {value}: {exc.problems[0].message}")
                continue
            items = value if isinstance(value, list) else [value]
            if any(isinstance(v, float) and not math.isfinite(v) for v in items):
                out.unknown.append(f"{flag} {shown(value)}: not a finite number (nan, inf), so not carried; a preset "
                                   "holds numbers only")
                continue
        out.settings[arg.dest] = value
        out.flag_of[arg.dest] = flag
    return out


@dataclass
class Launch:
    """A training command split into its runner (torchrun …), entry script and the script's words."""

    runner: list[str]
    script: str
    script_args: list[str]
    launcher: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)


def find_entry(argv: list[str]) -> int | None:
    for k, word in enumerate(argv):
        if any(word == s or word.endswith("/" + s) for s in ENTRY_SCRIPTS):
            return k
    return None


def split_launch(argv: list[str]) -> Launch:
    at = find_entry(argv)
    assert at is not None
    launch = Launch(argv[:at], argv[at], argv[at + 1:])
    runner = launch.runner
    k = 0
    while k < len(runner):
        word = runner[k]
        if not word.startswith("-"):
            k += 1
            continue
        if not word.startswith("--") and runner[0].rsplit("/", 1)[-1].startswith("python"):
            k += 2 if word == "-m" else 1  # python's own options: -u, -O, -m torch.distributed.run
            continue
        name, eq, inline = word.lstrip("-").partition("=")
        name = name.replace("-", "_")
        if name in TORCHRUN_SWITCHES:
            k += 1
            continue
        value = inline if eq else (runner[k + 1] if k + 1 < len(runner) else "")
        k += 1 if eq else 2
        if name in TORCHRUN_SETTINGS:
            setting = TORCHRUN_SETTINGS[name]
            if setting in ("nodes", "gpus_per_node", "master_port") and re.fullmatch(r"\d+", value):
                launch.launcher[setting] = int(value)
            elif setting == "master_addr" and value:
                launch.launcher[setting] = value
            else:
                launch.dropped.append(f"{word} {value}: not a number")
        elif name in TORCHRUN_DROPPED:
            launch.dropped.append(f"{word} {value}: {TORCHRUN_DROPPED[name]}".strip())
        else:
            launch.dropped.append(f"{word} {value}: a {runner[0]} option the launcher does not carry".strip())
    return launch
