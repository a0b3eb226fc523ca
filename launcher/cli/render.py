"""Dry-run output: a commented header and a bash script pasteable as is (text), or one JSON object."""

from __future__ import annotations

import json
import shlex
from typing import Any

from launcher.estimate import formulas as estimate
from launcher.estimate.formulas import human, padded_vocab_size, parameter_count
from launcher.megatron import args as megatron_args
from launcher.megatron.pin import Kernels
from launcher.pipeline.command import Command, flag_lines
from launcher.pipeline.layout import Plan, model_args


def quote(word: str, expand: bool = False) -> str:
    """shlex.quote, except words that must expand ${VAR} go in double quotes (they hold no other $, ` or \\)."""
    if expand:
        return '"' + word + '"'
    return shlex.quote(word)


def _one_line(text: object) -> str:
    """Text for a `#` comment: a newline in a preset's description must not end the comment."""
    return " ".join(str(text).split())


def command_lines(command: Command) -> list[str]:
    """One flag (with its values) per line, continued with backslashes."""
    runner = command.argv[:command.argv.index(command.script)]
    lines = [" ".join(quote(w, i in command.expand) for i, w in enumerate(runner)),
             *("  " + line for line in [shlex.quote(command.script), *flag_lines(command.script_args)])]
    return [line + " \\" for line in lines[:-1]] + [lines[-1]]


def summary(plan: Plan, command: Command, kernels: Kernels) -> dict[str, Any]:
    # Megatron's view, with the flags the launcher adds for a missing TE/apex (they change attention and memory)
    args = model_args(plan, command.kernel_flags)
    layout = plan.layout
    return {
        "parameters": parameter_count(args, layout.tp),
        "padded_vocab_size": padded_vocab_size(args, layout.tp),
        "kernels": {"transformer_engine": kernels.transformer_engine, "apex": kernels.apex, "how": kernels.how},
        "estimate": estimate.summary(args, layout, plan.preset.launcher.gpu, plan.gpus_per_node),
    }


def header(plan: Plan, command: Command, kernels: Kernels) -> list[str]:
    p, lay = plan.preset, plan.layout
    facts = summary(plan, command, kernels)
    about = f" ({_one_line(p.description)})" if p.description else ""
    lines = [f"# megatron-launch: preset {_one_line(p.name)}{about}"]
    lines.append(
        f"# world {lay.world_size} = {plan.nodes} node(s) × {plan.gpus_per_node} GPU(s) = "
        f"TP {lay.tp} · PP {lay.pp} · CP {lay.cp} · DP {lay.dp}" + (f", virtual pipeline {lay.vpp}" if lay.vpp else "")
    )
    lines.append(
        f"# batch {lay.global_batch_size} = micro batch {lay.micro_batch_size} × DP {lay.dp} × "
        f"{lay.num_microbatches} microbatch(es)"
    )
    lines.append(f"# parameters {human(facts['parameters'])} ({facts['parameters']:,}; padded vocab "
                 f"{facts['padded_vocab_size']})")
    lines.append(f"# memory {estimate.summary_line(facts['estimate'])}")
    if plan.entry == "pretrain_gpt":
        found = (("Transformer Engine", kernels.transformer_engine), ("NVIDIA apex", kernels.apex))
        text = f"# kernels ({kernels.how}): " + ", ".join(
            [f"with {n}" for n, on in found if on] + [f"without {n}" for n, on in found if not on])
        if command.kernel_flags:
            text += " → " + " ".join(
                w for dest, v in command.kernel_flags.items() for w in _flags(dest, v))
        lines.append(text)
    lines += [f"# note: {_one_line(n)}" for n in plan.notes]
    lines += [f"# warning: {_one_line(w)}" for w in plan.warnings]
    return lines


def _flags(dest: str, value: object) -> list[str]:
    return megatron_args.to_flags(megatron_args.catalog()[dest], value)


def text(plan: Plan, command: Command, kernels: Kernels) -> str:
    lines = header(plan, command, kernels)
    if any(command.expand):
        lines.append(f"# run this same command on each of the {plan.nodes} nodes; MASTER_ADDR is the first node")
        lines.append(': "${MASTER_ADDR:?set MASTER_ADDR to the hostname of the first node}"')
    lines += [f"export {name}={shlex.quote(value)}" for name, value in command.env.items()]
    lines += command_lines(command)
    return "\n".join(lines) + "\n"


def as_json(plan: Plan, command: Command, kernels: Kernels) -> str:
    facts = summary(plan, command, kernels)
    data = {
        "preset": plan.preset.name,
        "description": plan.preset.description,
        "entry": plan.entry,
        "nodes": plan.nodes,
        "gpus_per_node": plan.gpus_per_node,
        "layout": plan.layout.as_dict(),
        **facts,
        "argv": command.argv,
        "env": command.env,
        "script": command.script,
        "script_args": command.script_args,
        "notes": list(plan.notes),
        "warnings": list(plan.warnings),
        "sources": list(plan.preset.sources),
        "overrides": list(plan.preset.overrides),
    }
    return json.dumps(data, indent=2) + "\n"
