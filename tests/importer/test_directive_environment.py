"""A variable the user gives with --env (`SLURM_JOB_NUM_NODES=1 bash job.sh`, as a sweep runs a job file under
`srun --nodes=1`) is what the script reads: the scheduler lines of the file (#SBATCH, Grid Engine's #$) do not
replace it, and the import says which value it kept."""

from __future__ import annotations

import pytest

from launcher.importer.build import import_source

MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
         "--micro-batch-size 1 --global-batch-size 8 --train-iters 4 --mock-data --tokenizer-type NullTokenizer "
         "--vocab-size 128")

JOBS = {
    "SLURM_JOB_NUM_NODES": "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n",
    "NHOSTS": "#!/bin/bash\n#$ -l node_f=2\n#$ -cwd\n",
}


@pytest.mark.parametrize("variable", sorted(JOBS))
def test_the_callers_value_wins_over_the_scheduler_lines(variable):
    script = JOBS[variable] + f"NODES=${variable}\ntorchrun --nproc_per_node 8 --nnodes $NODES pretrain_gpt.py {MODEL}"
    as_submitted = import_source(script, "job.sh")
    assert as_submitted.launcher.get("nodes") == 2
    given = import_source(script, "job.sh", environment={variable: "1"})
    assert given.launcher.get("nodes") == 1, given.launcher
    assert any(f"{variable}=1: as given (--env)" in line for line in given.not_carried), given.not_carried


def test_a_variable_the_lines_do_not_set_is_given_as_before():
    job = JOBS["SLURM_JOB_NUM_NODES"]
    script = job + f"torchrun --nproc_per_node $G --nnodes $SLURM_NNODES pretrain_gpt.py {MODEL}"
    given = import_source(script, "job.sh", environment={"G": "4"})
    assert (given.launcher.get("gpus_per_node"), given.launcher.get("nodes")) == (4, 2)
    assert not any("as given (--env)" in line for line in given.not_carried)
