"""A process count, node count or host list that a branch the import cannot decide gives to a job launcher
(`mpirun -np $N`, `srun --ntasks-per-node $N`, `jsrun --nrs $N`) decides the layout as much as torchrun's
`--nproc_per_node $N`: it is listed as lost, the same way. A wrapper's option of the same name (`numactl -N $NUMA`)
counts no processes and is not."""

from __future__ import annotations

import pytest

from launcher.importer.build import import_source

ENTRY = ("pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 8 --seq-length 512 "
         "--max-position-embeddings 512 --micro-batch-size 1\n")
BRANCH = "#!/bin/bash\nif [ \"$BIG\" = 1 ]; then N=16; else N=8; fi\n"


@pytest.mark.parametrize(("runner", "option"), [
    ("torchrun --nproc_per_node $N", "--nproc_per_node"),
    ("mpirun -np $N python", "-np"),
    ("mpirun -n $N python", "-n"),
    ("mpirun --npernode $N python", "--npernode"),
    ("mpiexec -ppn $N python", "-ppn"),
    ("srun --ntasks-per-node $N python", "--ntasks-per-node"),
    ("srun -N $N --ntasks-per-node 8 python", "-N"),
    ("jsrun --nrs $N -a 1 python", "--nrs"),
    ("mpirun --hostfile hosts.$N python", "--hostfile"),
])
def test_a_count_a_branch_not_decided_gives_a_launcher_is_lost(runner, option):
    imported = import_source(BRANCH + f"{runner} {ENTRY}", "train.sh", [])
    assert any(f"it decides {option}" in line and "line 2" in line for line in imported.lost)


def test_a_wrappers_option_of_the_same_name_is_no_count():
    imported = import_source(BRANCH + f"mpirun -np 8 numactl -N $N python {ENTRY}", "train.sh", [])
    assert not imported.lost
