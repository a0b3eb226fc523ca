"""Ask the pinned Megatron itself whether an argv is valid: its parser, validate_args, microbatch
calculator and TransformerConfig, run in a subprocess of the interpreter that has megatron-core.

The launcher never imports torch; launcher/inside/verdict_worker.py does, in its own process. One worker serves
many checks (the import costs ~5-10 s, a check ~35 ms), so a grid of hundreds of layouts takes seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from launcher import install_command
from launcher.checks.megatron_python import TARGET_ENV_PREFIXES, WorkerProcess, find_megatron_python
from launcher.errors import UserError, closest
from launcher.inside.megatron_ext.coverage import NORM_FEATURES
from launcher.megatron import args as megatron_args
from launcher.megatron.effective import PRETRAIN_GPT_DEFAULTS
from launcher.megatron.target import AssumedMachine
from launcher.pipeline.environment import uses_megatron_ext
from launcher.pipeline.runner import rank_environment

WORKER = Path(__file__).resolve().parent.parent / "inside" / "verdict_worker.py"
# The launcher's own process variables (and those torchrun gives a rank, which a direct run exports): never
# forwarded to Megatron's checks.
NOT_FORWARDED = {"PYTHONPATH", *rank_environment()}


@dataclass(frozen=True)
class Verdict:
    """Megatron's answer for one argv: ok, or the stage that failed and Megatron's own message."""

    ok: bool
    stage: str = "done"
    error: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    suggestions: dict[str, str] = field(default_factory=dict)
    rewrites: list[dict[str, Any]] = field(default_factory=list)  # flags validate_args changed in place
    warnings: list[str] = field(default_factory=list)  # what validate_args / TransformerConfig warned
    not_checked: list[str] = field(default_factory=list)  # needs the target machine itself (CUDA, TE import)
    # the check of Megatron's source that refused: {"file": "megatron/training/arguments.py", "line", "function"}
    where: dict[str, Any] | None = None

    @property
    def check_site(self) -> str:
        """'megatron/training/arguments.py:1187 (validate_args)', or '' when the refusal names no line of Megatron."""
        if not self.where:
            return ""
        return f"{self.where['file']}:{self.where['line']} ({self.where['function']})"

    def render(self) -> str:
        if self.ok:
            return "ok" + "".join(f"\n  not checked here: {text}" for text in self.not_checked)
        text = f"{self.stage}: {self.error}" + (f" (at {self.check_site})" if self.check_site else "")
        for flag, near in self.suggestions.items():
            text += f"\n  {flag}: did you mean {near}?"
        return text


@dataclass(frozen=True)
class Request:
    argv: Sequence[str]
    world_size: int
    env: Mapping[str, str] = field(default_factory=dict)
    apex: bool = False  # whether the GPU machine has NVIDIA apex (picks Megatron's LayerNorm at model build)
    te: bool = False  # whether it has Transformer Engine (answers Megatron's TE version questions)
    capability: tuple[int, int] = (9, 0)  # its CUDA compute capability (Hopper unless the preset says)
    packages: tuple[str, ...] = ()  # other Python distributions the target has (a failure importing one: not here)
    norm_features: tuple[str, ...] = ()  # what the job's --spec implements in its own norm (coverage.NORM_FEATURES)

    def target(self) -> dict[str, Any]:
        return AssumedMachine("", self.te, self.apex, self.packages).as_request() | {
            "capability": list(self.capability), "norm_features": list(self.norm_features)}


def unknown_flags(parse_error: str) -> list[str]:
    """The flags argparse rejected, from 'unrecognized arguments: --num-layerz 24 --fp17'."""
    match = re.search(r"unrecognized arguments: (.*)", parse_error)
    if not match:
        return []
    return [word for word in match.group(1).split() if word.startswith("--")]


def nearest_flag(flag: str, known: Iterable[str]) -> str | None:
    return next(iter(closest(flag, known)), None)


class UpstreamChecker(WorkerProcess):
    """A running worker process; use as a context manager, then check() or check_many()."""

    def __init__(self, python: str | None = None, *, megatron_path: str | Path | None = None,
                 args_defaults: Mapping[str, Any] | None = None):
        found = python or find_megatron_python()
        if not found:
            raise UserError(
                "Megatron's own checks need megatron-core and torch, which this Python cannot import",
                f"{install_command('megatron')} (the README's `pip install -e '.[megatron]'`), or set "
                "MEGATRON_PYTHON to a python that has them",
            )
        self.python = found
        # The job's environment comes with each request (the target's); none of it may leak in from this shell.
        env = {k: v for k, v in os.environ.items() if not k.startswith(TARGET_ENV_PREFIXES)}
        env["MEGATRON_CHECK_EXTRA_ARGS"] = json.dumps(megatron_args.provider_specs())
        env["MEGATRON_CHECK_ARGS_DEFAULTS"] = json.dumps(dict(args_defaults or PRETRAIN_GPT_DEFAULTS))
        env["NO_VCS_VERSION"] = "1"  # skip the `git rev-parse` megatron runs at import
        if megatron_path is not None:
            # pretrain_gpt.py imports `megatron` from its own checkout, so check against that copy.
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(megatron_path), env.get("PYTHONPATH")]))
        hello = self._start(WORKER, env, "Megatron's checks")
        self.known_flags: list[str] = hello.get("flags", [])
        self.megatron_version: str = hello.get("version", "?")
        self.megatron_origin: str = hello.get("origin", "?")  # the directory `megatron` was imported from

    def _verdict(self, reply: Mapping[str, Any]) -> Verdict:
        if "fatal" in reply:
            raise RuntimeError(reply["fatal"])
        suggestions = {}
        if reply["stage"] == "parse":
            for flag in unknown_flags(reply["error"]):
                near = nearest_flag(flag, self.known_flags)
                if near:
                    suggestions[flag] = near
        return Verdict(reply["ok"], reply["stage"], reply["error"], reply.get("facts", {}), suggestions,
                       reply.get("rewrites", []), reply.get("warnings", []), reply.get("not_checked", []),
                       reply.get("where"))

    def check_many(self, requests: Sequence[Request]) -> list[Verdict]:
        """Checks in order; requests are written from a thread so neither pipe can fill up and stall."""
        assert self._proc.stdin is not None
        stdin = self._proc.stdin

        def feed() -> None:
            try:
                for req in requests:
                    line = {"argv": list(req.argv), "world_size": req.world_size, "env": dict(req.env),
                            "target": req.target()}
                    stdin.write(json.dumps(line) + "\n")
                stdin.flush()
            except BrokenPipeError:
                pass  # the worker died; _read reports why

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        verdicts = [self._verdict(self._read()) for _ in requests]
        writer.join()
        return verdicts

    def check(self, argv: Sequence[str], world_size: int, env: Mapping[str, str] | None = None,
              apex: bool = False, te: bool = False, capability: tuple[int, int] = (9, 0),
              packages: tuple[str, ...] = (), norm_features: tuple[str, ...] = ()) -> Verdict:
        return self.check_many([Request(argv, world_size, env or {}, apex, te, capability, packages,
                                        norm_features)])[0]


def target_env(job: Any) -> dict[str, str]:
    """The environment Megatron's checks see: the job's exports (resolve decided them, launcher.env included),
    without what torchrun sets per rank or what only finds the checkout."""
    return {k: v for k, v in job.environment.exported.items() if k not in NOT_FORWARDED}


def check_argvs(requests: Sequence[Request], python: str | None = None, **kwargs: Any) -> list[Verdict]:
    """One-shot helper: start a worker, check every request, stop it."""
    with UpstreamChecker(python, **kwargs) as checker:
        return checker.check_many(requests)


# -- `launch PRESET --check` --------------------------------------------------------------------------------

def _layout_line(job: Any) -> str:
    lay = job.layout
    vpp = f", virtual pipeline {lay.vpp}" if lay.vpp else ""
    return (f"world {lay.world_size} = {job.nodes} × {job.gpus_per_node}: TP {lay.tp} · PP {lay.pp} · "
            f"CP {lay.cp} · DP {lay.dp}{vpp}; {lay.num_microbatches} microbatch(es) of {lay.micro_batch_size}")


def target_packages(preset: Any, kernels: Any) -> tuple[str, ...]:
    """The Python packages the target has: launcher.packages, and where the kernels were looked up on this
    machine (a run here, a bare-metal Slurm login node), what this machine has of the table's packages."""
    from launcher.megatron import requirements

    found = requirements.packages_here() if kernels.how in ("detected", "login node") else {}
    # torchao is looked up whatever declares the kernels (FP8 without TE): what the dry-run found, the target has
    torchao = ("torchao",) if getattr(kernels, "torchao", False) else ()
    return tuple(dict.fromkeys([*preset.launcher.packages, *found, *torchao]))


def package_problems(job: Any, target: AssumedMachine) -> list[Any]:
    """The requirements table's Python packages the job's settings need and the target lacks."""
    from launcher.megatron import requirements
    from launcher.megatron.effective import effective_settings

    settings = effective_settings(job.megatron, job.layout.vpp).settings
    inventory = requirements.Inventory(target.transformer_engine, target.apex,
                                       packages={name: "" for name in target.packages})
    problems = []
    for row in requirements.applicable(settings, ["package"]):
        if not inventory.has(row)[0]:
            problem = requirements.missing_problem(row, settings, job.megatron, None, " on the target")
            problems.append(replace(problem, hint=f"{problem.hint}; or, if the target has it, declare it: "
                                                  f"launcher.packages: [{row.package}]"))
    return problems


def _assumed_lines(target: AssumedMachine, kernels: Any, env: Mapping[str, str], preset: Any) -> list[str]:
    how = "declared by the preset" if kernels.how == "preset" else "auto: as found on this machine"
    declared_env = set(preset.launcher.env)
    env_text = " ".join(f"{k}={v}" + ("" if k in declared_env else " (added by the launcher)")
                        for k, v in sorted(env.items())) or "none"
    return [f"assumed: {target.describe()} (GPU from launcher.gpu; kernels {how})", f"assumed: environment {env_text}"]


def _megatron_notes(verdict: Verdict) -> list[str]:
    lines = [f"  rewritten by validate_args: {r['flag']} {r['given']} → {r['now']}" for r in verdict.rewrites]
    lines += [f"  megatron warns: {text}" for text in verdict.warnings]
    return lines


def _launcher_lines(job: Any, problems: Sequence[Any]) -> list[str]:
    """The launcher's verdict: ok, ok with warnings (never a bare "ok" over a warning), or its problems."""
    if problems:
        return [f"launcher: {len(problems)} problem(s)",
                *("  " + line for p in problems for line in p.render().splitlines())]
    head = (f"launcher: accepted with {len(job.warnings)} warning(s)" if job.warnings else "launcher: ok")
    return [f"{head} ({_layout_line(job)})", *(f"  warning: {w}" for w in job.warnings)]


def disagreement(accepted: bool, problems: Sequence[Any], verdict: Verdict) -> str | None:
    """What the launcher and Megatron's checks disagree on, in one sentence; None when they agree.

    Megatron's checks reach its argument validation and config; a refusal of the launcher's for what comes later
    (model build, the first step, a save, the data files: any stage but "validate") is no disagreement."""
    if accepted and not verdict.ok:
        site = f" at {verdict.check_site}" if verdict.check_site else ""
        return (f"the launcher and Megatron disagree: the launcher accepted this job, and Megatron's {verdict.stage} "
                f"stage refuses it{site}: {verdict.error}. This is a check the launcher does not mirror yet; "
                "please report it with this output")
    refused_early = [p for p in problems if p.stage == "validate"]
    if verdict.ok and refused_early:
        said = "; ".join(p.message for p in refused_early)
        return (f"the launcher and Megatron disagree: the launcher refuses this job before launch ({said}), and "
                "Megatron's own checks accept it (the launcher's rule may be stricter than Megatron, or Megatron "
                "meets it only later, at model build or in training); please report it with this output")
    return None


def _launcher_only(job: Any, problems: Sequence[Any], target: AssumedMachine, kernels: Any, env: Mapping[str, str],
                   argv: Sequence[str], unasked: UserError, output_format: str, rehearse: bool = False) -> int:
    """--check where Megatron cannot be asked (no megatron-core): the launcher's verdict, and why Megatron's is
    missing; 2, since Megatron did not accept the job."""
    reason = unasked.problems[0]
    if output_format == "json":
        print(json.dumps({
            "world_size": job.nodes * job.gpus_per_node, "agree": None,
            "launcher": {"ok": not problems, "layout": job.layout.as_dict() if not problems else None,
                         "problems": [{"message": p.message, "hint": p.hint, "stage": p.stage} for p in problems],
                         "warnings": list(job.warnings) if not problems else []},
            "megatron": {"ok": None, "not_asked": reason.message, "hint": reason.hint},
            "argv": list(argv),
            **({"rehearsal": {"ok": None, "not_run": "Megatron could not be asked"}} if rehearse else {}),
        }, indent=1))
    else:
        print("\n".join(_assumed_lines(target, kernels, env, job.preset)))
        print("\n".join(_launcher_lines(job, problems)))
        print(f"megatron: not asked: {reason.message}\n  hint: {reason.hint}")
        if rehearse:
            print("rehearsal: not run (Megatron could not be asked)")
    return 2


def check_preset(job: Any, problems: list[Any], output_format: str = "text",
                 checker: UpstreamChecker | None = None, rehearse: bool = False) -> int:
    """Print the launcher's verdict and Megatron's own side by side; 0 only when both accept.

    `job` and `problems` are resolve.attempt's: Megatron is asked about the job exactly as it would run, even
    when the launcher refuses it. Megatron is imported from the checkout when there is one (pretrain_gpt.py
    imports it from there), else from the installed megatron-core. `checker` reuses a running worker.

    Megatron judges the target the preset declares: its launcher.env, its GPU (launcher.gpu) and its TE/apex,
    not this machine; the facts assumed are printed first. With `rehearse`, a job both accept is also rehearsed
    on CPU processes in its own parallel layout, shrunk (checks/rehearsal_ranks.py): a tiny model trained two
    steps, saved, and loaded at another TP·PP; 0 only when that works too."""
    from launcher.checks.resume import check_job
    from launcher.pipeline.command import script_args

    accepted = not problems
    if accepted and job.entry != "pretrain_gpt":
        why = f"entry {job.entry} takes no Megatron flags (the upstream script hard-codes its model)"
        if output_format == "json":  # asked for JSON: JSON, whatever the entry
            print(json.dumps({
                "world_size": job.world_size, "agree": True, "disagreement": None,
                "launcher": {"ok": True, "layout": job.layout.as_dict(), "problems": [],
                             "warnings": list(job.warnings)},
                "megatron": {"ok": None, "not_asked": why}, "argv": [],
                **({"rehearsal": {"ok": None, "not_run": why}} if rehearse else {})}, indent=1))
            return 0
        print(f"launcher: ok ({_layout_line(job)})\nmegatron: not asked: {why}"
              + (f"\nrehearsal: not run: {why}" if rehearse else ""))
        return 0
    preset, kernels, megatron_path = job.preset, job.kernels, job.megatron_path
    nodes, gpus_per_node = job.nodes, job.gpus_per_node
    argv, env = script_args(dict(job.megatron)), target_env(job)  # the command's flags, also when refused
    target = AssumedMachine(preset.launcher.gpu, kernels.transformer_engine, kernels.apex,
                            target_packages(preset, kernels))
    missing = package_problems(job, target)  # the launcher's own verdict on the target's packages
    checkout = megatron_path if megatron_path and (megatron_path / "megatron/training/arguments.py").is_file() else None
    try:
        started = contextlib.nullcontext(checker) if checker else UpstreamChecker(megatron_path=checkout)
    except UserError as exc:  # no megatron-core here: the launcher's own verdict still stands, said first
        return _launcher_only(job, [*problems, *missing], target, kernels, env, argv, exc, output_format, rehearse)
    with started as worker:
        verdict = worker.check(argv, nodes * gpus_per_node, env, apex=target.apex, te=target.transformer_engine,
                               capability=target.capability, packages=target.packages,
                               norm_features=NORM_FEATURES if uses_megatron_ext(job.megatron) else ())
        source = f"megatron-core {worker.megatron_version} from {worker.megatron_origin}"
        python = worker.python
    resume = check_job(job, python)  # the checkpoint under --load against the job, None where it loads none
    disagrees = disagreement(accepted, problems, verdict)
    agree = disagrees is None
    problems = [*problems, *missing]
    launcher_ok = accepted and not missing
    rehearsal = None
    if rehearse and launcher_ok and verdict.ok:
        from launcher.checks.rehearsal_ranks import rehearse_layout

        rehearsal = rehearse_layout(job, env)
    if output_format == "json":
        print(json.dumps({
            "world_size": nodes * gpus_per_node, "agree": agree, "disagreement": disagrees,
            "assumed": {"gpu": target.gpu, "capability": list(target.capability),
                        "transformer_engine": target.transformer_engine, "apex": target.apex,
                        "packages": list(target.packages), "kernels": kernels.how, "env": env},
            "launcher": {"ok": launcher_ok, "layout": job.layout.as_dict() if accepted else None,
                         "problems": [{"message": p.message, "hint": p.fix, "stage": p.stage} for p in problems],
                         "warnings": list(job.warnings) if accepted else []},
            "megatron": {"ok": verdict.ok, "stage": verdict.stage, "error": verdict.error, "facts": verdict.facts,
                         "suggestions": verdict.suggestions, "source": source, "rewrites": verdict.rewrites,
                         "warnings": verdict.warnings, "not_checked": verdict.not_checked,
                         "where": verdict.where},
            "argv": argv,
            **({"rehearsal": rehearsal.as_dict()} if rehearsal else
               {"rehearsal": {"ok": None, "not_run": "the launcher or Megatron refused the job"}} if rehearse else {}),
            **({"resume": resume.as_dict()} if resume else {}),
        }, indent=1))
    else:
        print("\n".join(_assumed_lines(target, kernels, env, preset)))
        print("\n".join(_launcher_lines(job, problems)))
        stages = "parser, validate_args, microbatch calculator, TransformerConfig, model-build checks"
        if verdict.ok and not verdict.not_checked:
            print(f"megatron: ok ({stages}: {verdict.facts.get('num_microbatches')} microbatch(es), padded vocab "
                  f"{verdict.facts.get('padded_vocab_size')})")
        elif verdict.ok:
            print("megatron: ok as far as this machine can tell")
            print("".join(f"  not checked here: {text}\n" for text in verdict.not_checked), end="")
        else:
            print("megatron: " + verdict.render().replace("\n", "\n  "))
        print("".join(line + "\n" for line in _megatron_notes(verdict)), end="")
        print(f"          ({source})")
        if disagrees:
            print(f"note: {disagrees}")
        if rehearsal is not None:
            print("\n".join(rehearsal.render()))
        elif rehearse:
            print("rehearsal: not run (the launcher or Megatron refused the job)")
        if resume is not None:
            print("\n".join(resume.render()))
    resumes = resume is None or resume.ok
    return 0 if launcher_ok and verdict.ok and resumes and (rehearsal is None or rehearsal.ok) else 2
