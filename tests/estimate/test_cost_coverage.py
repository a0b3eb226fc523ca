"""Every Megatron argument is modelled by the estimate, named by `launch plan` when in use, or reviewed as
cost-irrelevant; a new argument in the catalog that is none of the three fails here. Ranges and run lengths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.estimate import coverage, duration, ranges
from launcher.megatron import args as megatron_args

CATALOG = Path(__file__).resolve().parents[2] / "launcher" / "data" / "megatron_args.json"


def _unclassified(names: list[str]) -> list[str]:
    return [n for n in names if not coverage.classification(n)]


def test_every_argument_of_the_catalog_is_classified() -> None:
    names = list(json.loads(CATALOG.read_text())["arguments"])
    unclassified = _unclassified(names)
    assert unclassified == [], (
        "classify each in launcher/estimate/coverage.py: MODELLED (the estimate reads it), NOT_MODELLED (it changes "
        "parameters, FLOPs, memory or communication: say its effect) or COST_IRRELEVANT (reviewed, with a reason)")


def test_the_catalog_walk_is_the_whole_catalog_and_catches_a_new_setting() -> None:
    names = list(json.loads(CATALOG.read_text())["arguments"])
    assert len(names) >= 700 and set(names) == set(megatron_args.catalog())  # not an empty or partial walk
    assert _unclassified([*names, "attention_sink_tokens"]) == ["attention_sink_tokens"]
    # each class holds settings, so that none of them passes by being the only one
    assert coverage.MODELLED and coverage.NOT_MODELLED and any(coverage.COST_IRRELEVANT.values())


def _other_than(default: object) -> object:
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default * 2 + 3
    if isinstance(default, str):
        return default + "-other"
    if isinstance(default, (list, tuple)):
        return [*default, 3]
    return 3


def test_every_setting_not_modelled_is_named_when_set() -> None:
    """Set away from Megatron's default, each of them is named (with Transformer Engine, on a MoE model, where
    their rules look); those with a rule of their own are checked by the tests above."""
    catalog = megatron_args.catalog()
    base = {"seq_length": 1024, "transformer_impl": "transformer_engine", "num_experts": 8}
    silent = []
    for name, rule in coverage.NOT_MODELLED.items():
        if rule.active:
            continue
        value = _other_than(catalog[name].default)
        named = coverage.unmodelled({**base, name: value})
        if name not in [n.name for n in named]:
            silent.append(name)
    assert silent == []


def test_no_argument_is_in_two_classes() -> None:
    irrelevant = [n for names in coverage.COST_IRRELEVANT.values() for n in names]
    assert len(irrelevant) == len(set(irrelevant))
    classes = [coverage.MODELLED, set(coverage.NOT_MODELLED), set(irrelevant)]
    for i, a in enumerate(classes):
        for b in classes[i + 1:]:
            assert not (set(a) & set(b))


def test_every_class_names_real_arguments() -> None:
    names = set(megatron_args.catalog())
    irrelevant = {n for group in coverage.COST_IRRELEVANT.values() for n in group}
    assert coverage.MODELLED <= names and set(coverage.NOT_MODELLED) <= names and irrelevant <= names


def test_the_estimate_reads_what_it_calls_modelled() -> None:
    """The settings the estimate models are the ones the formulas look up (or the search sets)."""
    import re

    root = Path(__file__).resolve().parents[2] / "launcher"
    sources = "".join(p.read_text() for p in (root / "estimate").glob("*.py") if p.name != "coverage.py")
    sources += (root / "pipeline" / "pipeline_layout.py").read_text()
    read = set(re.findall(r'"([a-z0-9_]+)"', sources))
    assert sorted(coverage.READ - read) == []


@pytest.mark.parametrize("setting, value", [("mtp_num_layers", 1), ("moe_expert_capacity_factor", 1.0),
                                            ("cp_comm_type", "a2a"), ("optimizer", "sgd"),
                                            ("cpu_offloading_num_layers", 2)])
def test_a_setting_in_use_is_named_and_widens_the_range(setting: str, value: object) -> None:
    args = {"seq_length": 1024, setting: value}
    named = coverage.unmodelled(args)
    assert [n.name for n in named] == [setting]
    assert named[0].line().startswith(f"not modelled: {setting}=")
    plain = ranges.time_range(False, "hopper", False)
    wider = ranges.time_range(False, "hopper", False, coverage.widening(named))
    assert wider.low < plain.low and wider.high > plain.high


def test_defaults_and_the_launchers_own_no_te_choices_are_not_named() -> None:
    local = {"transformer_impl": "local", "gradient_accumulation_fusion": False, "no_persist_layer_norm": True}
    assert coverage.unmodelled(local) == []
    with_te = {"transformer_impl": "transformer_engine", "gradient_accumulation_fusion": False}
    assert [n.name for n in coverage.unmodelled(with_te)] == ["gradient_accumulation_fusion"]
    assert coverage.unmodelled({"moe_grouped_gemm": False}) == []  # dense: no experts to group
    assert [n.name for n in coverage.unmodelled({"num_experts": 8})] == ["moe_grouped_gemm"]


def test_the_range_comes_from_the_family_then_wider_ones() -> None:
    runs = ranges.HELD_BACK
    dense_fp8 = ranges.time_range(False, "hopper", True)
    errors = [r.error for r in runs if not r.moe and r.fp8 and r.generation == "hopper"]
    assert dense_fp8.runs == len(errors) >= ranges.MIN_RUNS
    assert dense_fp8.low == pytest.approx(min(1 / (1 + max(errors)), 1 - ranges.MIN_HALF_WIDTH))
    # no held-back dense BF16 run on Hopper: the dense Hopper runs speak for it
    assert "dense · hopper" == ranges.time_range(False, "hopper", False).family
    # MoE's range is MoE's, and wider than dense's
    moe = ranges.time_range(True, "hopper", True)
    assert moe.high > dense_fp8.high
    # Ada has no constants of its own fitted on its own runs: wider still; Blackwell has its own now
    assert ranges.time_range(False, "ada", True).high > dense_fp8.high
    assert "not fitted" not in ranges.time_range(False, "blackwell", True).family


def test_run_length_by_batch_schedule_phase() -> None:
    args = {"seq_length": 1000, "train_samples": 3_000_000, "step_batch_size_schedule": "0:100 1M:200"}
    assert duration.final_batch(args) == 200
    length = duration.training_length(args, 200)
    assert length is not None
    # 1M tokens = 1,000 samples at batch 100 (10 steps), the rest at 200
    assert [(p.batch, p.iterations) for p in length.phases] == [(100, 10), (200, (3_000_000 - 1000) / 200)]
    assert length.tokens == pytest.approx(3e9)
    iters = duration.training_length({"seq_length": 1000, "train_iters": 50, "step_batch_size_schedule":
                                      "0:100 1M:200"}, 200)
    assert iters is not None and [(p.batch, p.iterations) for p in iters.phases] == [(100, 10), (200, 40)]
    seconds = duration.train_seconds(iters, lambda batch: batch / 100, {"eval_interval": 25, "eval_iters": 3})
    assert seconds["steps"] == pytest.approx(10 * 1 + 40 * 2)
    assert seconds["evaluation"] == pytest.approx(2 * 3 * 2 / 3)  # 2 evaluations of 3 forward steps at batch 200


def test_kernel_fusions_the_launcher_turns_off_without_te_are_named_only_with_te() -> None:
    assert coverage.unmodelled({"transformer_impl": "local", "apply_rope_fusion": False}) == []
    named = coverage.unmodelled({"transformer_impl": "transformer_engine", "apply_rope_fusion": False})
    assert [n.name for n in named] == ["apply_rope_fusion"]
