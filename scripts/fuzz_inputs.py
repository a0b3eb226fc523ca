"""Hostile-input sweep over every file the launcher reads besides run directories (scripts/fuzz_run_dirs.py).

    python scripts/fuzz_inputs.py [--quick] [--per-slot N] [--sample N] [--match TEXT] [--seed N] [--keep DIR]
                                  [--list]

Each case is one input slot (a file some command reads) given one damage; the commands that read that slot run
on it, each in a forked child of this process (the launcher imported once), 20 s and 2 GiB at most (6 GiB
of address space for prepare-data, which maps 3.5 GiB importing torch):

    slots: a preset (launch --dry-run, --slurm/--k8s dry-runs, show, plan, diff) and a preset's base: file; a
    script for `import` (a file, standard input, a file it sources); `plan --refit --measurements`; `report`'s
    log; prepare-data's corpus (.txt, .jsonl, .jsonl.gz), GPT-2 vocab/merges, tokenizer.json and its lock; a
    dataset's .idx/.bin/.meta.json, data_args_path, per_split_data_args_path, an HF tokenizer_model directory;
    the launcher's config.json; a Megatron checkout's files (doctor, fetch-megatron); fetch-megatron's --source
    tarball; an index cache file in data_cache_path; runs --run-root; an import script's scheduler directives
    (#PJM, # flux:, #PBS, #SBATCH/#BSUB/#$) given hostile counts and shapes; a checkpoint's tracker file
    (latest_checkpointed_iteration.txt, read by --check) given hostile iterations; a DeepSpeed JSON and YAML an
    import script writes itself, given hostile counts and holding a planted secret
    damages: missing, empty, a directory, a FIFO, links to /dev/zero and /dev/urandom, a link to itself, a
    dangling link, a link to its own directory, a path too long to name it (300- and 5,000-character
    components, where a command names the slot), not UTF-8, NUL bytes, a sparse 10 GB file, a 9 MiB line,
    random bytes, 10,000 nested lists, 2,000 nested YAML mappings, a YAML alias bomb, deep JSON, 100,000
    digits, 1e999, NaN, a slot's valid content cut in half; and hostile values put in the slot's own format;
    without --quick also each slot's own (a gzip bomb of 16 GiB, a tar header of 4 GiB, a stale lock, …)

A finding: an exit status other than 0 or 2 (1 too for report: a failed run), a traceback or "internal error",
exit 2 without `error:` and `hint:`, more than the time limit, a planted secret in clear in the output or a file
written, or a half-written file left behind (a temporary
of the launcher's, or output files beside a refusal). Prints one line per finding and the totals; exit 1 when
there are findings.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import random
import shutil
import struct
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from fuzz_run_dirs import Outcome, outcome_findings, run_reader  # noqa: E402 - the same forked, bounded runner

# the slowest bounded read, a log's last GiB (report on a sparse 10 GB log), takes ~10 s on 2 busy cores
TIME_LIMIT_S = 20
# address space of one command: 2 GiB, and 6 GiB for those that import torch and megatron-core (prepare-data
# maps 3.5 GiB of it doing so; under 2 GiB its import failed, so no corpus was ever read by the sweep)
MEMORY_LIMIT = 2 << 30
TORCH_MEMORY_LIMIT = 6 << 30
TORCH_COMMANDS = ("prepare-data",)
LOG = ROOT / "tests" / "fixtures" / "logs" / "toy_fp32_1gpu.log"

# ------------------------------------------------------------------------------------------------ damages

Damage = Callable[[Path, bytes], None]  # (the slot's path, its valid content)


def _write(data: bytes) -> Damage:
    def apply(path: Path, _valid: bytes) -> None:
        path.write_bytes(data)
    return apply


def _missing(path: Path, _valid: bytes) -> None:
    path.unlink(missing_ok=True)


def _link(target: str) -> Damage:
    def apply(path: Path, _valid: bytes) -> None:
        path.unlink(missing_ok=True)
        path.symlink_to(target)
    return apply


def _self_link(path: Path, _valid: bytes) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to(path.name)


def _parent_link(path: Path, _valid: bytes) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to(".")


def _directory(path: Path, _valid: bytes) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()
    (path / "inner").mkdir()


def _fifo(path: Path, _valid: bytes) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _sparse(path: Path, _valid: bytes) -> None:
    with open(path, "wb") as handle:
        handle.truncate(10 << 30)


def _cut(path: Path, valid: bytes) -> None:
    path.write_bytes(valid[: len(valid) // 2])


def _nul(path: Path, valid: bytes) -> None:
    path.write_bytes(valid[: len(valid) // 2] + b"\0\0\0" + valid[len(valid) // 2:])


def _not_utf8(path: Path, valid: bytes) -> None:
    path.write_bytes(b"\xff\xfe\x80 " + valid + b"\n\xc3\x28\xa0\xa1\n")


def _long_name(path: Path, _valid: bytes) -> None:
    (path.parent / ".long-name").write_text("")  # the commands name the slot by a path the system refuses


def _gzipped(data: bytes) -> Damage:
    def apply(path: Path, _valid: bytes) -> None:
        path.write_bytes(gzip.compress(data, 1))
    return apply


ALIAS_BOMB = ("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
              + "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi")))
DEEP_BLOCK = "".join(f"{'  ' * depth}k{depth}:\n" for depth in range(2000)) + "  " * 2000 + "v\n"

GENERIC: dict[str, Damage] = {
    "missing": _missing,
    "empty": _write(b""),
    "a directory": _directory,
    "a FIFO": _fifo,
    "a link to /dev/zero": _link("/dev/zero"),
    "a link to /dev/urandom": _link("/dev/urandom"),
    "a link to itself": _self_link,
    "a dangling link": _link("no-such-target"),
    "a link to its directory": _parent_link,
    "not UTF-8": _not_utf8,
    "NUL bytes": _nul,
    "sparse 10 GB": _sparse,
    "a 9 MiB line": _write(b"a" * (9 << 20)),
    "random bytes": _write(random.Random(7).randbytes(65536)),
    "10,000 nested lists": _write(b"[" * 10000 + b"]" * 10000),
    "2,000 nested mappings": _write(DEEP_BLOCK.encode()),
    "an alias bomb": _write(ALIAS_BOMB.encode()),
    "deep JSON": _write(b'{"a":' * 10000 + b"1" + b"}" * 10000),
    "100,000 digits": _write(b"9" * 100000),
    "1e999": _write(b"1e999"),
    "NaN": _write(b"NaN"),
    "cut in half": _cut,
    "a name too long": _long_name,
}
QUICK_DAMAGES = ("a FIFO", "a link to /dev/zero", "a link to itself", "not UTF-8", "sparse 10 GB",
                 "10,000 nested lists", "a name too long")
# values put in a slot's own format at its {V}
HOSTILE_VALUES = ("1e999", "-1e999", ".nan", "NaN", "9" * 100000, "-" + "9" * 5000, "[" * 10000 + "]" * 10000,
                  "0x" + "f" * 40, "!!python/object/apply:os.system ['touch MARKER']", "null", "[]", "{}",
                  '"\\u0000"', '"$(touch MARKER)"', "-1", "0", "true", '"../../../../etc/passwd"')
QUICK_VALUES = ("9" * 100000, "[" * 10000 + "]" * 10000)
# a scheduler directive's count or shape (#PJM, # flux:, #PBS, #SBATCH, #BSUB, #$): each is read as pjsub, flux,
# qsub, sbatch, bsub or qsub would, bounded (1 … 1,000,000 nodes; a node file of at most 100,000 lines)
DIRECTIVE_VALUES = ("99999999999999", "x".join(["1"] * 5000), "-4", "\u0668", "$(touch MARKER)", "`touch MARKER`",
                    "1;touch${IFS}MARKER", "9" * 5000, "1000x1000x1000", "0", "4.5", "1e9", "\uff18",
                    "2:" + ":".join(["a=b"] * 5000))
QUICK_DIRECTIVE_VALUES = ("99999999999999", "x".join(["1"] * 5000), "$(touch MARKER)", "\u0668", "1000x1000x1000")
# a checkpoint's tracker as Megatron's read_metadata reads it: int() of its text, else 'release'
TRACKER_VALUES = ("-5", "release", str(1 << 63), "12\nresume: ok", "\x1b[2J50", "1_000", "\u0663", "9" * 5000,
                  "0x10", "50\x00")
QUICK_TRACKER_VALUES = (str(1 << 63), "12\nresume: ok", "\x1b[2J50")

# a file an import script writes itself and gives to the training command (a DeepSpeed JSON, a YAML of flags), with
# a planted secret: its counts compared with the flags' (0, -2, true divide nothing), read strictly, the secret
# shown in no output and no written file
PLANTED_SECRET = "Zq8sEcretV4lue77xx"  # no credential's form: a secret only by the member holding it
WRITTEN_CONFIG = ("#!/bin/bash\nMBS={V}\ncat > ds.json <<EOF\n{\"train_batch_size\": {V}, "
                  "\"train_micro_batch_size_per_gpu\": {V}, \"gradient_accumulation_steps\": 2,\n \"fp16\": "
                  "{\"enabled\": true, \"initial_scale_power\": {V}, \"loss_scale\": {V}}, \"zero_optimization\": "
                  "{\"stage\": {V}}, \"gradient_clipping\": {V},\n \"wandb\": {\"api_key\": \"SECRET\"}, "
                  "\"hf_token\": \"SECRET\", \"x\": {V}}\nEOF\necho '{\"train_batch_size\": {V}, \"comet\": "
                  "{\"api_key\": \"SECRET\"}}' > cfg.json\ncat > cfg.yaml <<'EOF'\nwandb:\n  api_key: SECRET\n"
                  "num_layers: {V}\nEOF\ntorchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 "
                  "--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --micro-batch-size $MBS "
                  "--global-batch-size 8 --train-iters 10 --lr 1e-4 --mock-data --tokenizer-type NullTokenizer "
                  "--vocab-size 1000 --fp16 --deepspeed_config ds.json --hf-config cfg.json --yaml-cfg cfg.yaml\n"
                  ).replace("SECRET", PLANTED_SECRET)
WRITTEN_VALUES = ("0", "-2", "true", "NaN", "1e400", "-1e999", "2.5", str(1 << 64), "9" * 5000,
                  "[" * 3000 + "]" * 3000, '"x"', "{}", "null", "$(touch MARKER)", "`touch MARKER`")
QUICK_WRITTEN_VALUES = ("0", "-2", "NaN", "9" * 5000, "[" * 3000 + "]" * 3000)


# -------------------------------------------------------------------------------------------------- slots

@dataclass
class Slot:
    name: str
    file: str  # relative to the case directory
    valid: bytes
    commands: dict[str, list[str]]  # reader name -> argv ({case} replaced); "-" as argv[0]: stdin is the file
    template: str | None = None  # the slot's format with {V} where a hostile value goes
    damages: tuple[str, ...] = ()  # of GENERIC; empty: all
    extra: dict[str, Damage] = field(default_factory=dict)
    values: tuple[tuple[str, ...], tuple[str, ...]] | None = None  # (quick, all) in place of the hostile values


def _index(sequence_lengths: list[int], code: int = 8) -> bytes:
    """Megatron's IndexedDataset .idx (indexed_dataset.py _IndexWriter): uint16 tokens, one document each."""
    pointers, at = [], 0
    for length in sequence_lengths:
        pointers.append(at)
        at += 2 * length
    count = len(sequence_lengths)
    return (b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code) + struct.pack("<Q", count)
            + struct.pack("<Q", count + 1) + struct.pack(f"<{count}i", *sequence_lengths)
            + struct.pack(f"<{count}q", *pointers) + struct.pack(f"<{count + 1}q", *range(count + 1)))


def _made(make: Callable[[], bytes]) -> Damage:
    """Content made only when the case runs (megabytes that every slots() call would otherwise build)."""
    def apply(path: Path, _valid: bytes) -> None:
        path.write_bytes(make())
    return apply


def _gzip_bomb(mebibytes: int) -> bytes:
    """`mebibytes` MiB of zeros as concatenated gzip members of 1 MiB: ~1 KB each, made in a moment."""
    return gzip.compress(b"\0" * (1 << 20), 9) * mebibytes


def _tar_header_bomb(gibibytes: int) -> bytes:
    """A tar.gz whose first record is a GNU long name declaring `gibibytes` GiB (tarfile reads such a header whole)."""
    header = tarfile.TarInfo("././@LongLink")
    header.type, header.size = tarfile.GNUTYPE_LONGNAME, gibibytes << 30
    return gzip.compress(header.tobuf(tarfile.GNU_FORMAT)) + _gzip_bomb(gibibytes << 10)


def _npy(values: int) -> bytes:
    """A .npy of int64 as numpy.save writes it (format 1.0), as in Megatron's index caches."""
    header = repr({"descr": "<i8", "fortran_order": False, "shape": (values,)}).encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + struct.pack(f"<{values}q", *range(values))


def _tarball() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = b"print('hello')\n"
        info = tarfile.TarInfo("Megatron-LM-x/pretrain_gpt.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


PREPARE = ["prepare-data", "--output-prefix", "out/c", "--workers", "1", "--no-progress"]
DATA = ["toy", "--dry-run", "--set", "mock_data=false", "--set", "tokenizer_type=NullTokenizer",
        "--set", "vocab_size=300"]


def slots() -> list[Slot]:
    preset = b"base: toy\ndescription: a copy of toy\nmegatron:\n  num_layers: 2\n"
    script = (b"#!/bin/bash\nsource ./env.sh\ntorchrun --nproc_per_node 8 pretrain_gpt.py --num-layers $LAYERS "
              b"--hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
              b"--micro-batch-size 1 --global-batch-size 8 --train-iters 10 --lr 1e-4 --mock-data "
              b"--tokenizer-type NullTokenizer --vocab-size 1000\n")
    tokens = [5, 7, 9]
    tokenizer = json.dumps({"version": "1.0", "added_tokens": [], "model": {"type": "BPE", "vocab": {"a": 0, "b": 1},
                                                                              "merges": []}}).encode()
    return [
        Slot("preset", "preset.yaml", preset, {
            "dry-run": ["preset.yaml", "--dry-run"], "slurm": ["preset.yaml", "--dry-run", "--slurm"],
            "k8s": ["preset.yaml", "--dry-run", "--k8s"], "show": ["show", "preset.yaml"],
            "plan": ["plan", "preset.yaml", "--gpus", "8"], "diff": ["diff", "preset.yaml", "toy"]},
            "base: toy\nmegatron:\n  num_layers: {V}\nlauncher:\n  nodes: 1\n"),
        Slot("preset launcher", "preset.yaml", preset, {"dry-run": ["preset.yaml", "--dry-run"]},
             "base: toy\nlauncher:\n  gpus_per_node: {V}\n  env:\n    X: {V}\n", damages=("cut in half",)),
        Slot("base file", "base.yaml", preset, {"dry-run": ["child.yaml", "--dry-run"],
                                                 "show": ["show", "child.yaml"]},
             "base: toy\nmegatron:\n  lr: {V}\n"),
        Slot("--set value", "preset.yaml", preset, {"dry-run": ["toy", "--dry-run", "--set", "num_layers={V}"],
                                                     "show": ["show", "toy", "--set", "launcher.env.X={V}"]},
             "", damages=("empty",)),
        Slot("import script", "train.sh", script, {"import": ["import", "train.sh"],
                                                    "import -o": ["import", "train.sh", "-o", "out/p.yaml"],
                                                    "import stdin": ["-", "import", "-"]},
             "#!/bin/bash\ntorchrun pretrain_gpt.py --num-layers {V} --hidden-size 8 --lr {V}\n"),
        *directive_slots(),
        Slot("written config", "ds.sh", WRITTEN_CONFIG.replace("{V}", "2").encode(), {
            "import -o": ["import", "ds.sh", "-o", "out/p.yaml", "--accept-loss"], "import": ["import", "ds.sh"]},
            WRITTEN_CONFIG, damages=("a FIFO", "not UTF-8", "cut in half"),
            values=(QUICK_WRITTEN_VALUES, WRITTEN_VALUES)),
        Slot("checkpoint tracker", "ckpt/latest_checkpointed_iteration.txt", b"50\n", {
            "check": ["toy", "--check", "--set", "load=ckpt", "--megatron-path", "mlm"]},
            "{V}\n", values=(QUICK_TRACKER_VALUES, TRACKER_VALUES)),
        Slot("sourced file", "env.sh", b"LAYERS=2\n", {"import": ["import", "train.sh"]}, "LAYERS={V}\n"),
        Slot("import yaml", "flags.yaml", b"num-layers: 2\nhidden-size: 64\n", {"import": ["import", "flags.yaml"]},
             "num-layers: {V}\nhidden-size: 64\n"),
        Slot("measurements", "measurements.json", b"[]\n", {
            "refit": ["plan", "toy", "--refit", "--measurements", "measurements.json"]},
            '[{"preset": "toy", "sets": [], "gpus": {V}, "seconds_per_iteration": {V}}]'),
        Slot("log", "train.log", LOG.read_bytes(), {
            "report": ["report", "train.log", "--output-dir", "out/plots"],
            "report json": ["report", "train.log", "--format", "json", "--output-dir", "out/plots"],
            "report partial": ["report", "train.log", "--partial", "--output-dir", "out/plots"]},
            " [2026-01-01 00:00:00] iteration        {V}/     100 | consumed samples: {V} | elapsed time per "
            "iteration (ms): {V} | learning rate: {V} | lm loss: {V} | loss scale: 1.0 |\n"),
        Slot("corpus text", "corpus.txt", b"hello world\nsecond line\n\nthird paragraph\n", {
            "prepare": [*PREPARE, "corpus.txt", "--tokenizer", "byte", "--text-unit", "line"]}),
        Slot("corpus jsonl", "corpus.jsonl", b'{"text": "hello"}\n{"text": "world"}\n', {
            "prepare": [*PREPARE, "corpus.jsonl", "--tokenizer", "byte"]}, '{"text": {V}}\n'),
        Slot("corpus gz", "corpus.jsonl.gz", gzip.compress(b'{"text": "hello"}\n'), {
            "prepare": [*PREPARE, "corpus.jsonl.gz", "--tokenizer", "byte"]},
            extra={"a gzip of 64 MB of zeros": _gzipped(b"\0" * (64 << 20)),
                   "a gzip of 200,000 short lines": _gzipped(b'{"text": "x"}\n' * 200000),
                   "a gzip bomb of 16 GiB of zeros": _made(lambda: _gzip_bomb(16 << 10))}),
        Slot("gpt2 vocab", "vocab.json", json.dumps({"a": 0, "b": 1, "<|endoftext|>": 2}).encode(), {
            "prepare": [*PREPARE, "corpus.txt", "--tokenizer", "gpt2", "--vocab-file", "vocab.json",
                        "--merge-file", "merges.txt"]}, '{"a": {V}, "<|endoftext|>": 2}'),
        Slot("gpt2 merges", "merges.txt", b"#version: 0.2\na b\n", {
            "prepare": [*PREPARE, "corpus.txt", "--tokenizer", "gpt2", "--vocab-file", "vocab.json",
                        "--merge-file", "merges.txt"]}),
        Slot("tokenizer.json", "hf/tokenizer.json", tokenizer, {
            "prepare": [*PREPARE, "corpus.txt", "--tokenizer", "hf", "--tokenizer-dir", "hf"],
            "dry-run": [*DATA[:-4], "--set", "data_path=data/ds", "--set", "tokenizer_type=HuggingFaceTokenizer",
                        "--set", "tokenizer_model=hf"]},
            '{"model": {"type": "BPE", "vocab": {"a": {V}}, "merges": []}, "added_tokens": {V}}'),
        Slot("prepare lock", "out/c.lock", b"", {"prepare": [*PREPARE, "corpus.txt", "--tokenizer", "byte"]},
             damages=("a directory", "a FIFO", "a link to /dev/zero", "a link to itself", "a dangling link",
                      "not UTF-8", "sparse 10 GB", "empty"),
             extra={"a stale pid": _write(b"999999\n"), "garbage": _write(random.Random(3).randbytes(4096))}),
        Slot("index cache", "data/cache/abc-GPTDataset-train-shuffle_index.npy", _npy(64), {
            "dry-run": [*DATA, "--set", "data_path=data/ds", "--set", "data_cache_path=data/cache"]},
            damages=("cut in half", "empty", "a FIFO", "a link to /dev/zero", "a link to itself", "a directory",
                     "sparse 10 GB", "random bytes", "NUL bytes"),
            extra={"a header of 100,000 digits": _write(b"\x93NUMPY\x01\x00\xa0\x86" + b"9" * 100_000),
                   "a shape of 2^62": _write(_npy(1).replace(b"(1,)", b"(4611686018427387904,)", 1))}),
        Slot("dataset .idx", "data/ds.idx", _index(tokens), {"dry-run": [*DATA, "--set", "data_path=data/ds"]},
             extra={"a count of 2^63": _write(_index(tokens)[:26] + struct.pack("<Q", (1 << 63) - 1)
                                              + _index(tokens)[34:]),
                    "an unknown dtype": _write(_index(tokens)[:17] + b"\x63" + _index(tokens)[18:]),
                    "a negative length": _write(_index([-5, 7, 9])),
                    "a billion sequences, no data": _write(_index(tokens)[:18] + struct.pack("<Q", 10**9)
                                                           + struct.pack("<Q", 10**9 + 1))}),
        Slot("dataset .bin", "data/ds.bin", struct.pack("<21H", *range(21)),
             {"dry-run": [*DATA, "--set", "data_path=data/ds"]}),
        Slot("dataset .meta.json", "data/ds.meta.json",
             json.dumps({"format": "megatron-launch/prepare-data/1", "vocab_size": 300, "max_token_id": 20,
                         "eod_id": 0}).encode(),
             {"dry-run": [*DATA, "--set", "data_path=data/ds"]},
             '{"format": "megatron-launch/prepare-data/1", "vocab_size": {V}, "max_token_id": {V}, "eod_id": {V}}'),
        Slot("data_args_path", "blend.txt", b"1.0 data/ds\n", {"dry-run": [*DATA, "--set",
                                                                           "data_args_path=blend.txt"]},
             "{V} data/ds {V}\n"),
        Slot("per_split_data_args_path", "split.json", b'{"train": ["data/ds"], "valid": ["data/ds"]}', {
            "dry-run": [*DATA, "--set", "per_split_data_args_path=split.json"]},
            '{"train": {V}, "valid": ["data/ds"], "test": [{V}]}'),
        Slot("launcher config", "home/.config/megatron-launch/config.json", b'{"megatron_path": "/nonexistent"}', {
            "dry-run": ["toy", "--dry-run"], "doctor": ["doctor"]}, '{"megatron_path": {V}}'),
        Slot("megatron package_info", "mlm/megatron/core/package_info.py", b"MAJOR = 0\nMINOR = 18\nPATCH = 0\n", {
            "doctor": ["doctor", "--megatron-path", "mlm"]}, "MAJOR = {V}\nMINOR = 18\nPATCH = 0\n"),
        Slot("megatron commit marker", "mlm/.megatron-launch-commit", b"432d76b2b8bf\n", {
            "doctor": ["doctor", "--megatron-path", "mlm"], "fetch": ["fetch-megatron", "mlm"]}),
        Slot("fetch tarball", "source.tar.gz", _tarball(), {
            "fetch": ["fetch-megatron", "out/mlm", "--source", "source.tar.gz"]},
            damages=("missing", "a directory", "a FIFO", "a link to /dev/zero", "a link to itself", "not UTF-8",
                     "random bytes", "cut in half", "sparse 10 GB"),
            extra={"a gzip of 64 MB of zeros": _gzipped(b"\0" * (64 << 20)),
                   "a tar header of 4 GiB": _made(lambda: _tar_header_bomb(4))}),
        Slot("run root", "runs", b"", {"runs": ["runs", "--run-root", "runs"],
                                       "runs json": ["runs", "--run-root", "runs", "--format", "json"]},
             damages=("missing", "empty", "a FIFO", "a link to /dev/zero", "a link to itself", "a dangling link",
                      "a link to its directory", "not UTF-8")),
    ]


TRAINING = ("pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
            "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --train-iters 10 --lr 1e-4 "
            "--mock-data --tokenizer-type NullTokenizer --vocab-size 1000")
DIRECTIVES = {
    "pjm": ('#PJM -L node={V}\n#PJM -L "rscgrp=small,node={V}"\n#PJM --mpi proc={V}\n#PJM --mpi max-proc-per-node={V}\n'
            "mpiexec -n $PJM_MPI_PROC torchrun --nnodes $PJM_NODE --nproc_per_node 4 "),
    "flux": ("# flux: -N {V}\n# flux: --nodes={V}\n# flux: -n {V}\nNN=$(flux resource list -n -o {nnodes})\n"
             "torchrun --nnodes $NN --nproc_per_node 4 "),
    "pbs": ("#PBS -l select={V}:ncpus=8:mpiprocs={V}\n#PBS -l nodes={V}:ppn={V}\n"
            "NN=$(sort -u $PBS_NODEFILE | wc -l)\ntorchrun --nnodes $NN --nproc_per_node 4 "),
    "sbatch/bsub/sge": ("#SBATCH --nodes={V}\n#SBATCH --ntasks-per-node={V}\n#SBATCH --gres=gpu:{V}\n#BSUB -n {V}\n"
                        "#$ -pe mpi {V}\nNN=$(scontrol show hostnames | wc -l)\nsrun torchrun --nnodes $NN "
                        "--nproc_per_node {V} "),
}


def directive_slots() -> list[Slot]:
    """An import script whose scheduler directives carry the hostile value, one slot a job manager."""
    found = []
    for name, head in DIRECTIVES.items():
        template = "#!/bin/bash\n" + head + TRAINING + "\n"
        found.append(Slot(f"{name} directives", f"{name.replace('/', '-')}.sh",
                          template.replace("{V}", "2").encode(),
                          {"import": ["import", f"{name.replace('/', '-')}.sh"]}, template,
                          damages=("a FIFO", "not UTF-8", "NUL bytes", "a 9 MiB line", "cut in half"),
                          values=(QUICK_DIRECTIVE_VALUES, DIRECTIVE_VALUES)))
    return found


def _base(case: Path) -> None:
    """The valid files every slot's commands need besides the slot itself."""
    for slot in slots():
        path = case / slot.file
        path.parent.mkdir(parents=True, exist_ok=True)
        if slot.file == "runs":
            path.mkdir(exist_ok=True)
        elif not path.exists():
            path.write_bytes(slot.valid)
    (case / "child.yaml").write_text("base: base.yaml\n")
    (case / "out").mkdir(exist_ok=True)
    (case / "mlm" / "pretrain_gpt.py").write_text("")


# ---------------------------------------------------------------------------------------------- the sweep

@dataclass
class Case:
    slot: Slot
    damage: str
    apply: Damage


def cases(quick: bool) -> list[Case]:
    found = []
    for slot in slots():
        names = slot.damages or (QUICK_DAMAGES if quick else tuple(GENERIC))
        if slot.damages and quick:
            names = tuple(n for n in names if n in QUICK_DAMAGES) or names[:1]
        if slot.name == "--set value":
            names = ()
        for name in names:
            found.append(Case(slot, name, GENERIC[name]))
        for name, apply in slot.extra.items() if not quick else ():
            found.append(Case(slot, name, apply))
        if slot.template is not None:
            quick_values, all_values = slot.values or (QUICK_VALUES, HOSTILE_VALUES)
            for value in quick_values if quick else all_values:
                text = slot.template.replace("{V}", value)
                if slot.name == "--set value":
                    found.append(Case(slot, f"value {value[:20]!r}", _argv_value(value)))
                else:
                    found.append(Case(slot, f"value {value[:20]!r}", _write(text.encode())))
    return found


def _argv_value(value: str) -> Damage:
    def apply(path: Path, _valid: bytes) -> None:
        (path.parent / ".value").write_text(value)
    return apply


def _argv(template: list[str], case_dir: Path, slot_file: str) -> tuple[list[str], Path | None]:
    if ((case_dir / slot_file).parent / ".long-name").exists():
        long = "n" * 300 + "/" + "a" * 5000
        template = [template[0]] + [long if word == slot_file else word.replace(f"={slot_file}", f"={long}")
                                    for word in template[1:]]
    stdin = None
    if template[0] == "-":  # `launch import - < FILE`: a shell that cannot open FILE runs nothing
        stdin, template = case_dir / "train.sh", template[1:]
        try:
            os.close(os.open(stdin, os.O_RDONLY | os.O_NONBLOCK))
        except OSError:
            return [], None
    value_file = case_dir / ".value"
    value = value_file.read_text() if value_file.exists() else ""
    return [word.replace("{V}", value) for word in template], stdin


def _leftovers(case_dir: Path, before: set[Path], status: int | None) -> list[str]:
    """Temporaries of the launcher's left behind, and output files beside a refusal."""
    found = []
    for dirpath, dirnames, filenames in os.walk(case_dir):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            path = Path(dirpath) / name
            relative = path.relative_to(case_dir)
            if name.endswith(".tmp") or ".tmp." in name:
                found.append(f"temporary left: {relative}")
            elif relative.parts[0] != "out" or path in before:
                continue
            elif name.endswith(".yaml") and not _whole_yaml(path):  # import -o writes its preset beside a report
                found.append(f"half-written: {relative}")
            elif status == 2 and not name.endswith((".yaml", ".log")):
                found.append(f"written although refused: {relative}")
    return found


def _whole_yaml(path: Path) -> bool:
    import yaml

    try:
        return isinstance(yaml.safe_load(path.read_text(encoding="utf-8")), dict)
    except (OSError, ValueError, yaml.YAMLError):
        return False


def judge(reader: str, outcome: Outcome, leftovers: list[str], marker: Path, written: list[Path] | None = None
          ) -> list[str]:
    """The findings of one command: `written`, the files it made or changed."""
    allowed = {0, 1, 2} if reader.startswith(("report", "doctor")) else {0, 2}  # a failed run; a failed check
    answer = outcome.out + outcome.err
    if reader == "check":  # --check's report: each refusal is a `refused:` line with its `hint:`
        answer = answer.replace("refused:", "error:")
    findings = outcome_findings(outcome, allowed, answer, TIME_LIMIT_S)
    if marker.exists():
        findings.append("EXECUTED: a value from a file ran a command")
        marker.unlink()
    if "needs megatron-core" in outcome.err:  # the sweep's own limits kept the command from its input
        findings.append("SETUP: megatron-core could not be imported within the sweep's limits; the input was not read")
    shown = [name for name, text in (("stdout", outcome.out), ("stderr", outcome.err)) if PLANTED_SECRET in text]
    shown += [str(path) for path in written or [] if _holds(path, PLANTED_SECRET)]
    if shown:
        findings.append(f"SECRET: a planted secret in clear in {', '.join(shown[:3])}")
    return findings + leftovers


def _holds(path: Path, text: str) -> bool:
    try:
        return path.is_file() and not path.is_symlink() and text.encode() in path.read_bytes()[:64 << 20]
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="7 damages and 2 values a slot, its first command only (1-2 min on 2 cores)")
    parser.add_argument("--sample", type=int, metavar="N", help="N cases drawn by --seed")
    parser.add_argument("--per-slot", type=int, metavar="N", help="N cases of each slot drawn by --seed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--match", help="only cases whose 'slot damage' contains this")
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temporary directory)")
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    args = parser.parse_args()
    chosen = cases(args.quick)
    if args.match:
        chosen = [c for c in chosen if args.match in f"{c.slot.name} {c.damage}"]
    rng = random.Random(args.seed)
    if args.per_slot is not None:
        by_slot: dict[str, list[Case]] = {}
        for case in chosen:
            by_slot.setdefault(case.slot.name, []).append(case)
        chosen = [case for cases_of_slot in by_slot.values()
                  for case in rng.sample(cases_of_slot, min(args.per_slot, len(cases_of_slot)))]
    if args.sample is not None and args.sample < len(chosen):
        chosen = rng.sample(chosen, args.sample)
    if args.list:
        for case in chosen:
            print(f"{case.slot.name} | {case.damage} | {', '.join(case.slot.commands)}")
        return 0
    work = (args.keep or Path(tempfile.mkdtemp(prefix="fuzz-inputs-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    template = work / "template"
    shutil.rmtree(template, ignore_errors=True)
    template.mkdir()
    _base(template)
    started = time.monotonic()
    import launcher.cli  # noqa: F401 - imported once: each command is a fork of this process
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8",
           "CUDA_VISIBLE_DEVICES": "0"}
    findings: list[str] = []
    runs = 0
    slowest, slowest_case = 0.0, ""
    case_dir = work / "case"
    for case in chosen:
        marker = case_dir / "MARKER"
        commands = list(case.slot.commands.items())
        for reader, command in commands[:1] if args.quick else commands:
            if case_dir.exists():
                _make_writable(case_dir)
                shutil.rmtree(case_dir)
            shutil.copytree(template, case_dir, symlinks=True)
            target = case_dir / case.slot.file
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            case.apply(target, case.slot.valid)
            argv, stdin = _argv(command, case_dir, case.slot.file)
            if not argv:
                continue
            before = {Path(d) / n for d, _, names in os.walk(case_dir) for n in names}
            limit = TORCH_MEMORY_LIMIT if argv[0] in TORCH_COMMANDS or "--check" in argv else MEMORY_LIMIT
            outcome = run_reader(argv, case_dir, {**env, "HOME": str(case_dir / "home")}, stdin, TIME_LIMIT_S, limit)
            runs += 1
            if outcome.seconds > slowest:
                slowest, slowest_case = outcome.seconds, f"{reader} on {case.slot.name} {case.damage}"
            written = [p for p in (Path(d) / n for d, _, names in os.walk(case_dir) for n in names)
                       if p not in before]
            for finding in judge(reader, outcome, _leftovers(case_dir, before, outcome.status), marker, written):
                line = f"{reader} | {case.slot.name} | {case.damage} | {finding}"
                findings.append(line)
                print(line, flush=True)
    shutil.rmtree(case_dir, ignore_errors=True)
    print(f"{len(chosen)} cases, {runs} runs, {len(findings)} findings, slowest {slowest:.1f} s ({slowest_case}), "
          f"{time.monotonic() - started:.0f} s in all")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if findings else 0


def _make_writable(directory: Path) -> None:
    for dirpath, dirnames, _ in os.walk(directory):
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755)


if __name__ == "__main__":
    sys.exit(main())
