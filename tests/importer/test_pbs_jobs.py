"""A PBS job's own `#PBS -l` lines: the node count a script reads from its host file ($PBS_NODEFILE, one line per
MPI slot) is known, its host names are not. Each expected count is what bash gives with the host file PBS writes."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from launcher.importer.bash_subset import read_script, show
from launcher.importer.build import import_source

MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
         "--micro-batch-size 1 --global-batch-size 8 --train-iters 4 --mock-data --tokenizer-type NullTokenizer "
         "--vocab-size 128")

# (the #PBS lines, the host file PBS writes for them: host → lines)
JOBS = [
    ("#PBS -l select=2:ngpus=4:system=polaris\n#PBS -l place=scatter", [("x1", 1), ("x2", 1)]),
    ("#PBS -q rt_HF\n#PBS -l select=3:ncpus=192:mpiprocs=2:ngpus=8\n#PBS -l walltime=1:00:00", [("a", 2), ("b", 2),
                                                                                              ("c", 2)]),
    ("#PBS -l nodes=2:ppn=4:gpus=4", [("n1", 4), ("n2", 4)]),
    ("#PBS -N job -l select=4,walltime=0:10:00", [("h1", 1), ("h2", 1), ("h3", 1), ("h4", 1)]),
]
COUNTS = ('A=$(wc -l < $PBS_NODEFILE)\nB=$(cat "$PBS_NODEFILE" | sort | uniq | wc -l)\n'
          'C=$(sort -u ${PBS_NODEFILE} | wc -l)\nD=$(uniq $PBS_NODEFILE | wc -l)\n'
          'E=$(head -n 1 $PBS_NODEFILE | wc -l)\n'
          # GNU's signed counts (all but the last N, from the Nth on: -1 and +2 were read as 1 and 2 lines) and a
          # count past the file's lines (tail -n 3 of 2 lines gave 1)
          'F=$(head -n -1 $PBS_NODEFILE | wc -l)\nG=$(tail -n +2 $PBS_NODEFILE | wc -l)\n'
          'H=$(sort -u $PBS_NODEFILE | head -n -1 | wc -l)\nI=$(tail -n 3 $PBS_NODEFILE | wc -l)\n'
          'J=$(head -2 $PBS_NODEFILE | wc -l)\nK=$(tail -n -2 $PBS_NODEFILE | wc -l)\n'
          'W="$A $B $C $D $E $F $G $H $I $J $K ${PBS_NUM_NODES:-none}"')


def words(code: str) -> list[str]:
    reading = read_script(code + "\ntorchrun pretrain_gpt.py $W\n")
    return [show(a) for a in reading.commands[-1].argv[2:]]


@pytest.mark.parametrize(("header", "hosts"), JOBS)
def test_the_host_file_lines_are_counted_as_pbs_writes_them(header, hosts, tmp_path):
    got = words(f"#!/bin/bash\n{header}\n{COUNTS}")
    assert all("${" not in w for w in got[:-1]), got
    if shutil.which("bash"):
        node_file = tmp_path / "nodefile"
        node_file.write_text("".join(f"{host}\n" * count for host, count in hosts))
        environment = {k: v for k, v in os.environ.items() if not k.startswith("PBS_")}
        environment["PBS_NODEFILE"] = str(node_file)
        if "nodes=" in header:  # Torque also sets the node count
            environment["PBS_NUM_NODES"] = str(len(hosts))
        out = subprocess.run(["bash", "-c", f"{COUNTS}\nprintf '%s\\n' $W"], capture_output=True, text=True,
                             timeout=10, env=environment)
        assert got == out.stdout.split()


def test_host_names_and_input_not_known_stay_unknown():
    got = words('#PBS -l select=2\nM=$(head -n 1 $PBS_NODEFILE)\nX=$(echo "$CALLER" | wc -l)\n'
                'Y=$(wc -l $PBS_NODEFILE)\nW="$M $X $Y"')
    assert all("${" in w for w in got), got  # a host, a caller's value of unknown lines, `wc -l FILE` with its name
    assert "${" in words('M=$(wc -l < $PBS_NODEFILE)\nW=$M')[0]  # no #PBS lines: the host file is not known


def test_a_large_jobs_host_file_is_counted_and_never_a_value():
    # 16,384 host lines: more text than a value may hold; `$(cat …)` of it is unknown (it was an error: no import)
    got = words("#PBS -l select=2048:mpiprocs=8\nH=$(cat $PBS_NODEFILE)\nB=`cat $PBS_NODEFILE`\n"
                "for h in $(sort -u $PBS_NODEFILE); do echo $h; done\nW=\"$(wc -l < $PBS_NODEFILE) $H $B\"")
    assert got[0] == "16384" and "${" in got[1] and "${" in got[2]


def test_the_node_count_reaches_the_launcher():
    imported = import_source(f"#!/bin/bash\n#PBS -l select=2:ngpus=4\nNNODES=$(wc -l < $PBS_NODEFILE)\n"
                             f"torchrun --nnodes $NNODES --nproc-per-node 4 pretrain_gpt.py {MODEL}\n", "job.pbs")
    assert imported.launcher["nodes"] == 2 and imported.launcher["gpus_per_node"] == 4
    assert any("#PBS lines" in note and "line 2" in note for note in imported.not_carried)


@pytest.mark.parametrize("header", ["#PBS -l select=999999999999:ngpus=4", "#PBS -l nodes=100000:ppn=100000",
                                    "#PBS -l select=" + "1" * 5000, "#PBS " + "-l select=2 " * 20000])
def test_huge_or_hostile_requests_end_in_bounded_time(header):
    began = time.monotonic()
    words(f"{header}\nA=$(wc -l < $PBS_NODEFILE)\nW=$A")
    assert time.monotonic() - began < 5


@pytest.mark.parametrize(("header", "listed", "expected"), [
    # Slurm's host list: one host a line, one line a node of the job the #SBATCH lines ask for
    ("#SBATCH --nodes=4", "$SLURM_JOB_NODELIST", 4),
    ("#SBATCH -N 3", '"$SLURM_NODELIST"', 3),
    ("#SBATCH --nodes=2", "", 2),
    ("#SBATCH --nodes=2", "node[1-4]", None),  # another list: not read
    ("#SBATCH --nodes=2-4", "$SLURM_JOB_NODELIST", None),  # a range: the allocation's count
    ("", "$SLURM_JOB_NODELIST", None),  # no job lines: the allocation's
])
def test_a_slurm_jobs_host_list_counts_its_nodes_and_no_host_is_known(header, listed, expected):
    hosts = f"scontrol show hostnames {listed}"
    script = (f"#!/bin/bash\n{header}\nN=$({hosts} | sort -u | wc -l)\nHEAD=$({hosts} | head -n 1)\n"
              f"nodes=( $({hosts}) )\n"
              f"torchrun --nnodes $N --nproc_per_node 8 --rdzv_endpoint $HEAD:29500 pretrain_gpt.py {MODEL}\n")
    imported = import_source(script, "job.sh")
    assert imported.launcher.get("nodes") == expected
    assert "master_addr" not in imported.launcher
    array = import_source(script.replace("--nnodes $N", "--nnodes ${#nodes[@]}"), "job.sh")
    assert array.launcher.get("nodes") == expected
