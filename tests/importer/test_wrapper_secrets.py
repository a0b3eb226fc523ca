"""A secret a job launcher or container runtime passes to the ranks on its own command line (mpirun -x, mpiexec
-genv/-env, srun --export, jsrun -E, docker -e, apptainer --env, env) is read as the variable it sets: not carried
into the preset, and shown nowhere in what the import writes, whatever form passes it."""

from __future__ import annotations

import pytest

from launcher import redaction
from launcher.importer.build import import_source

MODEL = ("pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
         "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --train-iters 4 --mock-data "
         "--tokenizer-type NullTokenizer --vocab-size 128")
SECRET = "s3cr3t-Pw9"  # no credential's form: a secret only by the name it is given

WRAPPERS = [
    "mpirun -np 8 -x DB_PASSWORD={s}",
    "mpirun -np 8 --x=DB_PASSWORD={s}",
    "mpiexec -n 8 -genv DB_PASSWORD {s}",
    "mpiexec -n 8 -env DB_PASSWORD {s}",
    "mpiexec -n 8 --env DB_PASSWORD {s}",
    "mpiexec -n 8 --env DB_PASSWORD={s}",
    "srun -N 1 --ntasks-per-node 8 --export=ALL,DB_PASSWORD={s},NCCL_DEBUG=INFO",
    "srun -N 1 --ntasks-per-node 8 --export ALL,DB_PASSWORD={s}",
    "jsrun -n 8 -r 8 -E DB_PASSWORD={s}",
    "jsrun -n 8 -r 8 --env DB_PASSWORD={s}",
    "srun -N 1 --ntasks-per-node 8 docker run -e DB_PASSWORD={s} img",
    "srun -N 1 --ntasks-per-node 8 apptainer exec --env DB_PASSWORD={s} img.sif",
    "env DB_PASSWORD={s} mpirun -np 8",
    # forms this reader knows as no environment option: the value after a secret's name is still not shown
    "mpirun -np 8 --mca-env DB_PASSWORD {s}",
    "mpirun -np 8 --vars=A=1,DB_PASSWORD={s}",
]


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_a_secret_passed_by_the_job_launcher_is_written_nowhere(wrapper):
    imported = import_source(f"#!/bin/bash\n{wrapper.format(s=SECRET)} python {MODEL}\n", "train.sh")
    written = redaction.for_file(imported.text)  # what nofollow.write_atomic writes
    assert SECRET not in written, [line for line in written.splitlines() if SECRET in line]
    assert "DB_PASSWORD" not in imported.env
    assert not any(SECRET in redaction.scrub(note) for note in imported.not_carried)


def test_a_variable_the_launcher_passes_is_carried_as_the_ranks_see_it():
    imported = import_source(f"#!/bin/bash\nsrun -N 1 --ntasks-per-node 8 --export=ALL,NCCL_DEBUG=INFO,A=1 "
                             f"python {MODEL}\nmpiexec -n 8 -genv NCCL_ALGO Ring -env B 2 python {MODEL}\n", "t.sh")
    assert {k: imported.env[k] for k in ("NCCL_ALGO", "B")} == {"NCCL_ALGO": "Ring", "B": "2"}
