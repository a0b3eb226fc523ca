"""`launch import SOURCE [-o preset.yaml]`: read, write the preset, check it, report."""

from __future__ import annotations

import json
import re
import shlex
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from launcher import nofollow, untrusted
from launcher.errors import UserError
from launcher.importer.build import VocabReader, import_source
from launcher.importer.report import ResolveJob, all_lost, as_dict, check_import, render

MAX_SOURCE_BYTES = 1_000_000


def read_input(words: list[str]) -> tuple[str, str, list[str]]:
    """(text, name, positional arguments): an existing file with the arguments a user runs it with
    (`launch import train.sh /ckpt /tb tok /data`: $1 … $4), '-' for stdin, else the words themselves as one
    command line."""
    if words and words[0] == "-":
        # bytes, not sys.stdin's text: a byte that is not UTF-8 is refused here, not carried as a lone surrogate
        return untrusted.read_stream_utf8(sys.stdin.buffer, "standard input", MAX_SOURCE_BYTES), "standard input", \
            words[1:]
    script_with_args = len(words) > 1 and Path(words[0]).is_file() and not words[0].startswith("-")
    if script_with_args or (len(words) == 1 and not words[0].lstrip().startswith("-") and " " not in words[0]):
        path = Path(words[0])
        if not path.is_file():
            raise UserError(f"{path} is not a file", "give a training script, a YAML mapping of flags, or the flags "
                            "themselves (launch import -- torchrun … pretrain_gpt.py …)")
        # the one bounded reader: a regular file (a FIFO swapped in after the check above is not waited on), capped
        return untrusted.read_utf8(path, "training script", MAX_SOURCE_BYTES), str(path), words[1:]
    return (words[0] if len(words) == 1 else shlex.join(words)), "the command line given", []


def parse_environment(assignments: list[str]) -> dict[str, str]:
    """--env NAME=VALUE …: a shell variable name, then anything (an empty value is a set, empty variable)."""
    environment: dict[str, str] = {}
    for assignment in assignments:
        name, equals, value = assignment.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
            raise UserError(f"--env {assignment!r} is not NAME=VALUE with a shell variable name",
                            "give each variable the script reads as --env NAME=VALUE, e.g. --env TP=8")
        environment[name] = value
    return environment


def main(source: list[str], output: str | None, resolve_job: ResolveJob, read_local: VocabReader | None = None,
         accept_loss: bool = False, output_format: str = "text", environment: Mapping[str, str] | None = None
         ) -> int:
    """`resolve_job`: how the command line resolves a preset (cli.job.job_for), for the check of the import;
    `read_local`: how a local tokenizer's vocabulary is read (launcher.checks.data.tokenizer_vocab_size);
    `accept_loss`: write the preset even where it does not hold the script's model, numerics or layout (its header
    then lists what was lost). With `output_format` json, one JSON object on stdout: the preset's text and the
    report. `environment`: the variables the script is read with (--env NAME=VALUE), as `NAME=VALUE bash SCRIPT`."""
    text, name, positional = read_input(source)
    script = Path(source[0]) if source and source[0] != "-" and name == str(Path(source[0])) else None
    imported = import_source(text, name, positional, read_local, script, environment)
    target = Path(output) if output else None
    if target is not None and target.exists() and target.is_dir():
        raise UserError(f"{target} is a directory", "give -o a file name such as imported.yaml")
    refused = bool(imported.lost) and not accept_loss
    if target is not None and not refused:
        try:  # whole or not at all: a full disk leaves no empty or cut preset
            nofollow.write_atomic(target, imported.text, what="imported preset", user_directory=True)
        except OSError as exc:
            raise UserError(f"cannot write {target}: {exc.strerror or exc}",
                            "free space there, or give -o a path on another file system") from None
        outcome = check_import(imported, target, resolve_job)
    else:  # checked where nobody reads it: printed below, or not written at all
        with tempfile.TemporaryDirectory() as tmp:
            scratch = Path(tmp) / (target.name if target is not None else "imported.yaml")
            nofollow.write_atomic(scratch, imported.text, what="imported preset")
            outcome = check_import(imported, scratch, resolve_job)
    lost = all_lost(imported, outcome)
    where = "not written" if refused else (str(target) if target is not None else "standard output")
    if output_format == "json":
        report = as_dict(imported, outcome, None if refused else output)
        report["lost"] = list(lost)
        sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
    else:
        if target is None and not refused:
            sys.stdout.write(imported.text)
        (sys.stdout if target is not None else sys.stderr).write(render(imported, outcome, where))
    if refused:
        sys.stderr.write(f"error: the preset would not hold {len(lost)} thing(s) of the script's model, numerics or "
                         "layout (listed under lost), so it was not written\n"
                         "hint: give each its setting where the pin has one (--set in a launch, or edit the script), "
                         "or the variables the script reads as --env NAME=VALUE (as `NAME=VALUE bash SCRIPT`), or "
                         "import with --accept-loss to write it anyway (its header then lists what was lost)\n")
    unaccepted = len(lost) > len(imported.lost) and not accept_loss  # the round trip found more than the import
    return 2 if refused or unaccepted or outcome.problems or outcome.differences else 0
