"""`launch show PRESET` and `launch diff A B`: what a preset resolves to, and how two presets or runs differ.

Both read presets as `launch` does (base: layering, --set overrides) and compare Megatron settings with
Megatron's own defaults from the argument catalog (launcher/data/megatron_args.json). Neither imports torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from launcher.errors import Problem, UserError
from launcher.megatron import args as megatron_args
from launcher.pipeline.preset import Preset, load_preset
from launcher.pipeline.resolve import ResolvedJob
from launcher.runs.rundir import MANIFEST, PRESET_FILE
from launcher.runs.secrets import redact_argv, redact_env

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
    for name in (f.name for f in fields(preset.launcher)):
        value = getattr(preset.launcher, name)
        if name == "env":  # the one secret rule: a secret's value is never shown
            value = redact_env(value)
        if isinstance(value, Mapping):
            flat.update({f"{name}.{key}": _plain(inner) for key, inner in value.items()})
        else:
            flat[name] = value
    return flat


def job_launcher_settings(job: ResolvedJob) -> dict[str, Any]:
    """The launcher's settings as the job runs them: its world and entry (which resolve may have changed: a
    one-GPU machine, --nodes, the toy's fallback), secrets masked."""
    flat = launcher_settings(job.preset)
    flat.update(nodes=job.nodes, gpus_per_node=job.gpus_per_node, entry=job.entry)
    for name, value in job.environment.shown().items():
        if f"env.{name}" in flat:
            flat[f"env.{name}"] = value
    return flat


def differing_from_defaults(megatron: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each Megatron setting whose value differs from Megatron's default: dest, value, default, flags."""
    catalog = megatron_args.catalog()
    rows = []
    for dest, value in megatron.items():
        default = catalog[dest].default
        if value is None or _plain(value) == _plain(default):
            continue
        rows.append({"dest": dest, "value": _plain(value), "default": _plain(default), "flags": _flags(dest, value)})
    return rows


def show_data(job: ResolvedJob, problems: list[Problem]) -> dict[str, Any]:
    """Everything `show` says about a job; the fields it shares with the dry-run's JSON hold the same values."""
    preset = job.preset
    rows = differing_from_defaults(job.megatron)
    for row in rows:
        row["by"] = "launcher" if row["dest"] in job.added else "preset"
    return {
        "preset": preset.name, "description": preset.description, "sources": list(preset.sources),
        "overrides": redact_argv(preset.overrides), "entry": job.entry, "target": job.target.describe(),
        "nodes": job.nodes, "gpus_per_node": job.gpus_per_node,
        "layout": job.layout.as_dict() if not problems else None,
        "launcher": job_launcher_settings(job), "env": job.environment.shown(),
        "megatron": {k: _plain(v) for k, v in job.megatron.items()}, "added": {k: _plain(v) for k, v in
                                                                             job.added.items()},
        "differs_from_megatron_defaults": rows, "notes": list(job.notes), "warnings": list(job.warnings),
        "run_dir": str(job.run_dir) if job.run_dir is not None else None,
        "problems": [p.render() for p in problems],
    }


def show(job: ResolvedJob, problems: list[Problem], fmt: str) -> str:
    """The resolved job: its sources, launcher settings, and the Megatron flags that differ from Megatron's
    defaults, including what the launcher decides for it (entry, micro batch, settings for a missing TE/apex).
    `job` and `problems` are resolve.attempt's for the arguments a dry-run would get (cli.job.job_for)."""
    data = show_data(job, problems)
    if fmt == "json":
        return json.dumps(data, indent=2, default=str) + "\n"
    preset, rows, settings = job.preset, data["differs_from_megatron_defaults"], data["launcher"]
    lines = [f"# preset {preset.name}" + (f": {' '.join(preset.description.split())}" if preset.description else "")]
    lines += [f"# from {source}" for source in preset.sources]
    if preset.overrides:
        lines.append("# overrides: " + " ".join(f"--set {o}" for o in data["overrides"]))
    lines.append(f"# entry {job.entry}; world {job.nodes} node(s) × {job.gpus_per_node} GPU(s)")
    lines += [f"# note: {' '.join(n.split())}" for n in job.notes]
    lines += [f"# warning: {' '.join(w.split())}" for w in job.warnings]
    lines += [f"# problem: {' '.join(p.message.split())}" for p in problems]
    lines.append("")
    lines.append("launcher settings:")
    width = max(len(name) for name in settings)
    # a null under env unsets the variable for the ranks (launcher.env), said so rather than "None"
    lines += [f"  {name:<{width}}  {'unset' if value is None and name.startswith('env.') else value}"
              for name, value in settings.items()]
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


RUN_DIRECTORY = "<run directory>"  # a side's own run directory, in the settings that point into it


@dataclass(frozen=True)
class Side:
    """One side of `launch diff`: the preset as written, and where it ran (a run directory's) or would run."""

    preset: Preset
    run_dir: Path | None = None
    slurm: bool = False
    k8s: bool = False
    world: tuple[int | None, int | None] = (None, None)


def read_side(ref: str) -> Side:
    preset = load_side(ref)
    path = Path(ref)
    if not path.is_dir():
        return Side(preset)
    from launcher.runs.cluster_job import JOBSET, SLURM_SCRIPT
    from launcher.runs.listing import _json

    world = (_json(path / MANIFEST) or {}).get("world")
    world = world if isinstance(world, dict) else {}
    nodes, gpus = world.get("nodes"), world.get("gpus_per_node")
    return Side(preset, path.absolute(), slurm=(path / SLURM_SCRIPT).is_file(), k8s=(path / JOBSET).is_file(),
                world=(nodes if isinstance(nodes, int) else None, gpus if isinstance(gpus, int) else None))


def resolved(side: Side, like: Side) -> Preset:
    """The side's Megatron settings as they run: a run directory's preset.yaml is resolved already (as launched);
    a preset is resolved now, where and on the world `like` (the other side, when it is a run directory) ran, so
    that an unchanged run and its preset differ in nothing. Paths into a side's own run directory read
    RUN_DIRECTORY on both sides."""
    from dataclasses import replace

    from launcher.cli.job import JobRequest, job_for

    run_dir: Path | None = side.run_dir
    if run_dir is not None:
        megatron = dict(side.preset.megatron)
    else:
        where = like if like.run_dir is not None else side
        job, _ = job_for(side.preset, JobRequest(*where.world, slurm=where.slurm, k8s=where.k8s, local=False))
        megatron, run_dir = dict(job.megatron), job.run_dir
    if run_dir is not None:
        megatron = {dest: _in_run_dir(value, str(run_dir)) for dest, value in megatron.items()}
    return replace(side.preset, megatron=megatron)


def _in_run_dir(value: Any, run_dir: str) -> Any:
    if isinstance(value, str) and (value == run_dir or value.startswith(run_dir + "/")):
        return RUN_DIRECTORY + value[len(run_dir):]
    return value


def diff(a_ref: str, b_ref: str, fmt: str) -> str:
    """Side by side, every setting whose value differs, each side resolved as it runs (resolved): Megatron's as
    Megatron sees them (defaults filled in for what one side leaves unset), then the launcher's."""
    sides = read_side(a_ref), read_side(b_ref)
    a, b = resolved(sides[0], sides[1]), resolved(sides[1], sides[0])
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
