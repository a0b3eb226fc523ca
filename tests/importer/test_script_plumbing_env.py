"""A script's exports that are its own plumbing are not the ranks' environment: what torchrun sets for each rank
(the launcher's torchrun sets its own), command strings and flag lists, and the values the training command is built
from. A variable a library reads stays, whatever its value; each one left out is said."""

from __future__ import annotations

import pytest

from launcher.importer.build import import_source

MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
         "--micro-batch-size 1 --global-batch-size 8 --train-iters 10 --lr 1e-4")


@pytest.mark.parametrize(("export", "why"), [
    ("MASTER_ADDR=node-001", "torchrun sets it for each rank"),
    ("MASTER_PORT=6000", "torchrun sets it for each rank"),
    ("WORLD_SIZE=16", "torchrun sets it for each rank"),
    ("RANK=0", "torchrun sets it for each rank"),
    ("LOCAL_RANK=0", "torchrun sets it for each rank"),
    ('DISTRIBUTED_ARGS="--nproc_per_node 8 --nnodes 1"', "a command line or flags"),
    ('LAUNCHER="python -u -m torch.distributed.run --nproc_per_node 8"', "a command line or flags"),
    ('CMD="pretrain_gpt.py --num-layers 2"', "a command line or flags"),
    ('GPT_ARGS="--seq-length 128"', "a command line or flags"),
    ("DATA_PATH=/data/web_text_document", "a value the script builds the training command from"),
    ("HIDDEN=64", "a value the script builds the training command from"),
])
def test_plumbing_exports_are_left_out_and_said(export, why):
    name = export.partition("=")[0]
    script = (f"export {export}\nexport NCCL_DEBUG=INFO\n"
              f"torchrun --nproc_per_node 8 pretrain_gpt.py {MODEL} --data-path /data/web_text_document\n")
    imported = import_source(script, "train.sh")
    assert name not in imported.env and imported.env["NCCL_DEBUG"] == "INFO", imported.env
    said = [line for line in imported.not_carried if line.startswith(f"export {name}=")]
    assert said and why in said[0] and said[0].endswith("not carried"), imported.not_carried


@pytest.mark.parametrize("export", [
    "CUDA_DEVICE_MAX_CONNECTIONS=1", "NCCL_IB_TIMEOUT=22", "OMP_NUM_THREADS=4", "XLA_FLAGS=--xla_gpu_autotune_level=0",
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "NVTE_FLASH_ATTN=1", "HSA_NO_SCRATCH_RECLAIM=1",
    "MY_SETTING=on", "B=2",
])
def test_what_a_library_reads_or_the_command_does_not_use_is_carried(export):
    name, _, value = export.partition("=")
    # the value 4 and 1 are also flag values of the command: a library's variable stays whatever its value
    script = f"export {export}\ntorchrun --nproc_per_node 8 pretrain_gpt.py {MODEL}\n"
    imported = import_source(script, "train.sh")
    assert imported.env.get(name) == value, (imported.env, imported.not_carried)
