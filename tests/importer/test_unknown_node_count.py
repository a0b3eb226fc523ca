"""A script whose node count is decided where it runs (a DeepSpeed hostfile, srun or mpirun without counts, torchrun
--nnodes $N) and whose layout needs more GPUs than one node has: the preset takes the fewest nodes whose GPUs the
layout divides, and says so, so that its dry-run does not refuse a world the script never had. A count the command
gives (torchrun's default of one node included) is kept: there the script fails as the dry-run says."""

from __future__ import annotations

from launcher.importer.build import import_source

MODEL = (" pretrain_gpt.py --num-layers 8 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
         "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 64 --lr 1e-4 --train-iters 10 "
         "--mock-data --bf16 ")


def test_an_unknown_node_count_becomes_the_fewest_nodes_the_layout_fits():
    layout = "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 8"
    for runner, per_node in (("deepspeed --hostfile hosts", 8), ("deepspeed", 8),
                             ("torchrun --nnodes $NNODES --nproc_per_node 8", 8), ("srun python", 8),
                             ("mpirun -np $NP python", 8), ("torchrun --nnodes=$N --nproc_per_node=4", 4)):
        found = import_source(runner + MODEL + layout, "train.sh")
        nodes = found.launcher.get("nodes")
        assert nodes == 32 // per_node, (runner, found.launcher)
        assert any(line.startswith(f"nodes {nodes}:") and "TP·PP·CP = 32" in line for line in found.not_carried), \
            (runner, found.not_carried)


def test_context_and_expert_parallelism_count_too():
    found = import_source("deepspeed --hostfile h" + MODEL + "--context-parallel-size 2 --tensor-model-parallel-size 8",
                          "train.sh")
    assert found.launcher.get("nodes") == 2
    moe = import_source("deepspeed --hostfile h" + MODEL + "--num-experts 16 --expert-model-parallel-size 16 "
                        "--moe-router-topk 2", "train.sh")
    assert moe.launcher.get("nodes") == 2


def test_a_count_the_command_gives_or_a_layout_one_node_holds_is_left_as_it_is():
    layout = "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 8"
    assert "nodes" not in import_source("torchrun --nproc_per_node 8" + MODEL + layout, "train.sh").launcher
    given = import_source("torchrun --nnodes 2 --nproc_per_node 8" + MODEL + layout, "train.sh")
    assert given.launcher["nodes"] == 2
    included = import_source("deepspeed --include localhost:0,1,2,3" + MODEL + layout, "train.sh")
    assert "nodes" not in included.launcher and included.launcher["gpus_per_node"] == 4  # one host: bash's world
    small = import_source("deepspeed --hostfile h" + MODEL + "--tensor-model-parallel-size 2", "train.sh")
    assert "nodes" not in small.launcher
    unknown_tp = import_source("deepspeed --hostfile h" + MODEL + "--tensor-model-parallel-size $TP", "train.sh")
    assert "nodes" not in unknown_tp.launcher


def test_a_total_the_job_launcher_gives_is_the_world_the_nodes_make():
    found = import_source("mpirun -np 64 python" + MODEL + "--tensor-model-parallel-size 4 "
                          "--pipeline-model-parallel-size 8", "train.sh")
    assert found.launcher.get("nodes") == 8 and found.launcher.get("gpus_per_node", 8) == 8


def test_a_profiler_around_python_is_no_job_launcher():
    found = import_source("nsys profile -o out python" + MODEL + "--tensor-model-parallel-size 4 "
                          "--pipeline-model-parallel-size 8", "train.sh")
    assert "nodes" not in found.launcher


def test_a_layout_past_any_cluster_chooses_no_count():
    found = import_source("deepspeed --hostfile h" + MODEL + "--tensor-model-parallel-size 99999999999", "train.sh")
    assert "nodes" not in found.launcher
