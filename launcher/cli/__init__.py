"""Command line: argument parsing and error display only; the work happens in the pipeline modules.

    launch PRESET [--nodes N] [--gpus-per-node G] [--set NAME=VALUE ...] [--dry-run] [--format text|json]
                  [--slurm] [--submit] [--chain K] [--preflight]
    launch --resume RUN_DIR [--set NAME=VALUE ...] [--slurm] [--submit]
    launch list
    launch plan PRESET [--nodes N --gpus-per-node G | --gpus N] [--gpu NAME] [--top N] [--format text|json]
    launch report RUN_DIR | LOG...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace

from launcher.errors import UserError


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as UserError (exit 2, one line), not its own exit."""

    def error(self, message: str):
        raise UserError(f"{self.prog}: {message}", f"see {self.prog} --help")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def run_parser() -> _Parser:
    p = _Parser(prog="launch", description="Validate, print or run Megatron-LM GPT training from a preset.",
                epilog="Other commands: " + ", ".join(f"launch {name}" for name in SUBCOMMANDS))
    p.add_argument("preset", nargs="?",
                   help="a preset name from configs/ (toy, 345m, 175b, …) or a path to a YAML file")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a run directory made by an earlier launch (same preset and checkpoints)")
    p.add_argument("--nodes", type=_positive,
                   help="number of nodes (default: the preset's for a dry-run or Slurm, 1 for a run here)")
    p.add_argument("--gpus-per-node", type=_positive,
                   help="GPUs per node (default: the preset's for a dry-run, this machine's for a run)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="override a Megatron setting (its dest name, e.g. lr=3e-4) or a launcher setting")
    p.add_argument("--dry-run", action="store_true", help="print the command and exit; touches no GPU")
    p.add_argument("--format", choices=("text", "json"), default="text", help="dry-run output format")
    p.add_argument("--megatron-path", help="Megatron-LM checkout (default: $MEGATRON_LM_PATH or the submodule)")
    p.add_argument("--check", action="store_true",
                   help="put the generated flags to Megatron's own parser and checks (needs megatron-core and "
                        "torch; touches no GPU) and show its verdict next to the launcher's")
    p.add_argument("--no-doctor", action="store_true",
                   help="start training without the environment checks of `launch doctor`")
    p.add_argument("--preflight", action="store_true",
                   help="instead of training, run a short all-reduce over every rank with the same torchrun and "
                        "rendezvous, and report each rank and the bus bandwidth")
    slurm = p.add_argument_group("Slurm")
    slurm.add_argument("--slurm", action="store_true",
                       help="write a Slurm batch script into a new run directory and print its path "
                            "(with --dry-run: print the script)")
    slurm.add_argument("--submit", action="store_true", help="write the batch script and submit it with sbatch; "
                       "prints the job id (implies --slurm)")
    slurm.add_argument("--chain", type=_positive, metavar="K",
                       help="K jobs that run one after another (--dependency=singleton), each resuming from "
                            "the last checkpoint; for runs longer than the partition's time limit")
    return p


def cmd_run(argv: list[str]) -> int:
    args = run_parser().parse_args(argv)
    # Run-directory and process modules load only for real runs: a dry-run stays fast.
    from launcher.cli import render
    from launcher.megatron.pin import megatron_path, require_checkout, resolve_kernels
    from launcher.pipeline.command import build_command
    from launcher.pipeline.layout import make_plan
    from launcher.pipeline.preset import load_preset

    if (args.preset is None) == (args.resume is None):
        raise UserError("give a preset, or --resume RUN_DIR (not both)", "for example: launch toy, or launch "
                        "--resume runs/toy-20261129T160150Z")
    if args.resume and args.dry_run:
        raise UserError("--resume starts training; it has no --dry-run", "see the run's command.sh instead")
    prepared = None
    if args.resume:
        from launcher.runs import tracking

        prepared = tracking.prepare_resume(args.resume, args.overrides)
        preset = prepared.preset
    else:
        preset = load_preset(args.preset, args.overrides)
    on_slurm = args.slurm or args.submit
    if args.chain and not on_slurm:
        raise UserError("--chain applies to Slurm jobs only", "add --slurm (write the script) or --submit")
    gpus = args.gpus_per_node
    nodes = args.nodes
    if not (args.dry_run or args.check or on_slurm):  # a run here: this machine, its GPUs unless told
        nodes = nodes or 1
        if gpus is None:
            from launcher.backends import local

            gpus = local.visible_gpus()
            if gpus == 0:
                raise UserError("no GPU is visible on this machine",
                                "run on a GPU machine, or use --dry-run to print the command")
    kernels = resolve_kernels(preset.launcher.transformer_engine, preset.launcher.apex)
    path = megatron_path(args.megatron_path, preset.launcher.megatron_path)
    if args.check:
        from launcher.checks.megatron_verdict import check_preset

        return check_preset(preset, args.nodes, args.gpus_per_node, kernels, path, args.format)
    plan = make_plan(preset, nodes, gpus, kernels.transformer_engine, kernels.apex)
    if on_slurm:
        from launcher.backends import slurm
        from launcher.runs import tracking

        # The job's run directory (a dry-run only shows its paths); the checks run on the cluster, not here.
        prepared = prepared or tracking.prepare_new(plan.preset, plan.entry)
        plan = replace(plan, preset=prepared.preset)
        return slurm.launch(plan, path, kernels, prepared, dry_run=args.dry_run, submit_job=args.submit,
                            chain=args.chain, preflight=args.preflight)
    if not args.dry_run and not args.preflight:
        # Checkout and environment first, so that a failed check leaves no run directory behind.
        require_checkout(path, plan.entry)
        if not args.no_doctor:
            from launcher.checks.doctor import preflight_or_raise

            preflight_or_raise(plan, build_command(plan, path, kernels), path, kernels)
        # A real launch gets a run directory: checkpoints, TensorBoard and logs go there.
        from launcher.runs import tracking

        prepared = prepared or tracking.prepare_new(plan.preset, plan.entry)
        preset = prepared.preset
        plan = replace(plan, preset=preset)
    command = build_command(plan, path, kernels)
    if args.preflight:
        from launcher.inside.allreduce import SCRIPT_PATH
        from launcher.pipeline.command import with_entry

        command = with_entry(command, str(SCRIPT_PATH), [])
    if args.dry_run:
        out = render.as_json if args.format == "json" else render.text
        sys.stdout.write(out(plan, command, kernels))
        return 0
    sys.stdout.write("\n".join(render.header(plan, command, kernels)) + "\n")
    sys.stdout.flush()
    if args.preflight:  # a check, not a run: no run directory, no training monitor
        from launcher.backends import local

        return local.run(command)
    return tracking.execute(prepared, plan, command, path)


def cmd_list(argv: list[str]) -> int:
    _Parser(prog="launch list", description="Show the shipped presets.").parse_args(argv)
    from launcher.estimate.formulas import human, parameter_count
    from launcher.megatron.pin import resolve_kernels
    from launcher.pipeline.layout import SIMPLE_LOOP_TP, make_plan, model_args
    from launcher.pipeline.preset import available_presets, load_preset

    rows = [("preset", "parameters", "layout (TP·PP·CP)", "min GPUs", "default world", "description")]
    for name in available_presets():
        preset = load_preset(name)
        kernels = resolve_kernels(preset.launcher.transformer_engine, preset.launcher.apex)
        plan = make_plan(preset, te_available=kernels.transformer_engine, apex_available=kernels.apex)
        lay = plan.layout
        min_gpus = SIMPLE_LOOP_TP if plan.entry == "simple_loop" else lay.model_parallel_size
        rows.append((name, human(parameter_count(model_args(plan), lay.tp)), f"{lay.tp}·{lay.pp}·{lay.cp}",
                     str(min_gpus), f"{plan.nodes}×{plan.gpus_per_node}", preset.description))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    return 0


def cmd_doctor(argv: list[str]) -> int:
    from launcher.checks import doctor

    return doctor.main(argv)


def cmd_plan(argv: list[str]) -> int:
    from launcher.cli import plan_report

    parser = _Parser(prog="launch plan", description="Parameters, FLOPs, memory per GPU and time of a preset "
                     "on a GPU budget, and the best parallel layouts for it. Needs no GPU and no torch.")
    plan_report.add_arguments(parser)
    sys.stdout.write(plan_report.run(parser.parse_args(argv)))
    return 0


def cmd_report(argv: list[str]) -> int:
    from launcher.runs import report

    parser = _Parser(prog="launch report", description="Plots (loss, throughput, learning rate) and a summary "
                     "of a run directory, or of Megatron log files such as a Slurm job's output.")
    report.add_arguments(parser)
    return report.run(parser.parse_args(argv))


def cmd_prepare_data(argv: list[str]) -> int:
    from launcher.dataprep.cli import main as prepare_data_main

    return prepare_data_main(argv)


SUBCOMMANDS: dict[str, Callable[[list[str]], int]] = {
    "list": cmd_list,
    "doctor": cmd_doctor,
    "plan": cmd_plan,
    "report": cmd_report,
    "prepare-data": cmd_prepare_data,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv and argv[0] in SUBCOMMANDS:
            return SUBCOMMANDS[argv[0]](argv[1:])
        return cmd_run(argv)
    except UserError as exc:
        print(exc.render(), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

