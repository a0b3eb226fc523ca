"""Run Megatron's own argument checks on many argvs, one per line of JSON on stdin.

This file runs inside the *Megatron* interpreter (megatron-core + torch), as a plain script, so it imports
nothing from the launcher. launcher/checks/megatron_verdict.py starts it and speaks this protocol:

    request  (stdin, one line):  {"argv": [...], "world_size": 8, "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
                                  "target": {"apex": false}}
    response (stdout, one line): {"ok": true, "stage": "done", "error": "", "facts": {...}}

The stages are the ones pretrain_gpt.py goes through before it touches a GPU: "parse" (argparse),
"validate" (validate_args), "globals" (set_global_variables: microbatch calculator, tokenizer) and
"config" (core_transformer_config_from_args, i.e. TransformerConfig.__post_init__), then "runtime": the
checks Megatron makes only at model build or at the first step (see runtime_checks). A failure reports
the stage and Megatron's own message. Importing megatron costs ~5 s, so one process serves many checks and
resets Megatron's global state between them.
"""

from __future__ import annotations

import contextlib
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


def _setup(arch_major: int):
    """Import Megatron once and make its checks runnable on a machine without a GPU."""
    import argparse

    argparse.ArgumentParser.error = _raise_parse_error
    # RANK != 0 keeps validate_args from printing its 44 KB table of arguments.
    os.environ["RANK"] = "1"
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

    # validate_args asks cuda:0 for its architecture when TP or CP > 1; answer for the target GPU instead.
    arguments.get_device_arch_version = lambda: arch_major
    return arguments


def _known_flags(arguments) -> list[str]:
    """Every long flag of the real parser, so the launcher can suggest the nearest one for a typo."""
    import argparse

    parser = arguments.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
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
    if args.transformer_impl == "local" and not target.get("apex", False):
        # gpt_layer_specs.py falls back to WrappedTorchNorm when apex is missing; build one to run its asserts.
        WrappedTorchNorm(config, config.hidden_size)
    if config.context_parallel_size > 1 and args.transformer_impl == "local":
        raise AssertionError("Context parallelism is only supported by TEDotProductAttention! "
                             "(transformer/dot_product_attention.py:57)")
    if vp is not None and pp > 1:  # the interleaved schedule, pipeline_parallel/schedules.py:1052-1072
        group = config.microbatch_group_size_per_vp_stage
        if group > num_microbatches or group < pp:
            raise ValueError("The number of contiguous micro-batches in a virtual pipeline stage"
                             f"should range in [PP={pp} , M={num_microbatches}]")
        if 0 < num_microbatches % group < pp:
            raise RuntimeError("The remainder of M (the total micro-batches) divided by N (number of contiguous "
                               "micro-batches in a virtual pipeline stage) should be 0, or larger than or equal "
                               f"to the pipeline-parallel size, but it is {num_microbatches % group}.")


def check(arguments, argv: list[str], world_size: int, env: dict[str, str], defaults: dict,
          target: dict) -> dict:
    """Run pretrain_gpt.py's startup checks on one argv; never raises."""
    from megatron.core.num_microbatches_calculator import get_num_microbatches
    from megatron.training import global_vars

    _reset()
    saved_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    os.environ["WORLD_SIZE"] = str(world_size)
    saved_argv = sys.argv
    sys.argv = ["pretrain_gpt.py", *argv]
    stage = "parse"
    facts: dict = {}
    try:
        args = arguments.parse_args()
        stage = "validate"
        arguments.validate_args(args, defaults)
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
        }
        stage = "globals"
        global_vars.set_global_variables(args)
        facts["num_microbatches"] = get_num_microbatches()
        facts["padded_vocab_size"] = getattr(args, "padded_vocab_size", None)
        stage = "config"
        config = arguments.core_transformer_config_from_args(args)
        stage = "runtime"
        runtime_checks(args, config, facts["num_microbatches"], target)
        return {"ok": True, "stage": "done", "error": "", "facts": facts}
    except ParseError as exc:
        return {"ok": False, "stage": stage, "error": str(exc), "facts": facts}
    except SystemExit as exc:
        return {"ok": False, "stage": stage, "error": f"Megatron called exit({exc.code})", "facts": facts}
    except Exception as exc:  # noqa: BLE001 - any Megatron failure is a verdict, not a crash of the worker
        return {"ok": False, "stage": stage, "error": _message(exc), "facts": facts}
    finally:
        sys.argv = saved_argv
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _reset()


def main() -> int:
    # Megatron prints freely; keep our protocol on a private copy of stdout and send its prints to stderr.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    arch_major = int(os.environ.get("MEGATRON_CHECK_ARCH_MAJOR", "9"))
    defaults = json.loads(os.environ.get("MEGATRON_CHECK_ARGS_DEFAULTS", "{}"))
    try:
        arguments = _setup(arch_major)
    except Exception as exc:  # noqa: BLE001
        protocol.write(json.dumps({"fatal": f"cannot import megatron.training: {_message(exc)}"}) + "\n")
        return 1
    import megatron.core

    hello = {"ready": READY, "flags": _known_flags(arguments), "version": megatron.core.__version__,
             "origin": os.path.dirname(os.path.dirname(megatron.core.__file__))}
    protocol.write(json.dumps(hello) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            result = check(arguments, request["argv"], int(request["world_size"]), request.get("env", {}),
                           defaults, request.get("target", {}))
        protocol.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
