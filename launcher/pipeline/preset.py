"""YAML presets → a typed, immutable Preset; layering is base: → file → --set.

A preset has two parts. `megatron:` holds Megatron settings under Megatron's own argument names (the dest
of each flag: --num-layers → num_layers), optionally grouped into sections for the reader. `launcher:` holds
what Megatron does not know: nodes, GPUs per node, the entry script, environment, Slurm settings.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from launcher import redaction, untrusted
from launcher.errors import Problem, UserError, did_you_mean, shown
from launcher.gpus import gpu_by_name
from launcher.megatron import args as megatron_args
from launcher.pipeline.environment import is_env_name
from launcher.pipeline.field_types import field_types, fields_allowing
from launcher.pipeline.k8s_settings import K8sSettings
from launcher.pipeline.slurm_settings import SlurmSettings

CONFIGS_DIR = Path(__file__).resolve().parents[1] / "configs"  # shipped in the package; ./configs links here
MAX_BASE_CHAIN = 32  # base: files one above another; real presets use one or two
TOP_LEVEL_KEYS = {"base", "description", "launcher", "megatron"}
ENTRIES = ("pretrain_gpt", "simple_loop")
RUNNERS = ("auto", "torchrun")
HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.\-]{0,252})|\[?[0-9A-Fa-f:.]{2,45}\]?")


@dataclass(frozen=True)
class LauncherSettings:
    nodes: int = 1
    gpus_per_node: int = 8
    entry: str = "pretrain_gpt"
    env: Mapping[str, str | None] = field(default_factory=dict)  # None: unset for the ranks
    master_addr: str = "localhost"
    master_port: int = 29500
    megatron_path: str | None = None
    torchrun: str = "torchrun"
    # How the processes start (pipeline/runner.py): "auto" runs one process here without torchrun, "torchrun" always
    runner: str = "auto"
    # "auto": use Transformer Engine / NVIDIA apex when importable, otherwise the flags that work without.
    transformer_engine: bool | Literal["auto"] = "auto"
    apex: bool | Literal["auto"] = "auto"
    run_root: str = "runs"
    gpu: str = "h100-80gb"  # for the memory estimate in the dry-run header (see `launch plan --gpu`)
    # Where the preset leaves micro_batch_size unset: the largest divisor of global batch / DP up to this
    # (one big microbatch is fastest when it fits; docs/benchmarks.md), so any GPU count gets a valid batch.
    max_micro_batch_size: int | None = None
    slurm: Mapping[str, Any] = field(default_factory=dict)
    k8s: Mapping[str, Any] = field(default_factory=dict)  # Kubernetes (JobSet) settings: pipeline/k8s_settings.py
    # Python packages the target has besides TE and apex (distribution names, e.g. nvidia-resiliency-ext), for
    # `launch --check` and container images; a local launch and each Slurm node look them up themselves.
    packages: tuple[str, ...] = ()

    def __post_init__(self) -> None:  # immutable all the way down: a job's settings cannot change after resolve
        for name in ("env", "slurm", "k8s"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))


LAUNCHER_FIELDS = {f.name: f for f in fields(LauncherSettings)}
# Each setting's type comes from its annotation above.
INT_FIELDS = fields_allowing(LauncherSettings, int)
OPTIONAL_FIELDS = fields_allowing(LauncherSettings, type(None))  # None means "not set"
TRISTATE_FIELDS = fields_allowing(LauncherSettings, Literal)  # true, false or auto
TEXT_FIELDS = fields_allowing(LauncherSettings, str)  # a --set value is taken as written, not read as YAML


SECTIONS = {"slurm": "Slurm", "k8s": "Kubernetes"}  # launcher settings that are mappings of a backend's settings


def _slurm_fields(section: str = "slurm") -> tuple[frozenset[str], frozenset[str]]:
    """Keys a preset's `launcher.slurm:` (or `launcher.k8s:`) section may hold, and those that are text; the
    backend settings' dataclass declares them."""
    cls = K8sSettings if section == "k8s" else SlurmSettings
    return frozenset(field_types(cls)), fields_allowing(cls, str)


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    megatron: Mapping[str, Any]  # as written: Megatron dest → typed value, in preset order; None: Megatron's default
    launcher: LauncherSettings
    sources: tuple[str, ...] = ()  # files read, base first
    overrides: tuple[str, ...] = ()  # --set NAME=VALUE as the user gave them

    def __post_init__(self) -> None:
        object.__setattr__(self, "megatron", MappingProxyType(dict(self.megatron)))
        object.__setattr__(self, "overrides", tuple(self.overrides))

    def arg(self, dest: str) -> Any:
        """The value Megatron will see: the preset's, else Megatron's own default."""
        if dest in self.megatron and self.megatron[dest] is not None:
            return self.megatron[dest]
        return megatron_args.catalog()[dest].default

    def effective(self) -> dict[str, Any]:
        """Every Megatron argument as Megatron will see it (defaults filled in)."""
        return {dest: self.arg(dest) for dest in megatron_args.catalog()}


def available_presets() -> list[str]:
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml"))


def _resolve(ref: str, relative_to: Path | None = None) -> Path:
    path = Path(ref)
    if path.suffix in (".yaml", ".yml") or "/" in ref:
        if not path.is_absolute() and relative_to is not None:  # a base: is relative to the file naming it
            path = relative_to / path
        return path
    named = CONFIGS_DIR / f"{ref}.yaml"
    if not named.exists():
        near = did_you_mean(ref, available_presets(), prefix="")
        raise UserError(
            f"no preset named '{ref}'",
            (f"{near} " if near else "")
            + f"shipped presets: {', '.join(available_presets())}; or give a path to a YAML file",
        )
    return named


def _read_yaml(path: Path) -> dict:
    data = untrusted.load_yaml(untrusted.read_utf8(path, "preset file"), str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{path} must be a YAML mapping (key: value), not a {type(data).__name__}")
    return data


def _flatten_megatron(section: Any, where: str, problems: list[Problem]) -> dict[str, Any]:
    """megatron: may group settings into sections ({model: {num_layers: 24}}); flatten to dest → value."""
    if section is None:
        return {}
    if not isinstance(section, dict):
        problems.append(Problem(f"'megatron' in {where} must be a mapping of settings"))
        return {}
    catalog = megatron_args.catalog()
    flat: dict[str, Any] = {}
    for key, value in section.items():
        key = str(key)
        if key in catalog or key in megatron_args.flag_aliases():
            _put(flat, key, value, where, problems)
        elif isinstance(value, dict):
            for inner_key, inner_value in value.items():
                _put(flat, str(inner_key), inner_value, f"{where}, megatron.{key}", problems)
        else:
            problems.append(megatron_args.unknown_name_problem(key, where))
    return flat


def _put(flat: dict, key: str, value: Any, where: str, problems: list[Problem]) -> None:
    try:
        dest, typed = type_megatron_value(key, value, where)
    except UserError as exc:
        problems.extend(exc.problems)
        return
    if dest in flat:
        problems.append(Problem(f"'{dest}' is set twice in {where}", "keep one of them"))
        return
    flat[dest] = typed


def type_megatron_value(key: str, value: Any, where: str) -> tuple[str, Any]:
    """Map a name (dest or flag spelling) and value to (dest, typed value) by Megatron's argument types."""
    catalog = megatron_args.catalog()
    if key in catalog:
        arg = catalog[key]
    elif key in megatron_args.flag_aliases():
        dest, meaning = megatron_args.flag_aliases()[key]
        arg = catalog[dest]
        if arg.kind in ("true", "false", "bool"):
            try:
                on = megatron_args.coerce(arg, value, where)
            except ValueError as exc:
                raise UserError(str(exc).replace(dest, key, 1)) from None
            return dest, (None if on is None else (meaning if on else not meaning))
    else:
        raise UserError([megatron_args.unknown_name_problem(key, where)])
    try:
        return arg.dest, megatron_args.coerce(arg, value, where)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _launcher_value(name: str, value: Any, where: str) -> Any:
    """Check and type one launcher setting."""
    if value is None and name in OPTIONAL_FIELDS:
        return None
    if name in INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"launcher.{name} ({where}) must be an integer, got {shown(value)}")
        if value < 1:
            raise UserError(f"launcher.{name} ({where}) must be at least 1, got {value}")
        if name == "master_port" and value > 65535:
            raise UserError(f"launcher.master_port ({where}) must be a TCP port (1-65535), got {value}")
        return value
    if name in TRISTATE_FIELDS:
        if isinstance(value, bool) or value == "auto":
            return value
        raise UserError(f"launcher.{name} ({where}) must be auto, true or false, got {shown(value)}")
    if name == "entry":
        if value not in ENTRIES:
            raise UserError(f"launcher.entry ({where}) must be one of {', '.join(ENTRIES)}, got {shown(value)}")
        return value
    if name == "runner":
        if value not in RUNNERS:
            near = did_you_mean(str(value), RUNNERS, prefix="")
            raise UserError(f"launcher.runner ({where}) must be auto or torchrun, got {shown(value)}",
                            (f"{near} " if near else "") + "auto starts exactly one process here without torchrun "
                            "(torchrun otherwise); torchrun always uses torchrun")
        return value
    if name == "env":
        if not isinstance(value, dict):
            raise UserError(f"launcher.env ({where}) must be a mapping of variable names to values")
        return {_env_name(k, where): _env_value(k, v, where) for k, v in value.items()}
    if name in SECTIONS:
        if not isinstance(value, dict):
            raise UserError(f"launcher.{name} ({where}) must be a mapping")
        known, _ = _slurm_fields(name)
        for key in value:
            if key not in known:
                hint = did_you_mean(str(key), known, n=3, cutoff=0.75) or f"known: {', '.join(sorted(known))}"
                raise UserError(f"unknown {SECTIONS[name]} setting '{key}' in {where}", hint)
        return dict(value)
    if name == "packages":
        return _package_names(value, where)
    if name == "master_addr" and not HOST_NAME.fullmatch(str(value)):
        # it becomes torchrun's rendezvous endpoint on every node: a host name or an IPv4/IPv6 address
        raise UserError(f"launcher.master_addr ({where}) must be a host name or IP address, got {shown(value)}",
                        "e.g. --set master_addr=node001 or --set master_addr=10.0.0.1")
    if name == "gpu":
        return gpu_by_name(str(value)).name
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise UserError(f"launcher.{name} ({where}) must be a string, got {shown(value)}")
    if not str(value).strip():
        raise UserError(f"launcher.{name} ({where}) must not be empty")
    return str(value)


MAX_PACKAGES = 64
PACKAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def _package_names(value: Any, where: str) -> tuple[str, ...]:
    """launcher.packages: a list of distribution names, or one string of them ("a b" / "a,b")."""
    items = value if isinstance(value, list) else re.split(r"[,\s]+", str(value).strip()) if value else []
    names = [str(item) for item in items if str(item)]
    if len(names) > MAX_PACKAGES:
        raise UserError(f"launcher.packages ({where}) lists {len(names)} packages; at most {MAX_PACKAGES}")
    bad = [shown(n) for n in names if not PACKAGE_NAME.fullmatch(n)]
    if bad:
        raise UserError(f"launcher.packages ({where}) holds names that are not Python distribution names: "
                        f"{', '.join(bad)}", "e.g. --set packages=nvidia-resiliency-ext,emerging-optimizers")
    return tuple(dict.fromkeys(n.lower().replace("_", "-") for n in names))


def _env_name(name: Any, where: str) -> str:
    if not is_env_name(name):
        raise UserError(f"{shown(name)} in launcher.env ({where}) is not a valid environment variable name",
                        "use letters, digits and underscores, not starting with a digit")
    return name


def _env_value(name: str, value: Any, where: str) -> str | None:
    if value is None:  # null: the ranks do not see the variable, even one the launch inherits
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (str, int, float)):
        redaction.remember(name, value)
        return str(value)
    raise UserError(f"launcher.env.{name} ({where}) must be a single value, got {shown(value)}")


def _launcher_section(section: Any, where: str, problems: list[Problem]) -> dict[str, Any]:
    if section is None:
        return {}
    if not isinstance(section, dict):
        problems.append(Problem(f"'launcher' in {where} must be a mapping"))
        return {}
    out = {}
    for key, value in section.items():
        if key not in LAUNCHER_FIELDS:
            hint = did_you_mean(str(key), LAUNCHER_FIELDS, n=3, cutoff=0.75)
            if not hint and str(key) in megatron_args.catalog():
                hint = f"{key} is a Megatron setting: put it under megatron:"
            problems.append(Problem(f"unknown launcher setting '{key}' in {where}", hint))
            continue
        try:
            out[key] = _launcher_value(key, value, where)
        except UserError as exc:
            problems.extend(exc.problems)
    return out


@dataclass
class _Layer:
    description: str
    megatron: dict[str, Any]
    launcher: dict[str, Any]
    sources: list[str]


def _load_layer(path: Path, seen: tuple[Path, ...]) -> _Layer:
    path = Path(os.path.realpath(path))  # not Path.resolve(): a link to itself is a read error below, not a crash
    if path in seen:
        chain = " → ".join(p.name for p in (*seen, path))
        raise UserError(f"preset files include each other in a loop: {shown(chain)}")
    if len(seen) >= MAX_BASE_CHAIN:
        raise UserError(f"{path} is more than {MAX_BASE_CHAIN} base: files deep",
                        "fold some of the base presets into one file")
    data = _read_yaml(path)
    where = str(path)
    problems = []
    for key in data:
        if key in TOP_LEVEL_KEYS:
            continue
        if str(key) in megatron_args.catalog():
            problems.append(Problem(f"'{key}' in {where} is a Megatron setting", "put it under megatron:"))
        else:
            problems.append(megatron_args.unknown_name_problem(str(key), where, TOP_LEVEL_KEYS))
    if "base" in data:
        base_ref = data["base"]
        if not isinstance(base_ref, str):
            raise UserError(f"'base' in {where} must be a preset name or path")
        layer = _load_layer(_resolve(base_ref, path.parent), (*seen, path))
    else:
        layer = _Layer("", {}, {}, [])
    megatron = _flatten_megatron(data.get("megatron"), where, problems)
    launcher = _launcher_section(data.get("launcher"), where, problems)
    if problems:
        raise UserError(problems)
    layer.megatron.update(megatron)
    _merge_launcher(layer.launcher, launcher)
    if data.get("description") is not None:
        if isinstance(data["description"], (bytes, bytearray)) or not isinstance(data["description"],
                                                                                 (str, int, float)):
            raise UserError(f"description in {where} must be text, got {type(data['description']).__name__}",
                            "write the description as a plain string")
        layer.description = str(data["description"])
    elif "base" in data and layer.description:  # the base's words describe the base, not this preset
        layer.description = f"based on {Path(str(data['base'])).stem}: {layer.description}"
    layer.sources.append(str(path))
    return layer


def _merge_launcher(into: dict[str, Any], layer: dict[str, Any]) -> None:
    for key, value in layer.items():
        if key in ("env", *SECTIONS) and key in into:
            into[key] = {**into[key], **value}
        else:
            into[key] = value


def parse_override(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise UserError(f"--set {shown(text)} is not NAME=VALUE", "for example --set tensor_model_parallel_size=4")
    return name, value


def override_name(text: str) -> str:
    """The setting a --set item names, as apply_override reads it (`launcher.X` and `megatron.X` are X); never raises:
    a run's manifest, which anyone may have written, records the items of each attempt."""
    return text.partition("=")[0].strip().removeprefix("launcher.").removeprefix("megatron.")


def unused_backend_overrides(overrides: tuple[str, ...], slurm: bool, k8s: bool) -> list[str]:
    """`--set slurm.X` / `--set k8s.X` given for a job that runs elsewhere: typed for a cluster, used by none.
    (A preset file's own sections are not judged: one preset serves every backend.)"""
    used = {"slurm": slurm, "k8s": k8s}
    unused = [name for name, _ in map(parse_override, overrides)
              if name.partition(".")[0] in used and not used[name.partition(".")[0]]]
    if not unused:
        return []
    where = "on Kubernetes" if k8s else "on Slurm" if slurm else "here"
    flags = {"slurm": "--slurm or --submit", "k8s": "--k8s"}
    needed = sorted({f"{SECTIONS[name.partition('.')[0]]} ({flags[name.partition('.')[0]]})" for name in unused})
    return [f"--set {', '.join(unused)}: only a job for {' or '.join(needed)} uses "
            f"{'it' if len(unused) == 1 else 'them'}; this one runs {where} and ignores "
            f"{'it' if len(unused) == 1 else 'them'}"]


def _override_value(raw: str) -> Any:
    """Scalars typed as YAML would (true, 8, [a, b]); Megatron's types refine them afterwards."""
    if raw == "":
        return ""
    try:
        return untrusted.load_yaml(raw, "--set value")
    except UserError:  # not YAML (or a value YAML cannot build, like 2024-13-45): the text as given
        return raw


def apply_overrides(layer: _Layer, overrides: list[str]) -> None:
    problems: list[Problem] = []
    for text in overrides:
        try:
            name, raw = parse_override(text)
            _apply_one(layer, name, raw)
        except UserError as exc:
            problems.extend(exc.problems)
    if problems:
        raise UserError(problems)


def _apply_one(layer: _Layer, name: str, raw: str) -> None:
    where = f"--set {name}"
    head, _, rest = name.partition(".")
    if head in ("env", *SECTIONS) and rest:
        # Slurm names and times stay text: YAML would read --set slurm.time=1:00:00 as the number 3600.
        value = raw if head == "env" or rest in _slurm_fields(head)[1] else _override_value(raw)
        if head in SECTIONS and raw.strip().lower() in ("null", "none", "~"):
            value = None  # unset: the setting's default, or nothing requested
        if head == "env" and raw.strip() in ("null", "~"):
            value = None  # unset for the ranks (YAML's null; "none" stays text, a value some variables take)
        typed = _launcher_value(head, {rest: value}, where)
        _merge_launcher(layer.launcher, {head: typed})
        return
    name = name.removeprefix("launcher.").removeprefix("megatron.")
    if name in LAUNCHER_FIELDS:
        value = raw if name in TEXT_FIELDS else _override_value(raw)
        layer.launcher[name] = _launcher_value(name, value, where)
        return
    if name not in megatron_args.catalog() and name not in megatron_args.flag_aliases():
        raise UserError([megatron_args.unknown_name_problem(name, where, LAUNCHER_FIELDS)])
    # Megatron's own type decides: lr=3e-4 is a float, data_path="1 a 1 b" a list, tokenizer_type a string.
    dest, typed = type_megatron_value(name, _megatron_text(name, raw), where)
    layer.megatron.pop(dest, None)  # an override moves to the end, so the argv shows it last
    layer.megatron[dest] = typed


def _megatron_text(name: str, raw: str) -> Any:
    stripped = raw.strip()
    if stripped.startswith("["):
        return _override_value(stripped)
    if stripped.lower() in ("null", "none", "~"):
        return None
    return stripped


def _refuse_nul(layer: _Layer) -> None:
    """A NUL byte ends a C string: in a path, an argv word or an environment value it cannot be passed on (exec and
    open refuse it), so a setting holding one is refused here, before anything is created."""
    values: list[tuple[str, Any]] = [("description", layer.description)]
    values += [(f"megatron.{k}", v) for k, v in layer.megatron.items()]
    for key, value in layer.launcher.items():
        if isinstance(value, dict):
            values += [(f"launcher.{key}.{k}", v) for k, v in value.items()]
            values += [(f"launcher.{key} name {k!r}", k) for k in value]
        else:
            values.append((f"launcher.{key}", value))
    bad = [name for name, value in values
           if any("\0" in str(item) for item in (value if isinstance(value, list) else [value]))]
    if bad:
        raise UserError([Problem(f"{name} holds a NUL byte (\\0), which no path, argument or environment "
                                 "value can hold", "remove the \\0 from the preset") for name in bad])


def load_preset(ref: str, overrides: list[str] | tuple[str, ...] = ()) -> Preset:
    path = _resolve(ref)
    layer = _load_layer(path, ())
    apply_overrides(layer, list(overrides))
    _refuse_nul(layer)
    name = path.stem
    launcher = replace(LauncherSettings(), **layer.launcher)
    return Preset(
        name=name,
        description=layer.description,
        megatron=layer.megatron,
        launcher=launcher,
        sources=tuple(layer.sources),
        overrides=tuple(overrides),
    )
