"""Ask the pinned Megatron itself whether an argv is valid: its parser, validate_args, microbatch
calculator and TransformerConfig, run in a subprocess of the interpreter that has megatron-core.

The launcher never imports torch; launcher/inside/verdict_worker.py does, in its own process. One worker serves
many checks (the import costs ~5-10 s, a check ~35 ms), so a grid of hundreds of layouts takes seconds.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from launcher.errors import UserError
from launcher.megatron.pin import has_module

WORKER = Path(__file__).resolve().parent.parent / "inside" / "verdict_worker.py"
# pretrain_gpt.py calls parse_and_validate_args(args_defaults={'tokenizer_type': 'GPT2BPETokenizer'}).
PRETRAIN_GPT_DEFAULTS = {"tokenizer_type": "GPT2BPETokenizer"}
# Hopper (H100/H200): validate_args requires CUDA_DEVICE_MAX_CONNECTIONS=1 for TP/CP > 1 below arch 10.
DEFAULT_ARCH_MAJOR = 9


@dataclass(frozen=True)
class Verdict:
    """Megatron's answer for one argv: ok, or the stage that failed and Megatron's own message."""

    ok: bool
    stage: str = "done"
    error: str = ""
    facts: dict[str, Any] = field(default_factory=dict)
    suggestions: dict[str, str] = field(default_factory=dict)

    def render(self) -> str:
        if self.ok:
            return "ok"
        text = f"{self.stage}: {self.error}"
        for flag, near in self.suggestions.items():
            text += f"\n  {flag}: did you mean {near}?"
        return text


@dataclass(frozen=True)
class Request:
    argv: Sequence[str]
    world_size: int
    env: Mapping[str, str] = field(default_factory=dict)
    apex: bool = False  # whether the GPU machine has NVIDIA apex (picks Megatron's LayerNorm at model build)


def find_megatron_python() -> str | None:
    """The interpreter to run Megatron in: $MEGATRON_PYTHON, else this one if it has megatron-core and torch."""
    explicit = os.environ.get("MEGATRON_PYTHON")
    if explicit:
        return explicit
    return sys.executable if has_module("megatron.training") and has_module("torch") else None


def unknown_flags(parse_error: str) -> list[str]:
    """The flags argparse rejected, from 'unrecognized arguments: --num-layerz 24 --fp17'."""
    match = re.search(r"unrecognized arguments: (.*)", parse_error)
    if not match:
        return []
    return [word for word in match.group(1).split() if word.startswith("--")]


def nearest_flag(flag: str, known: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(flag, list(known), n=1, cutoff=0.6)
    return matches[0] if matches else None


class UpstreamChecker:
    """A running worker process; use as a context manager, then check() or check_many()."""

    def __init__(self, python: str | None = None, *, megatron_path: str | Path | None = None,
                 arch_major: int = DEFAULT_ARCH_MAJOR, args_defaults: Mapping[str, Any] | None = None):
        self.python = python or find_megatron_python()
        if not self.python:
            raise UserError(
                "Megatron's own checks need megatron-core and torch, which this Python cannot import",
                "pip install 'megatron-core==0.18.0' torch pyyaml, or set MEGATRON_PYTHON to a python that has them",
            )
        env = dict(os.environ)
        env["MEGATRON_CHECK_ARCH_MAJOR"] = str(arch_major)
        env["MEGATRON_CHECK_ARGS_DEFAULTS"] = json.dumps(dict(args_defaults or PRETRAIN_GPT_DEFAULTS))
        env["NO_VCS_VERSION"] = "1"  # skip the `git rev-parse` megatron runs at import
        if megatron_path is not None:
            # pretrain_gpt.py imports `megatron` from its own checkout, so check against that copy.
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(megatron_path), env.get("PYTHONPATH")]))
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives as long as the worker
        try:
            self._proc = subprocess.Popen(
                [self.python, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                text=True, env=env,
            )
        except OSError as exc:
            self._log.close()
            raise UserError(f"cannot start {self.python} for Megatron's checks: {exc}",
                            "set MEGATRON_PYTHON to a python that has megatron-core and torch") from None
        hello = self._read()
        if "ready" not in hello:
            self.close()
            raise UserError(f"Megatron's checks could not start: {hello.get('fatal', hello)}",
                            "run `launch doctor` to see what is missing")
        self.known_flags: list[str] = hello.get("flags", [])
        self.megatron_version: str = hello.get("version", "?")
        self.megatron_origin: str = hello.get("origin", "?")  # the directory `megatron` was imported from

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._log.seek(0)
            tail = self._log.read()[-2000:]
            return {"fatal": f"the worker exited (code {self._proc.wait()}): {tail.strip()}"}
        return json.loads(line)

    def _verdict(self, reply: Mapping[str, Any]) -> Verdict:
        if "fatal" in reply:
            raise RuntimeError(reply["fatal"])
        suggestions = {}
        if reply["stage"] == "parse":
            for flag in unknown_flags(reply["error"]):
                near = nearest_flag(flag, self.known_flags)
                if near:
                    suggestions[flag] = near
        return Verdict(reply["ok"], reply["stage"], reply["error"], reply.get("facts", {}), suggestions)

    def check_many(self, requests: Sequence[Request]) -> list[Verdict]:
        """Checks in order; requests are written from a thread so neither pipe can fill up and stall."""
        assert self._proc.stdin is not None
        stdin = self._proc.stdin

        def feed() -> None:
            try:
                for req in requests:
                    line = {"argv": list(req.argv), "world_size": req.world_size, "env": dict(req.env),
                            "target": {"apex": req.apex}}
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
              apex: bool = False) -> Verdict:
        return self.check_many([Request(argv, world_size, env or {}, apex)])[0]

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_check_env(argv: Sequence[str]) -> dict[str, str]:
    """The env Megatron needs on Hopper: CUDA_DEVICE_MAX_CONNECTIONS=1 once TP or CP exceeds 1."""
    sizes = {"--tensor-model-parallel-size": 1, "--context-parallel-size": 1}
    for i, word in enumerate(argv[:-1]):
        if word in sizes:
            sizes[word] = int(argv[i + 1])
    return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if max(sizes.values()) > 1 else {}


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


def check_preset(preset: Any, nodes: int | None, gpus_per_node: int | None, inputs: dict[str, Any],
                 output_format: str = "text", checker: UpstreamChecker | None = None) -> int:
    """Print the launcher's verdict and Megatron's own side by side; 0 only when both accept.

    `inputs` are resolve's (kernels, megatron_path, target, run directory, …): Megatron is asked about the job
    exactly as it would run. Megatron is imported from the checkout when there is one (pretrain_gpt.py imports
    it from there), else from the installed megatron-core. `checker` reuses a running worker."""
    from launcher.pipeline import resolve
    from launcher.pipeline.command import build_command, script_args

    kernels, megatron_path = inputs["kernels"], inputs.get("megatron_path")
    nodes, gpus_per_node, _ = resolve.world(preset, nodes, gpus_per_node, inputs.get("gpus_here"))
    inputs = {name: value for name, value in inputs.items() if name != "gpus_here"}  # the world is decided
    job, problems = None, []
    try:
        job = resolve.resolve(preset, nodes, gpus_per_node, **inputs)
    except UserError as exc:
        problems = exc.problems
    if job is not None and job.entry != "pretrain_gpt":
        print(f"launcher: ok ({_layout_line(job)})\nmegatron: not asked: entry {job.entry} takes no Megatron "
              "flags (the upstream script hard-codes its model)")
        return 0
    if job is not None:
        cmd = build_command(job)
        argv, env = cmd.script_args, {k: v for k, v in cmd.env.items() if k == "CUDA_DEVICE_MAX_CONNECTIONS"}
    else:  # the launcher refused: still ask Megatron about the flags the job would pass
        unchecked, _ = resolve.resolve_settings(preset, nodes, gpus_per_node, **inputs)
        argv = script_args(unchecked.preset.megatron)
        env = default_check_env(argv)
    checkout = megatron_path if megatron_path and (megatron_path / "megatron/training/arguments.py").is_file() else None
    with contextlib.nullcontext(checker) if checker else UpstreamChecker(megatron_path=checkout) as worker:
        verdict = worker.check(argv, nodes * gpus_per_node, env, apex=kernels.apex)
        source = f"megatron-core {worker.megatron_version} from {worker.megatron_origin}"
    agree = verdict.ok == (job is not None)
    if output_format == "json":
        print(json.dumps({
            "world_size": nodes * gpus_per_node, "agree": agree,
            "launcher": {"ok": job is not None, "layout": job.layout.as_dict() if job else None,
                         "problems": [{"message": p.message, "hint": p.hint, "stage": p.stage} for p in problems]},
            "megatron": {"ok": verdict.ok, "stage": verdict.stage, "error": verdict.error, "facts": verdict.facts,
                         "suggestions": verdict.suggestions, "source": source},
            "argv": argv,
        }, indent=1))
    else:
        if job is not None:
            print(f"launcher: ok ({_layout_line(job)})")
        else:
            print(f"launcher: {len(problems)} problem(s)")
            print("\n".join("  " + line for p in problems for line in p.render().splitlines()))
        stages = "parser, validate_args, microbatch calculator, TransformerConfig, model-build checks"
        if verdict.ok:
            print(f"megatron: ok ({stages}: {verdict.facts.get('num_microbatches')} microbatch(es), padded vocab "
                  f"{verdict.facts.get('padded_vocab_size')})")
        else:
            print("megatron: " + verdict.render().replace("\n", "\n  "))
        print(f"          ({source})")
        if not agree:
            print("note: the launcher and Megatron disagree about this layout; please report it with this output")
    return 0 if job is not None and verdict.ok else 2
