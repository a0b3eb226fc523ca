"""Per-layer CUDA graphs and activation recomputation: TransformerConfig's checks of the two together
(megatron/core/transformer/transformer_config.py:2283-2330 at 432d76b2b8bf), said before launch with a way out.

A graphed layer cannot re-run a random number generator, so a recomputed module inside a graph may not use
dropout; full recompute goes only with the full-iteration graph (which this pin cannot run: target_rules).
"""

from __future__ import annotations

from typing import Any

PER_LAYER = ("local", "transformer_engine")
# the deprecated flags validate_args turns into an implementation (arguments.py:617, 623)
DEPRECATED = (("enable_cuda_graph", "local"), ("external_cuda_graph", "transformer_engine"))


def graph_impl(arg: Any) -> tuple[str, str]:
    """(the CUDA graph implementation Megatron uses, the setting that chose it)."""
    impl = arg("cuda_graph_impl") or "none"
    if impl == "none":
        for dest, meant in DEPRECATED:
            if arg(dest):
                return meant, dest
    return impl, "cuda_graph_impl"


def _no_graphs(dest: str) -> str:
    return "cuda_graph_impl=none" if dest == "cuda_graph_impl" else f"{dest}=false"


def check(c: Any) -> None:
    impl, chosen_by = graph_impl(c.arg)
    if impl not in PER_LAYER:
        return
    named = f"cuda_graph_impl {impl}" + ("" if chosen_by == "cuda_graph_impl" else f" (from {chosen_by})")
    granularity = c.arg("recompute_granularity")
    if granularity == "full":
        c.fail(f"{named} with full recompute: Megatron's TransformerConfig asserts \"full recompute is only "
               "supported with full iteration CUDA graph.\" (transformer_config.py:2286)",
               f"set {_no_graphs(chosen_by)}, or recompute_granularity=null --set recompute_method=null "
               "--set recompute_num_layers=null (no recompute)")
        return
    if granularity != "selective":
        return
    recomputed = c.arg("recompute_modules") or ["core_attn"]  # TransformerConfig's default (:1571)
    recomputed = [recomputed] if isinstance(recomputed, str) else [str(m) for m in recomputed]
    graphed = c.arg("cuda_graph_modules") or []
    graphed = [graphed] if isinstance(graphed, str) else [str(m) for m in graphed]
    whole_layer = not graphed  # an empty per-layer scope captures the whole layer

    def inside(module: str, graph_module: str) -> bool:
        return module in recomputed and (whole_layer or graph_module in graphed)

    for dropout, pairs, message, line in (
            ("attention_dropout", (("core_attn", "attn"),),
             "attention dropout is not supported with graphed attention recomputation.", 2309),
            ("hidden_dropout", (("mlp", "mlp"), ("moe", "moe")),
             "hidden dropout is not supported with graphed MLP/MoE recomputation.", 2317)):
        value = c.arg(dropout)
        modules = [m for m, g in pairs if inside(m, g)]
        if value and modules:
            c.fail(f"{named} with selective recompute of {', '.join(modules)} and {dropout} {value}: a graphed "
                   f"recompute cannot redraw its dropout; Megatron's TransformerConfig asserts \"{message}\" "
                   f"(transformer_config.py:{line})", f"set {dropout}=0.0, or {_no_graphs(chosen_by)}")
