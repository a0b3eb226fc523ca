"""Which decoder layers each pipeline rank holds, as Megatron splits them (no torch).

Megatron's rules at 432d76b2b8bf (megatron/core/transformer/transformer_block.py `get_num_layers_to_build`
and pipeline_parallel_layer_layout.py):

* even split: layers / PP per rank, then / VPP per model chunk;
* `decoder_first_pipeline_num_layers` / `decoder_last_pipeline_num_layers`: those counts on the first / last
  rank, the rest spread evenly over the ranks between. Megatron reads them at PP 1 too: one of them must then be
  num_layers (TransformerConfig refuses any other), and with both set (first + last ≠ num_layers) its one rank
  builds `last` decoder layers, whatever num_layers says;
* `account_for_embedding_in_pipeline_split` / `account_for_loss_in_pipeline_split`: the embedding and the
  loss count as one layer each in the split; the first chunk of rank 0 (last chunk of the last rank) then
  builds one decoder layer fewer;
* `pipeline_model_parallel_layout`: an explicit string such as "Et*3|(tt|)*29,m|L" ('E' embedding,
  't' decoder layer, 'L' loss, 'm' MTP; '|' ends a stage; stage k is chunk k // PP of rank k % PP).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from launcher.pipeline.pipeline_layout import parse_pipeline_layout


@dataclass(frozen=True)
class Stage:
    """One pipeline rank: its decoder layers per model chunk, and whether it holds the embedding / loss."""

    rank: int
    chunk_layers: tuple[int, ...]
    embedding: bool
    loss: bool

    @property
    def layers(self) -> int:
        return sum(self.chunk_layers)


class SplitError(ValueError):
    """The layout cannot be split as asked; the message says why (Megatron asserts the same)."""


def split_layers(num_layers: int, pp: int, vpp: int = 1, first: int | None = None, last: int | None = None,
                 embedding_in_split: bool = False, loss_in_split: bool = False,
                 layout: str | None = None) -> tuple[Stage, ...]:
    """Every pipeline rank's layers; raises SplitError where Megatron would refuse the split."""
    return _split(num_layers, pp, vpp, first, last, embedding_in_split, loss_in_split, layout)


@lru_cache(maxsize=8192)
def _split(num_layers: int, pp: int, vpp: int, first: int | None, last: int | None, embedding_in_split: bool,
           loss_in_split: bool, layout: str | None) -> tuple[Stage, ...]:
    if layout:
        return _from_layout(layout, num_layers, pp)
    if first is not None or last is not None:  # also at PP 1, where Megatron reads them too
        if embedding_in_split or loss_in_split:
            raise SplitError("uneven first/last pipeline stages cannot be combined with "
                             "account_for_embedding/loss_in_pipeline_split")
        for name, value in (("decoder_first_pipeline_num_layers", first), ("decoder_last_pipeline_num_layers", last)):
            if value is not None and value <= 0:
                raise SplitError(f"{name} must be larger than 0, got {value}")
        rest, ranks = num_layers - (first or 0) - (last or 0), pp - (first is not None) - (last is not None)
        if bool(rest) != bool(ranks):  # TransformerConfig's check; at PP 1 with both set, ranks is -1
            raise SplitError(f"{rest} middle layers remain for {ranks} middle pipeline stages (num_layers "
                             f"{num_layers}, PP {pp}, first {first}, last {last})")
        if ranks > 0 and (rest < 0 or rest % ranks):
            raise SplitError(f"{rest} layers left for the {ranks} middle pipeline stages do not divide evenly")
        middle = rest // ranks if ranks > 0 else 0
        per_rank = [middle] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:  # at PP 1 the one rank is first and last: get_num_layers_to_build gives it `last`
            per_rank[-1] = last
    else:
        units = num_layers + embedding_in_split + loss_in_split
        if units % pp:
            extra = " (embedding and loss counted as layers)" if embedding_in_split or loss_in_split else ""
            raise SplitError(f"{units} layers{extra} are not divisible by PP {pp}")
        per_rank = [units // pp] * pp
    stages = []
    for rank, count in enumerate(per_rank):
        if vpp > 1 and count % vpp:
            raise SplitError(f"{count} layers on pipeline rank {rank} are not divisible by VPP {vpp}")
        chunks = [count // vpp] * vpp
        if embedding_in_split and rank == 0:
            chunks[0] -= 1
        if loss_in_split and rank == pp - 1:
            chunks[-1] -= 1
        if min(chunks) < 0:
            raise SplitError("a pipeline chunk would hold fewer than zero decoder layers")
        stages.append(Stage(rank, tuple(chunks), rank == 0, rank == pp - 1))
    return tuple(stages)


def _from_layout(layout: str, num_layers: int, pp: int) -> tuple[Stage, ...]:
    try:  # the pipeline's one parser, bounded by the model's size
        stages = parse_pipeline_layout(layout, num_layers)
    except ValueError as exc:
        raise SplitError(f"pipeline layout {layout[:80]!r} {exc}") from None
    if len(stages) % pp:
        raise SplitError(f"pipeline layout has {len(stages)} stages, not a multiple of PP {pp}")
    vpp = len(stages) // pp
    built = sum(s.count("t") for s in stages)
    if built != num_layers:
        raise SplitError(f"pipeline layout builds {built} decoder layers, the model has {num_layers}")
    out = []
    for rank in range(pp):
        mine = [stages[chunk * pp + rank] for chunk in range(vpp)]
        out.append(Stage(rank, tuple(s.count("t") for s in mine), any("E" in s for s in mine),
                         any("L" in s for s in mine)))
    return tuple(out)
