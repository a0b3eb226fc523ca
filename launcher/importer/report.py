"""After an import: the launcher's own checks on the new preset, and the round trip (the preset's argv against the
source's, flag by flag, apart from what the launcher adds on purpose or the import had to replace)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.errors import Problem, UserError
from launcher.importer.build import Imported
from launcher.importer.flags import read_flags


@dataclass
class Outcome:
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    layout: str = ""
    argv: list[str] = field(default_factory=list)  # the preset's Megatron flags, as a dry-run would give them
    added: dict[str, Any] = field(default_factory=dict)  # what the launcher adds on purpose
    differences: list[str] = field(default_factory=list)  # round-trip differences beyond those


def preset_argv(preset: Any) -> tuple[list[str], dict[str, Any], Any, list[Problem]]:
    """(Megatron flags, settings the launcher added, resolved job or None, problems) for a preset as declared,
    as its dry-run would resolve it."""
    from launcher.pipeline import resolve as resolving
    from launcher.pipeline.command import build_command, script_args

    kernels = resolving.kernels_of(preset, resolving.HERE)
    try:
        job = resolving.resolve(preset, kernels=kernels)
    except UserError as exc:
        unchecked, _ = resolving.resolve_settings(preset, preset.launcher.nodes, preset.launcher.gpus_per_node,
                                                  kernels=kernels)
        return script_args(unchecked.preset.megatron), dict(unchecked.added), None, exc.problems
    added = dict(job.added)
    if preset.megatron.get("micro_batch_size") != job.preset.megatron.get("micro_batch_size"):
        added["micro_batch_size"] = job.preset.megatron["micro_batch_size"]
    return build_command(job).script_args, added, job, []


def round_trip(source_args: list[str], argv: list[str], ignore: set[str]) -> list[str]:
    """Differences between two Megatron argvs, setting by setting (typed, so 6.0e-5 equals 6e-05)."""
    ours, theirs = read_flags(argv), read_flags(source_args)
    out = []
    for dest in sorted((set(ours.settings) | set(theirs.settings)) - ignore):
        mine, source = ours.settings.get(dest, "(absent)"), theirs.settings.get(dest, "(absent)")
        if mine != source:
            out.append(f"{dest}: the script gives {source}, the preset {mine}")
    return out


def check_import(imported: Imported, preset_path: Path) -> Outcome:
    from launcher.pipeline.preset import load_preset

    preset = load_preset(str(preset_path))
    argv, added, plan, problems = preset_argv(preset)
    outcome = Outcome(problems=problems, argv=argv, added=added)
    if plan is not None:
        lay = plan.layout
        outcome.layout = (f"world {lay.world_size} = {plan.nodes} × {plan.gpus_per_node}: TP {lay.tp} · PP {lay.pp} "
                          f"· CP {lay.cp} · DP {lay.dp}")
        outcome.warnings = list(plan.warnings)
    outcome.differences = round_trip(imported.script_args, argv, set(added) | set(imported.replaced))
    return outcome


def render(imported: Imported, outcome: Outcome, where: str) -> str:
    lines = [f"imported: {len(imported.settings)} Megatron settings, launcher "
             + ", ".join(f"{k} {v}" for k, v in imported.launcher.items())
             + (f", env {' '.join(imported.env)}" if imported.env else "") + f" → {where}"]
    if imported.not_carried:
        lines.append(f"not carried ({len(imported.not_carried)}; each is a comment at the top of the preset):")
        lines += [f"  {n}" for n in imported.not_carried]
    if imported.replaced:
        lines.append("replaced: " + ", ".join(sorted(imported.replaced)))
    lines += [f"warning: {w}" for w in imported.warnings]
    if outcome.problems:
        lines.append(f"launcher checks: {len(outcome.problems)} problem(s)")
        lines += ["  " + line for p in outcome.problems for line in p.render().splitlines()]
    else:
        lines.append(f"launcher checks: ok ({outcome.layout})")
    lines += [f"  warning: {w}" for w in outcome.warnings]
    ignored = sorted(set(outcome.added) | set(imported.replaced))
    if outcome.differences:
        lines.append("round trip: the preset's argv differs from the script's:")
        lines += [f"  {d}" for d in outcome.differences]
    else:
        lines.append("round trip: the preset's argv equals the script's, flag by flag"
                     + (f" (apart from {', '.join(ignored)})" if ignored else ""))
    return "\n".join(lines) + "\n"
