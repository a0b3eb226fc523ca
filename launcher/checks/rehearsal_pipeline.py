"""A job's pipeline_model_parallel_layout shrunk to the rehearsal's pipeline (fewer stages, fewer layers), keeping
its shape: where the embedding and the loss sit (alone on a stage or with layers), where MTP sits (with the loss,
on a stage of its own, on another pipeline rank), empty stages, stages holding fewer layers than others, and the
virtual stages (Megatron derives them from the layout's length). What it cannot keep at the smaller size is said.

A stage of a layout Megatron accepts reads E? t* m* L? (validate_layer_layout at 432d76b2b8bf: the embedding
first, the loss last, decoder layers before MTP layers); any other layout is left to Megatron's own checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.pipeline.pipeline_layout import unroll_pipeline_layout

_STAGE = re.compile(r"(E?)(t*)(m*L?)")
MOST_PER_STAGE = 3  # decoder layers on a stage of the rehearsal's layout, where the model's number is free


@dataclass(frozen=True)
class Stage:
    head: str  # "E" on the first stage
    layers: int  # decoder layers
    tail: str  # MTP layers and the loss

    def text(self) -> str:
        return self.head + "t" * self.layers + self.tail

    @property
    def empty(self) -> bool:
        return not (self.head or self.layers or self.tail)


@dataclass(frozen=True)
class ShrunkLayout:
    """The rehearsal's layout string (None: none could be made), its decoder layers, and what was not kept."""

    text: str | None
    layers: int
    notes: tuple[str, ...]


def parse_stages(text: str) -> list[Stage] | None:
    """The layout's stages in layer order, or None where one is not of the shape Megatron accepts."""
    stages = []
    for raw in unroll_pipeline_layout(text):
        match = _STAGE.fullmatch(raw)
        if match is None:
            return None
        stages.append(Stage(match.group(1), len(match.group(2)), match.group(3)))
    return stages


def shape(stages: list[Stage], pp: int) -> set[str]:
    """What a layout's stages say beyond their sizes, as the words a note uses."""
    found = set()
    if stages[0].head and not stages[0].layers and not stages[0].tail:
        found.add("the embedding on a stage of its own")
    if stages[-1].tail == "L" and not stages[-1].layers:
        found.add("the loss on a stage of its own")
    for index, stage in enumerate(stages):
        if "m" in stage.tail:
            if not stage.layers and "L" not in stage.tail:
                found.add("MTP on a stage of its own")
            if index % pp != pp - 1:  # Megatron's mtp_standalone: MTP on another pipeline rank than the loss's
                found.add("MTP on another pipeline rank than the loss")
    if any(stage.empty for stage in stages):
        found.add("empty stages")
    if len({stage.layers for stage in stages if stage.layers}) > 1:
        found.add("stages with fewer decoder layers than others")
    return found


def megatron_accepts(stages: list[Stage], pp: int) -> bool:
    """validate_layer_layout's rules of placement: the length a multiple of PP, MTP in one stage of the last
    virtual stage of its rank (and so after every decoder layer: the tail of a stage follows its layers)."""
    if not stages or len(stages) % pp:
        return False
    with_mtp = [index for index, stage in enumerate(stages) if "m" in stage.tail]
    if len(with_mtp) > 1:
        return False
    if with_mtp and (with_mtp[0] < len(stages) - pp or any(s.layers for s in stages[with_mtp[0] + 1:])):
        return False
    return stages[0].head == "E" and stages[-1].tail.endswith("L")


def _merged(stages: list[Stage]) -> Stage:
    return Stage("".join(s.head for s in stages), sum(s.layers for s in stages), "".join(s.tail for s in stages))


def _picked(middle: list[Stage], count: int) -> list[Stage]:
    """`count` of the middle stages, evenly spaced, the first and the last among them (they carry the embedding
    and the MTP layers or the loss where no stage of their own does)."""
    if count == 1:
        return [_merged(middle)]
    picks = sorted({round(i * (len(middle) - 1) / (count - 1)) for i in range(count)})
    # a size of stage the even picks missed (an empty stage, a smaller one) takes the place of a pick whose size
    # another pick has, the nearest
    for index, stage in enumerate(middle):
        sizes = [middle[p].layers for p in picks]
        if stage.layers in sizes:
            continue
        shared = [p for p in picks[1:-1] if sizes.count(middle[p].layers) > 1]
        if shared:
            picks[picks.index(min(shared, key=lambda p: abs(p - index)))] = index
            picks.sort()
    return [middle[i] for i in picks]


def _sized(stages: list[Stage], layers: int | None) -> list[Stage] | None:
    """Decoder layers per stage: where the model's number is free, 1 on the stages with the job's fewest, 2 on the
    next, 3 on any with more (their order kept, at the fewest layers); else `layers` shared in the job's proportions, at
    least one on each stage that had some. None where `layers` is fewer than those stages."""
    counts = [stage.layers for stage in stages]
    holding = [i for i, count in enumerate(counts) if count]
    if layers is None:
        ranked = sorted({counts[i] for i in holding})
        sizes = [min(ranked.index(count) + 1, MOST_PER_STAGE) if count else 0 for count in counts]
    else:
        if layers < len(holding):
            return None
        total = sum(counts)
        sizes = [max(1, layers * count // total) if count else 0 for count in counts]
        # the rest by largest remainder, then from the largest stages where the floor of one overshot
        order = sorted(holding, key=lambda i: (-(layers * counts[i] % total), i))
        step = 0
        while sum(sizes) != layers:
            i = order[step % len(order)]
            if sum(sizes) < layers:
                sizes[i] += 1
            elif sizes[i] > 1:
                sizes[i] -= 1
            step += 1
    return [Stage(stage.head, size, stage.tail) for stage, size in zip(stages, sizes)]


def shrink_pipeline_layout(text: str, job_pp: int, pp: int, vpp: int | None,
                           layers: int | None = None) -> ShrunkLayout:
    """The job's layout at PP `pp` with `vpp` virtual stages (pp · vpp stages); `layers`: the decoder layers the
    tiny model must have (a per-layer pattern names them), else as few as keep the shape."""
    stages = parse_stages(text)
    wanted = pp * (vpp or 1)
    if not stages or not any(stage.layers for stage in stages):
        return ShrunkLayout(None, layers or 0, (f"pipeline_model_parallel_layout {text}: not of the shape E? t* m* "
                                                "L? per stage; the tiny model's stages are even instead",))
    first = next(i for i, stage in enumerate(stages) if stage.layers)
    last = max(i for i, stage in enumerate(stages) if stage.layers)
    head, middle, tail = stages[:first], stages[first:last + 1], stages[last + 1:]
    lost: list[str] = []
    # the stages around the layers keep their own where the smaller pipeline has room, else join the next one
    if head and len(head) + len(tail) + 1 > wanted:
        head, lost = [_merged(head)], lost + ["separate stages before the first decoder layer"] * (len(head) > 1)
    if tail and (len(tail) + len(head) + 1 > wanted or len(tail) > pp):
        tail, lost = [_merged(tail)], lost + ["separate stages after the last decoder layer"] * (len(tail) > 1)
    if head and len(head) + len(tail) + 1 > wanted:
        middle, head = [_merged(head + middle[:1])] + middle[1:], []
    if tail and len(head) + len(tail) + 1 > wanted:
        middle, tail = middle[:-1] + [_merged(middle[-1:] + tail)], []
    picked = _sized(head + _picked(middle, wanted - len(head) - len(tail)) + tail, layers)
    if picked is None or len(picked) != wanted or not megatron_accepts(picked, pp):
        return ShrunkLayout(None, layers or 0, (f"pipeline_model_parallel_layout {text}: no layout of {wanted} "
                                                f"stages at PP {pp} keeps it here; the tiny model's stages are "
                                                "even instead",))
    lost += sorted(shape(stages, job_pp) - shape(picked, pp))
    shrunk = "|".join(stage.text() for stage in picked)
    note = (f"pipeline_model_parallel_layout {text} ({len(stages)} stages at PP {job_pp}): rehearsed as {shrunk} "
            f"({wanted} stages at PP {pp})")
    if lost:
        note += "; not kept: " + ", ".join(lost)
    return ShrunkLayout(shrunk, sum(stage.layers for stage in picked), (note,))
