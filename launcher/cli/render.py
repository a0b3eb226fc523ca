"""Dry-run output: a commented header and a bash script pasteable as is (text), or one JSON object."""

from __future__ import annotations

import json

from launcher.estimate import summary as estimate
from launcher.estimate.formulas import human
from launcher.pipeline.checker import Layout
from launcher.pipeline.command import Command, flag_lines, kernel_summary
from launcher.pipeline.resolve import ResolvedJob
from launcher.pipeline.shell import shell_comment, shell_word
from launcher.runs.secrets import redact_argv, shell_export

_one_line = shell_comment  # a newline in a preset's description must not end the comment


def command_lines(command: Command) -> list[str]:
    """One flag (with its values) per line, continued with backslashes."""
    runner = command.shell_words()[:command.argv.index(command.script)]
    lines = [" ".join(runner),
             *("  " + line for line in [shell_word(command.script), *flag_lines(command.script_args)])]
    return [line + " \\" for line in lines[:-1]] + [lines[-1]]


def batch_line(lay: Layout) -> str:
    """The batch a step has: a step_batch_size_schedule's sizes where there is one (Megatron's global_batch_size is
    then only MBS·DP, not what a step trains on)."""
    step = lay.micro_batch_size * lay.dp
    sizes = lay.batch_schedule
    if sizes and step:
        counts = " → ".join(str(size // step) for size in sizes)
        return (f"# batch {' → '.join(map(str, sizes))} by step_batch_size_schedule = micro batch "
                f"{lay.micro_batch_size} × DP {lay.dp} × {counts} microbatch(es)")
    return (f"# batch {lay.global_batch_size} = micro batch {lay.micro_batch_size} × DP {lay.dp} × "
            f"{lay.num_microbatches} microbatch(es)")


def header(job: ResolvedJob) -> list[str]:
    p, lay = job.preset, job.layout
    facts = estimate.job_facts(job)
    about = f" ({_one_line(p.description)})" if p.description else ""
    lines = [f"# megatron-launch: preset {_one_line(p.name)}{about}"]
    lines.append(
        f"# world {lay.world_size} = {job.nodes} node(s) × {job.gpus_per_node} GPU(s) = "
        f"TP {lay.tp} · PP {lay.pp} · CP {lay.cp} · DP {lay.dp}" + (f", virtual pipeline {lay.vpp}" if lay.vpp else "")
    )
    lines.append(batch_line(lay))
    if job.elastic is not None:  # --nodes MIN-MAX: the layout above is the highest count's; each count's own
        lines.append(f"# elastic: --nodes {job.elastic.requested}, the job starts with "
                     f"{', '.join(map(str, job.elastic.counts))} node(s); at each, the global batch is kept:")
        lines += [f"#   {c.describe(lay.global_batch_size, lay.micro_batch_size)}" for c in job.elastic.valid]
        lines += [f"#   not {_one_line(line)}" for line in job.elastic.refusals()]
    vocab = facts["padded_vocab_size"] or "unknown: vocab_size is not set"
    lines.append(f"# parameters {human(facts['parameters'])} ({facts['parameters']:,}; padded vocab {vocab})")
    lines.append(f"# memory {estimate.summary_line(facts['estimate'])}")
    warning = estimate.memory_warning(facts["estimate"])
    if warning and not any(w.startswith(warning) for w in job.warnings):  # a judged job has it among its warnings
        lines.append(f"# warning: {warning}")
    if job.entry == "pretrain_gpt":
        lines.append("# " + kernel_summary(job))
    lines.append(f"# runs {job.runtime.describe(with_torchrun=not job.runner.direct)}")
    lines.append(f"# runner {job.runner.describe()}")
    if job.run_dir is not None:
        made = "the run's" if job.existing else "made at launch, not by a dry-run"
        lines.append(f"# run directory {_one_line(job.run_dir)} ({made}; its timestamp is the launch's)")
        if job.entry == "simple_loop":  # it checkpoints into $PWD/ckpt
            lines.append("# a launch runs this command with the run directory as its working directory "
                         "(upstream's loop writes ./ckpt); pasted, ./ckpt is made in the current directory")
    lines += [f"# note: {_one_line(n)}" for n in job.notes]
    lines += [f"# warning: {_one_line(w)}" for w in job.warnings]
    return lines


def text(job: ResolvedJob, command: Command) -> str:
    lines = header(job)
    if command.expand:
        count = f"{job.elastic.low} to {job.elastic.high}" if job.elastic is not None else str(job.nodes)
        lines.append(f"# run this same command on each of the {count} nodes; MASTER_ADDR is the first node")
        lines.append(': "${MASTER_ADDR:?set MASTER_ADDR to the hostname of the first node}"')
    # a secret is taken from the shell that runs the script, as command.sh and the sbatch script do
    lines += [shell_export(name, value, shell_word) for name, value in command.env.items()]
    lines += [f"unset {name}" for name in command.unset]  # names are checked: letters, digits, underscores
    lines += command_lines(command)
    return "\n".join(lines) + "\n"


def as_json(job: ResolvedJob, command: Command) -> str:
    facts = estimate.job_facts(job)
    data = {
        "preset": job.preset.name,
        "description": job.preset.description,
        "entry": job.entry,
        "target": job.target.describe(),
        "nodes": job.nodes,
        "gpus_per_node": job.gpus_per_node,
        **({"elastic": job.elastic.as_dict()} if job.elastic is not None else {}),
        "layout": job.layout.as_dict(),
        **facts,
        "argv": redact_argv(command.argv),
        "env": job.environment.shown(),
        **({"env_unset": list(command.unset)} if command.unset else {}),  # launcher.env's nulls
        "script": command.script,
        "runtime": {"python": job.runtime.python, "torchrun": job.runtime.torchrun, "how": job.runtime.how},
        "runner": {"name": job.runner.name, "why": job.runner.why},
        "script_args": command.script_args,
        "run_dir": str(job.run_dir) if job.run_dir is not None else None,
        "added": dict(job.added),
        "notes": list(job.notes),
        "warnings": list(job.warnings),
        "sources": list(job.preset.sources),
        "overrides": redact_argv(job.preset.overrides),
    }
    return json.dumps(data, indent=2) + "\n"
