"""`launch prepare-data`: tokenize JSONL/plain-text files into Megatron's `.bin`/`.idx` indexed dataset.

Workers (spawned processes) decode, parse and tokenize batches; the parent writes them in input order with
megatron-core's own `IndexedDatasetBuilder`, one document per JSON line (or text unit), each ending in EOD
as `tools/preprocess_data.py --append-eod` does. Everything is written under temporary names and renamed at
the end, so an error or Ctrl-C leaves no partial dataset behind.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import queue as queue_module
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from launcher import install_command, lock, nofollow
from launcher.checks.data import META_FORMAT, META_SUFFIX
from launcher.dataprep.progress import Progress
from launcher.dataprep.reader import (
    TEXT_UNITS,
    BadDocument,
    Batch,
    input_size,
    is_json_input,
    iter_batches,
    unit_text,
)
from launcher.dataprep.text_tokenizers import TextTokenizer, TokenizerSpec, build_tokenizer, check_spec
from launcher.errors import Problem, UserError
from launcher.interrupts import signals_deferred, signals_interrupt

MAX_REPORTED_ERRORS = 20
LOCK_SUFFIX = ".lock"


def output_paths(prefix: str) -> dict[str, str]:
    return {"bin": prefix + ".bin", "idx": prefix + ".idx", "meta": prefix + META_SUFFIX}


@dataclass(frozen=True)
class PrepareResult:
    prefix: str
    documents: int
    tokens: int
    skipped_empty: int
    vocab_size: int
    eod: int
    dtype: str
    seconds: float
    megatron_args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _BatchResult:
    path: str
    end_offset: int
    documents: list[np.ndarray]
    skipped_empty: int
    errors: list[tuple[int, str]]


def check_request(inputs: Sequence[str], output_prefix: str, overwrite: bool, text_unit: str,
                  workers: int) -> list[Problem]:
    """Every problem with the inputs and the output prefix, found before any work is done."""
    problems: list[Problem] = []
    if not inputs:
        problems.append(Problem("no input files given", "pass one or more .jsonl or text files"))
    for path in inputs:
        if not os.path.exists(path):
            problems.append(Problem(f"input {path} does not exist"))
        elif not os.path.isfile(path):
            problems.append(Problem(f"input {path} is not a file", "pass files, not directories"))
        elif not os.access(path, os.R_OK):
            problems.append(Problem(f"input {path} is not readable"))
        elif os.path.getsize(path) == 0:
            problems.append(Problem(f"input {path} is empty"))
    if text_unit not in TEXT_UNITS:
        problems.append(Problem(f"unknown text unit {text_unit!r}", f"use one of: {', '.join(TEXT_UNITS)}"))
    if workers < 1:
        problems.append(Problem(f"--workers must be at least 1, got {workers}"))
    if not output_prefix or output_prefix.endswith(os.sep):
        problems.append(Problem(f"output prefix {output_prefix!r} names no file",
                                "give a path without suffix, e.g. data/my-corpus"))
        return problems
    directory = os.path.dirname(os.path.abspath(output_prefix))
    # a missing output directory is made (as mkdir -p would), where its nearest existing ancestor allows it
    existing_dir = directory
    while not os.path.lexists(existing_dir) and os.path.dirname(existing_dir) != existing_dir:
        existing_dir = os.path.dirname(existing_dir)
    if not os.path.isdir(existing_dir):
        problems.append(Problem(f"output directory {directory} cannot be made: {existing_dir} is not a directory",
                                "choose another --output-prefix"))
    elif not os.access(existing_dir, os.W_OK):
        what = "output directory" if existing_dir == directory else f"output directory {directory} cannot be made:"
        problems.append(Problem(f"{what} {existing_dir} is not writable", "choose another --output-prefix"))
    outputs = output_paths(output_prefix)
    existing = [path for path in outputs.values() if os.path.exists(path)]
    if existing and not overwrite:
        problems.append(Problem(f"output prefix {output_prefix} already exists ({', '.join(existing)})",
                                "choose another --output-prefix, or pass --overwrite"))
    input_real = {os.path.realpath(path) for path in inputs}
    for path in outputs.values():
        if os.path.realpath(path) in input_real:
            problems.append(Problem(f"output {path} would overwrite an input", "choose another --output-prefix"))
    return problems


def prepare_data(inputs: Sequence[str], output_prefix: str, spec: TokenizerSpec, *, json_key: str = "text",
                 text_unit: str = "file", workers: int | None = None, overwrite: bool = False,
                 show_progress: bool = True) -> PrepareResult:
    """Tokenize `inputs` into `output_prefix`.bin/.idx (+ .meta.json); raise UserError on bad input.

    Ctrl-C, SIGTERM and SIGHUP stop the workers, remove the temporary files and raise Interrupted.
    """
    with signals_interrupt():
        return _prepare_data(inputs, output_prefix, spec, json_key=json_key, text_unit=text_unit,
                             workers=workers, overwrite=overwrite, show_progress=show_progress)


def _prepare_data(inputs: Sequence[str], output_prefix: str, spec: TokenizerSpec, *, json_key: str,
                  text_unit: str, workers: int | None, overwrite: bool, show_progress: bool) -> PrepareResult:
    workers = workers if workers is not None else default_workers()
    problems = check_request(inputs, output_prefix, overwrite, text_unit, workers) + check_spec(spec)
    if problems:
        raise UserError(problems)
    directory = os.path.dirname(os.path.abspath(output_prefix))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot make output directory {directory}: {err.strerror or err}",
                        "choose another --output-prefix") from None
    # one writer per prefix: a second run would pass the "exists" check above too, and replace this one's output
    left = lock.hold(output_prefix + LOCK_SUFFIX, f"output prefix {output_prefix}",
                     "another launch prepare-data is writing it; wait for it to end, or choose another --output-prefix")
    if left:
        print(f"note: {left}", file=sys.stderr)
    try:
        return _prepare_locked(inputs, output_prefix, spec, json_key=json_key, text_unit=text_unit,
                               workers=workers, overwrite=overwrite, show_progress=show_progress)
    except OSError as err:  # writing the dataset (inputs are read through the reader, which names them)
        full = err.errno in (errno.ENOSPC, errno.EDQUOT)
        raise UserError(f"cannot write the dataset {output_prefix}.bin/.idx: {err.strerror or err}; "
                        "nothing was written",
                        "free space on that file system, or choose another --output-prefix" if full else
                        "choose another --output-prefix, in a writable directory") from None
    finally:
        lock.release(output_prefix + LOCK_SUFFIX, remove=True)


def _prepare_locked(inputs: Sequence[str], output_prefix: str, spec: TokenizerSpec, *, json_key: str,
                    text_unit: str, workers: int, overwrite: bool, show_progress: bool) -> PrepareResult:
    problems = check_request(inputs, output_prefix, overwrite, text_unit, workers)  # as it is now, locked
    if problems:
        raise UserError(problems)
    tokenizer = build_tokenizer(spec)  # in the parent too: bad files are reported once, before any worker starts
    try:
        DType, IndexedDatasetBuilder = _import_megatron_builder()
    except ImportError as err:
        # a checkout stands in for megatron-core's own package, never for torch (or another module it imports)
        if (getattr(err, "name", None) or "megatron").split(".")[0] == "megatron":
            raise UserError(f"prepare-data needs megatron-core ({err})",
                            f"{install_command('megatron')} (megatron-core 0.18.0 and torch), or point "
                            "MEGATRON_LM_PATH at the Megatron-LM checkout") from err
        raise UserError(f"prepare-data needs megatron-core and what it imports ({err})",
                        f"{install_command('megatron')} (megatron-core 0.18.0 and torch); a Megatron-LM checkout "
                        "gives Megatron's own modules only") from err

    dtype = DType.optimal_dtype(tokenizer.vocab_size)
    outputs = output_paths(output_prefix)
    temps = _temp_paths(output_prefix)
    started = time.monotonic()
    progress = Progress(sum(input_size(path) for path in inputs), enabled=show_progress)
    documents = tokens = skipped = 0
    errors: list[Problem] = []
    error_count = 0
    try:
        _reserve(temps)
        builder = IndexedDatasetBuilder(temps["bin"], dtype=dtype)
        done_bytes: dict[str, int] = {}
        try:
            for result in _encode_all(inputs, spec, tokenizer, json_key, text_unit, workers, dtype,
                                      stop_tokenizing=lambda: bool(errors)):
                for line, message in result.errors:
                    error_count += 1
                    if len(errors) < MAX_REPORTED_ERRORS:
                        errors.append(Problem(f"{result.path}:{line}: {message}"))
                if errors:
                    if error_count >= MAX_REPORTED_ERRORS:
                        break
                    continue
                for document in result.documents:
                    builder.add_document(document, [len(document)])
                    tokens += len(document)
                documents += len(result.documents)
                skipped += result.skipped_empty
                done_bytes[result.path] = result.end_offset
                progress.advance(sum(done_bytes.values()), documents, tokens)
        finally:
            builder.data_file.close()
        if errors:
            progress.interrupt()
            if error_count >= MAX_REPORTED_ERRORS:
                errors.append(Problem(f"stopped after {error_count} bad documents; no output was written",
                                      "fix the input (or choose the field with --json-key) and run again"))
            raise UserError(errors)
        if documents == 0:
            raise UserError(f"no text in {', '.join(inputs)}: every document was empty",
                            "check --json-key and that the files hold text")
        builder.finalize(temps["idx"])
        progress.finish()
        prepared = PrepareResult(
            prefix=output_prefix, documents=documents, tokens=tokens, skipped_empty=skipped,
            vocab_size=tokenizer.vocab_size, eod=tokenizer.eod, dtype=np.dtype(dtype).name,
            seconds=time.monotonic() - started,
            megatron_args=spec.megatron_args(tokenizer.vocab_size, tokenizer.eod))
        _write_meta(temps["meta"], prepared, spec, inputs, json_key, text_unit)
        for key in ("bin", "idx"):  # on the disk before the names say the dataset is complete
            _fsync(temps[key])
        with signals_deferred():  # an interrupt between the renames would pair a new .bin with an old .idx
            for key in ("bin", "idx", "meta"):  # .meta.json last: its presence says the pair is complete
                os.replace(temps[key], outputs[key])
        return prepared
    except KeyboardInterrupt:
        progress.interrupt()
        raise
    finally:
        for path in temps.values():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def _import_megatron_builder() -> tuple[Any, Any]:
    """megatron-core's writer; its import warns about TE/apex/CUDA, which says nothing about writing files."""
    import logging
    import warnings

    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder
        except ImportError:
            # No megatron-core package: the Megatron-LM checkout the launcher trains with has the same module.
            from launcher.megatron.pin import megatron_path

            checkout = megatron_path(None, None)
            if not (checkout / "megatron" / "core" / "datasets" / "indexed_dataset.py").is_file():
                raise
            sys.path.append(str(checkout))
            from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder
    return DType, IndexedDatasetBuilder


def default_workers() -> int:
    return max(1, min(len(os.sched_getaffinity(0)), 32))


def _temp_paths(prefix: str) -> dict[str, str]:
    """Names no one can guess ahead (a link planted at one would take megatron-core's open(..., "wb"))."""
    directory, name = os.path.split(os.path.abspath(prefix))
    stem = os.path.join(directory, f".{name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    return {"bin": stem + ".bin", "idx": stem + ".idx", "meta": stem + META_SUFFIX}


def _reserve(temps: dict[str, str]) -> None:
    """Create the .bin and .idx temporaries as new regular files (O_EXCL, no link followed) before
    megatron-core's builder opens them by name."""
    for key in ("bin", "idx"):
        try:
            nofollow.open_file(temps[key], "xb", what="dataset file", user_directory=True).close()
        except FileExistsError:  # a file or link someone put there: neither written through nor replaced
            raise UserError(f"the temporary dataset file {temps[key]} exists already",
                            "remove it (nothing of this run is in it), then run again") from None


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_meta(path: str, result: PrepareResult, spec: TokenizerSpec, inputs: Sequence[str], json_key: str,
                text_unit: str) -> None:
    meta = {
        "format": META_FORMAT,
        "tokenizer": {**spec.describe(), "vocab_size": result.vocab_size, "eod": result.eod},
        "megatron_args": result.megatron_args,
        "documents": result.documents,
        "tokens": result.tokens,
        "skipped_empty": result.skipped_empty,
        "dtype": result.dtype,
        "inputs": [os.path.abspath(p) for p in inputs],
        "json_key": json_key if any(is_json_input(p) for p in inputs) else None,
        "text_unit": text_unit if not all(is_json_input(p) for p in inputs) else None,
    }
    nofollow.write_atomic(path, json.dumps(meta, indent=2) + "\n", what="dataset metadata",
                           user_directory=True)  # whole, no link


# ---- the work: batches in input order, tokenized here (1 worker) or in spawned processes ----

# How long the parent waits for a result before it checks that every worker is still alive.
_WORKER_POLL_SECONDS = 1.0


def _encode(batch: Batch, tokenizer: TextTokenizer, json_key: str, dtype: Any, tokenize: bool) -> _BatchResult:
    texts: list[str] = []
    errors: list[tuple[int, str]] = []
    for unit in batch.units:
        try:
            texts.append(unit_text(unit, batch.is_json, json_key))
        except BadDocument as err:
            errors.append((unit.line, str(err)))
    if errors or not tokenize:
        return _BatchResult(batch.path, batch.end_offset, [], 0, errors)
    documents = []
    skipped = 0
    for ids in tokenizer.encode_batch(texts):
        if not ids:  # as upstream: an empty document gets no EOD and is left out
            skipped += 1
            continue
        document = np.empty(len(ids) + 1, dtype=dtype)
        document[:-1] = ids
        document[-1] = tokenizer.eod
        documents.append(document)
    return _BatchResult(batch.path, batch.end_offset, documents, skipped, [])


def _worker_main(spec: TokenizerSpec, json_key: str, dtype: Any, tasks: Any, results: Any) -> None:
    """One tokenizer process: (number, batch, tokenize) in, (number, result or exception) out, None ends it."""
    # Ctrl-C reaches the whole process group; the parent alone decides what it means and then stops us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked from birth by the parent (see below)
    # each worker is one core: keep the Rust tokenizer from starting its own thread pool on top
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    tokenizer = build_tokenizer(spec)
    while (task := tasks.get()) is not None:
        number, batch, tokenize = task
        try:
            results.put((number, _encode(batch, tokenizer, json_key, dtype, tokenize)))
        except Exception as err:  # noqa: BLE001 - handed to the parent, which raises it
            results.put((number, err))


def _encode_all(inputs: Sequence[str], spec: TokenizerSpec, tokenizer: TextTokenizer, json_key: str,
                text_unit: str, workers: int, dtype: Any, stop_tokenizing: Any) -> Iterator[_BatchResult]:
    batches = (batch for path in inputs for batch in iter_batches(path, text_unit))
    if workers == 1:
        for batch in batches:
            yield _encode(batch, tokenizer, json_key, dtype, not stop_tokenizing())
        return
    # Own processes and queues, not multiprocessing.Pool: a Pool's terminate() waits for a lock that a killed
    # worker may hold, so Ctrl-C or SIGTERM could hang it. Here stopping is kill, join, abandon the queues.
    # spawn, not fork: the parent has torch loaded, and forking a threaded process can deadlock
    context = multiprocessing.get_context("spawn")
    tasks, results = context.Queue(), context.Queue()
    processes = [context.Process(target=_worker_main, args=(spec, json_key, dtype, tasks, results), daemon=True)
                 for _ in range(workers)]
    try:
        # A Ctrl-C during a worker's start-up (unpickling, imports) would print its KeyboardInterrupt traceback
        # before it can ignore SIGINT: it is born with SIGINT blocked (the mask survives exec) and unblocks it
        # once ignored. The parent's own Ctrl-C waits, pending, until the workers are started.
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            for process in processes:
                process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        # a bounded window of tasks: reading ahead of the workers would hold the whole corpus in memory
        window, sent, next_number = 2 * workers + 2, 0, 0
        finished: dict[int, Any] = {}
        batch_iter = iter(batches)
        exhausted = False
        while True:
            while not exhausted and sent - next_number < window:
                upcoming = next(batch_iter, None)
                if upcoming is None:
                    exhausted = True
                else:
                    tasks.put((sent, upcoming, not stop_tokenizing()))
                    sent += 1
            if next_number == sent:
                break
            while next_number not in finished:
                number, outcome = _next_result(results, processes)
                finished[number] = outcome
            outcome = finished.pop(next_number)
            next_number += 1
            if isinstance(outcome, BaseException):
                raise outcome
            yield outcome
        for _ in processes:
            tasks.put(None)
        for process in processes:
            process.join()
    finally:  # also on an exception, an interrupt, or the consumer stopping early
        for process in processes:
            if process.is_alive():
                process.kill()
        for process in processes:
            if process.pid is not None:
                process.join(timeout=5)
        for queue in (tasks, results):
            queue.cancel_join_thread()  # never block exit on data no worker will read
            queue.close()


def _next_result(results: Any, processes: Sequence[Any]) -> tuple[int, Any]:
    while True:
        try:
            return results.get(timeout=_WORKER_POLL_SECONDS)
        except queue_module.Empty:
            dead = [p.exitcode for p in processes if p.exitcode is not None]
            if dead:
                raise UserError(f"a tokenizer worker died (exit code {dead[0]}); no output was written",
                                "the machine may be out of memory: try fewer --workers") from None


def result_as_dict(result: PrepareResult) -> dict[str, Any]:
    return asdict(result)
