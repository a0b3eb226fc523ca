"""Megatron's pipeline_model_parallel_layout string and the virtual-pipeline size: one parser with its bounds, one
derivation, read by the checker (pipeline/rules.py), the estimator (estimate/stages.py, formulas) and the search.

"Et*3|(tt|)*29,m|L": 'E' embedding, 't' decoder layer, 'm' MTP layer, 'L' loss; '|' ends a stage; (…)*n and x*n
repeat (PipelineParallelLayerLayout.parse_str_to_list at 432d76b2b8bf).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from launcher.errors import Problem, shown

LAYER_LETTERS = {"E": "embedding", "t": "transformer layer", "m": "MTP layer", "L": "loss"}
MAX_LAYOUT_CHARACTERS = 1_000_000  # a layout spells out each layer once; real ones are a few hundred characters
_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")
_ONE = re.compile(r"(.)\*(\d+)")


def layout_limit(num_layers: int, mtp_layers: int = 0) -> int:
    """The longest unrolled layout a model of this size can mean: one character per layer and stage, with room
    for separators; a layout far longer than the model is a mistake, not a plan."""
    return min(MAX_LAYOUT_CHARACTERS, 16 * (max(num_layers, 0) + max(mtp_layers, 0) + 2) + 1024)


def unroll_pipeline_layout(text: str, limit: int = MAX_LAYOUT_CHARACTERS) -> list[str]:
    """Drop commas, unroll (…)*n then x*n, split on |: "E|(t|)*3,L" → ["E", "t", "t", "t", "L"]. ValueError,
    before anything is built, when the unrolled text would be longer than `limit` ("t*3000000000" is 13
    characters)."""
    text = text.replace(",", "")
    for pattern in (_GROUP, _ONE):
        def times(m: re.Match) -> int:
            return int(m.group(2)) if len(m.group(2)) <= 12 else limit + 1

        length = len(text) + sum(len(m.group(1)) * times(m) - len(m.group(0)) for m in pattern.finditer(text))
        if length > limit:
            raise ValueError(f"unrolls to more than {limit:,} characters")
        text = pattern.sub(lambda m: m.group(1) * times(m), text)
    return text.split("|")


def parse_pipeline_layout(text: str, num_layers: int, mtp_layers: int = 0) -> list[str]:
    """The stages of a layout for a model of `num_layers` decoder layers, bounded by its size (layout_limit);
    ValueError for a layout too long for the model or with letters Megatron does not know."""
    stages = unroll_pipeline_layout(text, layout_limit(num_layers, mtp_layers))
    bad = set("".join(stages)) - set(LAYER_LETTERS)
    if bad:
        raise ValueError(f"has unknown layer letters {''.join(sorted(bad))!r} (known: E, t, L, m)")
    return stages


def layout_string_problem(arg: Callable[[str], Any]) -> Problem | None:
    """The problem with a layout string too long for the model (said before anything unrolls it) or holding letters
    Megatron does not know, or None: every reader of a layout (checker, plan, estimate) asks this first."""
    text = arg("pipeline_model_parallel_layout")
    if text is None:
        return None
    layers = int(arg("num_layers"))
    try:
        parse_pipeline_layout(str(text), layers, int(arg("mtp_num_layers") or 0))
    except ValueError as exc:
        return Problem(f"pipeline_model_parallel_layout {shown(text)} {exc}, for num_layers {layers}",
                       "write one E, t, m or L per layer; (…)*n and x*n repeat")
    return None


def counted_layers(arg: Callable[[str], Any]) -> int:
    """Decoder layers plus the embedding and loss where the split counts them as layers."""
    return int(arg("num_layers")) + int(bool(arg("account_for_embedding_in_pipeline_split"))) + int(
        bool(arg("account_for_loss_in_pipeline_split")))


def virtual_pipeline_size(arg: Callable[[str], Any]) -> int:
    """Model chunks per pipeline rank as validate_args derives them (arguments.py:920-955); 1 means not
    interleaved. `arg(dest)` reads a setting as Megatron sees it. Whether the settings are valid is the
    checker's to say; this only derives."""
    pp = max(int(arg("pipeline_model_parallel_size")), 1)
    layout = arg("pipeline_model_parallel_layout")
    if layout:
        return max(1, len(parse_pipeline_layout(str(layout), int(arg("num_layers")),
                                                int(arg("mtp_num_layers") or 0))) // pp)
    if arg("num_virtual_stages_per_pipeline_rank"):
        return int(arg("num_virtual_stages_per_pipeline_rank"))
    per_vstage = arg("num_layers_per_virtual_pipeline_stage")
    if per_vstage:
        return max(1, counted_layers(arg) // pp // int(per_vstage))
    return 1
