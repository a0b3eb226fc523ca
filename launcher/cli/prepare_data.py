"""`launch prepare-data`: argument parsing and display only; the work is in launcher.dataprep (prepare.py,
index_cache.py)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from launcher import interrupts
from launcher.cli.parsing import Parser, refuse_idle_options
from launcher.errors import Problem, UserError

USAGE_EXAMPLES = """\
examples:
  launch prepare-data corpus.jsonl --output-prefix data/corpus --tokenizer byte
  launch prepare-data a.jsonl b.jsonl.gz --output-prefix data/web --tokenizer gpt2 \\
      --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt --workers 8
  launch prepare-data books/*.txt --output-prefix data/books --tokenizer hf --tokenizer-dir ./my-tokenizer
  launch prepare-data --build-index 345m --set data_path=data/corpus --set data_cache_path=/shared/cache
"""


def build_parser() -> Parser:
    parser = Parser(
        prog="launch prepare-data",
        description="Tokenize JSONL or plain-text files into Megatron's indexed dataset (PREFIX.bin/.idx), "
                    "or, with --build-index, build a preset's dataset index caches on this CPU machine.",
        epilog=USAGE_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="*", metavar="INPUT",
                        help="JSON Lines files (.jsonl/.json/.ndjson, optionally .gz) or plain-text files")
    parser.add_argument("--output-prefix", metavar="PREFIX",
                        help="write PREFIX.bin, PREFIX.idx and PREFIX.meta.json; PREFIX is what data_path names")
    parser.add_argument("--tokenizer", choices=("byte", "gpt2", "hf"),
                        help="byte: UTF-8 bytes, no files (vocab 257, EOD 256); gpt2: GPT-2 BPE from "
                             "--vocab-file/--merge-file; hf: a Hugging Face directory with tokenizer.json")
    parser.add_argument("--vocab-file", help="GPT-2 vocab.json (for --tokenizer gpt2)")
    parser.add_argument("--merge-file", help="GPT-2 merges.txt (for --tokenizer gpt2)")
    parser.add_argument("--tokenizer-dir", help="directory holding tokenizer.json (for --tokenizer hf)")
    parser.add_argument("--eod-token", help="the token that ends a document (default: <|endoftext|> for gpt2, "
                                            "the configured eos token for hf)")
    parser.add_argument("--json-key", default="text", help="field holding the text in JSON lines (default: text)")
    parser.add_argument("--text-unit", choices=("file", "line", "paragraph"), default="file",
                        help="what one document is in a plain-text file (default: the whole file)")
    parser.add_argument("--workers", type=int, default=None,
                        help="tokenizer processes (default: the CPUs this process may use, at most 32)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing PREFIX.bin/.idx")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="summary format")
    index = parser.add_argument_group("index caches (--build-index)")
    index.add_argument("--build-index", metavar="PRESET",
                       help="build the preset's GPTDataset index caches into its data_cache_path, on CPU")
    index.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                       help="override a preset setting (as for `launch PRESET`)")
    index.add_argument("--nodes", type=int, help="nodes of the training job (sets the data-parallel size)")
    index.add_argument("--gpus-per-node", type=int, help="GPUs per node of the training job")
    index.add_argument("--megatron-path", help="Megatron-LM checkout (as for `launch PRESET`)")
    return parser


def run(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> int:
    parser = parser or build_parser()
    tokenizing = ("--tokenizer", "--vocab-file", "--merge-file", "--tokenizer-dir", "--eod-token", "--json-key",
                  "--text-unit", "--workers", "--overwrite", "--no-progress")
    refuse_idle_options(parser, args, [
        *((option, bool(args.build_index), "with --build-index: it is a tokenizing option, and --build-index "
           "tokenizes nothing", "run tokenization and --build-index as two commands") for option in tokenizing),
        *((option, not args.build_index, "without --build-index: it describes the training job whose index "
           "caches --build-index builds", f"add --build-index PRESET, or drop {option}")
          for option in ("--set", "--nodes", "--gpus-per-node", "--megatron-path"))])
    if args.build_index:
        return _build_index(args)
    try:
        return _prepare(args)
    except KeyboardInterrupt as interrupt:  # prepare_data has stopped its workers and removed its temporary files
        print(f"error: prepare-data stopped by {interrupts.describe(interrupt)}; nothing was written",
              file=sys.stderr)
        return interrupts.exit_status(interrupt)


def _prepare(args: argparse.Namespace) -> int:
    from launcher.dataprep.prepare import prepare_data, result_as_dict
    from launcher.dataprep.text_tokenizers import TokenizerSpec

    missing = [flag for flag, value in (("--output-prefix", args.output_prefix), ("--tokenizer", args.tokenizer))
               if not value]
    if missing:
        problems = [Problem(f"prepare-data needs {' and '.join(missing)}",
                            "e.g. launch prepare-data corpus.jsonl --output-prefix data/corpus --tokenizer byte")]
        if not args.inputs:
            problems.append(Problem("no input files given", "pass one or more .jsonl or text files"))
        raise UserError(problems)
    spec = TokenizerSpec(kind=args.tokenizer, vocab_file=args.vocab_file, merge_file=args.merge_file,
                         tokenizer_dir=args.tokenizer_dir, eod_token=args.eod_token)
    result = prepare_data(args.inputs, args.output_prefix, spec, json_key=args.json_key,
                          text_unit=args.text_unit, workers=args.workers, overwrite=args.overwrite,
                          show_progress=not args.no_progress)
    if args.format == "json":
        print(json.dumps(result_as_dict(result), indent=2))
        return 0
    rate = result.tokens / max(result.seconds, 1e-9)
    print(f"wrote {result.prefix}.bin/.idx: {result.documents:,} documents, {result.tokens:,} tokens "
          f"({result.dtype}, vocab {result.vocab_size}, EOD {result.eod}) in {result.seconds:.1f}s "
          f"({rate:,.0f} tokens/s)")
    if result.skipped_empty:
        print(f"skipped {result.skipped_empty:,} empty documents")
    sets = " ".join(f"--set {shlex.quote(f'{k}={v}')}" for k, v in
                    {"mock_data": "false", "data_path": os.path.abspath(result.prefix), "split": "98,2,0",
                     **result.megatron_args}.items())
    print(f"train on it: launch PRESET {sets}")
    if args.overwrite:
        print("note: index caches built from the old files are stale; clear their data_cache_path")
    return 0


def _build_index(args: argparse.Namespace) -> int:
    from launcher.cli.job import JobRequest, checked_job
    from launcher.dataprep.index_cache import build_index_for_job, check_index_preset, samples_line
    from launcher.pipeline.preset import load_preset

    if args.inputs or args.output_prefix:
        raise UserError("--build-index takes a preset, not input files or --output-prefix",
                        "run tokenization and --build-index as two commands")
    preset = load_preset(args.build_index, list(args.overrides))
    check_index_preset(preset)
    # the job `launch PRESET` runs on that world (the cache names hash its settings), without a run directory
    job = checked_job(preset, JobRequest(args.nodes, args.gpus_per_node, megatron_path=args.megatron_path,
                                         run_dir=False, local=False, check_caches=False))
    summary = build_index_for_job(job)
    if args.format == "json":
        print(json.dumps(summary, indent=2))
    else:
        state = f"built {len(summary['new_files'])} files" if summary["new_files"] else "all present already"
        print(f"index caches in {summary['data_cache_path']}: {state} in {summary['seconds']:.1f}s\n"
              f"  {samples_line(summary)} "
              f"(world size {summary['world_size']}, data-parallel {summary['data_parallel_size']}, "
              f"global batch {summary['global_batch_size']})\n"
              f"  the training job reads them when it runs with the same settings (data_cache_path included)")
    return 0

