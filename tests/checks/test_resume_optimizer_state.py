"""The resume check against what the pinned Megatron does when a torch_dist checkpoint meets a job of another
precision, optimizer or vocabulary (measured with scripts/ckpt_load_matrix.py; docs/resume-and-requeue.md): what
raises at load is refused with the setting that lifts it, what loads but changes the model is a warning, what loads
unchanged says nothing. The stored settings are made by hand, as Megatron stores them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from launcher.checks import optimizer_state
from launcher.checks.checkpoint import StoredCheckpoint
from launcher.checks.resume import judge
from launcher.cli.job import JobRequest, job_for
from launcher.pipeline.preset import load_preset

FULL_STATE = ("args", "checkpoint_version", "iteration", "model", "optimizer", "opt_param_scheduler", "rng_state")
PRECISION = {"fp32": {}, "bf16": {"bf16": True, "accumulate_allreduce_grads_in_fp32": True},
             "fp16": {"fp16": True}}
JOB_PRECISION = {"fp32": [], "bf16": ["bf16=true"], "fp16": ["fp16=true"]}
DISTRIBUTED = "use_distributed_optimizer=true"


def stored(tmp_path: Path, precision: str = "bf16", sharding: str | None = None, **args) -> StoredCheckpoint:
    """A torch_dist checkpoint of the toy model at TP 2 as the pin stores it: the distributed optimizer's sharding
    type in the content metadata only where it was on."""
    metadata = {"singleton_local_shards": False, "chained_optim_avoid_prefix": True}
    if sharding:
        metadata["distrib_optim_sharding_type"] = sharding
    saved = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1, "num_layers": 2, "hidden_size": 12,
             "num_attention_heads": 4, "seq_length": 64, "max_position_embeddings": 64, "vocab_size": 100,
             "make_vocab_size_divisible_by": 128, "global_batch_size": 8, "consumed_train_samples": 800,
             "mock_data": True, "use_distributed_optimizer": bool(sharding), "accumulate_allreduce_grads_in_fp32":
             False, "transformer_impl": "local", **PRECISION[precision], **args}
    return StoredCheckpoint(str(tmp_path), found=True, iteration=100, directory=str(tmp_path / "iter_0000100"),
                            format="torch_dist", backend={"sharded_backend": "torch_dist"}, args=saved,
                            content_metadata=metadata, checkpoint_version=3.0, keys=FULL_STATE)


def job(tmp_path: Path, *overrides: str):
    made, problems = job_for(load_preset("toy", ["entry=pretrain_gpt", "train_iters=200", "global_batch_size=8",
                                                 "micro_batch_size=4", "ckpt_format=torch_dist", f"load={tmp_path}",
                                                 *overrides]),
                             JobRequest(nodes=1, gpus_per_node=2, run_dir=False, local=False))
    assert not problems, problems
    return made


def items(check, *topics: str) -> list[tuple[str, str]]:
    return [(i.level, i.message + " hint: " + i.hint) for i in check.items if i.topic in topics]


def levels(check, *topics: str) -> list[str]:
    return [level for level, _ in items(check, *topics)]


def text(check, *topics: str) -> str:
    return " ".join(said for _, said in items(check, *topics))


# -- the plain optimizer -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "raised"), [
    ("bf16", "fp32", "KeyError: 'pre_wd_mult'"), ("fp16", "fp32", "KeyError: 'pre_wd_mult'"),
    ("fp32", "bf16", "optimizer.state.fp32_param"), ("fp32", "fp16", "optimizer.state.fp32_param")])
def test_fp32_against_fp16_or_bf16_is_refused_with_megatrons_error_and_the_settings_that_lift_it(
        tmp_path, old, new, raised):
    check = judge(job(tmp_path, *JOB_PRECISION[new]), stored(tmp_path, old))
    assert levels(check, "precision") == ["refuse"], check.render()
    said = text(check, "precision")
    assert raised in said and f"keep {old}" in said and "no_load_optim=true" in said
    for lifted in ("no_load_optim=true", "finetune=true"):
        weights = judge(job(tmp_path, *JOB_PRECISION[new], lifted), stored(tmp_path, old))
        assert weights.ok and levels(weights, "precision") == ["note"], weights.render()
        assert "cast to" in text(weights, "precision")


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_an_unchanged_precision_and_optimizer_say_nothing(tmp_path, precision):
    plain = judge(job(tmp_path, *JOB_PRECISION[precision]), stored(tmp_path, precision))
    assert plain.ok and levels(plain, "precision", "optimizer") == [], plain.render()
    for sharding in optimizer_state.MEASURED:
        check = judge(job(tmp_path, *JOB_PRECISION[precision], DISTRIBUTED), stored(tmp_path, precision, sharding))
        assert check.ok and levels(check, "precision", "optimizer") == [], check.render()


# -- the distributed optimizer -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("old", "new"), [("bf16", "fp16"), ("bf16", "fp32"), ("fp16", "bf16"), ("fp16", "fp32"),
                                          ("fp32", "bf16"), ("fp32", "fp16")])
def test_any_precision_change_of_a_dp_reshardable_state_is_refused(tmp_path, old, new):
    check = judge(job(tmp_path, *JOB_PRECISION[new], DISTRIBUTED), stored(tmp_path, old, "dp_reshardable"))
    assert levels(check, "precision") == ["refuse"], check.render()
    said = text(check, "precision")
    assert f"params {old}" in said and "optimizer.distributed" in said
    assert "no_load_optim=true" in said and "dist_ckpt_optim_fully_reshardable=true" in said
    lifted = judge(job(tmp_path, *JOB_PRECISION[new], DISTRIBUTED, "no_load_optim=true"),
                   stored(tmp_path, old, "dp_reshardable"))
    assert lifted.ok and levels(lifted, "precision") == ["note"], lifted.render()


def test_gradients_reduced_in_another_dtype_are_refused_for_a_dp_reshardable_state_only(tmp_path):
    """The buffers are named by (param dtype, grad dtype): bf16 reduces in fp32 unless grad_reduce_in_bf16."""
    check = judge(job(tmp_path, "bf16=true", "grad_reduce_in_bf16=true", DISTRIBUTED),
                  stored(tmp_path, "bf16", "dp_reshardable"))
    assert levels(check, "precision") == ["refuse"], check.render()
    assert "grads fp32) (checkpoint) → (params bf16, grads bf16) (job)" in text(check, "precision")
    assert "grad_reduce_in_bf16=false" in text(check, "precision")
    fully = judge(job(tmp_path, "bf16=true", "grad_reduce_in_bf16=true", DISTRIBUTED),
                  stored(tmp_path, "bf16", "fully_reshardable"))
    assert fully.ok and levels(fully, "precision") == [], fully.render()


@pytest.mark.parametrize(("old", "new"), [("bf16", "fp32"), ("fp32", "bf16"), ("bf16", "fp16")])
def test_a_fully_reshardable_state_loads_at_another_precision_with_a_warning(tmp_path, old, new):
    check = judge(job(tmp_path, *JOB_PRECISION[new], DISTRIBUTED), stored(tmp_path, old, "fully_reshardable"))
    assert check.ok and levels(check, "precision") == ["warn"], check.render()
    assert f"cast to {new}" in text(check, "precision")


@pytest.mark.parametrize("sharding", optimizer_state.MEASURED)
def test_turning_the_distributed_optimizer_off_is_refused(tmp_path, sharding):
    check = judge(job(tmp_path, "bf16=true"), stored(tmp_path, "bf16", sharding))
    assert levels(check, "optimizer") == ["refuse"], check.render()
    assert "use_distributed_optimizer=true" in text(check, "optimizer") and "no_load_optim=true" in \
        text(check, "optimizer")
    assert judge(job(tmp_path, "bf16=true", "no_load_optim=true"), stored(tmp_path, "bf16", sharding)).ok


def test_turning_the_distributed_optimizer_on_is_refused(tmp_path):
    check = judge(job(tmp_path, "bf16=true", DISTRIBUTED), stored(tmp_path, "bf16"))
    assert levels(check, "optimizer") == ["refuse"], check.render()
    assert "flattened_range is not supported" in text(check, "optimizer")
    assert "use_distributed_optimizer=false" in text(check, "optimizer")
    assert judge(job(tmp_path, "bf16=true", DISTRIBUTED, "finetune=true"), stored(tmp_path, "bf16")).ok


def test_a_checkpoint_saved_before_content_metadata_takes_its_kind_from_the_stored_args(tmp_path):
    old = replace(stored(tmp_path, "bf16", use_distributed_optimizer=True), content_metadata=None)
    assert optimizer_state.saved_kind(old.args or {}, None) == "dp_zero_gather_scatter"
    check = judge(job(tmp_path, "fp16=true", DISTRIBUTED), old)
    assert levels(check, "precision") == ["warn"] and "not measured" in text(check, "precision"), check.render()


# -- the vocabulary ----------------------------------------------------------------------------------------------

def test_another_vocabulary_loads_in_torch_dist_with_a_warning_of_the_rows(tmp_path):
    check = judge(job(tmp_path, "bf16=true", "vocab_size=300"), stored(tmp_path, "bf16"))
    assert check.ok and levels(check, "shape") == ["ok", "warn"], check.render()
    said = text(check, "shape")
    assert "vocab_size 100 (checkpoint) → 300 (job)" in said and "padded 256 → 512 rows" in said
    assert "rows 256-511 start at zero" in said and "other tokens" in said
    smaller = judge(job(tmp_path, "bf16=true", "make_vocab_size_divisible_by=8"), stored(tmp_path, "bf16"))
    assert smaller.ok and "padded 256 → 112 rows (make_vocab_size_divisible_by)" in text(smaller, "shape")
    assert "rows 112-255 are dropped" in text(smaller, "shape") and "padding rows" in text(smaller, "shape")


def test_another_vocabulary_is_refused_for_a_dp_reshardable_state_unless_it_is_not_loaded(tmp_path):
    check = judge(job(tmp_path, "bf16=true", "vocab_size=300", DISTRIBUTED),
                  stored(tmp_path, "bf16", "dp_reshardable"))
    assert levels(check, "optimizer") == ["refuse"], check.render()
    assert "Global shape mismatch" in text(check, "optimizer") and "no_load_optim=true" in text(check, "optimizer")
    assert levels(check, "shape") == ["ok"]
    lifted = judge(job(tmp_path, "bf16=true", "vocab_size=300", DISTRIBUTED, "no_load_optim=true"),
                   stored(tmp_path, "bf16", "dp_reshardable"))
    assert lifted.ok and levels(lifted, "shape") == ["ok", "warn"], lifted.render()
    fully = judge(job(tmp_path, "bf16=true", "vocab_size=300", DISTRIBUTED),
                  stored(tmp_path, "bf16", "fully_reshardable"))
    assert fully.ok and levels(fully, "shape") == ["ok", "warn"], fully.render()


def test_the_torch_format_refuses_other_padded_rows_and_warns_of_another_vocabulary_padded_alike(tmp_path):
    torch_format = replace(stored(tmp_path, "bf16"), format="torch", content_metadata=None)
    rows = judge(job(tmp_path, "bf16=true", "ckpt_format=torch", "vocab_size=300"), torch_format)
    assert levels(rows, "shape") == ["refuse"] and "padded vocabulary 256" in text(rows, "shape"), rows.render()
    alike = judge(job(tmp_path, "bf16=true", "ckpt_format=torch", "vocab_size=120"), torch_format)
    assert alike.ok and levels(alike, "shape") == ["ok", "warn"], alike.render()
    assert "vocab_size 100 (checkpoint) → 120 (job)" in text(alike, "shape")


def test_a_tp_change_that_pads_the_vocabulary_otherwise_is_said_with_the_tp(tmp_path):
    check = judge(job(tmp_path, "bf16=true", "tensor_model_parallel_size=1", DISTRIBUTED),
                  stored(tmp_path, "bf16", "fully_reshardable"))
    assert check.ok and "padded 256 → 128 rows at TP 1" in text(check, "shape"), check.render()
    assert levels(check, "shape") == ["ok", "note"]  # padding that follows a resharding: said, not warned
