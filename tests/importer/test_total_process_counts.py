"""A job launcher's count of all processes (`srun -n 8`, `mpirun -np 16`, `--ntasks 4`) is the script's world, and
the preset's nodes × gpus_per_node must be that world. It was not: a count of 8 or fewer was read as one node's,
so `srun -n 8` in a job of `#SBATCH --nodes 2` became 2 nodes of 8 (16 processes), and where the layout needs more
GPUs than one node holds the preset took the layout's fewest nodes instead of the count (`mpirun -n 8` with TP 8 and
EP 8 became 8 nodes of 8; HabanaAI's Mixtral job): a world Megatron never ran, with nothing lost."""

from __future__ import annotations

import pytest

from launcher.importer.build import import_source

MODEL = "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512"


def _world(imported) -> int:
    return imported.launcher.get("nodes", 1) * imported.launcher.get("gpus_per_node", 8)


@pytest.mark.parametrize(("job", "command", "nodes", "per_node"), [
    ("#SBATCH --nodes 2", "srun -n 8", 2, 4),  # Slurm spreads the 8 tasks over the job's 2 nodes
    ("#SBATCH --nodes 2", "srun --ntasks 4", 2, 2),
    ("#SBATCH --nodes=4", "srun --ntasks=8", 4, 2),
    ("#SBATCH --nodes 2", "srun -n 16", 2, 8),  # already right: kept
])
def test_a_count_of_all_tasks_is_spread_over_the_jobs_nodes(job, command, nodes, per_node):
    imported = import_source(f"#!/bin/bash\n{job}\n{command} python pretrain_gpt.py {MODEL}\n", "job.sh")
    assert (imported.launcher.get("nodes"), imported.launcher.get("gpus_per_node")) == (nodes, per_node)


@pytest.mark.parametrize(("command", "layout", "total"), [
    ("mpirun -n 8", "--tensor-model-parallel-size 8 --num-experts 8 --expert-model-parallel-size 8", 8),
    ("srun -n 8", "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 2", 8),
    ("mpirun -np 16", "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4", 16),
    ("mpirun -np 64", "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4", 64),
])
def test_the_commands_world_is_kept_where_the_layout_needs_more_nodes(command, layout, total):
    imported = import_source(f"#!/bin/bash\n{command} python pretrain_gpt.py {MODEL} {layout}\n", "job.sh")
    assert _world(imported) == total
    note = next(n for n in imported.not_carried if n.startswith("nodes"))
    assert f"the command's {total} processes in all" in note


def test_a_count_that_makes_no_whole_nodes_sets_no_node_count():
    imported = import_source(f"#!/bin/bash\nmpirun -np 12 python pretrain_gpt.py {MODEL} "
                             "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 2\n", "job.sh")
    assert "nodes" not in imported.launcher
    assert any("12 processes in all make no whole number" in n for n in imported.not_carried)


def test_a_count_of_tasks_that_each_start_torchrun_is_no_count_of_ranks():
    # JUPITER: `srun --ntasks=$SLURM_NNODES … bash -c "torchrun --nproc_per_node 4 …"`: one torchrun a node
    script = ("#!/bin/bash\n#SBATCH --nodes 4\nsrun --ntasks=$SLURM_NNODES bash -c \"python -m torch.distributed.run "
              f"--nproc_per_node 4 --nnodes $SLURM_NNODES pretrain_gpt.py {MODEL}\"\n")
    imported = import_source(script, "job.sh")
    assert (imported.launcher.get("nodes"), imported.launcher.get("gpus_per_node")) == (4, 4)


@pytest.mark.parametrize(("job", "command", "launcher", "said"), [
    # OLCF Summit: jsrun's resource sets without a count on each host were no count at all, and nothing was said
    ("#BSUB -nnodes 2", "jsrun -n 12 -a 1 -g 1", {"nodes": 2, "gpus_per_node": 6}, "jsrun's 12 processes in all"),
    ("#BSUB -nnodes 2", "jsrun --nrs=4 --tasks_per_rs=3", {"nodes": 2, "gpus_per_node": 6}, "12 processes in all"),
    ("", "jsrun -n 12 -a 1 -g 1", {}, "jsrun -n 12 -a 1: processes in all, over nodes the command does not count"),
])
def test_jsruns_resource_sets_are_a_count_of_all_processes(job, command, launcher, said):
    imported = import_source(f"#!/bin/bash\n{job}\n{command} python pretrain_gpt.py {MODEL}\n", "job.lsf")
    assert {k: imported.launcher[k] for k in ("nodes", "gpus_per_node") if k in imported.launcher} == launcher
    assert any(said in n for n in imported.not_carried)


@pytest.mark.parametrize(("job", "command", "launcher"), [
    # mpirun's count of all processes in a job whose lines give its nodes and the slots on each: it fills each node's
    # slots in turn (it was one node of 8 where the count was 8 or fewer, and named as nodes not counted above that)
    ("#PBS -l select=2:mpiprocs=4", "mpirun -np 8", {"nodes": 2, "gpus_per_node": 4}),
    ("#PBS -l select=4:mpiprocs=4", "mpiexec -n 8", {"nodes": 2, "gpus_per_node": 4}),  # 2 of the job's 4 nodes
    ("#PJM -L node=4\n#PJM --mpi proc=16", "mpirun -n 16", {"nodes": 4, "gpus_per_node": 4}),
    ("#SBATCH -N 2\n#SBATCH --ntasks-per-node=8", "mpirun -np 16", {"nodes": 2, "gpus_per_node": 8}),
    ("#SBATCH -N 2\n#SBATCH --ntasks-per-node=8", "mpirun -np 4", {"gpus_per_node": 4}),  # the first node's slots
    ("#$ -l rt_AF=2", "mpirun -np 16", {}),  # slots not known: named, not guessed
    ("", "mpirun -np 16", {}),
    ("#PBS -l select=2:mpiprocs=4", "mpirun -np 8 -npernode 4", {"nodes": 2, "gpus_per_node": 4}),  # its own counts
])
def test_mpiruns_total_fills_the_jobs_slots(job, command, launcher):
    imported = import_source(f"#!/bin/bash\n{job}\n{command} python pretrain_gpt.py {MODEL}\n", "job.sh")
    assert {k: imported.launcher[k] for k in ("nodes", "gpus_per_node") if k in imported.launcher} == launcher
