"""Megatron's own argument names and types at the pinned commit, read from data (no torch import).

launcher/data/megatron_args.json is generated from the pinned checkout's parser by scripts/dump_megatron_args.py;
a test regenerates it and compares. Presets use Megatron's `dest` names (num_layers, bf16, ...).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from launcher.errors import Problem, did_you_mean, shown
from launcher.megatron import layer_pattern


@dataclass(frozen=True)
class MegatronArg:
    dest: str
    flags: tuple[str, ...]
    kind: str  # "value" | "true" (store_true) | "false" (store_false) | "bool" (--x/--no-x)
    type: str = "str"  # for kind "value": "int" | "float" | "str"
    nargs: int | str | None = None
    choices: tuple[Any, ...] | None = None
    default: Any = None
    # "megatron" (its own parser) or an extra provider pretrain_gpt.py adds, e.g. "modelopt" (pretrain_gpt.py:396)
    provider: str = "megatron"

    @property
    def takes_list(self) -> bool:
        return self.nargs is not None


@cache
def catalog() -> dict[str, MegatronArg]:
    raw = json.loads(resources.files("launcher").joinpath("data/megatron_args.json").read_text())
    return {
        dest: MegatronArg(
            dest=dest,
            flags=tuple(e["flags"]),
            kind=e["kind"],
            type=e.get("type", "str"),
            nargs=e.get("nargs"),
            choices=tuple(e["choices"]) if "choices" in e else None,
            default=e.get("default"),
            provider=e.get("provider", "megatron"),
        )
        for dest, e in raw["arguments"].items()
    }


def provider_specs() -> list[dict[str, Any]]:
    """The arguments extra providers add, as data a parser can be built from (for Megatron's own check)."""
    return [{"dest": a.dest, "flags": list(a.flags), "kind": a.kind, "type": a.type, "nargs": a.nargs,
             "choices": list(a.choices) if a.choices is not None else None, "default": a.default}
            for a in catalog().values() if a.provider != "megatron"]


@cache
def flag_aliases() -> dict[str, tuple[str, bool]]:
    """Flag spellings as names (no_gradient_accumulation_fusion → (gradient_accumulation_fusion, False))."""
    aliases = {}
    for arg in catalog().values():
        for flag in arg.flags:
            name = flag.removeprefix("--").replace("-", "_")
            if name == arg.dest:
                continue
            negative = arg.kind == "false" or (arg.kind == "bool" and flag.startswith("--no-"))
            aliases[name] = (arg.dest, not negative)
    return aliases


def unknown_name_problem(name: str, where: str, extra_names=()) -> Problem:
    hint = did_you_mean(name, [*catalog(), *extra_names], n=3, cutoff=0.75) or (
        "Megatron settings use the dest names of pretrain_gpt.py's flags (--num-layers → num_layers)"
    )
    return Problem(f"unknown setting '{name}' in {where}", hint)


TRUE_WORDS = {"true", "yes", "on", "1"}
# Megatron stores integers in int64 tensors and loops over sizes: a larger integer is never a setting.
INT_LIMIT = 2**63 - 1
NEGATIVE_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?|-\.\d+([eE][-+]?\d+)?")
FALSE_WORDS = {"false", "no", "off", "0"}


def _scalar(arg: MegatronArg, value: Any, where: str) -> Any:
    name = f"{arg.dest} ({where})"
    if arg.type == "int":
        if isinstance(value, bool) or not _is_int(value):
            raise ValueError(f"{name} must be an integer, got {shown(value)}")
        if abs(int(value)) > INT_LIMIT:
            raise ValueError(f"{name} is {shown(value)}: at most {INT_LIMIT:,} (a 64-bit integer)")
        return int(value)
    if arg.type == "float":
        if isinstance(value, bool):
            raise ValueError(f"{name} must be a number, got {shown(value)}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a number, got {shown(value)}") from None
    if arg.type == "layer_pattern":  # read, never evaluated; Megatron gets the text (an int stays an int)
        text = "[" + ",".join(map(str, value)) + "]" if isinstance(value, list) else value
        try:
            layer_pattern.parse(text)
        except ValueError as err:
            raise ValueError(f"{name} is not a layer pattern: {err}") from None
        return text
    if isinstance(value, (dict, list)) or value is None:
        raise ValueError(f"{name} must be a single value, got {shown(value)}")
    text = value if isinstance(value, str) else _plain(value)
    if looks_like_flag(text):
        # Megatron's parser would read the word as an option: a value must never become a flag of the argv
        raise ValueError(f"{name}: the value {shown(text)} starts with '-', which Megatron's parser reads as a "
                         "flag, not a value")
    return text


def looks_like_flag(word: str) -> bool:
    """Whether argparse would take `word` for an option (a leading '-' that is not a negative number)."""
    return word.startswith("-") and not NEGATIVE_NUMBER.fullmatch(word)


def _plain(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _is_int(value: Any) -> bool:
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, str) and len(value) > 40:  # int() of a 10,000-digit text is slow; no setting has 40
        return False
    try:
        int(str(value), 10)
        return True
    except ValueError:
        return False


def coerce(arg: MegatronArg, value: Any, where: str) -> Any:
    """Type a preset or --set value by Megatron's own argument type; ValueError says what is wrong."""
    if value is None:
        return None
    if arg.kind in ("true", "false", "bool"):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in TRUE_WORDS:
            return True
        if text in FALSE_WORDS:
            return False
        raise ValueError(f"{arg.dest} ({where}) is a flag: use true or false, got {shown(value)}")
    if arg.takes_list:
        items = value if isinstance(value, list) else str(value).split()
        if arg.nargs == "+" and not items:
            raise ValueError(f"{arg.dest} ({where}) needs at least one value")
        if isinstance(arg.nargs, int) and len(items) != arg.nargs:
            raise ValueError(f"{arg.dest} ({where}) takes exactly {arg.nargs} values, got {len(items)}")
        typed = [_scalar(arg, v, where) for v in items]
    else:
        typed = _scalar(arg, value, where)
    for item in typed if isinstance(typed, list) else [typed]:
        if arg.choices is not None and item not in arg.choices:
            raise ValueError(
                f"{arg.dest} ({where}) must be one of {', '.join(map(str, arg.choices))}; got {shown(item)}"
            )
    return typed


def to_flags(arg: MegatronArg, value: Any) -> list[str]:
    """The argv words for one setting; [] when the value means 'leave Megatron's default'."""
    if value is None:
        return []
    if arg.kind == "true":
        return [arg.flags[0]] if value else []
    if arg.kind == "false":
        return [] if value else [arg.flags[0]]
    if arg.kind == "bool":
        positive = next(f for f in arg.flags if not f.startswith("--no-"))
        negative = next(f for f in arg.flags if f.startswith("--no-"))
        return [positive if value else negative]
    values = value if isinstance(value, list) else [value]
    return [arg.flags[0], *(_format(v) for v in values)]


def _format(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


def default_ffn_hidden_size(hidden: int, swiglu: bool) -> int:
    """Megatron's MLP width when ffn_hidden_size is unset: 4h, or int(8h/3/64)·64 with SwiGLU."""
    return int(8 * hidden / 3 / 64) * 64 if swiglu else 4 * hidden


# Flags the pinned Megatron keeps only for old scripts: parsed, then ignored or redirected (arguments.py at
# 432d76b2b8bf, line numbers cited). Catalog entries whose dest says "deprecated" are added by `deprecated()`.
_DEPRECATED_NOTES: dict[str, str] = {
    "deprecated_use_mcore_models": "ignored: megatron-core models are the only ones (arguments.py:2596)",
    "use_flash_attn": "read nowhere but a deterministic-mode assert (arguments.py:1530): attention is chosen by "
                      "--attention-backend",
    "ckpt_fully_parallel_save_deprecated": "no effect (arguments.py:1592); see --no-ckpt-fully-parallel-save",
    "use_dist_ckpt_deprecated": "no effect (arguments.py:1604); see --ckpt-format",
    "dist_ckpt_format_deprecated": "no effect (arguments.py:1607); see --ckpt-format",
    "disable_msc_deprecated": "to be removed (arguments.py:158)",
    "cuda_graph_scope_deprecated": "use --cuda-graph-modules (arguments.py:631)",
    "enable_cuda_graph": "use --cuda-graph-impl local (arguments.py:619)",
    "external_cuda_graph": "use --cuda-graph-impl transformer_engine (arguments.py:625)",
    "recompute_activations": "rewritten to --recompute-granularity selective (arguments.py:604)",
    "hybrid_override_pattern": "use --hybrid-layer-pattern (arguments.py:735)",
}


@cache
def deprecated() -> dict[str, str]:
    """dest → what the pinned Megatron does with that old flag, for every deprecated flag it still parses."""
    known = catalog()
    found = {dest: note for dest, note in _DEPRECATED_NOTES.items() if dest in known}
    for dest in known:
        if "deprecated" in dest and dest not in found:
            found[dest] = "deprecated at the pinned commit"
    return found


def deprecation_warning(dest: str) -> str | None:
    note = deprecated().get(dest)
    if note is None:
        return None
    flag = catalog()[dest].flags[0]
    return f"{flag} is deprecated in the pinned Megatron: {note}"
