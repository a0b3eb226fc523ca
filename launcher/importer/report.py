"""After an import: the launcher's own checks on the new preset, and the round trip (the preset's argv against the
source's, flag by flag, apart from what the launcher adds on purpose or the import had to replace)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.errors import Problem
from launcher.importer.bash_subset import unresolved_names
from launcher.importer.build import Imported, comment_text
from launcher.importer.flags import read_flags
from launcher.megatron import args as megatron_args

# a preset → (its job as a dry-run resolves it, every problem); given by the command line (cli.job.job_for)
ResolveJob = Callable[[Any], tuple[Any, list[Problem]]]


@dataclass
class Outcome:
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    layout: str = ""
    argv: list[str] = field(default_factory=list)  # the preset's Megatron flags, as a dry-run would give them
    added: dict[str, Any] = field(default_factory=dict)  # what the launcher adds on purpose
    differences: list[str] = field(default_factory=list)  # round-trip differences beyond those
    apart: list[str] = field(default_factory=list)  # what differs on purpose, each named (translated, harmless)
    lost: list[str] = field(default_factory=list)  # words of the script whose meaning the preset does not hold


def preset_argv(job: Any, problems: list[Problem]) -> tuple[list[str], dict[str, Any], Any, list[Problem]]:
    """(Megatron flags, settings the launcher added, the job when it passes its checks else None, problems) for
    a preset as its dry-run resolves it (resolve.attempt's job and problems)."""
    from launcher.pipeline.command import script_args

    return script_args(job.megatron), dict(job.added), None if problems else job, problems


def run_dir_settings(job: Any) -> set[str]:
    """The settings a launch points at its run directory (checkpoints, TensorBoard, W&B) where the preset gives none:
    the launcher's on purpose, and no part of the script the round trip compares."""
    from launcher.pipeline.run_paths import run_dir_megatron_args

    if job.run_dir is None:
        return set()
    return set(run_dir_megatron_args(job.run_dir, job.preset.megatron)) & set(job.added)


def _why_lost(words: list[str], why: str) -> str:
    """A word the script decides at run time is said by its variable, never by the reader's marker."""
    names = list(dict.fromkeys(n for word in words for n in unresolved_names(word)))
    if not names:
        return why
    return ", ".join(n if n.startswith("$") else "$" + n for n in names) + " is not known without running the script"


def round_trip(source_args: list[str], argv: list[str], ignore: set[str], set_aside: Sequence[str] = ()
               ) -> tuple[list[str], list[str], list[str]]:
    """(differences, lost words, what differs on purpose) between the script's Megatron words and the preset's
    argv: every word of the script, its unknown and ill-typed flags included, against the settings the preset
    passes (typed, so 6.0e-5 equals 6e-05; another release's flag by its translation). `ignore`: settings the
    launcher adds or the import replaced on purpose; `set_aside`: words of the script the import left out on purpose
    (Imported.set_aside)."""
    ours, theirs = read_flags(argv), read_flags(source_args)
    lost = [f"{w.text}: {_why_lost(w.words, w.why)}" for w in theirs.of_kind("lost") if w.text not in set_aside]
    aside = [w.text for w in theirs.of_kind("lost") if w.text in set_aside]
    out = []
    catalog = megatron_args.catalog()
    for dest in sorted((set(ours.settings) | set(theirs.settings)) - ignore):
        mine, source = ours.settings.get(dest, "(absent)"), theirs.settings.get(dest, "(absent)")
        if mine != source and repr(mine) != repr(source):  # repr: NaN equals NaN
            # an absent flag is Megatron's default: a translation to the pin's default (an older release's
            # --no-query-key-layer-scaling) is the same run without a word in the preset's argv
            given = mine if source == "(absent)" else source
            if "(absent)" in (mine, source) and dest in catalog and catalog[dest].default is not None \
                    and given == catalog[dest].default:
                continue
            out.append(f"{dest}: the script gives {source}, the preset {mine}")
    out += [f"the preset's argv: {w.text}: {w.why}" for w in ours.of_kind("lost", "harmless")]
    apart = []
    for kind, what in (("harmless", "not carried as harmless"), ("translated", "translated"),
                       ("converted", "converted to the pin's type")):
        words = theirs.of_kind(kind)
        if words:
            # the flag as written: `--name=VALUE` by its name (a value not known would show the reader's marker)
            apart.append(f"{len(words)} {what} ({', '.join(w.words[0].partition('=')[0] for w in words)})")
    if theirs.repeated:  # an earlier value of the flag is no word of the preset's argv: argparse drops it too
        apart.append(f"{len(theirs.repeated)} given more than once, the last value carried as argparse takes it "
                     f"({', '.join(dict.fromkeys(w.partition('=')[0] for w in theirs.repeated))})")
    if aside:
        apart.append(f"{len(aside)} not carried: data, checkpoint or logging values not known without running the "
                     f"script ({', '.join(map(comment_text, aside))})")
    return out, lost, apart


def check_import(imported: Imported, preset_path: Path, resolve_job: ResolveJob) -> Outcome:
    """`resolve_job` turns the written preset into the job its dry-run would run (cli.job.job_for)."""
    from launcher.errors import UserError
    from launcher.pipeline.preset import load_preset

    try:
        job, found = resolve_job(load_preset(str(preset_path)))
        argv, added, plan, problems = preset_argv(job, found)
    except UserError as exc:  # the preset itself is refused: every problem, with what the import lost, at once
        outcome = Outcome(problems=list(exc.problems))
        _, outcome.lost, outcome.apart = round_trip(imported.script_args, [], set(), imported.set_aside)
        outcome.differences = ["the preset's argv cannot be compared: the preset is refused before it resolves"]
        return outcome
    by_run_dir = run_dir_settings(job)
    outcome = Outcome(problems=problems, argv=argv, added={k: v for k, v in added.items() if k not in by_run_dir})
    if plan is not None:
        lay = plan.layout
        outcome.layout = (f"world {lay.world_size} = {plan.nodes} × {plan.gpus_per_node}: TP {lay.tp} · PP {lay.pp} "
                          f"· CP {lay.cp} · DP {lay.dp}")
        outcome.warnings = list(plan.warnings)
    outcome.differences, outcome.lost, outcome.apart = round_trip(imported.script_args, argv,
                                                                  set(added) | set(imported.replaced),
                                                                  imported.set_aside)
    outcome.differences += env_differences(imported.env, job.environment.exported)
    return outcome


def env_differences(script: dict[str, str], ranks: Any) -> list[str]:
    """The script's exported variables (NCCL_*, NVTE_*: numerics and communication) the ranks would not see as the
    script sets them: the round trip covers the environment too, not only the argv."""
    return [f"env {name}: the script exports {value}, the job's ranks get {ranks.get(name, '(unset)')}"
            for name, value in script.items() if ranks.get(name) != value]


def all_lost(imported: Imported, outcome: Outcome) -> list[str]:
    """What the import found lost, and what the round trip found beyond it (each named once, by its words)."""
    named = {n.partition(": ")[0] for n in imported.lost}
    return [*imported.lost, *(n for n in map(comment_text, outcome.lost) if n.partition(": ")[0] not in named)]


def render(imported: Imported, outcome: Outcome, where: str) -> str:
    carried = [f"{len(imported.settings)} Megatron settings"]
    if imported.launcher:  # nothing to name when the source set no launcher setting
        carried.append("launcher " + ", ".join(f"{k} {v}" for k, v in imported.launcher.items()))
    if imported.env:
        carried.append(f"env {' '.join(imported.env)}")
    lines = [f"imported: {', '.join(carried)} → {where}"]
    if imported.not_carried:
        lines.append(f"not carried ({len(imported.not_carried)}; each is a comment at the top of the preset):")
        lines += [f"  {n}" for n in imported.not_carried]
    if imported.translated:
        lines.append(f"carried in the pin's words ({len(imported.translated)}):")
        lines += [f"  {n}" for n in imported.translated]
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
    apart = ([f"{len(ignored)} added or replaced by the launcher ({', '.join(ignored)})"] if ignored else []) + \
        outcome.apart
    lost = all_lost(imported, outcome)
    if lost:
        lines.append(f"lost ({len(lost)}: the script's model, numerics or layout that the preset does not hold):")
        lines += [f"  {n}" for n in lost]
    if outcome.differences or lost:
        lines.append(f"round trip: the preset's argv differs from the script's "
                     f"({len(outcome.differences) + len(lost)}):")
        lines += [f"  {d}" for d in outcome.differences]
        lines += [f"  lost: {n.partition(': ')[0]}" for n in lost]
        if apart:
            lines.append("  and on purpose: " + "; ".join(apart))
    elif apart:
        lines.append("round trip: the preset's argv equals the script's, flag by flag, apart from: " + "; ".join(apart))
    else:
        lines.append("round trip: equal (every word of the script's training command is in the preset's argv)")
    return "\n".join(lines) + "\n"


def as_dict(imported: Imported, outcome: Outcome, written_to: str | None) -> dict[str, Any]:
    """What render() says, as one JSON object (`launch import --format json`), with the preset's text (and the
    file it was written to, with -o)."""
    return {
        "preset": imported.text, "written_to": written_to,
        "imported": {"megatron_settings": len(imported.settings), "launcher": dict(imported.launcher),
                     "env": sorted(imported.env)},
        "not_carried": list(imported.not_carried), "replaced": dict(imported.replaced),
        "warnings": list(imported.warnings),
        "launcher": {"ok": not outcome.problems, "layout": outcome.layout or None,
                     "problems": [{"message": p.message, "hint": p.hint} for p in outcome.problems],
                     "warnings": list(outcome.warnings)},
        # equal as the text says it: no difference and nothing lost (a lost word is a difference of the argv)
        "round_trip": {"equal": not outcome.differences and not all_lost(imported, outcome),
                       "differences": list(outcome.differences),
                       "lost": [n.partition(": ")[0] for n in all_lost(imported, outcome)],
                       "apart_from": sorted(set(outcome.added) | set(imported.replaced)),
                       "on_purpose": list(outcome.apart)},
    }
