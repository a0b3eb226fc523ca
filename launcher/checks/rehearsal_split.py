"""A job's uneven pipeline split shrunk to the rehearsal's pipeline, with its settings kept: the first and last
stages hold fewer, as many or more decoder layers than the stages between (decoder_first/last_pipeline_num_layers),
or one fewer, down to none, where the embedding and the loss count as layers (account_for_embedding/loss_in_
pipeline_split), as the job's do. What the smaller pipeline cannot keep is said.

Megatron's rules at 432d76b2b8bf (TransformerConfig.__post_init__, validate_args, get_num_layers_to_build):
* decoder_first/last_pipeline_num_layers: each above 0 and divisible by the virtual pipeline size; the layers
  left divide over the pipeline ranks between (none left where no rank is between), and each of those ranks'
  share by the virtual pipeline size; the virtual stages named by num_virtual_stages_per_pipeline_rank only.
* account_for_embedding/loss_in_pipeline_split: num_layers plus one for each divisible by PP, each rank's share by
  the virtual pipeline size; the first virtual stage builds one decoder layer fewer for the embedding, the last one
  fewer for the loss.
* the two kinds together are refused: kept together here, so that Megatron refuses the rehearsal too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launcher.estimate.stages import SplitError, Stage, split_layers
from launcher.pipeline.pipeline_layout import virtual_pipeline_size

UNEVEN = ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers")
ACCOUNTED = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
SPLIT_SETTINGS = UNEVEN + ACCOUNTED


@dataclass(frozen=True)
class ShrunkSplit:
    """The rehearsal's num_layers and split settings (the job's way of naming virtual stages kept), and notes."""

    settings: dict[str, Any]
    notes: tuple[str, ...]


def has_uneven_split(megatron: Mapping[str, Any]) -> bool:
    return any(megatron.get(dest) is not None for dest in UNEVEN) or any(megatron.get(dest) for dest in ACCOUNTED)


def wants_middle_stage(megatron: Mapping[str, Any], vpp: int | None) -> bool:
    """Whether the job's first and last stages both differ from the stages between them, which only a pipeline with
    a stage between keeps: a pipeline rank between for uneven stages, a virtual stage between for the accounted
    embedding and loss."""
    if all(megatron.get(dest) is not None for dest in UNEVEN):
        return True
    return all(megatron.get(dest) for dest in ACCOUNTED) and not vpp


def shrink_split(megatron: Mapping[str, Any], pp: int, vpp: int | None,
                 layers: int | None = None) -> ShrunkSplit | None:
    """The job's split at PP `pp` with `vpp` virtual stages; `layers`: the decoder layers the tiny model must have
    (a per-layer pattern names them), else as few as keep the split. None where the job has no uneven split or the
    rehearsal no pipeline (PP 1: Megatron builds every layer on the one stage)."""
    if pp < 2 or not has_uneven_split(megatron):
        return None
    first, last = (megatron.get(dest) for dest in UNEVEN)
    embedding, loss = (bool(megatron.get(dest)) for dest in ACCOUNTED)
    per_vstage_named = megatron.get("num_layers_per_virtual_pipeline_stage") is not None
    v = vpp or 1
    lost: list[str] = []
    if layers is not None:
        kept = _the_jobs_own(megatron, layers, pp, v)
        if kept is None:
            return None
        sizes, per_vstage = kept, None
    elif first is not None or last is not None:
        sizes = _uneven(megatron, pp, v, lost)
        per_vstage = 1
    else:
        sizes, per_vstage = _accounted(megatron, pp, v, lost)
    settings: dict[str, Any] = {"num_layers": sizes["num_layers"]}
    settings.update({dest: sizes[dest] for dest in UNEVEN if megatron.get(dest) is not None})
    settings.update({dest: True for dest in ACCOUNTED if megatron.get(dest)})
    if vpp and per_vstage_named:
        # the job's name for the virtual stages (refused next to uneven stages: kept, so refused here too)
        settings["num_layers_per_virtual_pipeline_stage"] = per_vstage or (
            (sizes["num_layers"] + embedding + loss) // (pp * v))
    elif vpp:
        settings["num_virtual_stages_per_pipeline_rank"] = vpp
    note = (f"{_named(megatron)} ({_described(megatron, _job_pp(megatron), _job_vpp(megatron))}): rehearsed as "
            f"{_described(settings, pp, vpp)}")
    if lost:
        note += "; not kept: " + ", ".join(lost)
    return ShrunkSplit(settings, (note,))


def _job_pp(megatron: Mapping[str, Any]) -> int:
    return int(megatron.get("pipeline_model_parallel_size") or 1)


def _job_vpp(megatron: Mapping[str, Any]) -> int | None:
    try:
        vpp = virtual_pipeline_size(megatron.get) if megatron.get("num_layers") else 1
    except (ValueError, ZeroDivisionError):
        vpp = 1
    return vpp if vpp > 1 else None


def _uneven(megatron: Mapping[str, Any], pp: int, v: int, lost: list[str]) -> dict[str, Any]:
    """First, last and middle stages at 1, 2 or 3 decoder layers per virtual stage, in the job's order."""
    first, last = (megatron.get(dest) for dest in UNEVEN)
    ends = (first is not None) + (last is not None)
    job_middle_ranks = _job_pp(megatron) - ends
    job_middle = ((int(megatron.get("num_layers") or 0) - (first or 0) - (last or 0)) / job_middle_ranks
                  if job_middle_ranks > 0 else None)
    middle_ranks = pp - ends
    if job_middle is not None and middle_ranks <= 0:
        lost.append(f"the {job_middle_ranks} pipeline stages between the first and the last ({job_middle:g} layers "
                    f"each): PP {pp} has none")
    values = [value for value in (first, last, job_middle if middle_ranks > 0 else None) if value is not None]
    order = sorted({value for value in values if value > 0})

    def units(value: float | None) -> int | None:
        if value is None:
            return None
        if value <= 0:  # Megatron refuses a stage of no layers here: kept, so refused here too
            return int(value)
        return (order.index(value) + 1) * v

    middle = units(job_middle) if middle_ranks > 0 else 0
    out: dict[str, Any] = {UNEVEN[0]: units(first), UNEVEN[1]: units(last)}
    out["num_layers"] = (out[UNEVEN[0]] or 0) + (out[UNEVEN[1]] or 0) + max(middle_ranks, 0) * (middle or 0)
    return out


def _accounted(megatron: Mapping[str, Any], pp: int, v: int, lost: list[str]) -> tuple[dict[str, Any], int]:
    """Layers per virtual stage, the embedding and the loss counted: 1 where the job's stage with the embedding
    (the loss) holds no decoder layer, else 2 (one fewer there, not none)."""
    embedding, loss = (bool(megatron.get(dest)) for dest in ACCOUNTED)
    counted = int(megatron.get("num_layers") or 0) + embedding + loss
    job_stages = _job_pp(megatron) * (_job_vpp(megatron) or 1)
    per_vstage = 1 if counted == job_stages else 2
    if embedding and loss and job_stages > 2 and pp * v == 2:
        lost.append(f"the {job_stages - 2} stages between the first and the last ({counted // job_stages} layers "
                    f"each): {pp} stages at PP {pp} have none")
    if per_vstage == 1 and pp * v - embedding - loss < 1:
        per_vstage = 2
        lost.append(f"the embedding and the loss each on a stage without decoder layers: {pp * v} stages at PP {pp} "
                    "leave none between them")
    return {"num_layers": pp * v * per_vstage - embedding - loss}, per_vstage


def _the_jobs_own(megatron: Mapping[str, Any], layers: int, pp: int, v: int) -> dict[str, Any] | None:
    """The job's own first and last stage sizes where the tiny model's layers are the job's (a per-layer pattern):
    where Megatron splits them so at the rehearsal's pipeline too."""
    first, last = (megatron.get(dest) for dest in UNEVEN)
    try:
        _split_of({**megatron, "num_layers": layers}, pp, v)
    except SplitError:
        return None
    return {"num_layers": layers, UNEVEN[0]: first, UNEVEN[1]: last}


def _named(megatron: Mapping[str, Any]) -> str:
    return ", ".join([f"{dest} {megatron[dest]}" for dest in UNEVEN if megatron.get(dest) is not None]
                     + [dest for dest in ACCOUNTED if megatron.get(dest)])


def _described(settings: Mapping[str, Any], pp: int, vpp: int | None) -> str:
    """Decoder layers per (virtual) stage in layer order, runs of one size shortened: '3|6 ×14|3 at PP 16'."""
    at = f"at PP {pp}" + (f" (VPP {vpp})" if vpp else "")
    try:
        ranks = _split_of(settings, pp, vpp or 1)
    except SplitError as exc:
        return f"{settings.get('num_layers')} layers {at}, which Megatron refuses: {exc}"
    sizes = [ranks[stage % pp].chunk_layers[stage // pp] for stage in range(pp * (vpp or 1))]
    runs: list[list[int]] = []
    for size in sizes:
        if runs and runs[-1][0] == size:
            runs[-1][1] += 1
        else:
            runs.append([size, 1])
    text = "|".join(f"{size}" + (f" ×{count}" if count > 1 else "") for size, count in runs)
    return f"{text} decoder layers per stage {at}"


def _split_of(settings: Mapping[str, Any], pp: int, v: int) -> tuple[Stage, ...]:
    """Each pipeline rank's decoder layers per virtual stage as Megatron splits them (SplitError where it refuses)."""
    return split_layers(int(settings["num_layers"]), pp, v, first=settings.get(UNEVEN[0]),
                        last=settings.get(UNEVEN[1]), embedding_in_split=bool(settings.get(ACCOUNTED[0])),
                        loss_in_split=bool(settings.get(ACCOUNTED[1])))
