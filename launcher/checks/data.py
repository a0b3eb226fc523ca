"""Pre-launch checks of a preset's data settings, in Megatron's own argument names; no torch, no megatron.

`check_data(megatron_args)` returns every problem: the data source (mock vs real, never both), the blend
("w1 p1 w2 p2"), the split, each .bin/.idx pair (present, readable, consistent), the tokenizer's type and
files, and that the data's token ids fit the model's tokenizer vocabulary.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import socket
import struct
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launcher import untrusted
from launcher.errors import Problem, UserError, shown

# Megatron's IndexedDataset .idx layout (megatron/core/datasets/indexed_dataset.py, _IndexWriter)
INDEX_MAGIC = b"MMIDIDX\x00\x00"
INDEX_HEADER_BYTES = 34  # magic 9 + version 8 + dtype code 1 + sequence count 8 + document count 8
DTYPE_SIZES = {1: ("uint8", 1), 2: ("int8", 1), 3: ("int16", 2), 4: ("int32", 4), 5: ("int64", 8),
               6: ("float64", 8), 7: ("float32", 4), 8: ("uint16", 2)}
META_SUFFIX = ".meta.json"
META_FORMAT = "megatron-launch/prepare-data/1"
# Reading every token id to find the largest is only done for data without our .meta.json, and small.
MAX_SCAN_BYTES = 64 << 20
MAX_TOKENIZER_BYTES = 256 << 20  # tokenizer.json of large vocabularies is tens of MB; vocab and blend files less

# Which tokenizer types read which files (megatron/core/tokenizers/utils/build_tokenizer.py)
FILE_TOKENIZERS = {"SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer", "TikTokenizer",
                   "SFTTokenizer"}
KNOWN_TOKENIZERS = {"HuggingFaceTokenizer", "MultimodalTokenizer", "NullTokenizer", "NullMultimodalTokenizer",
                    "BertWordPieceLowerCase", "BertWordPieceCase", "GPT2BPETokenizer", *FILE_TOKENIZERS}
PER_SPLIT_SETTINGS = ("train_data_path", "valid_data_path", "test_data_path")
# blend_per_split without a train blend: the builder makes no training set, and training.py
# build_train_valid_test_data_loaders sets do_train false, so pretrain() runs no step and exits 0
NO_TRAINING_SET = ("Megatron builds no training set and trains nothing (training.py: do_train is false without a "
                   "train dataloader), then exits 0")
# Every Megatron setting check_data reads: what a Slurm job passes to its node to run the same check there.
DATA_SETTINGS = ("mock_data", "data_path", "data_args_path", *PER_SPLIT_SETTINGS, "per_split_data_args_path", "split",
                 "tokenizer_type", "tokenizer_model", "vocab_size", "vocab_file", "merge_file", "null_tokenizer_eod_id",
                 "eod_mask_loss", "reset_position_ids", "reset_attention_mask")


@dataclass(frozen=True)
class IndexSummary:
    dtype: str
    itemsize: int
    sequences: int
    documents: int
    bin_bytes: int  # what the .bin must hold, from the last sequence's pointer and length


@dataclass(frozen=True)
class TrainingTokenizer:
    """What the model will be built with: the tokenizer's vocabulary (before Megatron pads it) and EOD."""

    tokenizer_type: str
    vocab_size: int | None
    eod: int | None


def check_data(megatron_args: Mapping[str, Any], python_here: bool = True) -> list[Problem]:
    """Every problem with the data and tokenizer settings of a pretrain_gpt run. `python_here`: the training
    runs this Python (locally, on a node at job start), so the packages the tokenizer needs are checked too."""
    problems: list[Problem] = []
    problems += _check_sources(megatron_args)
    tokenizer, tokenizer_problems = training_tokenizer(megatron_args)
    problems += tokenizer_problems
    if python_here:
        problems += tokenizer_package_problems(megatron_args)
    for setting, prefixes in _blend_prefixes(megatron_args, problems).items():
        for prefix in prefixes:
            problems += check_prefix(prefix, setting, tokenizer, megatron_args)
    if megatron_args.get("data_path") or megatron_args.get("data_args_path"):
        split = megatron_args.get("split")
        split_problems = check_split(str(split)) if split is not None else []
        problems += split_problems
        if not split_problems and not problems:  # every prefix readable: count what each split gets of it
            for prefix in _blend_prefixes(megatron_args, []).get("data_path", []):
                problems += check_split_documents(prefix, str(split or LEGACY_SPLIT))
    return problems


# validate_args' split where data_path is given without one (arguments.py:667)
LEGACY_SPLIT = "969, 30, 1"
SPLIT_NAMES = ("train", "valid", "test")


def split_ranges(split: str, count: int) -> list[range | None]:
    """The documents of a dataset of `count` that each split takes, as Megatron computes them
    (parse_and_normalize_split, convert_split_vector_to_split_matrix, then round(bound × count) in
    _build_megatron_dataset_splits); None: a split of weight 0, which Megatron does not build."""
    weights = [float(n) for n in re.findall(r"[.0-9]+", split)]
    weights += [0.0] * (len(SPLIT_NAMES) - len(weights))
    total = sum(weights)
    bounds, start = [], 0.0
    for weight in weights:
        end = start + weight / total
        bounds.append(None if end <= start else (start, end))
        start = end
    return [None if b is None else range(int(round(b[0] * count)), int(round(b[1] * count))) for b in bounds]


def check_split_documents(prefix: str, split: str) -> list[Problem]:
    """A split of positive weight that gets none of a dataset's documents: Megatron still builds its dataset, of 0
    tokens an epoch, and its index build adds such epochs forever (gpt_dataset.py:633 _get_num_epochs): the job
    hangs at start (seen: 2 documents, split 98,2,0, the valid split)."""
    try:
        count = read_index(prefix).sequences
    except (OSError, ValueError):
        return []  # said by check_prefix
    empty = [name for name, taken in zip(SPLIT_NAMES, split_ranges(split, count)) if taken is not None and not taken]
    if not empty:
        return []
    zeroed = ",".join("0" if name in empty else part for name, part in
                      zip(SPLIT_NAMES, [*re.findall(r"[.0-9]+", split), "0", "0", "0"]))
    return [Problem(f"split {split!r} gives the {' and '.join(empty)} split{'s' if len(empty) > 1 else ''} none of "
                    f"the {count} document(s) of {prefix}: Megatron would build {'them' if len(empty) > 1 else 'it'} "
                    "empty and never finish its index (each epoch adds 0 tokens)",
                    f"add documents, or give {'those splits' if len(empty) > 1 else 'that split'} no share: "
                    f"--set split={zeroed}")]


def data_files(megatron_args: Mapping[str, Any]) -> list[str]:
    """Every file the data and tokenizer settings name, as given: the .bin/.idx of each dataset prefix, the
    listing files (*_args_path, not opened here) and the tokenizer's files."""
    files = [str(megatron_args[name]) for name in ("data_args_path", "per_split_data_args_path", "vocab_file",
                                                   "merge_file") if megatron_args.get(name)]
    model = megatron_args.get("tokenizer_model")
    if model and str(model).startswith(("/", ".")):  # otherwise possibly a hub name, fetched at run time
        files.append(str(model))
    for name in ("data_path", *PER_SPLIT_SETTINGS):
        value = megatron_args.get(name)
        if value:
            prefixes, _weights, problems = parse_blend(value, name)
            files += [prefix + suffix for prefix in ([] if problems else prefixes) for suffix in (".bin", ".idx")]
    return files


def check_job_data(args: Mapping[str, Any], remote: bool, python_here: bool = True, caches: bool = True
                   ) -> tuple[list[Problem], list[str]]:
    """resolve's data check (its `data_check`). Here, every data check (exit 2 before launch). On a cluster
    (Slurm, Kubernetes), the same when this machine sees the files; otherwise only the checks that need no file,
    and the files this machine cannot see (the job checks them on its first node). A container brings its own
    packages (the node checks them at job start); elsewhere this Python answers (`python_here`). `caches`: and
    the index caches the job would load (check_cache)."""
    if remote:
        unseen = [path for path in data_files(args) if not os.path.exists(path)]
        if unseen:
            return check_data_sources(args), unseen
    return check_data(args, python_here=python_here) + (check_cache(args) if caches else []), []


def check_job_data_only(args: Mapping[str, Any], remote: bool, python_here: bool = True
                        ) -> tuple[list[Problem], list[str]]:
    """check_job_data without the index caches (for --build-index, which replaces a cut one)."""
    return check_job_data(args, remote, python_here, caches=False)


# Megatron's index caches: a set of files per dataset and split, taken as built once all of them exist.
MAX_CACHE_ENTRIES = 10_000  # a cache holds a few files per dataset and split; past this many, not scanned
_NPY_MAGIC = b"\x93NUMPY"
_NPY_HEADER_BYTES = 4096  # numpy writes ~128 bytes; a longer header is not sized (taken as whole): 40 MB read at most


def cache_directories(args: Mapping[str, Any]) -> list[str]:
    """Where Megatron reads and writes the index caches of these data settings: data_cache_path, or beside each
    dataset prefix (PREFIX/cache/GPTDataset_indices, Megatron's default)."""
    if args.get("mock_data"):
        return []
    if args.get("data_cache_path"):
        return [str(args["data_cache_path"])]
    prefixes = []
    for name in ("data_path", *PER_SPLIT_SETTINGS):
        if args.get(name):
            found, _weights, problems = parse_blend(args[name], name)
            prefixes += [] if problems else found
    return sorted({os.path.join(prefix, "cache", "GPTDataset_indices") for prefix in prefixes})


def cut_cache_files(directory: str) -> list[str]:
    """The `.npy` files of a cache directory that end before their array does: cut while written (a job or build
    killed, a full disk). Megatron would take their set as built and fail to load it. The first MAX_CACHE_ENTRIES
    entries are looked at, each by its header only."""
    cut: list[str] = []
    try:
        with os.scandir(directory) as entries:
            for number, entry in enumerate(entries):
                if number >= MAX_CACHE_ENTRIES:
                    break
                if entry.name.endswith(".npy") and entry.is_file(follow_symlinks=False) and \
                        not _whole_npy(entry.path):
                    cut.append(entry.path)
    except OSError:
        return cut  # no cache yet (or not readable here): nothing is loaded from it
    return sorted(cut)


def _whole_npy(path: str) -> bool:
    """A .npy file at least as long as its header says: magic, version, header length, then a dict literal
    with 'descr' and 'shape'. One of a format this cannot size (a structured dtype) is taken as whole."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return True  # gone meanwhile, or not readable here: not this check's to judge
    try:
        size = os.fstat(fd).st_size
        head = os.read(fd, _NPY_HEADER_BYTES + 12)
    except OSError:
        return True
    finally:
        os.close(fd)
    if len(head) < 10 or not head.startswith(_NPY_MAGIC):
        return False
    wide = head[6] >= 2
    start = 12 if wide else 10
    length = int.from_bytes(head[8:start], "little")
    if len(head) < start + length:
        return length > _NPY_HEADER_BYTES and size >= start + length  # a header longer than read: not sized
    try:
        import ast

        header = ast.literal_eval(head[start:start + length].decode("latin-1"))
        descr, shape = header["descr"], tuple(header["shape"])
    except (ValueError, SyntaxError, KeyError, TypeError, MemoryError, RecursionError):
        return False
    item = re.fullmatch(r"[<>|=]?[a-zA-Z](\d+)", descr) if isinstance(descr, str) else None
    if item is None or not all(isinstance(n, int) and n >= 0 for n in shape):
        return True
    return size >= start + length + math.prod(shape) * int(item.group(1))


def check_cache(args: Mapping[str, Any]) -> list[Problem]:
    """A cut index cache file (a job killed while it wrote it) fails every later job that loads its set; one that
    is no NumPy array file at all (a pickle) would run code as Megatron loads it."""
    way_out = "remove it (rm {}), or run `launch prepare-data --build-index` for this preset, which replaces it"
    return [Problem(f"{path} is no NumPy array file: Megatron loads its index caches with "
                    "numpy.load(allow_pickle=True), which unpickles such a file, and a pickle runs code"
                    if _not_npy(path) else
                    f"{path} is a cut index cache file (its array ends early: a job or build was stopped while "
                    "writing it, unless one is writing it now); Megatron would take its set as built and fail "
                    "loading it", way_out.format(shown(path)))
            for directory in cache_directories(args) for path in cut_cache_files(directory)]


def _not_npy(path: str) -> bool:
    """A file that does not begin as a .npy file does (an empty one, or one cut within the magic, is merely cut)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        head = os.read(fd, len(_NPY_MAGIC))
    except OSError:
        return False
    finally:
        os.close(fd)
    return not _NPY_MAGIC.startswith(head)


def check_data_sources(megatron_args: Mapping[str, Any]) -> list[Problem]:
    """The checks that need no file: one data source, a well-formed blend and split."""
    problems = _check_sources(megatron_args)
    for name in ("data_path", *PER_SPLIT_SETTINGS):
        if megatron_args.get(name):
            problems += parse_blend(megatron_args[name], name)[2]
    if megatron_args.get("data_path") and megatron_args.get("split") is not None:
        problems += check_split(str(megatron_args["split"]))
    return problems


def _check_sources(args: Mapping[str, Any]) -> list[Problem]:
    mock = bool(args.get("mock_data"))
    blended = bool(args.get("data_path")) or bool(args.get("data_args_path"))
    per_split = any(args.get(name) for name in PER_SPLIT_SETTINGS) or bool(args.get("per_split_data_args_path"))
    problems = []
    if mock and (blended or per_split):
        real = "data_path" if blended else "train/valid/test_data_path"
        problems.append(Problem(f"both mock data (mock_data) and real data ({real}) are requested",
                                "keep one: mock_data=false for real data, or drop the data paths"))
    elif blended and per_split:
        problems.append(Problem("data_path and train/valid/test_data_path are both set; Megatron takes one source",
                                "use data_path with split, or the three per-split paths"))
    elif not (mock or blended or per_split):
        problems.append(Problem("no training data: neither mock_data nor data_path is set",
                                "set mock_data=true, or data_path=PREFIX (made by `launch prepare-data`)"))
    elif per_split and not args.get("per_split_data_args_path") and not args.get("train_data_path"):
        given = " and ".join(name for name in PER_SPLIT_SETTINGS if args.get(name))
        problems.append(Problem(f"{given} without train_data_path: {NO_TRAINING_SET}",
                                "set train_data_path=PREFIX (made by `launch prepare-data`), or use data_path with "
                                "split"))
    if args.get("data_path") and args.get("data_args_path"):
        problems.append(Problem("data_path and data_args_path are both set", "keep one of them"))
    return problems


def _blend_prefixes(args: Mapping[str, Any], problems: list[Problem]) -> dict[str, list[str]]:
    """The dataset prefixes named by each data setting (files named by *_args_path are read)."""
    found: dict[str, list[str]] = {}
    values: dict[str, Any] = {name: args.get(name) for name in ("data_path", *PER_SPLIT_SETTINGS)}
    if args.get("data_args_path"):
        text = _read_text(str(args["data_args_path"]), "data_args_path", problems)
        values["data_args_path"] = text.split() if text is not None else None
    if args.get("per_split_data_args_path"):
        text = _read_text(str(args["per_split_data_args_path"]), "per_split_data_args_path", problems)
        if text is not None:
            try:
                per_split = untrusted.loads_json(text, "per_split_data_args_path")
            except UserError:
                per_split = None
            splits = per_split.items() if isinstance(per_split, dict) else []
            if not isinstance(per_split, dict) or not all(_is_blend(v) for _, v in splits):
                problems.append(Problem(f"per_split_data_args_path {args['per_split_data_args_path']} is not a "
                                        'JSON object {"train": …, "valid": …, "test": …} of dataset lists',
                                        'each split: "weight prefix …" text or a list of them'))
            else:
                for split in ("train", "valid", "test"):
                    values[f"per_split_data_args_path[{split}]"] = per_split.get(split)
                if not per_split.get("train"):
                    problems.append(Problem(f"per_split_data_args_path {args['per_split_data_args_path']} names no "
                                            f"train datasets: {NO_TRAINING_SET}",
                                            'give its "train" split the datasets to train on'))
    for setting, value in values.items():
        if value is None or value == []:
            continue
        prefixes, _weights, blend_problems = parse_blend(value, setting)
        problems += blend_problems
        if not blend_problems:  # a malformed list's "prefixes" would only add noise
            found[setting] = prefixes
    return found


def _is_blend(value: Any) -> bool:
    """What Megatron takes for one split's data: text, or a list of texts and numbers (or nothing)."""
    if value is None or isinstance(value, str):
        return True
    return isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                           for v in value)


def parse_blend(value: str | Sequence[str], setting: str = "data_path"
                ) -> tuple[list[str], list[float] | None, list[Problem]]:
    """Megatron's blend list: "p1 p2 …" (equal weight by size) or "w1 p1 w2 p2 …" (get_blend_from_list)."""
    items = value.split() if isinstance(value, str) else [str(item) for item in value]
    if not items:
        return [], None, [Problem(f"{setting} is empty", "name at least one dataset prefix")]
    numbers = [_as_float(item) for item in items]
    if len(items) % 2 == 0 and all(n is not None for n in numbers[0::2]):
        weights = [float(n) for n in numbers[0::2] if n is not None]
        prefixes = items[1::2]
        problems = []
        if any(n is not None for n in numbers[1::2]):
            problems.append(Problem(f"{setting} {' '.join(items)!r}: a dataset prefix looks like a number",
                                    'the format is "weight1 prefix1 weight2 prefix2 …"'))
        if not _finite(weights):
            problems.append(Problem(f"{setting} weights {shown(' '.join(items[0::2]), 120)} are not finite numbers "
                                    "with a finite sum (Megatron reads nan, inf and 1e999 as weights and divides by "
                                    "their sum)", "give each dataset a finite weight, e.g. 0.3 and 0.7"))
        elif any(w < 0 for w in weights) or sum(weights) <= 0:
            problems.append(Problem(f"{setting} weights {weights} must be non-negative with a positive sum"))
        return prefixes, weights, problems
    if any(n is not None for n in numbers):
        return items, None, [Problem(
            f"{setting} {' '.join(items)!r} mixes weights and prefixes unevenly",
            'use "prefix1 prefix2 …" or "weight1 prefix1 weight2 prefix2 …" (a weight before every prefix)')]
    return items, None, []


def check_split(split: str) -> list[Problem]:
    """Megatron's --split: up to three non-negative proportions, e.g. "949,50,1" or "98/2/0"."""
    parts = [part.strip() for part in re.split(r"[,/]", split)]
    numbers = [_as_float(part) for part in parts]
    hint = 'three proportions for train, valid, test, e.g. split="949,50,1"'
    if len(parts) > 3 or any(n is None for n in numbers):
        return [Problem(f"split {shown(split, 120)} is not up to three comma-separated numbers", hint)]
    if not _finite([n for n in numbers if n is not None]):  # Megatron normalizes by the sum: nan or inf is no split
        return [Problem(f"split {shown(split, 120)} holds a number that is not finite (nan, inf, 1e999)", hint)]
    if any(n is not None and n < 0 for n in numbers) or sum(n for n in numbers if n is not None) <= 0:
        return [Problem(f"split {split!r} needs non-negative proportions with a positive sum", hint)]
    if not numbers[0]:
        return [Problem(f"split {split!r} leaves no data for training", hint)]
    return []


def read_index(prefix: str) -> IndexSummary:
    """Header facts of PREFIX.idx; raises ValueError (message for the user) when it is not Megatron's format."""
    path = prefix + ".idx"
    try:
        handle = untrusted.open_binary(path, "index file")  # a FIFO named PREFIX.idx is not waited on
    except UserError as error:
        raise ValueError(error.problems[0].message) from None
    with handle:
        header = handle.read(INDEX_HEADER_BYTES)
        if len(header) < INDEX_HEADER_BYTES or header[:9] != INDEX_MAGIC:
            raise ValueError(f"{path} is not a Megatron indexed-dataset index (bad header)")
        (version,) = struct.unpack("<Q", header[9:17])
        dtype_code = header[17]
        sequences, documents = struct.unpack("<QQ", header[18:34])
        if version != 1 or dtype_code not in DTYPE_SIZES:
            raise ValueError(f"{path}: unknown index version {version} or dtype code {dtype_code}")
        expected = INDEX_HEADER_BYTES + 12 * sequences + 8 * documents
        actual = os.path.getsize(path)
        if actual not in (expected, expected + sequences):  # + one mode byte per sequence when multimodal
            raise ValueError(f"{path} is truncated or corrupt: {actual} bytes, expected {expected}")
        dtype, itemsize = DTYPE_SIZES[dtype_code]
        bin_bytes = 0
        if sequences:
            handle.seek(INDEX_HEADER_BYTES + 4 * (sequences - 1))
            (last_length,) = struct.unpack("<i", handle.read(4))
            handle.seek(INDEX_HEADER_BYTES + 4 * sequences + 8 * (sequences - 1))
            (last_pointer,) = struct.unpack("<q", handle.read(8))
            bin_bytes = last_pointer + last_length * itemsize
    return IndexSummary(dtype, itemsize, sequences, documents, bin_bytes)


def read_meta(prefix: str) -> dict[str, Any] | None:
    """PREFIX.meta.json written by `launch prepare-data`, or None (e.g. data made by upstream tools)."""
    if not os.path.exists(prefix + META_SUFFIX):
        return None
    try:
        meta = untrusted.read_json(prefix + META_SUFFIX, "dataset metadata", 1 << 20)
    except UserError:
        return None
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        return None
    tokenizer = meta.get("tokenizer")
    # Damaged or edited by hand: checked as if it were not there (the .idx checks still run).
    if not isinstance(tokenizer, dict) or not _is_id(tokenizer.get("vocab_size")):
        return None
    if not isinstance(meta.get("megatron_args", {}), dict):
        return None
    return meta


def check_prefix(prefix: str, setting: str, tokenizer: TrainingTokenizer | None = None,
                 megatron_args: Mapping[str, Any] | None = None) -> list[Problem]:
    """The .bin/.idx pair of one dataset prefix: present, readable, consistent, ids within the vocabulary."""
    hint = f"make it with: launch prepare-data INPUT… --output-prefix {prefix} --tokenizer …"
    missing = [prefix + suffix for suffix in (".bin", ".idx") if not os.path.isfile(prefix + suffix)]
    if missing:
        where = f" (relative to {os.getcwd()})" if not os.path.isabs(prefix) else ""
        return [Problem(f"{setting}: dataset {prefix} has no {' or '.join(missing)}{where}", hint)]
    unreadable = [prefix + s for s in (".bin", ".idx") if not os.access(prefix + s, os.R_OK)]
    if unreadable:
        return [Problem(f"{setting}: {', '.join(unreadable)} not readable", "check the file permissions")]
    try:
        index = read_index(prefix)
    except (OSError, ValueError) as err:
        return [Problem(f"{setting}: {err}", hint)]
    bin_size = os.path.getsize(prefix + ".bin")
    if bin_size != index.bin_bytes:
        return [Problem(f"{setting}: {prefix}.bin has {bin_size} bytes but its .idx describes {index.bin_bytes}",
                        "the pair is from different runs or truncated; " + hint)]
    if index.sequences == 0:
        return [Problem(f"{setting}: dataset {prefix} holds no documents", hint)]
    if tokenizer is None or tokenizer.vocab_size is None:
        return []
    return _check_vocab(prefix, setting, index, tokenizer, megatron_args or {})


def _check_vocab(prefix: str, setting: str, index: IndexSummary, tokenizer: TrainingTokenizer,
                 args: Mapping[str, Any]) -> list[Problem]:
    assert tokenizer.vocab_size is not None
    problems: list[Problem] = []
    meta = read_meta(prefix)
    if meta is not None:
        data_vocab = int(meta["tokenizer"]["vocab_size"])
        data_eod = meta["tokenizer"].get("eod")
        settings = " ".join(f"{k}={v}" for k, v in meta.get("megatron_args", {}).items())
        if data_vocab > tokenizer.vocab_size:
            problems.append(Problem(
                f"{setting}: {prefix} was tokenized with a vocabulary of {data_vocab} "
                f"({meta['tokenizer'].get('kind')}) but the model's tokenizer {tokenizer.tokenizer_type} has "
                f"{tokenizer.vocab_size}: larger token ids would index past the embedding",
                f"train with the data's tokenizer: --set {settings.replace(' ', ' --set ')}"))
        uses_eod = any(args.get(flag) for flag in ("eod_mask_loss", "reset_position_ids", "reset_attention_mask"))
        if uses_eod and tokenizer.eod is not None and data_eod is not None and data_eod != tokenizer.eod:
            problems.append(Problem(
                f"{setting}: {prefix} ends documents with id {data_eod} but the model's tokenizer uses EOD "
                f"{tokenizer.eod}; eod_mask_loss/reset_* would miss every document boundary",
                f"train with the data's tokenizer: --set {settings.replace(' ', ' --set ')}"))
        return problems
    largest = _largest_token(prefix, index)
    if largest is not None and largest >= tokenizer.vocab_size:
        problems.append(Problem(
            f"{setting}: {prefix} holds token id {largest} but the model's tokenizer {tokenizer.tokenizer_type} "
            f"has a vocabulary of {tokenizer.vocab_size}",
            "use the tokenizer the data was made with (tokenizer_type and its files, or vocab_size)"))
    return problems


def _largest_token(prefix: str, index: IndexSummary) -> int | None:
    if index.bin_bytes > MAX_SCAN_BYTES or index.dtype.startswith("float"):
        return None
    try:
        import numpy as np
    except ImportError:
        return None
    try:  # read here, bounded: numpy's own reader would wait on a FIFO and read a .bin that grew without end
        data = untrusted.read_bytes(prefix + ".bin", "dataset", MAX_SCAN_BYTES)
    except UserError:
        return None
    data = data[: len(data) - len(data) % index.itemsize]
    tokens = np.frombuffer(data, dtype=index.dtype)
    return int(tokens.max()) if tokens.size else None


# the settings that decide which tokenizer Megatron builds, and so the model's vocabulary
_TOKENIZER_SETTINGS = ("tokenizer_type", "tokenizer_model", "vocab_file", "merge_file", "vocab_size",
                       "null_tokenizer_eod_id", "vocab_extra_ids", "tokenizer_hf_use_fast", "tiktoken_pattern")


def model_vocab_size(args: Mapping[str, Any]) -> int | None:
    """The vocabulary (before padding) the model is built with, where the settings or the tokenizer's own files
    say it: vocab_size, GPT-2's for Megatron's default tokenizer, a hub tokenizer of a fixed release, a readable
    local tokenizer; None when it is not known here. For estimates only: the command is not changed."""
    from launcher.importer.build import tokenizer_vocab  # the importer's one answer, the local files read here

    settings = {name: args.get(name) for name in _TOKENIZER_SETTINGS if args.get(name) is not None}
    key = repr(sorted(settings.items()))
    if key not in _VOCAB_SIZES:  # each estimate asks; a tokenizer's files are read once a process
        _VOCAB_SIZES[key] = tokenizer_vocab(settings, tokenizer_vocab_size)[0]
    return _VOCAB_SIZES[key]


_VOCAB_SIZES: dict[str, int | None] = {}


def tokenizer_vocab_size(args: Mapping[str, Any]) -> int | None:
    """The vocabulary size of the tokenizer these settings build, where its local files tell it (else None)."""
    tokenizer, problems = training_tokenizer(args)
    return tokenizer.vocab_size if tokenizer and not problems else None


def training_tokenizer(args: Mapping[str, Any]) -> tuple[TrainingTokenizer | None, list[Problem]]:
    """The tokenizer Megatron will build from these settings, as far as it can be known without building it."""
    # pretrain_gpt.py passes defaults={"tokenizer_type": "GPT2BPETokenizer"} to validate_args
    kind = str(args.get("tokenizer_type") or "GPT2BPETokenizer")
    if kind not in KNOWN_TOKENIZERS:
        return None, [Problem(f"unknown tokenizer_type {kind!r}",
                              f"use one of: {', '.join(sorted(KNOWN_TOKENIZERS))}")]
    if kind == "NullTokenizer":
        vocab = args.get("vocab_size")
        if not vocab:
            return None, [Problem("tokenizer_type NullTokenizer needs vocab_size",
                                  "e.g. vocab_size=50257 (GPT-2 ids) or 257 (`prepare-data --tokenizer byte`)")]
        if int(vocab) < 1:  # Megatron pads a negative one to an embedding of no rows
            return None, [Problem(f"vocab_size {vocab} is no vocabulary: NullTokenizer's ids are 0 … vocab_size-1",
                                  "e.g. vocab_size=50257 (GPT-2 ids) or 257 (`prepare-data --tokenizer byte`)")]
        eod = args.get("null_tokenizer_eod_id")
        return TrainingTokenizer(kind, int(vocab), int(eod) if eod is not None else int(vocab) - 1), []
    if kind == "GPT2BPETokenizer":
        return _gpt2_tokenizer(args)
    if kind == "HuggingFaceTokenizer":
        return _hf_tokenizer(args)
    if kind in FILE_TOKENIZERS:
        model = args.get("tokenizer_model")
        if not model:
            return None, [Problem(f"tokenizer_type {kind} needs tokenizer_model", "set tokenizer_model=PATH")]
        if not os.path.exists(str(model)):
            return None, [Problem(f"tokenizer_model {model} does not exist")]
    return TrainingTokenizer(kind, None, None), []


# Tokenizer types Megatron at the pin builds through transformers' AutoTokenizer
# (megatron/core/tokenizers/text/libraries/huggingface_tokenizer.py, megatron_hf_tokenizer.py).
AUTOTOKENIZER_TYPES = {"HuggingFaceTokenizer", "GPT2BPETokenizer", "BertWordPieceLowerCase", "BertWordPieceCase"}


def tokenizer_package_problems(args: Mapping[str, Any]) -> list[Problem]:
    """A tokenizer this Python cannot build offline: Megatron would fail at start-up (`name 'AutoTokenizer' is
    not defined`) or ask the Hugging Face hub for the tokenizer's files."""
    kind = str(args.get("tokenizer_type") or "GPT2BPETokenizer")
    if kind not in AUTOTOKENIZER_TYPES:
        return []
    from launcher.importer.build import tokenizer_vocab

    known, _ = tokenizer_vocab(dict(args)) if kind == "HuggingFaceTokenizer" else (None, "")
    size = f"{known} ({args.get('tokenizer_model')}'s vocabulary)" if known else "N"
    offline = (f"tokenizer_type=NullTokenizer with vocab_size={size} (and null_tokenizer_eod_id=ID), which "
               "pretraining needs no file for: `launch prepare-data` prints it")
    hub = ""
    if kind != "HuggingFaceTokenizer":  # MegatronHFTokenizer: AutoTokenizer.from_pretrained("gpt2", vocab_file=…)
        hub = (f"; and Megatron builds {kind} from the Hugging Face hub's "
               f"{'gpt2' if kind == 'GPT2BPETokenizer' else 'bert-large'} files even with vocab_file set, "
               "which needs the network (or the hub's cache)")
    if importlib.util.find_spec("transformers") is None:
        return [Problem(f"tokenizer_type {kind} needs the transformers package, which this Python "
                        f"({sys.executable}) lacks{hub}",
                        f"use {offline}; or `pip install transformers`")]
    return []


def _gpt2_tokenizer(args: Mapping[str, Any]) -> tuple[TrainingTokenizer | None, list[Problem]]:
    problems = []
    unset = [name for name in ("vocab_file", "merge_file") if not args.get(name)]
    if unset:
        # only a job that names GPT-2's tokenizer has GPT-2-tokenized data; one that names none gets it by default
        named = bool(args.get("tokenizer_type"))
        problems.append(Problem(
            f"tokenizer_type GPT2BPETokenizer needs {' and '.join(unset)}" if named else
            f"tokenizer_type is not set, so Megatron builds GPT2BPETokenizer, which needs {' and '.join(unset)}",
            "set vocab_file and merge_file (GPT-2 vocab.json and merges.txt), or use tokenizer_type="
            "NullTokenizer with vocab_size=50257 for GPT-2-tokenized data" if named else
            "set tokenizer_type to the tokenizer the data was made with (e.g. HuggingFaceTokenizer with "
            "tokenizer_model=NAME_OR_DIR), or tokenizer_type=NullTokenizer with vocab_size of that tokenizer "
            "(50257 only for GPT-2 token ids)"))
    for name in ("vocab_file", "merge_file"):
        path = args.get(name)
        if path and (not os.path.isfile(str(path)) or not os.access(str(path), os.R_OK)):
            problems.append(Problem(f"{name} {path} does not exist or is not readable"))
    if problems:
        return None, problems
    try:
        vocab = untrusted.read_json(str(args["vocab_file"]), "vocab_file", MAX_TOKENIZER_BYTES)
    except UserError as err:  # not a readable file, or not strict JSON (NaN, 1e400, nesting past 64)
        return None, err.problems
    if not isinstance(vocab, dict) or not all(_is_id(v) for v in vocab.values()):
        return None, [Problem(f"vocab_file {args['vocab_file']} is not a GPT-2 vocab.json: it must be a JSON "
                              f"object of token → id, not {shown(vocab, 60)}")]
    return TrainingTokenizer("GPT2BPETokenizer", len(vocab), vocab.get("<|endoftext|>")), []


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _hf_tokenizer(args: Mapping[str, Any]) -> tuple[TrainingTokenizer | None, list[Problem]]:
    model = args.get("tokenizer_model")
    if not model:
        return None, [Problem("tokenizer_type HuggingFaceTokenizer needs tokenizer_model",
                              "set tokenizer_model to a local tokenizer directory")]
    tokenizer_json = os.path.join(str(model), "tokenizer.json")
    if not os.path.isfile(tokenizer_json):  # a hub name: not checkable offline
        if os.path.isdir(str(model)) or str(model).startswith(("/", ".")):
            return None, [Problem(f"tokenizer_model {model} has no tokenizer.json")]
        return TrainingTokenizer("HuggingFaceTokenizer", None, None), []
    try:
        spec = untrusted.read_json(tokenizer_json, "tokenizer file", MAX_TOKENIZER_BYTES)
        vocab = spec["model"]["vocab"]
        ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))
        ids += [token["id"] for token in spec.get("added_tokens") or []]
    except UserError as err:
        return None, err.problems
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
        return None, [Problem(f"cannot read the vocabulary of {tokenizer_json}: {shown(err)}")]
    if not all(_is_id(i) for i in ids):
        return None, [Problem(f"cannot read the vocabulary of {tokenizer_json}: token ids must be whole numbers")]
    return TrainingTokenizer("HuggingFaceTokenizer", max(ids) + 1 if ids else None, None), []


def _finite(numbers: Sequence[float]) -> bool:
    """Proportions Megatron normalizes by their sum: each finite, and the sum too (1e308 twice is inf)."""
    return all(math.isfinite(n) for n in numbers) and math.isfinite(sum(numbers))


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _read_text(path: str, setting: str, problems: list[Problem]) -> str | None:
    try:
        return untrusted.read_utf8(path, setting, MAX_TOKENIZER_BYTES)
    except UserError as err:
        problems.extend(err.problems)
        return None


def main(argv: list[str]) -> int:
    """`python -m launcher.checks.data SETTINGS_JSON`: check_data on the machine that runs the job (a Slurm node
    at job start); every problem as the launcher prints it, exit 2 if any."""
    problems = check_data(json.loads(argv[0]))
    for problem in problems:
        print(f"{socket.gethostname()}: {problem.render()}", file=sys.stderr)
    return 2 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
