"""`launch show PRESET` and `launch diff A B`: what a preset resolves to, and how two presets or runs differ.

Both read presets as `launch` does (base: layering, --set overrides) and compare Megatron settings with
Megatron's own defaults from the argument catalog (launcher/data/megatron_args.json). Neither imports torch.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from launcher.errors import UserError
from launcher.megatron import args as megatron_args
from launcher.pipeline.preset import Preset, load_preset
from launcher.runs import secrets
from launcher.runs.rundir import MANIFEST, PRESET_FILE

NOT_SET = "(not set)"


def _flags(dest: str, value: Any) -> str:
    words = megatron_args.to_flags(megatron_args.catalog()[dest], value)
    return " ".join(words) if words else f"(no flag: {dest}={value!r} is Megatron's default)"


def _plain(value: Any) -> Any:
    """JSON-friendly: tuples as lists, everything else as it is."""
    if isinstance(value, tuple):
        return list(value)
    return value


def launcher_settings(preset: Preset) -> dict[str, Any]:
    """The launcher's settings flattened: env and slurm entries as env.NAME and slurm.NAME."""
    flat: dict[str, Any] = {}
    for name, value in asdict(preset.launcher).items():
        if name == "env":  # the one secret rule: a secret's value is never shown
            value = secrets.redact_env(value)
        if isinstance(value, dict):
            flat.update({f"{name}.{key}": _plain(inner) for key, inner in value.items()})
        else:
            flat[name] = value
    return flat


def differing_from_defaults(megatron: dict[str, Any]) -> list[dict[str, Any]]:
    """Each Megatron setting whose value differs from Megatron's default: dest, value, default, flags."""
    catalog = megatron_args.catalog()
    rows = []
    for dest, value in megatron.items():
        default = catalog[dest].default
        if value is None or _plain(value) == _plain(default):
            continue
        rows.append({"dest": dest, "value": _plain(value), "default": _plain(default), "flags": _flags(dest, value)})
    return rows


def show(preset_ref: str, overrides: list[str], nodes: int | None, gpus_per_node: int | None,
         fmt: str) -> str:
    """The resolved preset: its sources, launcher settings, and the Megatron flags that differ from Megatron's
    defaults, including what the launcher decides for it (entry, micro batch, settings for a missing TE/apex)."""
    from launcher.pipeline import resolve

    preset = load_preset(preset_ref, overrides)
    nodes, gpus_per_node, _ = resolve.world(preset, nodes, gpus_per_node)
    kernels = resolve.kernels_of(preset, resolve.HERE)
    job, problems = resolve.resolve_settings(preset, nodes, gpus_per_node, kernels=kernels)
    rows = differing_from_defaults(job.preset.megatron)
    for row in rows:
        row["by"] = "launcher" if row["dest"] in job.added or row["dest"] not in preset.megatron else "preset"
    settings = launcher_settings(preset)
    data: dict[str, Any] = {
        "preset": preset.name, "description": preset.description, "sources": list(preset.sources),
        "overrides": secrets.redact_argv(preset.overrides), "entry": job.entry, "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "launcher": settings, "megatron": {k: _plain(v) for k, v in job.preset.megatron.items()},
        "differs_from_megatron_defaults": rows, "notes": list(job.notes),
        "problems": [p.render() for p in problems],
    }
    if fmt == "json":
        return json.dumps(data, indent=2, default=str) + "\n"
    lines = [f"# preset {preset.name}" + (f": {' '.join(preset.description.split())}" if preset.description else "")]
    lines += [f"# from {source}" for source in preset.sources]
    if preset.overrides:
        lines.append("# overrides: " + " ".join(f"--set {o}" for o in secrets.redact_argv(preset.overrides)))
    lines.append(f"# entry {job.entry}; world {nodes} node(s) × {gpus_per_node} GPU(s)")
    lines += [f"# note: {' '.join(n.split())}" for n in job.notes]
    lines += [f"# problem: {' '.join(p.message.split())}" for p in problems]
    lines.append("")
    lines.append("launcher settings:")
    width = max(len(name) for name in settings)
    lines += [f"  {name:<{width}}  {value}" for name, value in settings.items()]
    lines.append("")
    lines.append(f"Megatron flags that differ from Megatron's defaults ({len(rows)}; 'launcher' = decided by the "
                 "launcher):")
    width = max((len(row["flags"]) for row in rows), default=0)
    for row in rows:
        by = "  (launcher)" if row["by"] == "launcher" else ""
        lines.append(f"  {row['flags']:<{width}}  # default: {row['default']}{by}")
    return "\n".join(lines) + "\n"


def load_side(ref: str) -> Preset:
    """A preset name or file, or a run directory (its resolved preset.yaml, as launched)."""
    path = Path(ref)
    if path.is_dir():
        if not (path / MANIFEST).exists() or not (path / PRESET_FILE).exists():
            raise UserError(f"{path} is a directory but not a run directory (no {MANIFEST} or {PRESET_FILE})",
                            "give a preset name, a preset file, or a run directory made by launch")
        preset = load_preset(str(path / PRESET_FILE))
        from dataclasses import replace

        return replace(preset, name=path.name)
    return load_preset(ref)


def diff(a_ref: str, b_ref: str, fmt: str) -> str:
    """Side by side, every setting whose value differs: Megatron's as Megatron sees them (defaults filled in for
    what one side leaves unset), then the launcher's."""
    a, b = load_side(a_ref), load_side(b_ref)
    rows: list[dict[str, Any]] = []
    for dest in dict.fromkeys([*a.megatron, *b.megatron]):
        va, vb = _plain(a.arg(dest)), _plain(b.arg(dest))
        if va != vb:
            rows.append({"setting": dest, "kind": "megatron", "a": va, "b": vb})
    la, lb = launcher_settings(a), launcher_settings(b)
    for name in dict.fromkeys([*la, *lb]):
        if la.get(name, NOT_SET) != lb.get(name, NOT_SET):
            rows.append({"setting": name, "kind": "launcher", "a": la.get(name, NOT_SET),
                         "b": lb.get(name, NOT_SET)})
    if fmt == "json":
        return json.dumps({"a": a_ref, "b": b_ref, "identical": not rows, "differences": rows}, indent=2,
                          default=str) + "\n"
    if not rows:
        return f"{a_ref} and {b_ref}: the same settings\n"
    header = ("setting", a_ref, b_ref)
    cells = [header] + [(("" if r["kind"] == "megatron" else "launcher.") + r["setting"], str(r["a"]), str(r["b"]))
                        for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(2)]
    lines = [f"{c[0]:<{widths[0]}}  {c[1]:<{widths[1]}}  {c[2]}" for c in cells]
    lines.insert(1, "-" * (widths[0] + widths[1] + 4 + max(len(c[2]) for c in cells)))
    return "\n".join(lines) + "\n"
