"""SkyPilot and dstack task files: the shell block that runs pretrain_gpt.py is the script, and the counts the
platform gives it (SKYPILOT_NUM_NODES from num_nodes, SKYPILOT_NUM_GPUS_PER_NODE from the accelerators; dstack's
DSTACK_NODES_NUM and DSTACK_GPUS_PER_NODE) are the file's, so torchrun's --nnodes and --nproc_per_node are known."""

from __future__ import annotations

import pytest

from launcher.errors import UserError
from launcher.importer.build import import_source

MODEL = ("pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 "
         "--max-position-embeddings 512 --micro-batch-size 1 --global-batch-size 32 --lr 1e-4 --train-iters 10 "
         "--mock-data --bf16 --tensor-model-parallel-size 2")

SKYPILOT = f"""\
name: megatron-gpt
resources:
  accelerators: H100:8
num_nodes: 2
envs:
  NCCL_DEBUG: INFO
setup: |
  pip install -e .
run: |
  cd Megatron-LM
  MASTER_ADDR=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
  torchrun --nnodes=$SKYPILOT_NUM_NODES --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE \\
    --node_rank=$SKYPILOT_NODE_RANK --master_addr=$MASTER_ADDR --master_port=8008 {MODEL}
"""

DSTACK = f"""\
type: task
name: megatron
nodes: 4
env:
  - NCCL_DEBUG=INFO
commands:
  - cd Megatron-LM
  - torchrun --nnodes=$DSTACK_NODES_NUM --nproc_per_node=$DSTACK_GPUS_PER_NODE --node_rank=$DSTACK_NODE_RANK
    --master_addr=$DSTACK_MASTER_NODE_IP --master_port=29500 {MODEL}
resources:
  gpu: H100:8
"""


def test_a_skypilot_task_runs_its_run_block_on_its_nodes():
    found = import_source(SKYPILOT, "sky.yaml")
    assert found.launcher["nodes"] == 2 and found.launcher["gpus_per_node"] == 8
    assert found.settings["tensor_model_parallel_size"] == 2 and found.lost == []
    assert found.env.get("NCCL_DEBUG") == "INFO" and not any(k.startswith("SKYPILOT_") for k in found.env)
    assert not any("pip install" in line for line in found.not_carried)  # setup is not the run


def test_a_dstack_task_runs_its_commands_on_its_nodes():
    found = import_source(DSTACK, "task.dstack.yml")
    assert found.launcher["nodes"] == 4 and found.launcher["gpus_per_node"] == 8
    assert found.env.get("NCCL_DEBUG") == "INFO" and found.lost == []


@pytest.mark.parametrize("accelerators", ["'{H100:8, A100:8}'", "[H100:8, A100-80GB:8]", "H100:x"])
def test_accelerators_that_are_no_one_count_leave_the_gpus_unknown(accelerators):
    found = import_source(SKYPILOT.replace("H100:8", accelerators.replace("H100:8", "H100:8")), "sky.yaml")
    assert "gpus_per_node" not in found.launcher
    assert any("SKYPILOT_NUM_GPUS_PER_NODE" in line for line in found.not_carried)


def test_the_callers_env_wins_over_the_file_and_a_task_without_training_is_refused():
    found = import_source(SKYPILOT, "sky.yaml", environment={"SKYPILOT_NUM_NODES": "3"})
    assert found.launcher["nodes"] == 3
    with pytest.raises(UserError):
        import_source("resources:\n  accelerators: H100:8\nrun: |\n  echo hello\n", "sky.yaml")


def test_one_accelerator_named_alone_is_one_gpu_a_node():
    for accelerators in ("H100", '{"A100-80GB"}', "{H100: 4}"):
        found = import_source(SKYPILOT.replace("H100:8", accelerators), "sky.yaml")
        assert found.launcher.get("gpus_per_node") == (4 if "4" in accelerators else 1), accelerators
