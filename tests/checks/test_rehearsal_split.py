"""A job's uneven pipeline split (decoder_first/last_pipeline_num_layers, account_for_embedding/loss_in_pipeline_
split) shrunk to the layout rehearsal's pipeline: the first and last stages keep holding fewer, as many, more or no
decoder layers against the stages between, with the job's settings, at a split Megatron accepts; a split Megatron
refuses stays refused; and the launcher refuses before the rehearsal every split Megatron refuses."""

from __future__ import annotations

import itertools
import os
import tempfile

import pytest

from launcher.checks.rehearsal_ranks import RankLayout, load_layout, rank_settings, shrunk_layout
from launcher.checks.rehearsal_split import SPLIT_SETTINGS, UNEVEN, shrink_split
from launcher.errors import UserError
from launcher.estimate.stages import split_layers
from launcher.megatron.pin import Kernels
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve
from tests.checks.test_rehearsal import megatron_checkout, needs_checkout
from tests.checks.test_rehearsal_ranks import job

FIRST, LAST = UNEVEN
EMBEDDING, LOSS = "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"
# Splits Megatron accepts at the pin (345M's 24 layers unless said): (settings, PP)
ACCEPTED = [
    ({FIRST: 3}, 4),  # first fewer than the middle (7 each)
    ({FIRST: 9}, 4),  # first more (5 each)
    ({LAST: 3}, 4),
    ({FIRST: 4, LAST: 6}, 4),  # first < last < middle (7)
    ({FIRST: 8, LAST: 8}, 4),  # both more than the middle (4)
    ({FIRST: 9, LAST: 6}, 3),  # first as many as the middle, last fewer
    ({FIRST: 10, LAST: 14}, 2),  # no middle stage
    ({FIRST: 4, LAST: 4, "num_virtual_stages_per_pipeline_rank": 2}, 4),  # uneven and interleaved
    ({EMBEDDING: True, "num_layers": 23}, 4),  # 5|6|6|6
    ({LOSS: True, "num_layers": 23}, 2),  # 12|11
    ({EMBEDDING: True, LOSS: True, "num_layers": 22}, 4),  # 5|6|6|5
    ({EMBEDDING: True, LOSS: True, "num_layers": 6}, 8),  # 0|1 ×6|0: the embedding and the loss alone
    ({EMBEDDING: True, LOSS: True, "num_layers": 22, "num_layers_per_virtual_pipeline_stage": 3}, 4),
    ({EMBEDDING: True, "num_layers": 23, "num_virtual_stages_per_pipeline_rank": 2}, 4),
    ({EMBEDDING: True, "num_layers": 7, "num_layers_per_virtual_pipeline_stage": 1}, 4),  # the embedding alone
]
# The rehearsal's pipelines (shrunk_layout: PP min(PP, 2), 3 where first and last both differ, or kept)
SHRUNK = [(2, None), (3, None), (4, None), (2, 2), (3, 2), (4, 2)]


def _id(case: tuple[dict, int]) -> str:
    settings, pp = case
    return f"pp{pp}-" + "-".join(f"{k.split('_')[0] if k in UNEVEN else k.split('_')[2]}{v}"
                                   for k, v in settings.items() if k in SPLIT_SETTINGS or k.endswith("stage")
                                   or k.endswith("rank"))


def resolved(settings: dict, pp: int):
    """345M with these settings at PP `pp` on `pp` GPUs, as the launcher checks it (UserError where it refuses)."""
    overrides = [f"pipeline_model_parallel_size={pp}", "global_batch_size=48", "micro_batch_size=1"]
    overrides += [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in settings.items()]
    return resolve(load_preset("345m", overrides), 1, pp, kernels=Kernels(False, False, "preset"))


def vpp_of(settings: dict, pp: int) -> int | None:
    if settings.get("num_virtual_stages_per_pipeline_rank"):
        return settings["num_virtual_stages_per_pipeline_rank"]
    if settings.get("num_layers_per_virtual_pipeline_stage"):
        counted = settings.get("num_layers", 24) + bool(settings.get(EMBEDDING)) + bool(settings.get(LOSS))
        return counted // pp // settings["num_layers_per_virtual_pipeline_stage"]
    return None


def relations(settings: dict, pp: int, vpp: int | None) -> dict[str, object]:
    """How the stages the split sets apart (the first, the last) compare with each other and with the others:
    pipeline ranks' layers for uneven stages (each rank's virtual stages alike), virtual stages in layer order where
    the embedding and the loss count."""
    ranks = split_layers(settings.get("num_layers", 24), pp, vpp or 1, settings.get(FIRST), settings.get(LAST),
                         bool(settings.get(EMBEDDING)), bool(settings.get(LOSS)))
    uneven = settings.get(FIRST) is not None or settings.get(LAST) is not None
    sizes = [rank.layers for rank in ranks] if uneven else [
        ranks[k % pp].chunk_layers[k // pp] for k in range(pp * (vpp or 1))]
    apart = {"first": settings.get(FIRST) is not None if uneven else bool(settings.get(EMBEDDING)),
             "last": settings.get(LAST) is not None if uneven else bool(settings.get(LOSS))}
    roles = {"first": sizes[0] if apart["first"] else None, "last": sizes[-1] if apart["last"] else None}
    others = set(sizes[1 if apart["first"] else 0:len(sizes) - 1 if apart["last"] else len(sizes)])
    assert len(others) <= 1  # Megatron's splits: one size for the stages not set apart
    roles["others"] = others.pop() if others else None
    seen: dict[str, object] = {f"{role} empty": size == 0 for role, size in roles.items() if size is not None}
    for a, b in (("first", "others"), ("last", "others"), ("first", "last")):
        if roles[a] is not None and roles[b] is not None:
            seen[f"{a} against {b}"] = (roles[a] > roles[b]) - (roles[a] < roles[b])
    return seen


@pytest.mark.parametrize("case", ACCEPTED, ids=[_id(c) for c in ACCEPTED])
def test_a_split_megatron_accepts_keeps_its_settings_and_stage_sizes_at_every_rehearsal_pipeline(case):
    settings, job_pp = case
    resolved(settings, job_pp)  # the job's split is one the launcher (and Megatron) accepts
    job_vpp = vpp_of(settings, job_pp)
    megatron = {**job("345m").megatron, "pipeline_model_parallel_size": job_pp, **settings}
    for pp, vpp in SHRUNK:
        if pp > job_pp or bool(vpp) != bool(job_vpp):
            continue
        shrunk = shrink_split(megatron, pp, vpp)
        assert shrunk is not None
        out = shrunk.settings
        # the job's settings, none more, none fewer; the virtual stages named as the job names them
        assert {k for k in SPLIT_SETTINGS if out.get(k) not in (None, False)} == \
            {k for k in SPLIT_SETTINGS if settings.get(k) not in (None, False)}
        assert ("num_layers_per_virtual_pipeline_stage" in out) == ("num_layers_per_virtual_pipeline_stage" in settings)
        assert out["num_layers"] <= 3 * pp * (vpp or 1)
        accepted = resolved(out, pp)  # the launcher's rules, Megatron's at the pin (test below)
        assert accepted.layout.vpp == vpp
        want, got = relations(settings, job_pp, job_vpp), relations(out, pp, vpp)
        changed = {k for k in want if got.get(k) != want[k]}
        # only a pipeline without a stage between the first and the last loses a relation, and says which
        between = pp >= 3 or (vpp is not None and settings.get(FIRST) is None and settings.get(LAST) is None)
        assert not changed if between else (not changed or "; not kept: the " in shrunk.notes[0]), shrunk.notes
        assert not changed or "not kept" in shrunk.notes[0]
        assert "not kept" not in shrunk.notes[0] or changed


def test_the_note_gives_the_jobs_stage_sizes_and_the_rehearsals():
    megatron = {**job("345m").megatron, "pipeline_model_parallel_size": 4, FIRST: 4, LAST: 6}
    assert shrink_split(megatron, 3, None).notes == (
        "decoder_first_pipeline_num_layers 4, decoder_last_pipeline_num_layers 6 (4|7 ×2|6 decoder layers per stage "
        "at PP 4): rehearsed as 1|3|2 decoder layers per stage at PP 3",)
    assert shrink_split(megatron, 2, None).notes[0].endswith(
        "rehearsed as 1|2 decoder layers per stage at PP 2; not kept: the 2 pipeline stages between the first and "
        "the last (7 layers each): PP 2 has none")
    alone = {**job("345m").megatron, "pipeline_model_parallel_size": 8, "num_layers": 6, EMBEDDING: True, LOSS: True}
    assert shrink_split(alone, 2, 2).notes == (
        "account_for_embedding_in_pipeline_split, account_for_loss_in_pipeline_split (0|1 ×6|0 decoder layers per "
        "stage at PP 8): rehearsed as 0|1 ×2|0 decoder layers per stage at PP 2 (VPP 2)",)


# Splits Megatron refuses at the pin (at PP 4), and the rehearsal's pipelines that keep what it refuses
REFUSED = [
    ({FIRST: 3, LOSS: True}, SHRUNK[:3]),  # TransformerConfig: uneven stages with the loss counted
    ({FIRST: 4, LAST: 4, "num_layers_per_virtual_pipeline_stage": 2}, [(4, 2)]),  # validate_args: name them by count
    ({FIRST: 0}, SHRUNK[:3]),  # TransformerConfig: a first stage of no layers
]


@pytest.mark.parametrize("refused, pipelines", REFUSED,
                         ids=["uneven-and-accounted", "uneven-and-layers-per-virtual-stage", "first-of-no-layers"])
def test_a_split_megatron_refuses_stays_refused(refused, pipelines):
    megatron = {**job("345m").megatron, "pipeline_model_parallel_size": 4, **refused}
    with pytest.raises(UserError):
        resolved(refused, 4)
    for pp, vpp in pipelines:
        shrunk = shrink_split(megatron, pp, vpp)
        assert shrunk is not None
        with pytest.raises(UserError, match="cannot be combined|must be larger than 0"):
            resolved(shrunk.settings, pp)


def test_a_split_whose_first_and_last_both_differ_gets_a_stage_between_them():
    """175B (PP 16) with fewer layers on the first stage and more on the last: PP 3 where PP 2 would have no stage
    between them to compare with."""
    resolved_job = job("175b", "decoder_first_pipeline_num_layers=5", "decoder_last_pipeline_num_layers=7")
    layout, _ = shrunk_layout(resolved_job.layout, resolved_job.megatron)
    assert (layout.tp, layout.pp, layout.dp, layout.world) == (2, 3, 2, 12)
    settings, notes = rank_settings(resolved_job.megatron, layout, load_layout(layout, None))
    assert (settings["num_layers"], settings[FIRST], settings[LAST]) == (6, 1, 3)
    assert any(note.startswith("decoder_first_pipeline_num_layers 5, decoder_last_pipeline_num_layers 7 (5|6 ×14|7 "
                               "decoder layers per stage at PP 16): rehearsed as 1|2|3") for note in notes)
    plain, _ = shrunk_layout(job("175b").layout, job("175b").megatron)
    assert plain.pp == 2  # an even split stays at PP 2


def test_the_checkpoint_loads_at_pp_1_without_the_split():
    from pathlib import Path

    from launcher.checks.rehearsal_ranks import _load_settings

    megatron = {**job("345m").megatron, "pipeline_model_parallel_size": 2, "num_layers": 23, LOSS: True,
                "num_query_groups": 1, "group_query_attention": True}
    layout = RankLayout(pp=2)
    load = load_layout(layout, 1)
    settings, _ = rank_settings(megatron, layout, load)
    assert settings[LOSS] is True and settings["num_layers"] == 3
    assert load.pp == 1 and LOSS not in _load_settings(settings, megatron, layout, load, Path("ckpt"), [])
    same_pp = _load_settings(settings, megatron, layout, RankLayout(pp=2, tp=2), Path("ckpt"), [])
    assert same_pp[LOSS] is True


# -- Megatron's own verdict at the pin ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pinned_megatron():
    from launcher.checks.megatron_python import find_megatron_python
    from launcher.checks.megatron_verdict import UpstreamChecker

    checkout = megatron_checkout()
    if checkout is None or find_megatron_python() is None:
        pytest.skip("needs a Megatron-LM checkout at the pin (MEGATRON_LM_PATH) and torch")
    with UpstreamChecker(megatron_path=checkout) as checker:
        yield checker


def megatron_verdicts(checker, cases: list[tuple[dict, int]]) -> list:
    """Megatron's verdict on 345M with each case's settings at its PP, on PP GPUs, as resolved() puts them."""
    from upstream_support import megatron_request

    requests = []
    for settings, pp in cases:
        overrides = [f"pipeline_model_parallel_size={pp}", "global_batch_size=48", "micro_batch_size=1"]
        overrides += [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in settings.items()]
        requests.append(megatron_request(load_preset("345m", overrides), pp, False, False))
    return checker.check_many(requests)


@pytest.mark.megatron
def test_megatron_accepts_every_shrunk_split_and_refuses_the_refused(pinned_megatron):
    cases = []
    for settings, job_pp in ACCEPTED:
        cases.append((settings, job_pp))
        megatron = {**job("345m").megatron, "pipeline_model_parallel_size": job_pp, **settings}
        cases += [(shrink_split(megatron, pp, vpp).settings, pp) for pp, vpp in SHRUNK
                  if pp <= job_pp and bool(vpp) == bool(vpp_of(settings, job_pp))]
    refused = []
    for settings, pipelines in REFUSED:
        megatron = {**job("345m").megatron, "pipeline_model_parallel_size": 4, **settings}
        refused += [(shrink_split(megatron, pp, vpp).settings, pp) for pp, vpp in pipelines]
    verdicts = megatron_verdicts(pinned_megatron, cases + refused)
    assert [(case, v.render()) for case, v in zip(cases, verdicts) if not v.ok] == []
    assert [case for case, v in zip(refused, verdicts[len(cases):]) if v.ok] == []


@pytest.mark.megatron
def test_the_launcher_refuses_every_split_megatron_refuses_at_the_pin(pinned_megatron):
    """Every combination of uneven stages, embedding and loss counted, and virtual stages named either way, over
    layer counts that split well and badly: the launcher's verdict is Megatron's (both ways)."""
    cases = []
    for layers, pp, virtual, first, last, embedding, loss in itertools.product(
            [6, 7, 8], [1, 2, 3, 4], [{}, {"num_virtual_stages_per_pipeline_rank": 2},
                                          {"num_layers_per_virtual_pipeline_stage": 1}],
            [None, 0, 1, 2], [None, 1, 3], [False, True], [False, True]):
        settings = {"num_layers": layers, **virtual, EMBEDDING: embedding, LOSS: loss}
        settings.update({k: v for k, v in ((FIRST, first), (LAST, last)) if v is not None})
        cases.append((settings, pp))
    disagree = []
    for (settings, pp), verdict in zip(cases, megatron_verdicts(pinned_megatron, cases), strict=True):
        try:
            resolved(settings, pp)
            ours = True
        except UserError:
            ours = False
        if ours != verdict.ok:
            disagree.append(f"PP {pp} {settings}: launcher {'ok' if ours else 'refuses'}, Megatron {verdict.render()}")
    assert not disagree, "\n".join(disagree)


# -- the real rehearsal: Megatron's schedule over the shrunk split on CPU processes ---------------------------------

def rehearsed(monkeypatch, overrides: list[str], nodes: int, gpus: int):
    from launcher.checks.megatron_verdict import target_env
    from launcher.checks.rehearsal_ranks import rehearse_layout

    own = tempfile.mkdtemp(prefix="rh-")  # short: the ranks' multiprocessing sockets live under it
    monkeypatch.setattr(tempfile, "tempdir", own)
    loaded = load_preset("345m", overrides)
    resolved_job = resolve(loaded, nodes, gpus, kernels=Kernels(False, False, "preset"),
                           megatron_path=megatron_checkout())
    result = rehearse_layout(resolved_job, target_env(resolved_job))
    os.rmdir(own)  # the rehearsal left nothing behind
    return result


@needs_checkout
def test_uneven_first_and_last_stages_run_megatrons_interleaved_schedule_as_split(monkeypatch):
    """First 4 < last 6 < middle 14 layers per rank at PP 3 with 2 virtual stages each: rehearsed as 2 < 4 < 6."""
    result = rehearsed(monkeypatch, ["tensor_model_parallel_size=2", "pipeline_model_parallel_size=3",
                                     "num_virtual_stages_per_pipeline_rank=2", "decoder_first_pipeline_num_layers=4",
                                     "decoder_last_pipeline_num_layers=6", "global_batch_size=48",
                                     "micro_batch_size=1"], 1, 6)
    assert result.ok, "\n".join(result.render())
    assert result.layout is not None and (result.layout.pp, result.layout.vpp) == (3, 2)
    # each pipeline rank's model chunks as Megatron built them: the first fewest, the middle most
    assert result.facts["decoder_layers_by_pipeline_rank"] == [[1, 1], [3, 3], [2, 2]]
    assert result.facts["model_chunks"] == 2 and result.facts["load"]["iteration"] == 2
    assert any(note.endswith("rehearsed as 1|3|2|1|3|2 decoder layers per stage at PP 3 (VPP 2)")
               for note in result.not_rehearsed)


@needs_checkout
def test_the_loss_counted_in_the_split_runs_with_the_loss_alone_on_the_last_stage(monkeypatch):
    """7 layers and the loss at PP 8 (one each, the loss alone on the last stage), rehearsed at PP 2 as 1 and 0."""
    result = rehearsed(monkeypatch, ["tensor_model_parallel_size=2", "pipeline_model_parallel_size=8",
                                     "num_layers=7", "account_for_loss_in_pipeline_split=true"], 2, 8)
    assert result.ok, "\n".join(result.render())
    assert result.layout is not None and (result.layout.tp, result.layout.pp) == (2, 2)
    assert result.facts["decoder_layers_by_pipeline_rank"] == [[1], [0]]
    assert all(loss is not None for loss in result.facts["loss"])
    assert "account_for_loss_in_pipeline_split (1 ×7|0 decoder layers per stage at PP 8): rehearsed as 1|0 decoder " \
           "layers per stage at PP 2" in result.not_rehearsed
