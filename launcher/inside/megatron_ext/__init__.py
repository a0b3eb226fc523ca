"""Code that runs inside Megatron training processes (on the training PYTHONPATH), not in the launcher CLI.

Importing the submodules needs megatron-core and torch; this package file imports nothing.
"""

SDPA_SPEC = ("launcher.inside.megatron_ext.sdpa_spec", "layer_spec")
SDPA_SPEC_FAST = ("launcher.inside.megatron_ext.sdpa_spec_fast", "layer_spec")

FAST_OPS_ENV = "MEGATRON_LAUNCH_FAST_OPS"
ALL_OPS = ("ce", "norm", "scale", "adam", "nosync", "nancheck", "layer", "save")
# What runs when MEGATRON_LAUNCH_FAST_OPS is unset: all of them. ``save`` (the staged checkpoint copy) measured on
# one H200, 345m: a save blocks training 0.36 s instead of 2.37 s (docs/checkpoint-saves.md).
DEFAULT_OPS = ALL_OPS


def selected_ops(value: str | None) -> tuple[str, ...]:
    """The ops named in a MEGATRON_LAUNCH_FAST_OPS value (see fast_ops); unknown names are an error."""
    if value is None or value.strip() == "":
        return DEFAULT_OPS
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if names == ("none",):
        return ()
    unknown = sorted(set(names) - set(ALL_OPS))
    if unknown:
        raise ValueError(f"unknown fast op(s) {unknown}; choose from {list(ALL_OPS)} or 'none'")
    return names

# FP8 without Transformer Engine (float8.py): the Megatron fp8 formats and recipes the compiled layers run with
# torchao's float8 matmul; the launcher's rules read them before launch (no torch imported here).
FP8_IMPLEMENTATION_WITHOUT_TE = "torchao float8 with dynamic tensorwise scaling"
FP8_PACKAGE = "torchao"
FP8_FORMATS_WITHOUT_TE = ("hybrid", "e4m3")
FP8_RECIPES_WITHOUT_TE = ("delayed", "tensorwise")
# Each weight cast to FP8 once per optimizer step (float8.py); "0": torchao's own cast in every call.
FP8_WEIGHT_CACHE_ENV = "MEGATRON_LAUNCH_FP8_WEIGHT_CACHE"
