"""scripts/functional_test_matrix.py: a functional-test configuration moved to one GPU as a user would, then the
launcher's verdict (the rehearsal's needs the checkout and is covered by tests/checks/test_rehearsal.py)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import functional_test_matrix as matrix  # noqa: E402

CONFIG = """\
ENV_VARS:
  CUDA_DEVICE_MAX_CONNECTIONS: 1
MODEL_ARGS:
  --num-layers: 12
  --hidden-size: 512
  --num-attention-heads: 8
  --seq-length: 1024
  --max-position-embeddings: 1024
  --micro-batch-size: 4
  --global-batch-size: 32
  --train-samples: 100000
  --lr-decay-samples: 90000
  --lr: 1e-4
  --tensor-model-parallel-size: 2
  --pipeline-model-parallel-size: 2
  --num-layers-per-virtual-pipeline-stage: 3
  --transformer-impl: transformer_engine
  --data-path: ${DATA_PATH}/text
  --save: ${CHECKPOINT_SAVE_PATH}
  --async-save: true
  --use-persistent-ckpt-worker: true
  --ckpt-format: torch_dist
  --eval-interval: 1000
  --bf16: true
"""


def test_a_configuration_moves_to_one_gpu_as_a_user_would(tmp_path):
    config = tmp_path / "gpt" / "gpt3_tp2_pp2_vp" / "model_config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(CONFIG)
    preset_path, settings = matrix.imported_preset(config, tmp_path)
    overrides = matrix.one_gpu_overrides(settings)
    assert overrides == ["nodes=1", "gpus_per_node=1", "transformer_engine=false", "apex=false", "num_layers=4",
                         "train_iters=4", "transformer_impl=null", "tensor_model_parallel_size=1",
                         "pipeline_model_parallel_size=1", "num_layers_per_virtual_pipeline_stage=null",
                         "train_samples=null", "lr_decay_samples=null"]
    # a per-layer pattern names every layer: the layer count it names stays (4 layers would not match it)
    patterned = matrix.one_gpu_overrides(dict(settings, moe_layer_freq="([0]*1+[1]*1)"))
    assert "num_layers=4" not in patterned and "train_iters=4" in patterned
    row = matrix.Row("gpt/gpt3_tp2_pp2_vp", overrides=tuple(overrides))
    job = matrix.judge_launcher(row, preset_path, tmp_path, tmp_path / "runs")
    assert (row.launcher, row.reason) == ("accepted", "")
    assert job.megatron["async_save"] is True  # the configuration's async checkpointing is kept
    assert job.megatron["spec"] == ["launcher.inside.megatron_ext.sdpa_spec_fast", "layer_spec"]


def test_a_refused_configuration_carries_the_launchers_reason(tmp_path):
    config = tmp_path / "gpt" / "variant" / "model_config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(CONFIG + "  --experimental-attention-variant: gated_delta_net\n")
    preset_path, settings = matrix.imported_preset(config, tmp_path)
    row = matrix.Row("gpt/variant", overrides=tuple(matrix.one_gpu_overrides(settings)))
    assert matrix.judge_launcher(row, preset_path, tmp_path, tmp_path / "runs") is None
    assert row.launcher == "refused"
    assert row.reason.startswith("experimental attention variants (experimental_attention_variant) needs "
                                 "Transformer Engine")


def test_the_table_counts_crashes_after_acceptance():
    rows = [matrix.Row("gpt/a", "accepted", "ok", "one step, loss 4.85"),
            matrix.Row("gpt/b", "accepted", "crashed", "model: AssertionError: x (file.py:1)"),
            matrix.Row("moe/c", "refused", "", "lr is not set")]
    text = matrix.markdown(rows, "python scripts/functional_test_matrix.py …", 12.0)
    assert ("3 configurations: 2 accepted, 1 refused before launch; of the accepted, 1 rehearse a training step, "
            "0 are not rehearsed (a package the job needs is not installed on this machine) and **1 crash in the "
            "rehearsal**.") in text
    assert "| gpt/b | accepted | crashed | model: AssertionError: x (file.py:1) |" in text
    assert "| moe/c | refused | – | lr is not set |" in text


def test_gpu_parts_fold_in_and_are_counted(tmp_path):
    import json
    from dataclasses import asdict

    part = tmp_path / "gpu-progress.jsonl"
    trained = matrix.Row("gpt/a", "accepted", "", "", gpu="trains", gpu_reason="loss 10.92 → 10.90 (55 s)")
    refused = matrix.Row("gpt/b", "accepted", "", "", gpu="refused", gpu_reason="error: nvidia-resiliency-ext: …")
    part.write_text(json.dumps(asdict(trained)) + "\n" + json.dumps(asdict(refused)) + "\n" + '{"config": "gpt/c", "gp')
    rows = [matrix.Row("gpt/a", "accepted"), matrix.Row("gpt/b", "accepted"), matrix.Row("gpt/c", "accepted")]
    matrix.fold_previous(rows, [part], rerun=("refused",))  # the cut-off last line (a full disk) is skipped
    assert [(r.gpu, r.gpu_reason) for r in rows] == [("trains", "loss 10.92 → 10.90 (55 s)"), ("", ""), ("", "")]
    matrix.fold_previous(rows, [part])
    assert rows[1].gpu == "refused"
    text = matrix.markdown(rows, "python scripts/functional_test_matrix.py …", 1.0)
    assert "GPU: 2 of the 3 accepted run; 1 trains, 1 refused, 0 no update, 0 fault, 0 failed, 0 timeout." in text
    assert "| gpt/a | accepted | – | trains | GPU: loss 10.92 → 10.90 (55 s) |" in text


def test_a_layout_rehearsal_this_machine_cannot_run_is_not_run_and_agrees(tmp_path, monkeypatch):
    """--layouts: 'not run' (a package the target has, missing here) is no disagreement with the GPU's 'trains';
    a rehearsal that fails is."""
    import json

    from launcher.checks import rehearsal_ranks

    config = tmp_path / "gpt" / "gpt3_tp2_pp2_vp" / "model_config.yaml"
    config.parent.mkdir(parents=True)
    config.write_text(CONFIG)
    preset_path, settings = matrix.imported_preset(config, tmp_path)
    answers = iter([rehearsal_ranks.LayoutRehearsal(False, rehearsal_ranks.RankLayout(), stage="setup",
                                                    error="this machine lacks what the job needs: einops"),
                    rehearsal_ranks.LayoutRehearsal(False, rehearsal_ranks.RankLayout(), stage="step",
                                                    error="RuntimeError: x")])
    monkeypatch.setattr(rehearsal_ranks, "rehearse_layout", lambda job, env: next(answers))
    rows = [matrix.Row("gpt/a", "accepted", gpu="trains"), matrix.Row("gpt/b", "accepted", gpu="trains")]
    matrix.rehearse_layouts([(row, preset_path, settings) for row in rows], tmp_path, tmp_path)
    records = [json.loads(line) for line in (tmp_path / "layouts.jsonl").read_text().splitlines()]
    assert [(r["layout"], r["agrees"]) for r in records] == [("not run", True), ("failed", False)]
