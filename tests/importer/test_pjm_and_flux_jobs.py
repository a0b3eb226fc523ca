"""A Fujitsu PJM job's `#PJM` lines (Fugaku, Wisteria-Odyssey/Aquarius) and a Flux batch script's `# flux:` lines: the
counts the scheduler gives the job (PJM_NODE, PJM_MPI_PROC, PJM_PROC_BY_NODE, the lines of $PJM_O_NODEINF; the
nodes `flux resource list` prints) are known, what they do not give stays unknown and is said."""

from __future__ import annotations

import pytest

from launcher.importer.bash_subset import read_script, show
from launcher.importer.build import import_source

MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
         "--micro-batch-size 1 --global-batch-size 8 --train-iters 4 --mock-data --tokenizer-type NullTokenizer "
         "--vocab-size 128")
PJM_WORDS = 'W="$PJM_NODE $PJM_MPI_PROC $PJM_PROC_BY_NODE $(wc -l < $PJM_O_NODEINF)"'


def words(code: str) -> list[str]:
    reading = read_script(code + "\ntorchrun pretrain_gpt.py $W\n")
    return [show(a) for a in reading.commands[-1].argv[2:]]


# (#PJM lines in the style of each site, PJM_NODE, PJM_MPI_PROC, PJM_PROC_BY_NODE, node file lines)
PJM_JOBS = [
    # Wisteria-Aquarius: whole nodes of 8 A100s, one process a GPU
    ("#PJM -L rscgrp=regular-a\n#PJM -L node=4\n#PJM --mpi proc=32\n#PJM -L elapse=06:00:00\n#PJM -g gx00",
     "4", "32", "8", "4"),
    # Fugaku: a 3-D torus shape is its product; max-proc-per-node alone gives the processes
    ('#PJM -L "node=2x3x2:torus"\n#PJM -L "rscgrp=small"\n#PJM --mpi "max-proc-per-node=4"\n#PJM -j\n#PJM -S',
     "12", "48", "4", "12"),
    # Fugaku: every resource on one quoted line, --rsc-list spelled out, a comment after it
    ('#PJM --rsc-list "rscunit=rscunit_ft01,rscgrp=small-s2,node=12,elapse=06:00:00"   # 12 nodes\n'
     '#PJM --mpi "proc=12"', "12", "12", "1", "12"),
    # proc not a multiple of the nodes: pjsub puts at most proc/nodes, rounded up, on a node
    ("#PJM -L node=4:noncont\n#PJM --mpi proc=30", "4", "30", "8", "4"),
    # a 2-D shape with both counts given
    ('#PJM -L "node=2x3:mesh"\n#PJM --mpi "proc=24,max-proc-per-node=4"', "6", "24", "4", "6"),
]


@pytest.mark.parametrize(("header", "nodes", "procs", "per_node", "lines"), PJM_JOBS)
def test_the_counts_pjsub_gives_are_known(header, nodes, procs, per_node, lines):
    assert words(f"#!/bin/bash\n{header}\n{PJM_WORDS}") == [nodes, procs, per_node, lines]


def test_what_pjsub_leaves_to_the_site_stays_unknown():
    # no --mpi: the site's default process count, not known here; a host name is never known
    got = words("#!/bin/bash\n#PJM -L node=2\nH=$(head -n 1 $PJM_O_NODEINF)\n" + PJM_WORDS + ' W="$W $H"')
    assert got[0] == "2" and got[3] == "2"
    assert "${" in got[1] and "${" in got[2] and "${" in got[4]


@pytest.mark.parametrize("header", ["#PJM -L node=0", "#PJM -L node=2x0", "#PJM -L node=99999999999",
                                    "#PJM -L node=$N", "echo start\n#PJM -L node=4"])
def test_a_node_count_pjsub_does_not_take_or_does_not_read_is_not_carried(header):
    assert "${" in words(f"#!/bin/bash\n{header}\nW=$PJM_NODE")[0]


def test_a_wisteria_job_reaches_the_launcher_and_says_what_is_not_carried():
    imported = import_source(
        "#!/bin/bash\n#PJM -L rscgrp=regular-a\n#PJM -L node=4\n#PJM --mpi proc=32\n#PJM -L elapse=06:00:00\n"
        "export MASTER_ADDR=$(head -n 1 $PJM_O_NODEINF)\n"
        "mpirun -np ${PJM_MPI_PROC} -machinefile ${PJM_O_NODEINF} --map-by ppr:${PJM_PROC_BY_NODE}:node "
        f"-x MASTER_ADDR python pretrain_gpt.py {MODEL} --tensor-model-parallel-size 2\n", "job.sh")
    assert imported.launcher["nodes"] == 4 and imported.launcher["gpus_per_node"] == 8
    note = next(n for n in imported.not_carried if "#PJM lines" in n)
    assert "line 2" in note and "rscgrp=regular-a" in note and "elapse=06:00:00" in note


def test_a_shared_aquarius_job_is_its_gpus_on_one_node():
    imported = import_source(
        "#!/bin/bash\n#PJM -L rscgrp=share-debug\n#PJM -L gpu=4\n#PJM --mpi proc=4\n"
        f"mpirun -np $PJM_MPI_PROC --npernode $PJM_PROC_BY_NODE python pretrain_gpt.py {MODEL}\n", "job.sh")
    assert imported.launcher["nodes"] == 1 and imported.launcher["gpus_per_node"] == 4


def test_pjsub_exports_what_x_gives():
    assert words("#!/bin/bash\n#PJM -x TP=4,PP=2\n#PJM -x PJM_LLIO_GFSCACHE=/vol0004\n"
                 "W=\"$TP $PP $PJM_LLIO_GFSCACHE\"") == ["4", "2", "/vol0004"]


# (# flux: lines, what `flux resource list -n -o {nnodes}` prints)
FLUX_JOBS = [
    ("# flux: -N 4\n# flux: --exclusive\n# flux: -t 2h\n# flux: -q pbatch", "4"),
    ("#flux: --nodes=2 -g 1 # two nodes", "2"),
    ("#FLUX: -N8", "8"),
    ("# flux: --job-name='a b' -N 3", "3"),
]


@pytest.mark.parametrize(("header", "nodes"), FLUX_JOBS)
def test_the_nodes_flux_batch_gives_are_what_the_instance_prints(header, nodes):
    got = words(f"#!/bin/bash\n{header}\nA=$(flux resource list -n -o {{nnodes}})\nB=$(flux getattr size)\n"
                "C=$(flux resource list -no {nnodes})\nW=\"$A $B $C\"")
    assert got == [nodes] * 3


@pytest.mark.parametrize("code", [
    "# flux: -n 16 -g 1\nW=$(flux resource list -n -o {nnodes})",  # slots, no nodes: not known
    "# flux: -N 4\nW=$(flux resource list -s free -n -o {nnodes})",  # only the free ones: not computed
    "# flux: -N 4\nW=$(flux resource list -n -o {ngpus})",  # the nodes' GPUs: not known
    "echo start\n# flux: -N 4\nW=$(flux resource list -n -o {nnodes})",  # after a command: not a directive
])
def test_what_flux_does_not_say_stays_unknown(code):
    assert "${" in words(f"#!/bin/bash\n{code}")[0]


def test_a_flux_job_reaches_the_launcher():
    imported = import_source(
        "#!/bin/bash\n# flux: -N 4\n# flux: --exclusive\nNNODES=$(flux resource list -n -o {nnodes})\n"
        f"flux run -N $NNODES -n $((NNODES*4)) -g 1 python pretrain_gpt.py {MODEL}\n", "job.flux")
    assert imported.launcher["nodes"] == 4 and imported.launcher["gpus_per_node"] == 4
    assert any("# flux: lines" in note and "line 2" in note for note in imported.not_carried)
