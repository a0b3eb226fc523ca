"""Per-layer CUDA graphs and activation recomputation: TransformerConfig's checks of the two together
(megatron/core/transformer/transformer_config.py:2283-2330 at 432d76b2b8bf), said before launch with a way out.

A graphed layer cannot re-run a random number generator, so a recomputed module inside a graph may not use
dropout; full recompute goes only with the full-iteration graph (which this pin cannot run: target_rules).
"""

from __future__ import annotations

from typing import Any

from launcher.megatron import layer_pattern

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


def graphed_modules(arg: Any, impl: str) -> list[str]:
    """The per-layer scope as TransformerConfig ends with it: the local implementation graphs the MoE router and
    its preprocessing together, so naming either names both (transformer_config.py:2234-2244)."""
    graphed = arg("cuda_graph_modules") or []
    graphed = [m for m in str(graphed).strip("[]").replace(",", " ").split()] if isinstance(graphed, str) else \
        [str(m) for m in graphed]
    if impl == "local" and {"moe_router", "moe_preprocess"} & set(graphed):
        graphed += [m for m in ("moe_router", "moe_preprocess") if m not in graphed]
    return graphed


def _without(graphed: list[str], dropped: set[str], chosen_by: str) -> str:
    """The way out that leaves `dropped` out of the graphed modules (no graphs when nothing is left: an empty scope
    would graph the whole layer, more than was asked)."""
    kept = [m for m in graphed if m not in dropped]
    return f"cuda_graph_modules=[{','.join(kept)}]" if kept else _no_graphs(chosen_by)


def moe_scopes(c: Any, impl: str, graphed: list[str], chosen_by: str) -> None:
    """transformer_config.py:2245-2282: which MoE parts a per-layer graph may capture."""
    experts = c.arg("num_experts")
    cite = "Megatron's TransformerConfig asserts"
    named = f"cuda_graph_impl {impl}" + ("" if chosen_by == "cuda_graph_impl" else f" (from {chosen_by})")

    def refuse(modules: set[str], why: str, line: int, also: str = "") -> None:
        c.fail(f"{named} graphing {', '.join(m for m in graphed if m in modules)}: {why}; {cite} it "
               f"(transformer_config.py:{line})", f"set {_without(graphed, modules, chosen_by)}{also}")

    if "moe" in graphed and "moe_router" in graphed:
        refuse({"moe_router", "moe_preprocess"}, "the whole MoE layer and its router cannot both be graphs", 2250)
        return
    if "moe_preprocess" in graphed and "moe_router" not in graphed:
        refuse({"moe_preprocess"}, "the MoE preprocessing is graphed only with its router", 2254)
        return
    if not experts or experts <= 1:
        if {"moe", "moe_router", "moe_preprocess"} & set(graphed):
            refuse({"moe", "moe_router", "moe_preprocess"}, "a dense model has no MoE layer", 2259)
        return
    try:
        freq = layer_pattern.parse(c.arg("moe_layer_freq") or 1)
    except ValueError:
        freq = None  # the pattern's own rule says why
    if "mlp" in graphed and (freq == 1 or (isinstance(freq, list) and 0 not in freq)):
        refuse({"mlp"}, "every layer is an MoE layer, and the mlp graph captures dense layers only", 2265)
    padded = c.arg("moe_expert_capacity_factor") is not None and c.arg("moe_pad_expert_input_to_capacity")
    if not padded:
        if "moe" in graphed:
            refuse({"moe"}, "the whole MoE layer is graphed only with drop-and-pad (a capacity factor and "
                   "moe_pad_expert_input_to_capacity)", 2274)
        elif "moe_preprocess" in graphed and c.arg("moe_token_dispatcher_type") == "alltoall" and (
                c.arg("moe_expert_capacity_factor") is not None or c.arg("moe_router_padding_for_fp8")):
            # the local implementation graphs the router with its preprocessing: both go
            dropped = {"moe_router", "moe_preprocess"} if impl == "local" else {"moe_preprocess"}
            refuse(dropped, "the alltoall dispatcher's preprocessing copies to the host with a capacity factor or "
                   "router padding", 2281)


def check(c: Any) -> None:
    impl, chosen_by = graph_impl(c.arg)
    if impl not in PER_LAYER:
        return
    named = f"cuda_graph_impl {impl}" + ("" if chosen_by == "cuda_graph_impl" else f" (from {chosen_by})")
    moe_scopes(c, impl, graphed_modules(c.arg, impl), chosen_by)
    granularity = c.arg("recompute_granularity")
    if granularity == "full":
        c.fail(f"{named} with full recompute: Megatron's TransformerConfig asserts \"full recompute is only "
               "supported with full iteration CUDA graph.\" (transformer_config.py:2286)",
               # the recompute is often what makes the job fit: dropping it is offered in words, for a job whose
               # activations fit without it (this rule cannot know; the memory estimate then says)
               f"set {_no_graphs(chosen_by)}; or, where the activations fit without recompute, drop it (unset "
               "recompute_granularity, recompute_method and recompute_num_layers)")
        return
    if granularity != "selective":
        return
    recomputed = c.arg("recompute_modules") or ["core_attn"]  # TransformerConfig's default (:1571)
    recomputed = [recomputed] if isinstance(recomputed, str) else [str(m) for m in recomputed]
    graphed = graphed_modules(c.arg, impl)
    whole_layer = not graphed  # an empty per-layer scope captures the whole layer

    if impl == "transformer_engine" and "moe" in recomputed and "moe_router" in graphed:
        c.fail(f"{named} graphing moe_router with selective recompute of moe: a recomputed module may not cover a "
               "graph; Megatron's TransformerConfig asserts \"moe recompute is not supported with moe_router CUDA "
               "graph\" (transformer_config.py:2298)",
               f"set {_without(graphed, {'moe_router', 'moe_preprocess'}, chosen_by)}, or take moe out of "
               "recompute_modules")

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


class _Probe:
    """Just enough of the checker for check(): settings read through `arg`, refusals counted."""

    def __init__(self, arg: Any):
        self.arg = arg
        self.refusals: list[str] = []

    def fail(self, message: str, *_: Any, **__: Any) -> None:
        self.refusals.append(message)


def refuses(arg: Any, changes: dict[str, Any]) -> bool:
    """Whether these rules refuse the job with `changes` applied: a hint offers another rule's way out (a
    replacement recompute) only where the graphs take it."""
    probe = _Probe(lambda dest: changes[dest] if dest in changes else arg(dest))
    check(probe)
    return bool(probe.refusals)

