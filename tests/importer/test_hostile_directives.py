"""Scheduler directives are data: a hostile count or shape in #PJM, # flux:, #PBS, #SBATCH, #BSUB or #$ lines (a
14-digit node count, a shape of 5,000 factors, negative, non-ASCII digits, `$(cmd)`) is read within bounds: the
import ends at once, runs nothing, and a count outside 1 … 1,000,000 never reaches the preset."""

from __future__ import annotations

import time

import pytest

from launcher.importer import pbs
from launcher.importer.build import import_source

TRAINING = ("pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
            "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --train-iters 10 --lr 1e-4 "
            "--mock-data --tokenizer-type NullTokenizer --vocab-size 1000")
HEADS = {
    "pjm": '#PJM -L node={V}\n#PJM -L "rscgrp=small,node={V}"\n#PJM --mpi proc={V}\n#PJM --mpi max-proc-per-node={V}\n'
           "mpiexec -n $PJM_MPI_PROC -machinefile $PJM_O_NODEINF torchrun --nnodes $PJM_NODE --nproc_per_node 4 ",
    "flux": "# flux: -N {V}\n# flux: --nodes={V}\n# flux: -n {V}\nNN=$(flux resource list -n -o {nnodes})\n"
            "torchrun --nnodes $NN --nproc_per_node 4 ",
    "pbs": "#PBS -l select={V}:ncpus=8:mpiprocs={V}\n#PBS -l nodes={V}:ppn={V}\n"
           "NN=$(sort -u $PBS_NODEFILE | wc -l)\ntorchrun --nnodes $NN --nproc_per_node 4 ",
    "slurm": "#SBATCH --nodes={V}\n#SBATCH --ntasks-per-node={V}\nNN=$(scontrol show hostnames | wc -l)\n"
             "srun torchrun --nnodes $NN --nproc_per_node 4 ",
    "lsf/sge": "#BSUB -n {V}\n#$ -pe mpi {V}\ntorchrun --nnodes $NSLOTS --nproc_per_node 4 ",
}
VALUES = ["99999999999999", "x".join(["1"] * 5000), "x".join(["1000"] * 3), "-4", "0", "\u0668", "\uff18", "4.5",
          "1e9", "9" * 5000, "$(touch MARKER)", "`touch MARKER`", "1000000", "100001"]


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize("manager", sorted(HEADS))
def test_a_hostile_directive_is_read_within_bounds(tmp_path, monkeypatch, manager, value):
    monkeypatch.chdir(tmp_path)
    script = "#!/bin/bash\n" + HEADS[manager].replace("{V}", value) + TRAINING + "\n"
    started = time.monotonic()
    imported = import_source(script, "job.sh")
    assert time.monotonic() - started < 10
    nodes = imported.launcher.get("nodes")
    assert nodes is None or 1 <= nodes <= 1_000_000
    assert not (tmp_path / "MARKER").exists()


def test_a_node_file_is_never_built_past_its_bound():
    with pytest.raises(ValueError):
        pbs.host_lines(pbs.NODE_FILE, pbs.MAX_LINES + 1)
    assert len(pbs.host_lines(pbs.NODE_FILE, 10, 3)) == 30
