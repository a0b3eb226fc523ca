"""Megatron's JIT warm-up against the start-up hook's draws-only stand-in: the CUDA generator must end in the same
state (the model's initialisation continues from it). Needs one GPU and the Megatron-LM checkout on PYTHONPATH.

    PYTHONPATH=$MEGATRON_LM_PATH:. python scripts/check_warmup_rng.py [--preset-shape 345m|toy]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import types
from pathlib import Path

SHAPES = {  # what the presets give _warmup_jit_function (bf16, TP 1, CP 1, no sequence parallelism)
    "345m": dict(hidden_size=1024, ffn_hidden_size=4096, seq_length=1024, micro_batch_size=32),
    "toy": dict(hidden_size=12, ffn_hidden_size=48, seq_length=64, micro_batch_size=8),
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset-shape", choices=sorted(SHAPES), default="345m")
    options = parser.parse_args()
    import torch
    from megatron.training import global_vars, initialize

    global_vars._GLOBAL_ARGS = types.SimpleNamespace(
        bf16=True, fp16=False, tensor_model_parallel_size=1, context_parallel_size=1, swiglu=False,
        sequence_parallel=False, **SHAPES[options.preset_shape])
    site = Path(__file__).resolve().parent.parent / "launcher" / "inside" / "site" / "sitecustomize.py"
    spec = importlib.util.spec_from_file_location("launch_startup_hook", site)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    states = {}
    for name in ("megatron", "hook", "megatron again"):
        torch.cuda.manual_seed(1234)
        start = time.monotonic()
        if name == "hook":
            real = initialize._warmup_jit_function
            hook.warmup_draws_only(initialize)
            initialize._warmup_jit_function()
            initialize._warmup_jit_function = real
        else:
            initialize._warmup_jit_function()
        torch.cuda.synchronize()
        states[name] = torch.cuda.get_rng_state()
        print(f"{name}: {time.monotonic() - start:.2f} s, generator offset state {states[name][-16:].tolist()}")
    same = torch.equal(states["megatron"], states["hook"])
    print(f"warm-up RNG check ({options.preset_shape} shapes): the hook's draws leave the CUDA generator "
          f"{'IN THE SAME STATE' if same else 'IN ANOTHER STATE'} as Megatron's warm-up; Megatron twice: "
          f"{'same' if torch.equal(states['megatron'], states['megatron again']) else 'differs'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
