"""Node, process and GPU counts from hostile or sloppy scripts and manifests: every place a count is read (a job
launcher's options, torchrun's, the #SBATCH/#PBS/#BSUB/#$ lines, a Kubernetes manifest) takes ASCII digits from 1 to
1,000,000 and nothing else (0, -1, 1e9, 99999999999, ٨ or ８ are no count any of them takes), and counts that do not
make whole nodes of one size, or that sit next to a count not known, are named instead of read as one node."""

from __future__ import annotations

import time

import pytest
import yaml

from launcher.errors import UserError
from launcher.importer.bash_subset import ShellSyntaxError
from launcher.importer.build import import_source
from launcher.importer.words import MAX_COUNT, count

MODEL = ("pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
         "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --train-iters 4 --mock-data "
         "--tokenizer-type NullTokenizer --vocab-size 128")

# (script with {v} where the count goes, the preset setting that count alone gives, its value for v = 4)
SOURCES = [
    ("mpirun -np {v} python " + MODEL, "gpus_per_node", 4),  # all processes, ≤ 8: one node's
    ("mpirun -np 16 --npernode {v} python " + MODEL, "gpus_per_node", 4),
    ("mpiexec -n 16 --ppn {v} python " + MODEL, "gpus_per_node", 4),
    ("mpirun -N {v} python " + MODEL, "gpus_per_node", 4),  # Open MPI: per node
    ("mpirun -np 16 --map-by ppr:{v}:node python " + MODEL, "gpus_per_node", 4),
    ("srun -N {v} --ntasks-per-node 8 python " + MODEL, "nodes", 4),
    ("srun --nodes={v} --ntasks-per-node=8 python " + MODEL, "nodes", 4),
    ("jsrun -n 8 -r {v} -a 1 python " + MODEL, "gpus_per_node", 4),
    ("torchrun --nnodes {v} --nproc_per_node 8 " + MODEL, "nodes", 4),
    ("torchrun --nnodes 2 --nproc_per_node={v} " + MODEL, "gpus_per_node", 4),
    ("accelerate launch --num_processes {v} " + MODEL, "gpus_per_node", 4),
    ("#SBATCH --nodes={v}\n#SBATCH --ntasks-per-node=8\nsrun python " + MODEL, "nodes", 4),
    ("#SBATCH -N 2\n#SBATCH --ntasks-per-node={v}\nsrun python " + MODEL, "gpus_per_node", 4),
    ("#SBATCH -N 2\n#SBATCH --gres=gpu:{v}\nsrun --ntasks-per-node=$SLURM_GPUS_ON_NODE python " + MODEL,
     "gpus_per_node", 4),
    ("#$ -l node_f={v}\nmpirun -np $((NHOSTS*8)) -npernode 8 python " + MODEL, "nodes", 4),
    ("#BSUB -nnodes {v}\njsrun -r 6 -a 1 python " + MODEL, "nodes", 4),
    ("#PBS -l select={v}:mpiprocs=8\nN=$(sort -u $PBS_NODEFILE | wc -l)\ntorchrun --nnodes $N " + MODEL, "nodes", 4),
    ("#PBS -l nodes=2:ppn={v}\ntorchrun --nnodes 2 --nproc_per_node $PBS_NUM_PPN " + MODEL, "gpus_per_node", 4),
]
NO_COUNTS = ["0", "-1", "1e9", "99999999999", "٨", "８", "4.0", "0x10"]


def launcher_of(text: str) -> tuple[dict, list[str]]:
    imported = import_source("#!/bin/bash\n" + text + "\n", "train.sh")
    return imported.launcher, imported.not_carried


@pytest.mark.parametrize(("template", "setting", "expected"), SOURCES)
def test_a_count_is_read_where_it_is_one(template, setting, expected):
    launcher, _ = launcher_of(template.format(v="4"))
    assert launcher.get(setting) == expected


@pytest.mark.parametrize("value", NO_COUNTS)
@pytest.mark.parametrize(("template", "setting", "expected"), SOURCES)
def test_a_value_no_launcher_takes_as_a_count_is_never_carried(template, setting, expected, value):
    launcher, _ = launcher_of(template.format(v=value))
    # not the value, not its digits read otherwise (٨ → 8), not a count derived from it
    assert setting not in launcher, (launcher, value)
    for other in ("nodes", "gpus_per_node"):
        assert other not in launcher or 1 <= launcher[other] <= MAX_COUNT


@pytest.mark.parametrize("value", ["0", "99999999999", "٨"])
def test_a_launchers_count_that_is_none_is_named(value):
    _, notes = launcher_of(f"mpirun -np {value} python " + MODEL)
    assert any(f"-np {value}: no process count" in n for n in notes), notes


def test_counts_that_leave_nodes_uneven_are_named_not_read_as_fewer_nodes():
    # 7 processes at 2 a node are 4 nodes, the last with one: was 1 node of 2 (world 2, silently)
    launcher, notes = launcher_of("mpirun -np 7 --npernode 2 python " + MODEL)
    assert "nodes" not in launcher
    assert any("-np 7 --npernode 2: 7 processes at 2 a node" in n for n in notes), notes
    launcher, notes = launcher_of("srun -n 16 -N 3 python " + MODEL)
    assert "gpus_per_node" not in launcher and any("16 processes over 3 node(s)" in n for n in notes), notes
    launcher, notes = launcher_of("srun -n 12 -N 2 --ntasks-per-node 4 python " + MODEL)
    assert any("12 processes in all are not 2 node(s) of 4" in n for n in notes), notes


@pytest.mark.parametrize("line", ["mpiexec -n 8 --ppn $GPUS", "mpirun -np 8 -npernode $(nvidia-smi -L | wc -l)",
                                  "srun -n 8 -N $NODES", "mpirun -np 8 -H $HOSTS", "jsrun -n 8 -a $PER_SET",
                                  "mpiexec -n 8 --ppn 0"])
def test_a_total_next_to_a_count_not_known_is_not_one_node(line):
    # `-n 8` alone is one node of 8; next to a per-node or node count that is not known, it is not
    launcher, notes = launcher_of(line + " python " + MODEL)
    assert launcher.get("gpus_per_node") != 8 or "nodes" in launcher, launcher
    assert any("not known without running the script" in n or "no process count" in n for n in notes), notes


def volcano(tasks: list) -> str:
    return yaml.safe_dump({"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "gpt"},
                           "spec": {"tasks": tasks}})


def task(replicas: object, gpus: object = 8) -> dict:
    return {"name": "worker", "replicas": replicas, "template": {"spec": {"containers": [
        {"name": "t", "image": "img", "command": ["torchrun", *MODEL.split()],
         "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}


@pytest.mark.parametrize("replicas", ["٤", "４", 4.0, True, -4, 10**12, "4e0", None])
def test_a_manifest_replica_count_that_is_none_is_not_carried(replicas):
    imported = import_source(volcano([task(replicas)]), "job.yaml")
    assert "nodes" not in imported.launcher, imported.launcher


@pytest.mark.parametrize("gpus", ["٨", 8.5, True, -8, 10**12])
def test_a_manifest_gpu_count_that_is_none_is_not_carried(gpus):
    imported = import_source(volcano([task(2, gpus)]), "job.yaml")
    assert "gpus_per_node" not in imported.launcher, imported.launcher


def test_pods_past_any_cluster_are_named_not_carried():
    imported = import_source(volcano([{**task(1_000_000), "name": f"w{k}"} for k in range(3)]), "job.yaml")
    assert "nodes" not in imported.launcher
    assert any("3,000,000 pods in all" in n for n in imported.not_carried), imported.not_carried


def test_pods_with_different_gpu_counts_are_named():
    # 2 pods of 8 and 2 of 4 are 24 ranks; a preset of 4 nodes × 8 would be 32, silently
    imported = import_source(volcano([task(2, 8), {**task(2, 4), "name": "small"}]), "job.yaml")
    assert "gpus_per_node" not in imported.launcher
    assert any("different numbers of GPUs (4, 8)" in n for n in imported.not_carried), imported.not_carried


def test_a_manifest_name_with_a_newline_stays_one_line_of_the_report():
    imported = import_source(volcano([{**task("${N}"), "name": "w\nkind: Pod"}]), "job.yaml")
    named = [n for n in imported.not_carried if "kind: Pod" in n]
    assert named and not any("\n" in n for n in named), named


def test_a_loop_over_a_large_node_file_ends_within_the_step_limit():
    # 100,000 host lines sorted 1,000 times: > 30 s before the filters' work was counted
    script = ("#PBS -l select=50000:mpiprocs=2\nfor i in $(seq 1 1000); do N=$(sort -u $PBS_NODEFILE | wc -l); done\n"
              "torchrun --nnodes $N " + MODEL)
    started = time.monotonic()
    with pytest.raises((UserError, ShellSyntaxError), match="steps"):
        import_source(script, "train.sh")
    assert time.monotonic() - started < 15


def test_one_reading_of_a_count():
    assert [count(w) for w in ("8", "0008", "1000000", "1000001", "0", "٨", "８", " 8", "8 ", "-8", "+8")] == \
        [8, 8, 1_000_000, None, None, None, None, None, None, None, None]
    assert count("0", least=0) == 0 and count(True) is None and count(8.0) is None and count(3) == 3


@pytest.mark.parametrize(("nodes", "said"), [("2-4", "between 2 and 4 nodes"), ("5-2", "no node range it takes"),
                                             ("0-99999999999", "no node range it takes")])
def test_an_sbatch_node_range_is_said_as_sbatch_takes_it(nodes, said):
    launcher, notes = launcher_of(f"#SBATCH --nodes={nodes}\nsrun --ntasks-per-node 8 python " + MODEL)
    assert "nodes" not in launcher and any(f"--nodes={nodes}: sbatch gives the job {said}" in n for n in notes)


def test_tasks_past_those_read_leave_the_nodes_unset_and_named():
    # 150 tasks of one pod each: only the first 100 were read, and 100 nodes carried
    imported = import_source(volcano([{**task(1), "name": f"w{k}"} for k in range(150)]), "job.yaml")
    assert "nodes" not in imported.launcher
    assert any("Volcano Job tasks: 150, of which the first 100 are read" in n for n in imported.not_carried)
    imported = import_source(volcano([{**task(1), "name": f"w{k}"} for k in range(100)]), "job.yaml")
    assert imported.launcher["nodes"] == 100
