"""Command line: argument parsing and error display only; the work happens in the pipeline modules.

    launch PRESET [--nodes N] [--gpus-per-node G] [--set NAME=VALUE ...] [--dry-run] [--format text|json]
                  [--slurm] [--submit] [--chain K] [--preflight] [--k8s]
    launch --resume RUN_DIR [--set NAME=VALUE ...] [--slurm | --k8s] [--submit]
    launch list
    launch plan PRESET [--nodes N --gpus-per-node G | --gpus N] [--gpu NAME] [--top N] [--format text|json]
    launch report RUN_DIR | LOG...
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from launcher import interrupts
from launcher.cli.parsing import Parser, node_count, positive, refuse_idle_options
from launcher.errors import UserError, closest


def run_parser() -> Parser:
    p = Parser(prog="launch", description="Validate, print or run Megatron-LM GPT training from a preset.",
                epilog="Other commands: " + ", ".join(f"launch {name}" for name in SUBCOMMANDS))
    p.add_argument("preset", nargs="?",
                   help="a preset name from configs/ (toy, 345m, 175b, …) or a path to a YAML file")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a run directory made by an earlier launch (same preset and checkpoints)")
    p.add_argument("--nodes", type=node_count, metavar="N|MIN-MAX",
                   help="number of nodes (default: the preset's); MIN-MAX: an elastic job (Slurm grants a count "
                        "in the range, the layout is checked at each, the global batch is kept)")
    p.add_argument("--gpus-per-node", type=positive,
                   help="GPUs per node (default: the preset's; for a one-node job here at most this machine's)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="override a Megatron setting (its dest name, e.g. lr=3e-4) or a launcher setting; "
                        "NAME=null unsets it (Megatron's default applies), e.g. --set train_samples=null")
    p.add_argument("--dry-run", action="store_true", help="print the command and exit; touches no GPU")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="output format of --dry-run, --check, --slurm and --k8s; with json, errors are a JSON "
                        "object on stdout too")
    p.add_argument("--version", action="version", version=version_text(),
                   help="the launcher's version and the Megatron-LM it is pinned to")
    p.add_argument("--megatron-path", help="Megatron-LM checkout (default: launcher.megatron_path, "
                   "$MEGATRON_LM_PATH, the submodule, or the one `launch fetch-megatron` fetched)")
    p.add_argument("--check", action="store_true",
                   help="put the generated flags to Megatron's own parser and checks (needs megatron-core and "
                        "torch; touches no GPU) and show its verdict next to the launcher's")
    p.add_argument("--rehearse", action="store_true",
                   help="with --check (implied): also rehearse the job in its own parallel layout, shrunk to at "
                        "most 16 CPU processes (torchrun over gloo): a tiny model with the job's features, two "
                        "steps through its optimizer, a checkpoint in its format loaded back at another TP·PP "
                        "(needs the Megatron-LM checkout); says what it could not rehearse")
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
    slurm.add_argument("--chain", type=positive, metavar="K",
                       help="K jobs that run one after another (--dependency=singleton), each resuming from "
                            "the last checkpoint; for runs longer than the partition's time limit")
    p.add_argument_group("Kubernetes").add_argument(
        "--k8s", action="store_true", help="write the job as a JobSet manifest (jobset.yaml) into a new run directory "
        "and print its path; --dry-run prints it (--format json: as JSON), --submit applies it with kubectl "
        "(server-side apply); settings under launcher.k8s")
    return p


def cmd_run(argv: list[str]) -> int:
    parser = run_parser()
    if not argv:  # a bare `launch` asks what it can do
        sys.stdout.write(parser.format_help())
        return 0
    args = parser.parse_args(argv)
    # Run-directory and process modules load only for real runs: a dry-run stays fast.
    from launcher.cli import render
    from launcher.cli.job import JobRequest, job_for, local_gpus
    from launcher.megatron.pin import checkout_warning, require_checkout
    from launcher.pipeline.command import build_command
    from launcher.pipeline.preset import load_preset

    if args.preset is None and args.resume is None:
        raise UserError("no preset given", "for example: launch toy --dry-run (launch list shows the presets; "
                        "launch --help the options), or launch --resume RUN_DIR")
    if args.preset is not None and args.resume is not None:
        raise UserError("give a preset or --resume RUN_DIR, not both", "a resumed run keeps its own preset; "
                        "change settings with --set")
    if args.resume and args.dry_run:
        raise UserError("--resume starts training; it has no --dry-run",
                        f"{args.resume}/command.sh shows what the run runs; resume it on a GPU machine, or on a "
                        "cluster with --slurm / --k8s")
    on_k8s = args.k8s
    if on_k8s and args.slurm:
        raise UserError("--k8s and --slurm are two different clusters", "choose one")
    on_slurm = (args.slurm or args.submit) and not on_k8s
    if args.chain and not on_slurm:
        raise UserError("--chain applies to Slurm jobs only", "add --slurm (write the script) or --submit")
    checking = args.check or args.rehearse
    refuse_idle_options(parser, args, [
        ("--format", not (args.dry_run or checking or on_slurm or on_k8s),
         "(json) for a launch here: its output is the training's own log, not JSON",
         "add --dry-run (the command as JSON), or drop --format json"),
        ("--submit", checking, "with --check: a check writes and submits nothing",
         "check first (--check), then launch again with --submit"),
        ("--chain", checking, "with --check: a check writes and submits nothing",
         "check first (--check), then launch again with --chain"),
        ("--no-doctor", on_slurm or on_k8s, "for a cluster job: the doctor's checks run before training here "
         "only (each node checks what the job needs at start)", "drop --no-doctor"),
        ("--no-doctor", args.preflight and not checking and not (on_slurm or on_k8s),
         "with --preflight: the all-reduce starts without the doctor's checks", "drop --no-doctor"),
    ])
    existing = None
    if args.resume:
        from launcher.runs import tracking

        preset, existing = tracking.open_resume(args.resume, args.overrides,
                                                megatron_path_given=args.megatron_path is not None)
    else:
        preset = load_preset(args.preset, args.overrides)
    name_only = args.dry_run or args.check or args.rehearse
    if not (on_slurm or on_k8s) and not name_only and args.gpus_per_node is None and local_gpus() == 0:
        # a resumed run has no --dry-run (it would only say what command.sh says): never send the user there
        raise UserError("no GPU is visible on this machine",
                        f"run on a GPU machine; {args.resume}/command.sh shows what the resumed run runs, "
                        "or add --slurm / --k8s to resume it on a cluster" if args.resume else
                        "run on a GPU machine, or use --dry-run to print the command")
    # A launch claims its run directory's name at once (mkdir), so launches in the same second never share one; if
    # this launch ends before writing the directory, the empty claim is removed at exit.
    # Judged against its target unless this is a launch here, whose checks before torchrun say the same (doctor).
    request = JobRequest(args.nodes, args.gpus_per_node, slurm=on_slurm, k8s=on_k8s, preflight=args.preflight,
                         megatron_path=args.megatron_path, existing=existing, reserve_run_dir=not name_only,
                         judge=not args.preflight and (name_only or on_slurm or on_k8s),
                         judge_here=not args.no_doctor)
    job, problems = job_for(preset, request)
    if args.check or args.rehearse:
        from launcher.checks.megatron_verdict import check_preset

        return check_preset(job, problems, args.format, rehearse=args.rehearse)
    if problems:
        raise UserError(problems)
    path = job.megatron_path
    command = build_command(job)
    if on_k8s:  # the pods run Megatron-LM from their image, not from a checkout here
        from launcher.backends import k8s

        return k8s.launch(job, command, dry_run=args.dry_run, submit_job=args.submit, output_format=args.format)
    if on_slurm:
        from launcher.backends import slurm

        return slurm.launch(job, command, dry_run=args.dry_run, submit_job=args.submit, chain=args.chain,
                            as_json=args.format == "json")
    # A missing checkout is among the job's warnings (cli.job); a pasted script's `# warning:` lines are easily
    # missed, so a text dry-run whose output goes to a file or a pipe says it on stderr too (in a terminal, where
    # both show, the header says it once).
    missing = checkout_warning(path, job.entry)
    if args.dry_run and missing and args.format != "json" and not _is_terminal(sys.stdout):
        print(f"warning: {missing}", file=sys.stderr)
    if args.dry_run:
        out = render.as_json if args.format == "json" else render.text
        sys.stdout.write(out(job, command))
        return 0
    if not args.preflight:
        # Checkout and environment first, so that a failed check leaves no run directory behind.
        require_checkout(path, job.entry)
        if not args.no_doctor:
            from launcher.backends import local
            from launcher.checks.doctor import check_before_launch

            check_before_launch(job, local.process_environment(job.environment))
    sys.stdout.write("\n".join(render.header(job)) + "\n")
    sys.stdout.flush()
    if args.preflight:  # a check, not a run: no run directory, no training monitor
        from launcher.backends import local

        return local.run(command, local.process_environment(job.environment))
    from launcher.backends import local_run

    return local_run.execute(job, command)


def _is_terminal(stream: object) -> bool:
    try:
        return bool(getattr(stream, "isatty", lambda: False)())
    except (OSError, ValueError):
        return False


def version_text() -> str:
    from launcher import MEGATRON_COMMIT, MEGATRON_CORE_VERSION, __version__

    return f"megatron-launch {__version__} (Megatron-LM {MEGATRON_COMMIT[:12]}, megatron-core {MEGATRON_CORE_VERSION})"


def cmd_list(argv: list[str]) -> int:
    parser = Parser(prog="launch list", description="Show the shipped presets: parameters, layout, the fewest "
                    "GPUs and the default world of each.")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    from launcher.cli.job import JobRequest, checked_job
    from launcher.estimate.formulas import built_model_parameters, human
    from launcher.pipeline.checker import SIMPLE_LOOP_TP
    from launcher.pipeline.preset import available_presets, load_preset

    rows = [("preset", "parameters", "layout (TP·PP·CP)", "min GPUs", "default world", "description")]
    records = []
    for name in available_presets():
        preset = load_preset(name)
        job = checked_job(preset, JobRequest(run_dir=False, local=False))  # the preset's own world
        lay = job.layout
        min_gpus = SIMPLE_LOOP_TP if job.entry == "simple_loop" else lay.model_parallel_size
        params = built_model_parameters(job.effective(), job.entry, lay.tp, job.tokenizer_vocab)
        rows.append((name, human(params), f"{lay.tp}·{lay.pp}·{lay.cp}", str(min_gpus),
                     f"{job.nodes}×{job.gpus_per_node}", preset.description))
        records.append({"preset": name, "parameters": params, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp,
                        "entry": job.entry, "min_gpus": min_gpus, "nodes": job.nodes,
                        "gpus_per_node": job.gpus_per_node, "description": preset.description,
                        "source": preset.sources[-1]})
    if args.format == "json":
        import json

        print(json.dumps(records, indent=2))
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    return 0


def cmd_doctor(argv: list[str]) -> int:
    parser = Parser(prog="launch doctor", description="Is this machine ready to run the pinned Megatron? Each "
                    "check says ok / warn / fail and how to fix it.")
    parser.add_argument("--megatron-path",
                        help="Megatron-LM checkout to inspect (default: $MEGATRON_LM_PATH or the submodule)")
    parser.add_argument("--torch", action="store_true",
                        help="also import torch and Transformer Engine (slower): CUDA, GPUs, NCCL as torch sees them")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    options = parser.parse_args(argv)
    import json
    from dataclasses import asdict

    from launcher.backends.local import training_path
    from launcher.checks import doctor
    from launcher.megatron.pin import megatron_path

    # what training processes started here would get (PATH with this interpreter first)
    env = {**os.environ, "PATH": training_path(os.environ.get("PATH"))}
    ctx = doctor.Context(megatron_path=megatron_path(options.megatron_path, None), env=env, torch_probe=options.torch)
    findings = doctor.run_checks(ctx)
    if options.format == "json":
        print(json.dumps([asdict(f) for f in findings], indent=1))
    else:
        print("\n".join(f.render() for f in findings))
        print(f"doctor: {doctor.worst(findings)}")
    return 1 if doctor.worst(findings) == "fail" else 0


def cmd_plan(argv: list[str]) -> int:
    from launcher.cli import plan_report

    parser = Parser(prog="launch plan", description="Parameters, FLOPs, memory per GPU and time of a preset "
                     "on a GPU budget, and the best parallel layouts for it. Needs no GPU and no torch.")
    plan_report.add_arguments(parser)
    ns = parser.parse_args(argv)
    if ns.measure and ns.refit:
        raise UserError("--refit and --measure go one after the other",
                        "measure first (launch plan PRESET --measure), then plan with --refit")
    measuring = [(option, not ns.measure, "without --measure: it is about the layouts --measure runs",
                  f"add --measure, or drop {option}")
                 for option in ("--measure-layouts", "--measure-iters", "--megatron-path", "--no-doctor")]
    # --measure ranks by measured step time and prints its own table: the plan's list, token budget and rates are
    # not part of it
    planning = [(option, ns.measure, f"with --measure: {what}", f"drop {option}, or plan without --measure")
                for option, what in (("--top", "it runs --measure-layouts N layouts"),
                                     ("--tflops", "its predictions use the calibrated kernel model"),
                                     ("--tokens", "it prints no time to train"),
                                     ("--ckpt-write-gbps", "it prints no checkpoint times"))]
    refuse_idle_options(parser, ns, [*measuring, *planning, (
        "--measurements", not ns.refit, "without --refit: only --refit reads the measurements",
        "add --refit, or drop --measurements")])
    if ns.measure:
        from launcher.cli import plan_measure

        return plan_measure.run(ns)
    sys.stdout.write(plan_report.run(ns))
    return 0


def cmd_report(argv: list[str]) -> int:
    parser = Parser(prog="launch report", description="Plots (loss, throughput, learning rate) and a summary "
                    "of a run directory, or of Megatron log files such as a Slurm job's output.")
    parser.add_argument("targets", nargs="+", type=Path, metavar="RUN_DIR_OR_LOG",
                        help="a run directory made by launch, or Megatron log files (e.g. slurm-123.out)")
    parser.add_argument("--output-dir", type=Path, default=None,
                        help="where the PNG plots go (default: RUN_DIR/plots for a run directory, "
                             "./plots/LOG_NAME in the current directory for log files)")
    parser.add_argument("--partial", action="store_true",
                        help="report what is readable in a truncated or partly garbled log")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    import json

    from launcher.runs.report import make_report, plots_unavailable

    report = make_report(args.targets, args.output_dir, args.partial)
    no_plots = plots_unavailable()
    if args.format == "json":
        print(json.dumps({"summary": report.summary.to_dict(), "plots": [str(p) for p in report.plots],
                          **({"plots_unavailable": no_plots} if no_plots else {}),
                          "sources": [str(s) for s in report.sources], "attempts": report.attempts,
                          "failures": report.failures, "job_states": report.job_states,
                          "skipped": report.skipped}, indent=2,
                         allow_nan=False))
    else:
        print(report.summary.render())
        for number, note in enumerate(report.skipped):  # a log over the bound: its head was not read
            print(("skipped:            " if number == 0 else " " * 20) + note)
        for number, attempt in enumerate(report.attempts):
            print(("attempts:           " if number == 0 else " " * 20) + attempt)
        from launcher.runs.triage import describe_failures

        for number, line in enumerate(describe_failures(report.failures)):  # each classified end
            print(("failures:           " if number == 0 else " " * 20) + line)
        if report.job_states:
            print("job states:         " + report.job_states)
        print("plots:              " + (", ".join(str(p) for p in report.plots) or f"none ({no_plots})"))
    # the report was made; its exit status says how the run went, as the run's own exit did
    return 1 if report.summary.outcome == "failed" else 0


def cmd_show(argv: list[str]) -> int:
    parser = Parser(prog="launch show", description="The resolved preset (base: files and --set applied), its "
                    "launcher settings, and the Megatron flags that differ from Megatron's own defaults, including "
                    "those the launcher decides (entry, micro batch, settings for a missing TE/apex).")
    parser.add_argument("preset", help="a preset name or a path to a YAML file")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                        help="override a setting first, as for launch (NAME=null unsets it)")
    parser.add_argument("--nodes", type=node_count, metavar="N|MIN-MAX",
                        help="number of nodes (default: the preset's), or an elastic range MIN-MAX")
    parser.add_argument("--gpus-per-node", type=positive, help="GPUs per node (default: the preset's)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--megatron-path", help="Megatron-LM checkout (default: $MEGATRON_LM_PATH or the submodule)")
    args = parser.parse_args(argv)
    from launcher.cli.job import JobRequest, job_for
    from launcher.cli.show import show
    from launcher.pipeline.preset import load_preset

    # the job a dry-run of the same arguments resolves (its run directory named, not made)
    job, problems = job_for(load_preset(args.preset, args.overrides),
                            JobRequest(args.nodes, args.gpus_per_node, megatron_path=args.megatron_path,
                                       judge=True))
    sys.stdout.write(show(job, problems, args.format))
    return 0


def cmd_diff(argv: list[str]) -> int:
    parser = Parser(prog="launch diff", description="Two presets or run directories side by side: every "
                    "Megatron setting (as Megatron sees it, defaults filled in) and launcher setting that differs.")
    parser.add_argument("a", metavar="A", help="a preset name, a preset file, or a run directory")
    parser.add_argument("b", metavar="B", help="the same, to compare with A")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    from launcher.cli.show import diff

    sys.stdout.write(diff(args.a, args.b, args.format))
    return 0


def cmd_completion(argv: list[str]) -> int:
    from launcher.cli import completion

    parser = Parser(prog="launch completion", description="Print a shell completion script for commands, "
                    "presets, each command's options and their values, and setting names: "
                    "source <(launch completion bash), or zsh; launch completion fish | source.")
    parser.add_argument("shell", nargs="?", choices=completion.SHELLS)
    parser.add_argument("--names", choices=completion.NAME_KINDS,
                        help="print the names of one kind, one a line")
    parser.add_argument("--complete", nargs="*", metavar="WORDS",
                        help="print what Tab offers for this command line (what the scripts call; everything "
                             "after it is the line): launch completion --complete -- launch plan --g")
    if argv[:1] == ["--complete"]:  # the words are the user's command line, never options of this command
        words = argv[2:] if argv[1:2] == ["--"] else argv[1:]
        print("\n".join(completion.complete(words)))
        return 0
    args = parser.parse_args(argv)
    if args.names and args.shell:
        raise UserError(f"launch completion --names prints names, not a {args.shell} script: {args.shell} would do "
                        "nothing", f"drop {args.shell} (launch completion --names {args.names}), or drop --names")
    if args.names:
        print("\n".join(completion.names(args.names)))
        return 0
    if args.shell is None:
        raise UserError("launch completion needs a shell: bash, zsh or fish",
                        "for example: source <(launch completion bash)")
    sys.stdout.write(completion.script(args.shell))
    return 0


def cmd_prepare_data(argv: list[str]) -> int:
    from launcher.cli import prepare_data

    parser = prepare_data.build_parser()
    return prepare_data.run(parser.parse_args(argv), parser)


def cmd_import(argv: list[str]) -> int:
    parser = Parser(prog="launch import", description="Turn an existing training script (bash, torchrun … "
                    "pretrain_gpt.py …), a flag list or a YAML mapping of flags (MODEL_ARGS) into a preset, without "
                    "running it; then check the preset and compare its argv with the script's.")
    parser.add_argument("source", nargs="*", metavar="SCRIPT_OR_FLAGS",
                        help="a file with the arguments it is run with, '-' for standard input, or the flags "
                             "themselves after --; arguments that begin with - go after -- too (launch import "
                             "train.sh -- --tp 2)")
    parser.add_argument("-o", "--output", metavar="PRESET.yaml",
                        help="write the preset here (default: print it; the report goes to standard error)")
    parser.add_argument("--accept-loss", action="store_true",
                        help="write the preset even where it does not hold something of the script's model, "
                             "numerics or layout (an unknown flag, a value the pin cannot take); the preset's "
                             "header lists each")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="json: one object on standard output with the preset's text and the report")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a variable the script is run with, as `NAME=VALUE bash SCRIPT` (repeat it); the "
                             "script's variables that it does not set are otherwise not known")
    # everything after the first `--` is the source's own words: a command line, or the script's arguments, which
    # may begin with - as bash takes them (`train.sh --tp 2`); argparse would read those as options of its own
    cut = argv.index("--") if "--" in argv else len(argv)
    args, extra = parser.parse_known_args(argv[:cut])
    if extra:
        near = parser._suggestion(f"unrecognized arguments: {' '.join(extra)}")
        raise UserError(f"launch import: unrecognized arguments: {' '.join(extra)}",
                        (f"{near} " if near else "") + "the script's own arguments that begin with - go after --: "
                        "launch import train.sh -- --tp 2 (see launch import --help)")
    source = [*args.source, *argv[cut + 1:]]
    if not source:
        parser.error("the following arguments are required: SCRIPT_OR_FLAGS")
    from launcher.checks.data import tokenizer_vocab_size
    from launcher.cli.job import job_as_declared
    from launcher.importer.run import main as import_main
    from launcher.importer.run import parse_environment

    return import_main(source, args.output, job_as_declared, tokenizer_vocab_size, args.accept_loss,
                       args.format, parse_environment(args.env))


def cmd_fetch_megatron(argv: list[str]) -> int:
    from launcher import MEGATRON_COMMIT, untrusted
    from launcher.megatron import fetch, pin

    parser = Parser(prog="launch fetch-megatron", description=f"Fetch the pinned Megatron-LM "
                    f"({MEGATRON_COMMIT[:12]}) and remember it: every later launch uses it where no "
                    "--megatron-path, launcher.megatron_path or $MEGATRON_LM_PATH says otherwise.")
    parser.add_argument("directory", nargs="?", type=Path, metavar="DIR",
                        help=f"where it goes (default: {pin.default_fetch_dir()})")
    parser.add_argument("--source", metavar="URL_OR_PATH",
                        help=f"a git repository (URL or local) or a .tar.gz of the commit (URL or file); default "
                             f"${fetch.SOURCE_ENV}, else GitHub ({fetch.GIT_SOURCE}, or its tarball without git)")
    args = parser.parse_args(argv)
    from launcher.runs.atomic import write_text_atomic
    from launcher.runs.rundir import git_commit

    directory = (args.directory or pin.default_fetch_dir()).expanduser().absolute()
    if directory.exists():
        at = git_commit(directory)["commit"]
        marker = directory / pin.COMMIT_MARKER
        if not at:
            at = (untrusted.text_or_none(marker, "commit marker", pin.MAX_MARKER_BYTES) or "").strip()
        if at != MEGATRON_COMMIT or not (directory / pin.ENTRY_SCRIPTS["pretrain_gpt"]).is_file():
            raise UserError(f"{directory} exists and is not a Megatron-LM checkout of {MEGATRON_COMMIT[:12]}",
                            "give another DIR, or remove it first")
        print(f"Megatron-LM {MEGATRON_COMMIT[:12]} is already in {directory}")
    else:
        try:
            how = fetch.fetch(directory, args.source or fetch.default_source())
        except OSError as err:  # a full disk, a read-only or missing parent: the place given, not a bug
            raise UserError(f"cannot fetch Megatron-LM into {directory}: {err.strerror or err}",
                            "give a DIR on a writable disk with about 200 MB free") from None
        print(f"Megatron-LM {MEGATRON_COMMIT[:12]} is in {directory} ({how})")
    config = pin.config_file()
    try:
        config.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(config, json.dumps({"megatron_path": str(directory)}, indent=1) + "\n")
    except OSError as err:
        raise UserError(f"cannot remember the checkout in {config}: {err.strerror or err}",
                        f"use --megatron-path {directory} or {pin.ENV_VAR}={directory} instead") from None
    first = (f"; {pin.SUBMODULE} is populated, so this source tree's launches use that"
             if (pin.SUBMODULE / pin.ENTRY_SCRIPTS["pretrain_gpt"]).is_file() else "")
    print(f"remembered in {config}: launches use it unless --megatron-path, launcher.megatron_path, "
          f"${pin.ENV_VAR} or a populated submodule (third_party/megatron-lm of a source tree) names another{first}")
    return 0


def cmd_runs(argv: list[str]) -> int:
    from launcher.pipeline.preset import LauncherSettings
    from launcher.runs import listing

    parser = Parser(prog="launch runs", description="The run directories under the run root (newest first): "
                    "preset, start, state (running, succeeded, failed, preempted, submitted, written), last iteration, "
                    "tokens/s. Also `launch ls`.")
    parser.add_argument("--run-root", type=Path, default=None,
                        help="where the run directories are (default: ./runs, the launcher's run_root)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    root = args.run_root or Path(LauncherSettings().run_root)
    if args.run_root is None and not root.exists():  # nothing launched from here yet: not an error
        sys.stdout.write("[]\n" if args.format == "json" else f"no runs under {root}/ yet\n")
        return 0
    rows = listing.list_runs(root)
    sys.stdout.write(listing.as_json(rows) if args.format == "json" else listing.render(rows))
    return 0


SUBCOMMANDS: dict[str, Callable[[list[str]], int]] = {
    "fetch-megatron": cmd_fetch_megatron,
    "runs": cmd_runs,
    "ls": cmd_runs,
    "import": cmd_import,
    "list": cmd_list,
    "doctor": cmd_doctor,
    "plan": cmd_plan,
    "report": cmd_report,
    "prepare-data": cmd_prepare_data,
    "show": cmd_show,
    "diff": cmd_diff,
    "completion": cmd_completion,
}


def _with_command_hint(exc: UserError, argv: list[str]) -> UserError:
    """`launch docter` is read as a preset name; when no such preset exists, suggest the command."""
    near = closest(argv[0], SUBCOMMANDS, cutoff=0.75) if argv and not argv[0].startswith("-") else []
    if not near or not exc.problems[0].message.startswith("no preset named"):
        return exc
    return UserError(f"no command or preset named {argv[0]!r}", f"did you mean launch {near[0]}? "
                     f"({exc.problems[0].hint})")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Every output passes the one secret rule (and loses raw terminal controls) on its way out.
    from launcher.redaction import RedactingStream

    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = RedactingStream(stdout), RedactingStream(stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = stdout, stderr


def _refuse_non_utf8(argv: list[str]) -> None:
    """Arguments are text: a byte that is not UTF-8 (Python keeps it as a lone surrogate) could not be printed as
    it is run, nor written to a record, so it is refused at the door, whatever the command."""
    for number, word in enumerate(argv, 1):
        bad = next((ch for ch in word if 0xD800 <= ord(ch) <= 0xDFFF), None)
        if bad is not None:
            byte = f"\\x{ord(bad) - 0xDC00:02x}" if 0xDC80 <= ord(bad) <= 0xDCFF else f"U+{ord(bad):04X}"
            raise UserError(f"argument {number} holds a byte that is not UTF-8 text ({byte})",
                            "give every value as UTF-8 text (a file name in another encoding: rename it)")


def _main(argv: list[str]) -> int:
    try:
        _refuse_non_utf8(argv)
        with interrupts.signals_interrupt():  # SIGTERM/SIGHUP clean up like Ctrl-C (a running child gets them)
            if argv and argv[0] in SUBCOMMANDS:
                return SUBCOMMANDS[argv[0]](argv[1:])
            try:
                return cmd_run(argv)
            except UserError as exc:
                raise _with_command_hint(exc, argv) from None
    except UserError as exc:
        return _refused(exc, argv)
    except KeyboardInterrupt as interrupt:
        return interrupts.exit_status(interrupt)
    except Exception as exc:  # noqa: BLE001 - a bug in the launcher: one line here, the traceback in a file
        name = name_refused(exc) if isinstance(exc, OSError) else None
        if name is not None:
            return _refused(name, argv)
        print(internal_error_line(exc, argv), file=sys.stderr)
        return 1


def _refused(exc: UserError, argv: list[str]) -> int:
    if _wants_json(argv):  # a script asked for JSON: it gets the error as JSON too, where it reads
        print(exc.as_json())
    else:
        print(exc.render(), file=sys.stderr)
    return 2


def name_refused(exc: OSError) -> UserError | None:
    """The system refusing a path the user gave: a name too long, a loop of symbolic links, a directory on the way
    that this user may not search. Every path check may meet it first (Path.exists, is_file and is_dir raise all
    three in Python 3.12), so it is answered here, once, as the input error it is; any other OSError that
    reaches here is the launcher's bug."""
    import errno

    from launcher.errors import clip, shown

    name = shown(clip(str(exc.filename), 120)) if exc.filename is not None else "a path"
    if exc.errno == errno.ENAMETOOLONG:
        return UserError(f"{name} is too long a path: {exc.strerror}",
                         "give a shorter path (at most 255 bytes a name, 4,096 in all)")
    if exc.errno == errno.ELOOP:
        return UserError(f"{name} cannot be followed: {exc.strerror}",
                         "a symbolic link on the way points back at itself: fix or remove it")
    if exc.errno in (errno.EACCES, errno.EPERM) and exc.filename is not None:
        return UserError(f"{name} cannot be reached: {exc.strerror}",
                         "check the permissions of it and of each directory above it")
    return None


def internal_error_line(exc: BaseException, argv: list[str]) -> str:
    """Write the traceback to a file in the temp directory; the one line that says so."""
    import tempfile
    import time
    import traceback

    from launcher.errors import shown
    from launcher.redaction import scrub
    from launcher.runs.secrets import redact_argv

    name = f"megatron-launch-crash-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.txt"
    path = os.path.join(tempfile.gettempdir(), name)
    try:
        with open(path, "x", encoding="utf-8") as handle:  # "x": O_EXCL, never through a planted link
            handle.write(f"launch {' '.join(redact_argv(argv))}\n\n")
            handle.write(scrub("".join(traceback.format_exception(exc))))  # a secret's value in a frame's text
        where = f"traceback in {path}"
    except OSError:
        where = "the traceback could not be written to a file"
    return (f"error: internal error in megatron-launch (a bug, not your input): {type(exc).__name__}: "
            f"{' '.join(shown(exc, 160).split())}; {where}; please report it")


def _wants_json(argv: list[str]) -> bool:
    """--format json (or --format=json) anywhere on the command line, even where parsing itself failed."""
    return "--format=json" in argv or any(a == "--format" and b == "json" for a, b in zip(argv, argv[1:]))

