"""`launch prepare-data --build-index PRESET`: build the GPTDataset index caches on one CPU machine.

Every rank of a multi-node job that finds no cache builds it (or waits on rank 0 of its own node), and
nodes race on a shared filesystem (Megatron-LM issues #907, #795). Building the caches once, ahead of
the job, into the preset's shared `data_cache_path` leaves the GPU job only reading them.

The build runs in a child process that parses the training command's own Megatron arguments with
Megatron's parser, then does what `tools/prepare_cache.py` (upstream, this commit) does: the sample counts
of `get_train_valid_test_num_samples`, the `GPTDatasetConfig` of `pretrain_gpt.py`, and
`BlendedMegatronDatasetBuilder(...).build()`. The cache file names hash that config, so the GPU job finds
exactly these files. Only `compile_helpers()` is skipped: the wheel ships the helpers prebuilt.

Megatron takes a set of cache files as built once all of them exist, and writes each with `numpy.save` to its
final name: a build killed, interrupted or out of space halfway would leave a cut `.npy` that every later job
loads and fails on. Here each `.npy` is written whole or not at all (a temporary, fsynced, renamed), and a cut
one already in the cache (a job killed while it wrote it) is removed first, so the build makes it again.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from launcher import untrusted
from launcher.checks.data import check_data, cut_cache_files
from launcher.errors import Problem, UserError
from launcher.interrupts import signals_interrupt


def check_index_request(megatron_args: Mapping[str, Any]) -> list[Problem]:
    """What --build-index needs beyond check_data: real data, a cache path, sizes in iterations or samples."""
    problems: list[Problem] = []
    real = any(megatron_args.get(name) for name in ("data_path", "data_args_path", "train_data_path",
                                                     "valid_data_path", "test_data_path", "per_split_data_args_path"))
    if megatron_args.get("mock_data") and not real:  # mock and real together is check_data's to report
        problems.append(Problem("the preset uses mock data; there is no index cache to build",
                                "set data_path=PREFIX (and mock_data=false) to train on real data"))
    if not megatron_args.get("data_cache_path"):
        problems.append(Problem("--build-index needs data_cache_path: the directory the job will read caches from",
                                "--set data_cache_path=/shared/cache (a path every node sees)"))
    if not (megatron_args.get("train_iters") or megatron_args.get("train_samples")):
        problems.append(Problem("the number of samples needs train_iters or train_samples"))
    for unsupported in ("fim_data", "sft", "step_batch_size_schedule"):
        if megatron_args.get(unsupported):
            problems.append(Problem(f"--build-index does not support {unsupported} (nor does tools/prepare_cache.py)"))
    return problems


def check_index_preset(preset: Any) -> None:
    """What --build-index needs of the preset before it is resolved; UserError with every problem."""
    if preset.launcher.entry != "pretrain_gpt":
        raise UserError(f"preset {preset.name} runs {preset.launcher.entry}, which reads no dataset",
                        "--build-index is for pretrain_gpt presets with data_path")
    problems = check_index_request(preset.megatron) + check_data(preset.megatron)
    if problems:
        raise UserError(problems)


def build_index_for_job(job: Any) -> dict[str, Any]:
    """Build the caches of a resolved job (as `launch PRESET` resolves it) with its exact Megatron flags."""
    from launcher.pipeline.command import build_command

    return build_index_caches(build_command(job).script_args, job.world_size)


def build_index_caches(script_args: Sequence[str], world_size: int, python: str = sys.executable,
                       cwd: str | None = None) -> dict[str, Any]:
    """Run the build in a child process (Megatron's parser and globals stay out of this one)."""
    with tempfile.TemporaryDirectory(prefix="launch-index-") as scratch:
        result_path = os.path.join(scratch, "result.json")
        argv = [python, "-m", "launcher.dataprep.index_cache", "--world-size", str(world_size),
                "--result", result_path, "--", *script_args]
        env = {**os.environ, "CUDA_DEVICE_MAX_CONNECTIONS": "1", "NO_VCS_VERSION": "1"}
        completed = subprocess.run(argv, cwd=cwd, env=env, check=False)
        if not os.path.exists(result_path):
            raise UserError(f"building the index caches failed (exit {completed.returncode}); see the log above")
        with open(result_path, encoding="utf-8") as handle:
            result = json.load(handle)
    if result.get("storage"):
        raise UserError(f"cannot write the index caches: {result['error']}; every cache file is whole or absent",
                        "free space on that file system, then run again" if result.get("no_space") else
                        "make data_cache_path a writable directory, then run again")
    if "error" in result:
        raise UserError(f"Megatron rejected the training arguments: {result['error']}",
                        "the GPU job would fail the same way; fix the preset or --set values")
    return result


def _child_main(argv: Sequence[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="launcher.dataprep.index_cache", allow_abbrev=False)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    script_args = options.script_args[1:] if options.script_args[:1] == ["--"] else options.script_args
    # Megatron prints to stdout; keep ours for the caller (`--format json` is one JSON document)
    os.dup2(2, 1)
    # Megatron's imports warn about this CPU process (no TE, no apex, fallback optimizers): nothing the index needs
    # or the user can act on here; the training job's own log still says them
    for category in (UserWarning, FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    started = time.monotonic()
    try:
        with signals_interrupt():  # SIGTERM/SIGHUP, like Ctrl-C, remove the file being written
            summary = _build(script_args, options.world_size)
    except SystemExit as err:  # Megatron's argparse: an unknown flag or a bad value (message already printed)
        summary = {"error": f"its argument parser exited with {err.code} (message above)"}
    except UserError as err:  # a file the arguments name, refused by the bounded reader
        summary = {"error": "; ".join(problem.message for problem in err.problems)}
    except OSError as err:  # writing the caches (a full disk, a read-only directory)
        summary = {"error": f"{err.strerror or err}" + (f": {err.filename}" if err.filename else ""),
                   "storage": True, "no_space": err.errno in (errno.ENOSPC, errno.EDQUOT)}
    except (AssertionError, ValueError, RuntimeError) as err:
        summary = {"error": f"{type(err).__name__}: {err}"}
    summary["seconds"] = round(time.monotonic() - started, 3)
    with open(options.result, "w", encoding="utf-8") as handle:
        json.dump(summary, handle)
    return 0 if "error" not in summary else 2


def _build(script_args: Sequence[str], world_size: int) -> dict[str, Any]:
    os.environ["RANK"], os.environ["WORLD_SIZE"] = "0", str(world_size)
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.tokenizers.utils.build_tokenizer import build_tokenizer
    from megatron.training import arguments as megatron_arguments
    from megatron.training import get_train_valid_test_num_samples
    from megatron.training.global_vars import set_args, unset_global_variables
    from megatron.training.training import update_train_iters
    from megatron.training.utils import get_blend_and_blend_per_split

    # No GPU here: validate_args asks the device's architecture for TP/CP > 1; answer "pre-Blackwell",
    # which only selects the CUDA_DEVICE_MAX_CONNECTIONS check (satisfied in our environment).
    megatron_arguments.get_device_arch_version = lambda: 9
    megatron_arguments._print_args = lambda *a, **k: None  # the 44 KB argument dump says nothing new here
    sys.argv = ["pretrain_gpt.py", *script_args]
    args = megatron_arguments.parse_args(ignore_unknown_args=False)
    megatron_arguments.validate_args(args, defaults={"tokenizer_type": "GPT2BPETokenizer"})
    args.rank = 0
    # flags that only change how an existing cache is read (tools/prepare_cache.py turns them off too)
    args.dataloader_fast_cache_load = False
    args.dataloader_defer_npy_index_mmap = False

    unset_global_variables()
    set_args(args)
    try:
        update_train_iters(args)  # derives train_iters from train_samples, as pretrain() does
        num_samples = get_train_valid_test_num_samples()
        config = GPTDatasetConfig(**_gpt_dataset_config_kwargs(args, build_tokenizer(args),
                                                                get_blend_and_blend_per_split(args)))
        removed = _remove_cut_files(args.data_cache_path)
        before = _listing(args.data_cache_path)
        with _whole_npy_files():
            datasets = BlendedMegatronDatasetBuilder(GPTDataset, num_samples, lambda: True, config).build()
        after = _listing(args.data_cache_path)
    finally:
        unset_global_variables()
    return {
        "data_cache_path": os.path.abspath(args.data_cache_path),
        "world_size": args.world_size,
        "data_parallel_size": args.data_parallel_size,
        "global_batch_size": args.global_batch_size,
        "num_samples": list(num_samples),
        "lengths": [_length(ds) for ds in datasets],  # None: that split has no dataset
        "split": args.split,
        "per_split_paths": get_blend_and_blend_per_split(args)[1] is not None,
        "new_files": sorted(after - before),
        "replaced_cut_files": removed,
    }


def samples_line(summary: dict[str, Any]) -> str:
    """Samples each split will draw, naming a split that has no dataset (split=98,2,0 has no test set)
    instead of printing the count Megatron would ask of it."""
    names = ("train", "valid", "test")
    lengths = summary.get("lengths") or [0, 0, 0]
    missing = [name for name, length in zip(names, lengths) if length is None]
    parts = [f"{name} none" if length is None else f"{name} {wanted:,}"
             for name, wanted, length in zip(names, summary["num_samples"], lengths)]
    line = "samples " + ", ".join(parts)
    if missing:
        why = ("no data path is given for it" if summary.get("per_split_paths")
               else f"split {summary.get('split')} gives it no documents")
        line += f" ({'/'.join(missing)}: {why}, so Megatron builds and evaluates none)"
    return line


def _gpt_dataset_config_kwargs(args: Any, tokenizer: Any, blends: tuple[Any, Any]) -> dict[str, Any]:
    """The GPTDatasetConfig of pretrain_gpt.py's core_gpt_dataset_config_from_args (no FIM), field by field."""
    sequences_per_dataset = None
    if args.per_dataset_sequences_path is not None:
        sequences_per_dataset = untrusted.read_json(args.per_dataset_sequences_path, "per_dataset_sequences_path")
    blend, blend_per_split = blends
    return {
        "random_seed": args.seed,
        "sequence_length": args.seq_length,
        "blend": blend,
        "blend_per_split": blend_per_split,
        "split": args.split,
        "multiple_validation_sets": args.multiple_validation_sets,
        "full_validation": args.full_validation,
        "num_dataset_builder_threads": args.num_dataset_builder_threads,
        "path_to_cache": args.data_cache_path,
        "mmap_bin_files": args.mmap_bin_files,
        "tokenizer": tokenizer,
        "reset_position_ids": args.reset_position_ids,
        "reset_attention_mask": args.reset_attention_mask,
        "eod_mask_loss": args.eod_mask_loss,
        "create_attention_mask": args.create_attention_mask_in_dataloader,
        "object_storage_cache_path": args.object_storage_cache_path,
        "mid_level_dataset_surplus": args.mid_level_dataset_surplus,
        "allow_ambiguous_pad_tokens": args.allow_ambiguous_pad_tokens,
        "fast_cache_load": args.dataloader_fast_cache_load,
        "sequences_per_dataset": sequences_per_dataset,
        "defer_npy_index_mmap": args.dataloader_defer_npy_index_mmap,
        "context_parallel_size": args.context_parallel_size,
        "data_parallel_size": args.data_parallel_size,
        "sequence_parallel_size": args.tensor_model_parallel_size * args.sequence_parallel,
        "hybrid_context_parallel": args.hybrid_context_parallel,
    }


def _remove_cut_files(cache: str) -> list[str]:
    """Remove the cache's cut `.npy` files (Megatron would take their set as built and fail to load it)."""
    removed = []
    for path in cut_cache_files(cache):
        try:
            os.unlink(path)
            removed.append(os.path.basename(path))
        except FileNotFoundError:
            pass
    return removed


@contextmanager
def _whole_npy_files() -> Iterator[None]:
    """numpy.save, as Megatron calls it for each cache file, writes a temporary that is fsynced and renamed to the
    name: an interrupt, a kill or a full disk leaves the file whole or absent, never cut."""
    import numpy

    save = numpy.save

    def save_whole(file: Any, arr: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(file, (str, os.PathLike)):
            return save(file, arr, *args, **kwargs)
        path = os.fspath(file)
        path = path if path.endswith(".npy") else path + ".npy"  # as numpy.save names it
        directory, name = os.path.split(path)
        temporary = os.path.join(directory, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            with open(temporary, "xb") as handle:
                save(handle, arr, *args, **kwargs)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        except BaseException:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise
        return None

    numpy.save = save_whole
    try:
        yield
    finally:
        numpy.save = save


def _listing(directory: str) -> set[str]:
    files: set[str] = set()
    for root, _dirs, names in os.walk(directory):
        files.update(os.path.relpath(os.path.join(root, name), directory) for name in names)
    return files


def _length(dataset: Any) -> Any:
    if dataset is None:
        return None
    if isinstance(dataset, list):
        return [_length(item) for item in dataset]
    return len(dataset)


if __name__ == "__main__":
    raise SystemExit(_child_main(sys.argv[1:]))
