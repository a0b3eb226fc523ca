"""`launch import SOURCE [-o preset.yaml]`: read, write the preset, check it, report."""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from pathlib import Path

from launcher.errors import UserError
from launcher.importer.build import VocabReader, import_source
from launcher.importer.report import ResolveJob, as_dict, check_import, render

MAX_SOURCE_BYTES = 1_000_000


def read_input(words: list[str]) -> tuple[str, str, list[str]]:
    """(text, name, positional arguments): an existing file with the arguments a user runs it with
    (`launch import train.sh /ckpt /tb tok /data`: $1 … $4), '-' for stdin, else the words themselves as one
    command line."""
    if words and words[0] == "-":
        return sys.stdin.read(MAX_SOURCE_BYTES + 1), "standard input", words[1:]
    script_with_args = len(words) > 1 and Path(words[0]).is_file() and not words[0].startswith("-")
    if script_with_args or (len(words) == 1 and not words[0].lstrip().startswith("-") and " " not in words[0]):
        path = Path(words[0])
        if not path.is_file():
            raise UserError(f"{path} is not a file", "give a training script, a YAML mapping of flags, or the flags "
                            "themselves (launch import -- torchrun … pretrain_gpt.py …)")
        if path.stat().st_size > MAX_SOURCE_BYTES:
            raise UserError(f"{path} is larger than {MAX_SOURCE_BYTES:,} bytes", "import reads training scripts")
        try:
            return path.read_text(), str(path), words[1:]
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read {path}: {exc}") from None
    return (words[0] if len(words) == 1 else shlex.join(words)), "the command line given", []


def main(source: list[str], output: str | None, resolve_job: ResolveJob, read_local: VocabReader | None = None,
         output_format: str = "text") -> int:
    """`resolve_job`: how the command line resolves a preset (cli.job.job_for), for the check of the import;
    `read_local`: how a local tokenizer's vocabulary is read (launcher.checks.data.tokenizer_vocab_size). With
    `output_format` json, one JSON object on stdout: the preset's text and the report."""
    text, name, positional = read_input(source)
    imported = import_source(text, name, positional, read_local)
    if output:
        target = Path(output)
        if target.exists() and target.is_dir():
            raise UserError(f"{target} is a directory", "give -o a file name such as imported.yaml")
        try:
            target.write_text(imported.text)
        except OSError as exc:
            raise UserError(f"cannot write {target}: {exc}") from None
        outcome, where = check_import(imported, target, resolve_job), str(target)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            scratch = Path(tmp) / "imported.yaml"
            scratch.write_text(imported.text)
            outcome = check_import(imported, scratch, resolve_job)
        where = "standard output"
    if output_format == "json":
        sys.stdout.write(json.dumps(as_dict(imported, outcome, output), indent=2, default=str) + "\n")
    elif output:
        sys.stdout.write(render(imported, outcome, where))
    else:
        sys.stdout.write(imported.text)
        sys.stderr.write(render(imported, outcome, where))
    return 2 if outcome.problems else 0
