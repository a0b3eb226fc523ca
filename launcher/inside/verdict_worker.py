"""Run Megatron's own argument checks on many argvs, one per line of JSON on stdin.

This file runs inside the *Megatron* interpreter (megatron-core + torch), as a plain script, so it imports
nothing from the launcher. launcher/checks/megatron_verdict.py starts it and speaks this protocol:

    request  (stdin, one line):  {"argv": [...], "world_size": 8, "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
                                  "target": {"apex": false, "te": true, "te_version": "2.14.0",
                                             "capability": [9, 0]}}
    response (stdout, one line): {"ok": true, "stage": "done", "error": "", "facts": {...},
                                  "rewrites": [...], "warnings": [...], "not_checked": [...]}

The target is the GPU machine the preset declares, not this one: its compute capability answers
get_device_arch_version() and torch.cuda.get_device_capability(), a declared Transformer Engine answers every
is_te_min_version() question at the declared version (and provides fused RoPE), an undeclared one answers 0.0.0.
What still needs the real machine (a CUDA driver, a TE import at config time) is "not checked here", never a
rejection. validate_args rewrites some settings in place ("Disabling --async-save", "... is ignored"): the
response lists each flag the argv gave whose value it changed, and the warnings it printed.

The stages are the ones pretrain_gpt.py goes through before it touches a GPU: "parse" (argparse),
"validate" (validate_args), "globals" (set_global_variables: microbatch calculator, tokenizer) and
"config" (core_transformer_config_from_args, i.e. TransformerConfig.__post_init__), then "runtime": the
checks Megatron makes only at model build or at the first step (see runtime_checks). A failure reports
the stage and Megatron's own message. Importing megatron costs ~5 s, so one process serves many checks and
resets Megatron's global state between them.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import sys
import traceback

READY = "megatron-upstream-worker ready"


class ParseError(Exception):
    """argparse's error(), raised instead of printing the 500-line usage and exiting."""


def _raise_parse_error(_parser, message: str):
    raise ParseError(message)


def _setup():
    """Import Megatron once and make its checks runnable on a machine without a GPU."""
    import argparse

    argparse.ArgumentParser.error = _raise_parse_error
    # RANK != 0 keeps validate_args from printing its 44 KB table of arguments; its warnings are captured.
    os.environ["RANK"] = "1"
    # The tokenizer is built at the "globals" stage: offline, as every recipe the launcher prints must train,
    # so a tokenizer that would fetch from the Hugging Face hub fails here instead of downloading.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from megatron.training import argument_utils, arguments

    # parse_args rebuilds the parser every call and re-reads dataclass sources for help text (~0.3 s);
    # the docstrings only feed --help, so reading them once per class changes no verdict.
    factory = argument_utils.ArgumentGroupFactory
    read_docstrings = factory._get_field_docstrings
    docstrings_by_class: dict[type, dict[str, str]] = {}

    def cached_docstrings(self, src_cfg_class: type) -> dict[str, str]:
        if src_cfg_class not in docstrings_by_class:
            docstrings_by_class[src_cfg_class] = read_docstrings(self, src_cfg_class)
        return dict(docstrings_by_class[src_cfg_class])

    factory._get_field_docstrings = cached_docstrings
    return arguments


def extra_args_provider():
    """What pretrain_gpt.py passes as extra_args_provider: ModelOpt's arguments when megatron.post_training
    imports (always, from a checkout). Without a checkout, the same flags from the launcher's catalog
    (MEGATRON_CHECK_EXTRA_ARGS), so a job that runs from a checkout is judged by the parser it will meet."""
    try:
        from megatron.post_training.arguments import add_modelopt_args

        return add_modelopt_args
    except ImportError:
        pass
    spec = json.loads(os.environ.get("MEGATRON_CHECK_EXTRA_ARGS", "[]"))
    if not spec:
        return None
    types = {"int": int, "float": float, "str": str}

    def add_from_catalog(parser):
        group = parser.add_argument_group(title="extra providers (from the launcher's catalog)")
        for entry in spec:
            if entry["kind"] == "true":
                group.add_argument(*entry["flags"], dest=entry["dest"], action="store_true")
            elif entry["kind"] == "false":
                group.add_argument(*entry["flags"], dest=entry["dest"], action="store_false")
            else:
                group.add_argument(*entry["flags"], dest=entry["dest"], type=types[entry.get("type", "str")],
                                   nargs=entry.get("nargs"), choices=entry.get("choices"),
                                   default=entry.get("default"))
        return parser

    return add_from_catalog


class MachinePatch:
    """Answers Megatron's questions about the GPU machine for the declared target, then puts things back."""

    def __init__(self, arguments):
        import torch
        from megatron.core import utils as core_utils
        from megatron.core.models.common.embeddings import rope_utils

        self.arguments, self.torch, self.core_utils, self.rope_utils = arguments, torch, core_utils, rope_utils
        self.saved = {
            (arguments, "get_device_arch_version"): arguments.get_device_arch_version,
            (torch.cuda, "get_device_capability"): torch.cuda.get_device_capability,
            (core_utils, "_te_version"): core_utils._te_version,
            (rope_utils, "fused_apply_rotary_pos_emb"): rope_utils.fused_apply_rotary_pos_emb,
            (rope_utils, "fused_apply_rotary_pos_emb_thd"): rope_utils.fused_apply_rotary_pos_emb_thd,
        }

    def apply(self, target: dict) -> None:
        from packaging.version import Version

        major, minor = target.get("capability") or [9, 0]
        self.arguments.get_device_arch_version = lambda: major
        self.torch.cuda.get_device_capability = lambda *_a, **_k: (major, minor)
        te = bool(target.get("te"))
        self.core_utils._te_version = Version(target.get("te_version") or "2.14.0") if te else Version("0.0.0")
        # TransformerConfig asks rope_utils for TE's fused RoPE kernels; a declared TE has them.
        fused = _declared_kernel if te else None
        self.rope_utils.fused_apply_rotary_pos_emb = fused
        self.rope_utils.fused_apply_rotary_pos_emb_thd = fused

    def restore(self) -> None:
        for (owner, name), value in self.saved.items():
            setattr(owner, name, value)
        self.torch.use_deterministic_algorithms(False)  # --deterministic-mode turns it on in validate_args


def _declared_kernel(*_args, **_kwargs):
    raise RuntimeError("a stand-in for a kernel of the declared target; never called by the checks")


# Failures that only say this CPU machine is not the target: reported as "not checked here".
MACHINE_ONLY = ("Found no NVIDIA driver", "Torch not compiled with CUDA", "CUDA driver", "no CUDA GPUs",
                "NVIDIA driver on your system")
TE_ONLY = ("transformer_engine", "transformer-engine", "Transformer Engine", "TransformerEngine", "install TE")
APEX_ONLY = ("No module named 'apex'", "No module named 'amp_C'", "fused_weight_gradient_mlp_cuda")


def only_this_machine(message: str, target: dict) -> bool:
    if any(text in message for text in MACHINE_ONLY):
        return True
    declared = {name.replace("-", "_") for name in target.get("packages") or []}
    if any(f"No module named '{module}" in message for module in declared):
        return True  # a package the target declares (launcher.packages) that this machine lacks
    if target.get("te") and any(text in message for text in TE_ONLY):
        return True
    return bool(target.get("apex")) and any(text in message for text in APEX_ONLY)


def _known_flags(arguments) -> list[str]:
    """Every long flag of the real parser, so the launcher can suggest the nearest one for a typo."""
    import argparse

    parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    extra = extra_args_provider()
    if extra is not None:
        parser = extra(parser)
    return sorted({flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")})


def _reset():
    from megatron.core.num_microbatches_calculator import unset_num_microbatches_calculator
    from megatron.training import global_vars

    global_vars.unset_global_variables()
    unset_num_microbatches_calculator()


def _message(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if text:
        return f"{type(exc).__name__}: {text}"
    # Megatron has bare asserts: name the line that failed so the user can find it.
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        last = frames[-1]
        where = f"{os.path.basename(last.filename)}:{last.lineno}"
        return f"{type(exc).__name__} at {where}: {(last.line or '').strip()}"
    return type(exc).__name__


def megatron_frame(exc: BaseException) -> dict | None:
    """The innermost frame of Megatron's own source in the failure (the assert, the raise, the exit() call):
    which of its checks refused, as file (from megatron/ on), line and function."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        parts = frame.filename.split(os.sep)
        if "megatron" in parts[:-1]:
            start = len(parts) - 1 - parts[::-1].index("megatron")
            return {"file": "/".join(parts[start:]), "path": frame.filename, "line": frame.lineno,
                    "function": frame.name}
    return None


def runtime_checks(args, config, num_microbatches: int, target: dict) -> None:
    """Checks Megatron makes only at model build or at the first step, on the GPUs. The layer split, the TP
    split of the MLP and the torch LayerNorm fallback run Megatron's own code; the rest are transcribed
    from the cited lines. `target` says what the GPU machine has: {"apex": bool}."""
    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.utils import divide

    tp = config.tensor_model_parallel_size
    pp = config.pipeline_model_parallel_size
    vp = config.virtual_pipeline_model_parallel_size
    # A --pipeline-model-parallel-layout was validated by TransformerConfig; its per-rank count needs process
    # groups, so only the even/uneven split is recomputed here.
    if config.pipeline_model_parallel_layout is None:
        for pp_rank in range(pp):
            for vp_stage in range(vp) if vp else [None]:
                get_num_layers_to_build(config, vp_stage=vp_stage, pp_rank=pp_rank)
    # ColumnParallelLinear splits the MLP's fc1 output (doubled for gated units) over TP.
    divide(config.ffn_hidden_size * (2 if config.gated_linear_unit else 1), tp)
    if config.sequence_parallel and (args.seq_length // config.context_parallel_size) % tp:
        raise AssertionError("First dimension of the tensor should be divisible by tensor parallel size "
                             "(tensor_parallel/mappings.py:70: seq_length / CP split over TP)")
    if args.transformer_impl == "transformer_engine" and not target.get("te", False):
        # gpt_builders picks the TE layer spec, which needs transformer_engine at model build.
        raise AssertionError("transformer_impl transformer_engine needs Transformer Engine, which the target "
                             "lacks (gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec)")
    if args.transformer_impl == "local" and not target.get("apex", False):
        # gpt_layer_specs.py falls back to WrappedTorchNorm when apex is missing; build one to run its asserts,
        # less those the job's --spec lifts by implementing the feature in its own norm (target "norm_features").
        norm_config = copy.copy(config)
        for feature in target.get("norm_features", []):
            setattr(norm_config, feature, False)
        WrappedTorchNorm(norm_config, config.hidden_size)
    if config.num_moe_experts and tp > 1 and not config.sequence_parallel:  # moe_layer.py:620, in training only
        raise ValueError("During training, performance may degrade if MoE and tensor parallelism are enabled without "
                         "also enabling sequence parallelism. (moe_layer.py:621, at the first training step)")
    if config.context_parallel_size > 1 and args.transformer_impl == "local":
        raise AssertionError("Context parallelism is only supported by TEDotProductAttention! "
                             "(transformer/dot_product_attention.py:57)")
    if args.tp_comm_overlap and not target.get("te", False):  # training/initialize.py:_initialize_tp_communicators
        raise RuntimeError("Tensor Parallel Communication/GEMM Overlap optimization needs 'yaml' and "
                           "'transformer_engine' packages")
    instances = args.num_distributed_optimizer_instances
    if instances > 1:  # parallel_state.initialize_model_parallel (:829, :1248)
        if (args.data_parallel_size * config.context_parallel_size) % instances:
            raise AssertionError("Data parallel size should be divisible by partial DistOpt shard factor")
        etp = args.expert_tensor_parallel_size or tp
        if (args.world_size // (etp * args.expert_model_parallel_size * pp)) % instances:
            raise AssertionError("Expert data parallel size should be divisible by partial DistOpt shard factor")
    if args.use_torch_fsdp2:
        # finalize_model_grads calls finish_grad_sync(force_all_reduce=...) on every model chunk at each step;
        # Megatron's own class answers whether its torch-FSDP2 wrapper takes it.
        import inspect

        from megatron.core.distributed.torch_fully_sharded_data_parallel import TorchFullyShardedDataParallel

        if "force_all_reduce" not in inspect.signature(TorchFullyShardedDataParallel.finish_grad_sync).parameters:
            raise TypeError("TorchFullyShardedDataParallel.finish_grad_sync() got an unexpected keyword argument "
                            "'force_all_reduce' (finalize_model_grads.py, at the first training step)")
    if vp is not None and pp > 1:  # the interleaved schedule, pipeline_parallel/schedules.py:1052-1072
        group = config.microbatch_group_size_per_vp_stage
        if group > num_microbatches or group < pp:
            raise ValueError("The number of contiguous micro-batches in a virtual pipeline stage"
                             f"should range in [PP={pp} , M={num_microbatches}]")
        if 0 < num_microbatches % group < pp:
            raise RuntimeError("The remainder of M (the total micro-batches) divided by N (number of contiguous "
                               "micro-batches in a virtual pipeline stage) should be 0, or larger than or equal "
                               f"to the pipeline-parallel size, but it is {num_microbatches % group}.")


_FLAG_DESTS: dict[bool, dict[str, str]] = {}


def _given_dests(arguments, extra, argv: list[str]) -> dict[str, str]:
    """dest → flag for every flag the argv spells out (to tell the user's settings from derived ones)."""
    import argparse

    key = extra is not None
    if key not in _FLAG_DESTS:  # the parser's shape never changes within a process
        parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
        if extra is not None:
            parser = extra(parser)
        _FLAG_DESTS[key] = {flag: action.dest for action in parser._actions for flag in action.option_strings}
    by_flag = _FLAG_DESTS[key]
    return {by_flag[word]: word for word in argv if word in by_flag}


def _plain(value):
    return value if isinstance(value, (bool, int, float, str, type(None))) else str(value)


def _rewrites(given: dict[str, str], before: dict, args) -> list[dict]:
    """Settings the argv gave that validate_args changed in place (e.g. --async-save turned off)."""
    changed = []
    for dest, flag in given.items():
        old, new = before.get(dest), getattr(args, dest, None)
        if old != new:
            changed.append({"dest": dest, "flag": flag, "given": _plain(old), "now": _plain(new)})
    return changed


class _Recorder:
    """validate_args speaks through warn_rank_0 / print_rank_0 (silent at RANK 1) and warnings.warn."""

    def __init__(self, arguments):
        self.arguments = arguments
        self.messages: list[str] = []
        self.printed: list[str] = []  # everything print_rank_0 said: an exit() says why only there

    def __enter__(self):
        self.saved = (self.arguments.warn_rank_0, self.arguments.print_rank_0)
        self.arguments.warn_rank_0 = self._warn
        self.arguments.print_rank_0 = self._print
        return self

    def _warn(self, message, rank=None):
        text = str(message)
        if not text.startswith("Overriding default arguments for"):  # pretrain_gpt.py's own tokenizer default
            self.messages.append(text)

    def _print(self, message, rank=None):
        text = str(message)
        self.printed.append(" ".join(text.split()))
        if any(word in text for word in ("WARN", "Disabling", "ignored", "deprecated", "overrid")):
            self.messages.append(text)

    def __exit__(self, *exc):
        self.arguments.warn_rank_0, self.arguments.print_rank_0 = self.saved


def check(arguments, argv: list[str], world_size: int, env: dict[str, str], defaults: dict,
          target: dict, machine: MachinePatch | None = None) -> dict:
    """Run pretrain_gpt.py's startup checks on one argv; never raises."""
    import warnings

    from megatron.core.num_microbatches_calculator import get_num_microbatches
    from megatron.training import global_vars

    _reset()
    saved_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    os.environ["WORLD_SIZE"] = str(world_size)
    saved_argv = sys.argv
    sys.argv = ["pretrain_gpt.py", *argv]
    if machine is not None:
        machine.apply(target)
    stage = "parse"
    facts: dict = {}
    rewrites: list[dict] = []
    extra = extra_args_provider()
    recorder = _Recorder(arguments)

    where: dict | None = None

    def reply(ok: bool, error: str = "", not_checked: list[str] | None = None) -> dict:
        seen = list(dict.fromkeys(" ".join(m.split()) for m in recorder.messages + [
            str(w.message) for w in caught if f"{os.sep}megatron{os.sep}" in w.filename]))
        return {"ok": ok, "stage": "done" if ok and not not_checked else stage, "error": error, "facts": facts,
                "rewrites": rewrites, "warnings": seen, "not_checked": not_checked or [],
                "where": where}

    with warnings.catch_warnings(record=True) as caught, recorder:
        warnings.simplefilter("always")
        try:
            args = arguments.parse_args(extra_args_provider=extra)
            before = dict(vars(args))
            given = _given_dests(arguments, extra, argv)
            stage = "validate"
            arguments.validate_args(args, defaults)
            rewrites = _rewrites(given, before, args)
            changed = {dest: _plain(getattr(args, dest, None)) for dest, old in before.items()
                       if _plain(old) != _plain(getattr(args, dest, None))}
            facts = {
                "data_parallel_size": args.data_parallel_size,
                "tensor_model_parallel_size": args.tensor_model_parallel_size,
                "pipeline_model_parallel_size": args.pipeline_model_parallel_size,
                "context_parallel_size": args.context_parallel_size,
                "virtual_pipeline_model_parallel_size": args.virtual_pipeline_model_parallel_size,
                "global_batch_size": args.global_batch_size,
                "micro_batch_size": args.micro_batch_size,
                "sequence_parallel": args.sequence_parallel,
                "ffn_hidden_size": args.ffn_hidden_size,
                "kv_channels": args.kv_channels,
                "changed_by_validate_args": changed,  # every setting it rewrote, given or defaulted
            }
            stage = "globals"
            global_vars.set_global_variables(args)
            facts["num_microbatches"] = get_num_microbatches()
            facts["padded_vocab_size"] = getattr(args, "padded_vocab_size", None)
            stage = "config"
            config = arguments.core_transformer_config_from_args(args)
            stage = "runtime"
            runtime_checks(args, config, facts["num_microbatches"], target)
            return reply(True)
        except ParseError as exc:
            return reply(False, str(exc))
        except SystemExit as exc:
            where = megatron_frame(exc)
            said = f" after printing: {recorder.printed[-1]}" if recorder.printed else ""
            return reply(False, f"Megatron called exit({exc.code}){said}")
        except Exception as exc:  # noqa: BLE001 - any Megatron failure is a verdict, not a crash of the worker
            where = megatron_frame(exc)
            message = _message(exc)
            if only_this_machine(message, target):
                return reply(True, "", [f"{stage}: {message}"])
            return reply(False, message)
        finally:
            sys.argv = saved_argv
            for key, value in saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            if machine is not None:
                machine.restore()
            _reset()


def main() -> int:
    # Megatron prints freely; keep our protocol on a private copy of stdout and send its prints to stderr.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    defaults = json.loads(os.environ.get("MEGATRON_CHECK_ARGS_DEFAULTS", "{}"))
    try:
        arguments = _setup()
        machine = MachinePatch(arguments)
    except Exception as exc:  # noqa: BLE001
        protocol.write(json.dumps({"fatal": f"cannot import megatron.training: {_message(exc)}"}) + "\n")
        return 1
    import megatron.core

    hello = {"ready": READY, "flags": _known_flags(arguments), "version": megatron.core.__version__,
             "origin": os.path.dirname(os.path.dirname(megatron.core.__file__))}
    protocol.write(json.dumps(hello) + "\n")
    # The requests come on a private copy of stdin: Megatron's bare exit() (site's Quitter) closes sys.stdin
    # before it raises SystemExit, which would end every check after it.
    requests = os.fdopen(os.dup(0), "r")
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            result = check(arguments, request["argv"], int(request["world_size"]), request.get("env", {}),
                           defaults, request.get("target", {}), machine)
        protocol.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
