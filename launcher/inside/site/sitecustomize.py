"""Start-up settings of the launcher's training processes, applied when Python starts (before pretrain_gpt.py's own
imports). The launcher puts this folder on the ranks' PYTHONPATH and says in the environment what to do; without
those variables this file does nothing but hand over to the sitecustomize it shadows, if there is one.

MEGATRON_LAUNCH_SKIP_IMPORTS=a,b: top-level packages the job never uses that Megatron probes at import
    (``try: import transformers``): they are not importable, exactly as if they were not installed. The launcher
    lists only packages that the job's settings cannot reach (launcher/pipeline/startup.py).
MEGATRON_LAUNCH_JIT_WARMUP=draws: Megatron's ``_warmup_jit_function`` (initialize.py) compiles its standalone
    bias-GeLU and bias-dropout-add fusions on sample tensors; where the layers are compiled whole
    (compiled_layer.py) those standalone functions never run. With this value only its random draws are made (the
    same calls, so the CUDA generator's state afterwards, which the model's initialisation continues from, is the
    same), and nothing is compiled.
MEGATRON_LAUNCH_IMPORT_GC=paused: in pretrain_gpt.py's processes, automatic garbage collection is paused from
    the interpreter's start until Megatron's ``initialize_megatron`` is called (in torchrun's, until its
    torch.distributed.run is imported; other programs are left alone): the imports (torch, dynamo, inductor,
    Megatron: ~450,000 objects) otherwise trigger ~900 collections, six of them full, over the growing heap (1.5-2.7
    s CPU of 8.5 on a CPU machine). There, one collection frees what the imports left as garbage, what is alive
    (modules, classes, functions: alive for the whole run) is frozen so that later collections skip it, and
    automatic collection resumes. Megatron's own --manual-gc disables it again later, as without the launcher.
MEGATRON_LAUNCH_EXIT=collect-once: when the program has ended and its atexit handlers have run, the garbage left
    then is collected once (its finalizers run, buffered files in it are flushed), every file still open for writing
    is flushed, and every object still alive is frozen (gc.freeze), so that the interpreter's shutdown does not walk
    torch's ~450,000 objects again in each of its collections while it tears the modules down (measured 1.8-2.9 s
    per process on a CPU machine, 0.2-0.8 s with this). What is still reachable at that point is left to the
    operating system, as any object alive at exit may be: memory, file descriptors and the GPU context are released
    with the process either way.
MEGATRON_LAUNCH_EXIT=quick: as collect-once, and then, only when Megatron's pretrain() returned and no exception went
    unhandled, every open file object is flushed and the process ends with status 0 at once (os._exit), skipping the
    interpreter's module teardown and the C++ destructors (NCCL's communicators, CUDA's runtime) that would follow;
    the operating system releases the process's memory and GPU context either way. Any other end (an exception,
    sys.exit from inside the run) ends as Python would.
MEGATRON_LAUNCH_EXIT_TRACE=SECONDS (a measurement aid, never set by the launcher): when Megatron's pretrain() returns,
    one stamped line says so, and from then on every SECONDS the Python stack of each thread is written to stderr
    (faulthandler), so a stamped log shows where the end of a run spends its time until the process is gone.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

SKIP_ENV = "MEGATRON_LAUNCH_SKIP_IMPORTS"
WARMUP_ENV = "MEGATRON_LAUNCH_JIT_WARMUP"
EXIT_ENV = "MEGATRON_LAUNCH_EXIT"
IMPORT_GC_ENV = "MEGATRON_LAUNCH_IMPORT_GC"
EXIT_TRACE_ENV = "MEGATRON_LAUNCH_EXIT_TRACE"
_HERE = os.path.dirname(os.path.abspath(__file__))


class AfterImport(importlib.abc.MetaPathFinder):
    """Runs each of `hooks[name]` (module -> None), in order, right after module `name` is first executed (a
    post-import hook). One finder for all: the import system asks only the first finder that answers for a name."""

    def __init__(self) -> None:
        self.hooks: dict[str, list] = {}

    def add(self, name: str, then) -> None:
        self.hooks.setdefault(name, []).append(then)

    def find_spec(self, name, path=None, target=None):
        if name not in self.hooks:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, hooks = spec.loader, self.hooks[name]
        execute = loader.exec_module

        def exec_module(module):
            execute(module)
            for then in hooks:
                then(module)

        loader.exec_module = exec_module  # this spec's loader instance only
        return spec


def warmup_draws_only(initialize) -> None:
    """Replace initialize._warmup_jit_function by its random draws alone (see WARMUP_ENV)."""
    original = initialize._warmup_jit_function

    def draws() -> None:
        try:
            args = initialize.get_args()
            if args.swiglu:  # bias-SwiGLU warms another function; its draws are the same, but keep to the known case
                return original()
        except Exception:  # noqa: BLE001 - Megatron's own warm-up, as without the launcher
            return original()
        _draws(args)

    def _draws(args) -> None:
        import torch

        dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else torch.float32
        ffn = args.ffn_hidden_size // args.tensor_model_parallel_size
        seq = args.seq_length // args.context_parallel_size
        torch.rand(ffn, dtype=dtype, device="cuda")  # bias
        torch.rand((seq, args.micro_batch_size, ffn), dtype=dtype, device="cuda")  # input
        sp_seq = (args.seq_length // initialize.mpu.get_tensor_model_parallel_world_size()
                  if args.sequence_parallel else args.seq_length) // args.context_parallel_size
        for _ in range(2):  # input, residual
            torch.rand((sp_seq, args.micro_batch_size, args.hidden_size), dtype=dtype, device="cuda")
        torch.rand(args.hidden_size, dtype=dtype, device="cuda")  # bias
        # The compiled dropout of the 2 x 5 bias-dropout-add calls: inductor draws one seed per call
        # (torch._inductor.ir.RandomSeeds: aten.randint.low_out(int64 min, int64 max, [count]); count 1 here)
        for _ in range(10):
            torch.randint(-2**63, 2**63 - 1, [1], device="cuda")
        print("> megatron-launch: JIT warm-up skipped (the layers are compiled whole); its random draws made",
              flush=True)

    initialize._warmup_jit_function = draws


def entry_script() -> str:
    """The file name of the program this interpreter runs (`python path/to/pretrain_gpt.py …`), else ''."""
    argv = getattr(sys, "orig_argv", [])[1:]
    while argv and argv[0].startswith("-"):
        if argv[0] in ("-c", "-m"):
            return ""
        argv = argv[2:] if argv[0] in ("-W", "-X") else argv[1:]
    return os.path.basename(argv[0]) if argv else ""


def resume_gc() -> None:
    """Automatic garbage collection, paused since the interpreter started (see IMPORT_GC_ENV), resumes: one
    collection of what the imports left as garbage, then what is alive is frozen (gc.freeze) so that later
    collections skip it."""
    import gc

    if not gc.isenabled():
        gc.collect()
        gc.freeze()
        gc.enable()


def resume_gc_at_initialize(initialize) -> None:
    """resume_gc when Megatron's initialize_megatron is called."""
    import functools

    original = initialize.initialize_megatron

    @functools.wraps(original)
    def initialize_megatron(*args, **kwargs):
        resume_gc()
        return original(*args, **kwargs)

    initialize.initialize_megatron = initialize_megatron


def trace_after_pretrain(training, interval: float) -> None:
    """Wrap training.pretrain (before megatron.training binds it) to start the stack dumps of EXIT_TRACE_ENV."""
    import functools

    original = training.pretrain

    @functools.wraps(original)
    def pretrain(*args, **kwargs):
        result = original(*args, **kwargs)
        import faulthandler
        import time

        print(f"> megatron-launch exit trace: pretrain returned at {time.time():.3f}", flush=True)
        faulthandler.dump_traceback_later(interval, repeat=True)
        return result

    training.pretrain = pretrain


def _seconds(value: str | None) -> float | None:
    """A positive number of seconds, else None (the trace is off: a measurement aid never stops a run)."""
    try:
        seconds = float(value) if value else 0.0
    except ValueError:
        return None
    return seconds if 0 < seconds < float("inf") else None


def collect_once_then_freeze() -> None:
    """The last atexit handler (registered first): see EXIT_ENV. Open files are flushed first: what is frozen is
    never finalized, so a file the program left open would otherwise lose what its buffer holds."""
    import gc

    gc.collect()
    flush_open_files()
    gc.freeze()


_pretrain_returned = False


def note_pretrain_returned(training) -> None:
    """Wrap training.pretrain (before megatron.training binds it) to note that it returned (EXIT_ENV=quick)."""
    import functools

    original = training.pretrain

    @functools.wraps(original)
    def pretrain(*args, **kwargs):
        global _pretrain_returned
        result = original(*args, **kwargs)
        _pretrain_returned = True
        return result

    training.pretrain = pretrain


def flush_open_files() -> None:
    """Flush every file object still open for writing: os._exit drops what their buffers hold."""
    import gc
    import io

    for obj in gc.get_objects():
        if isinstance(obj, (io.BufferedWriter, io.BufferedRandom, io.TextIOWrapper)):
            try:
                if not obj.closed and obj.writable():
                    obj.flush()
            except Exception:  # noqa: BLE001 - a file that cannot flush would not at teardown either
                pass


def quick_exit() -> None:
    """The last atexit handler with EXIT_ENV=quick: collect once, then end at once after a clean pretrain()."""
    import gc

    if not _pretrain_returned or getattr(sys, "last_exc", None) is not None:
        collect_once_then_freeze()
        return
    gc.collect()
    flush_open_files()
    torch = sys.modules.get("torch")
    try:  # what the GPU still runs (a collective the other ranks wait on) ends before this process does
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - a broken device ends the process as Python would
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(0)


def install(environ=os.environ) -> None:
    if environ.get("MEGATRON_LAUNCH_WRITE_BYTECODE") == "1" and sys.pycache_prefix:
        # bytecode goes to the launcher's own cache (PYTHONPYCACHEPREFIX), not into the installation, so the
        # PYTHONDONTWRITEBYTECODE of this environment, which keeps installations clean, is kept in spirit
        sys.dont_write_bytecode = False
    for name in filter(None, (n.strip() for n in environ.get(SKIP_ENV, "").split(","))):
        # None in sys.modules is Python's own "not importable": `import` raises ModuleNotFoundError ("import of
        # NAME halted") and importlib.util.find_spec answers None, exactly as for a package not installed.
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    after = AfterImport()
    if environ.get(WARMUP_ENV) == "draws":
        after.add("megatron.training.initialize", warmup_draws_only)
    resume = {"pretrain_gpt.py": ("megatron.training.initialize", resume_gc_at_initialize),
              "torchrun": ("torch.distributed.run", lambda _module: resume_gc())}.get(entry_script())
    if environ.get(IMPORT_GC_ENV) == "paused" and resume is not None:
        import gc

        gc.disable()
        after.add(*resume)
    interval = _seconds(environ.get(EXIT_TRACE_ENV))
    if interval:
        after.add("megatron.training.training", lambda training: trace_after_pretrain(training, interval))
    if environ.get(EXIT_ENV) == "quick" and entry_script() == "pretrain_gpt.py":
        after.add("megatron.training.training", note_pretrain_returned)
    if after.hooks:
        sys.meta_path.insert(0, after)
    if environ.get(EXIT_ENV) in ("collect-once", "quick"):
        import atexit

        # handlers run last-registered first: this one runs last
        atexit.register(quick_exit if environ.get(EXIT_ENV) == "quick" else collect_once_then_freeze)


def hand_over() -> None:
    """Run the sitecustomize this one shadows (the next one on sys.path), as Python would have without us."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    install()
except Exception as error:  # noqa: BLE001 - the hook only saves time: never stop a process for it
    print(f"warning: megatron-launch start-up hook not applied: {error!r}", file=sys.stderr)
hand_over()
