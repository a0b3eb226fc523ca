"""A runner that starts one process per GPU it sees (deepspeed given no count, hostfile or host list; torchrun
`--nproc_per_node gpu`) where the script sets CUDA_VISIBLE_DEVICES: the count is the visible GPUs, as DeepSpeed's
runner reads them ("respect CUDA_VISIBLE_DEVICES for a single node and no explicit resource filters": it runs on
localhost:$CUDA_VISIBLE_DEVICES) and as torch counts devices. `CUDA_VISIBLE_DEVICES=0 deepspeed pretrain_gpt.py …`
(a one-GPU run) was a count known only where it runs, and the preset ran 8."""

from __future__ import annotations

import pytest

from launcher.importer.build import import_source

MODEL = "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512"


@pytest.mark.parametrize(("command", "gpus", "nodes"), [
    ("CUDA_VISIBLE_DEVICES=0 deepspeed", 1, 1),
    ("export CUDA_VISIBLE_DEVICES=0,1,2,3\ndeepspeed --master_port 29500", 4, 1),
    ("CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc_per_node=gpu", 2, None),
    ("CUDA_VISIBLE_DEVICES=4,5,6,7 torchrun --nnodes 2 --nproc_per_node auto", 4, 2),
])
def test_the_visible_gpus_give_the_count(command, gpus, nodes):
    imported = import_source(f"#!/bin/bash\n{command} pretrain_gpt.py {MODEL} --tensor-model-parallel-size 1\n",
                             "train.sh")
    assert imported.launcher.get("gpus_per_node") == gpus and imported.launcher.get("nodes") == nodes
    assert any(n.startswith(f"gpus_per_node {gpus}:") and "CUDA_VISIBLE_DEVICES" in n for n in imported.not_carried)


@pytest.mark.parametrize("command", [
    "CUDA_VISIBLE_DEVICES=0,1 deepspeed --hostfile hosts",  # the hostfile's slots, not the visible GPUs
    "CUDA_VISIBLE_DEVICES=0,1 deepspeed --num_nodes 2",
    "CUDA_VISIBLE_DEVICES=$GPUS deepspeed",  # not known
    "deepspeed",
])
def test_where_they_do_not_the_count_stays_named(command):
    imported = import_source(f"#!/bin/bash\n{command} pretrain_gpt.py {MODEL}\n", "train.sh")
    assert "gpus_per_node" not in imported.launcher
    assert any("a count known only where it runs" in n for n in imported.not_carried)
