"""What the launcher's start-up hook does in a job's training processes (launcher/inside/site/sitecustomize.py),
decided here from the job's settings and shown in the dry-run like every other exported variable.

Only on the fast path (the launcher's SDPA spec, pretrain_gpt.py), where the launcher knows what the ranks run:
- imports Megatron probes at start that the job cannot use are skipped: `cupy` (only Megatron's RL weight
  resharding uses it) and, with the NullTokenizer (mock data), the tokenizer libraries `transformers`,
  `sentencepiece` and `tiktoken`, which Megatron's tokenizer package imports whatever the tokenizer;
- where the layers are compiled whole (fast op `layer`), or the job turns off the fusions it warms (bias + GeLU or
  SwiGLU, bias + dropout + add), Megatron's JIT warm-up makes its random draws and compiles nothing: the standalone
  fusions it compiles never run there;
- torchrun and pretrain_gpt.py's processes collect no garbage while they import (~900 collections over torch's
  growing heap); automatic collection resumes once imported (when Megatron initializes), after one collection, with
  what is alive then frozen;
- torch's compile-worker pool starts when a kernel must be compiled, not at the first torch.compile call
  (TORCH_WARM_POOL=0): with the compile cache warm nothing is compiled, and the ~16 workers (each importing torch)
  only competed with the rank's start and were waited for at its exit;
- at exit (MEGATRON_LAUNCH_EXIT=quick), once Megatron's pretrain() returned cleanly and the atexit handlers are
  done, the ranks collect once, flush every open file, wait for the GPU's queued work and end at once (os._exit):
  the interpreter's module teardown and the C++ destructors after it are skipped, and the operating system
  releases the memory and the GPU context as it would anyway. Any other end (an exception, an exit from inside the
  run) is Python's own after one collection (collect-once).
No Megatron setting changes; the model, its initialisation and the data are the same.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path

from launcher.inside.megatron_ext import selected_ops

SITE_DIR_PARTS = ("launcher", "inside", "site")
BYTECODE_ENV = "MEGATRON_LAUNCH_WRITE_BYTECODE"
NO_BYTECODE = "PYTHONDONTWRITEBYTECODE"
PREFIX = "PYTHONPYCACHEPREFIX"
SKIP_ENV = "MEGATRON_LAUNCH_SKIP_IMPORTS"
WARMUP_ENV = "MEGATRON_LAUNCH_JIT_WARMUP"
IMPORT_GC_ENV = "MEGATRON_LAUNCH_IMPORT_GC"
EXIT_ENV = "MEGATRON_LAUNCH_EXIT"
WARM_POOL_ENV = "TORCH_WARM_POOL"  # torch/_inductor/async_compile.py: maybe_warm_pool
ALWAYS_UNUSED = ("cupy",)
TOKENIZER_LIBRARIES = ("transformers", "sentencepiece", "tiktoken")


def skipped_imports(settings: Mapping[str, object]) -> tuple[str, ...]:
    names = list(ALWAYS_UNUSED)
    if settings.get("tokenizer_type") == "NullTokenizer":
        names += TOKENIZER_LIBRARIES
    return tuple(names)


def uses_warmed_fusions(settings: Mapping[str, object]) -> bool:
    """Whether training runs one of the fusions Megatron's JIT warm-up compiles (bias + GeLU or SwiGLU, bias +
    dropout + add; pretrain_gpt.py's defaults turn them on)."""
    activation = "bias_swiglu_fusion" if settings.get("swiglu") else "bias_gelu_fusion"
    return settings.get(activation) is not False or settings.get("bias_dropout_fusion") is not False


def compiles_layers(fast_ops: str | None) -> bool:
    try:
        return "layer" in selected_ops(fast_ops)
    except ValueError:  # an unknown op name: the rank refuses it itself; decide nothing here
        return False


def torch_package() -> Path | None:
    """torch's package folder as this interpreter finds it, without importing it."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent


def installation_has_bytecode() -> bool:
    """Whether torch, as this interpreter finds it (not importing it), was installed with its bytecode, as pip does
    unless told not to. The ranks then read it where they are; a bytecode cache of the launcher's would hide it
    (Python looks only in PYTHONPYCACHEPREFIX once it is set), so the first launch on a machine compiled torch's
    ~1300 modules from source in every process (on CPU: `import torch` 1.3-1.6 s of CPU with the installed
    bytecode, 3.3-3.5 s with an empty cache)."""
    package = torch_package()
    if package is None:
        return False
    source = package / "__init__.py"
    return (source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc").is_file()


def startup_variables(settings: Mapping[str, object], fast_ops: str | None,
                      inherited: Mapping[str, str] | None = None) -> dict[str, str]:
    """The hook's variables for a fast-path job (the caller checks that it is one)."""
    chosen = {SKIP_ENV: ",".join(skipped_imports(settings)), IMPORT_GC_ENV: "paused"}
    inherited = inherited or {}
    if inherited.get(NO_BYTECODE) and not inherited.get(PREFIX) and not installation_has_bytecode():
        # Python may not write bytecode here, and site-packages ships none (torch's ~1300 modules compiled from
        # source by torchrun, each rank and each compile worker, at every launch): the processes keep their
        # bytecode in the launcher's cache instead, leaving the installation as it is. Where torch's bytecode is
        # installed, the Megatron checkout's is compiled in place before the ranks import it (backends/bytecode.py)
        from launcher.megatron.pin import cache_dir

        chosen[PREFIX] = str(cache_dir() / "pycache")
        chosen[BYTECODE_ENV] = "1"
    if compiles_layers(fast_ops) or not uses_warmed_fusions(settings):
        chosen[WARMUP_ENV] = "draws"
    if EXIT_ENV not in inherited:
        # measured on one H200 (docs/benchmarks.md): end of training -> exit, against collect-once, 345m 7.1-7.3 ->
        # 4.0 s, toy 5.6-6.2 -> 1.7-2.3 s (collect-once was itself 0.4-1.5 s shorter than Python's exit)
        chosen[EXIT_ENV] = "quick"
    if WARM_POOL_ENV not in inherited:
        # measured on one H200 (docs/benchmarks.md): 345m warm 12.8 -> 10.2 s to iteration 1 and 32.8 -> 26.5 s
        # command -> exit, toy warm 16.4 -> 14.9 s; a cold start the same (28.3 s toy)
        chosen[WARM_POOL_ENV] = "0"
    return chosen


def startup_notes(env: Mapping[str, str]) -> list[str]:
    """Dry-run header notes for what the exported variables make the hook do."""
    notes = []
    if env.get(SKIP_ENV):
        notes.append(f"the ranks skip importing {', '.join(env[SKIP_ENV].split(','))} ({SKIP_ENV}): Megatron "
                     "imports them at start whether or not they are used, and this job cannot use them (one H200, "
                     "345m: Megatron's argument parsing 3.8 -> 0.24 s); "
                     f"--set env.{SKIP_ENV}= to import them")
    if env.get(PREFIX):
        notes.append(f"bytecode kept in {env[PREFIX]} ({PREFIX}; {NO_BYTECODE} is set here and torch was installed "
                     "without its bytecode, so every process compiled torch and Megatron from source at each "
                     "launch); the installation is not written "
                     "(one H200, 345m warm: the rank's imports, Megatron's library-setup, 15.2 -> 3.7-4.9 s); "
                     f"--set env.{PREFIX}=null for none")
    if env.get(IMPORT_GC_ENV) == "paused":
        notes.append("the ranks (and torchrun, where it runs) collect no garbage while they import "
                     f"({IMPORT_GC_ENV}=paused): torch's and Megatron's imports otherwise run ~900 collections over "
                     "the growing heap (2.5-3 s CPU of 8-9 in a rank on a CPU machine); once imported (the ranks: "
                     "when Megatron initializes), one collection, what is alive then is frozen, and automatic "
                     f"collection resumes; --set env.{IMPORT_GC_ENV}=python for Python's own")
    if env.get(WARM_POOL_ENV) == "0":
        notes.append(f"torch's compile workers start only when a kernel must be compiled ({WARM_POOL_ENV}=0), not "
                     "at the first torch.compile: with the compile cache warm none start (one H200, 345m: iteration 1 "
                     f"2.6 s and exit 6 s sooner); --set env.{WARM_POOL_ENV}=1 for torch's default")
    if env.get(EXIT_ENV) == "quick":
        notes.append(f"at exit a rank whose training returned cleanly ends at once ({EXIT_ENV}=quick): its files "
                     "flushed and its GPU work finished, the interpreter's and CUDA's teardown skipped (one H200: "
                     "3.3-3.9 s sooner from the end of training to exit, against collect-once); any other end is "
                     "Python's own; "
                     f"--set env.{EXIT_ENV}=python for Python's own always")
    if env.get(EXIT_ENV) == "collect-once":
        notes.append(f"at exit the ranks collect their garbage once and freeze what is alive ({EXIT_ENV}="
                     "collect-once): the interpreter's shutdown otherwise walks torch's ~450,000 objects in each of "
                     "its collections (one H200: 0.4-1.5 s sooner from the end of training to exit); "
                     f"--set env.{EXIT_ENV}=python for Python's own")
    if env.get(WARMUP_ENV) == "draws":
        notes.append(f"Megatron's JIT warm-up compiles nothing ({WARMUP_ENV}=draws): the layers are compiled "
                     "whole, or the job turns off the fusions it compiles, so they never run; its random draws "
                     "are kept, so the model's initialisation is the same (one H200, 345m: the warm-up 1.9-3.1 -> "
                     f"0.01 s; toy: 2.0 s warm, 5.8 s on a fresh machine); --set env.{WARMUP_ENV}=megatron for "
                     "Megatron's own")
    return notes
