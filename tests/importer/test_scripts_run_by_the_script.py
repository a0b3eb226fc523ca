"""A job script that runs another script file next to it (`mpirun -n 13824 bash inner.sh` in Fugaku's outer jobs,
`srun bash train.sh`, `sbatch job.slurm`, `./run.sh`): bash runs that file, so the import reads it (never runs it),
with its arguments, the counts of the launcher around it, and only the variables exported to it. Before, the import
stopped at "no training command found … runs another script, which the import does not open"."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from launcher.errors import UserError
from launcher.importer.build import import_source

INNER = ("#!/bin/bash\nTP=${TP:-2}\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n"
         "python pretrain_gpt.py --num-layers $LAYERS --hidden-size $1 --num-attention-heads 8 "
         "--tensor-model-parallel-size $TP --seq-length 512 --max-position-embeddings 512\n")
OUTER = ("#!/bin/bash\n#SBATCH --nodes 2\nTP=8\nexport LAYERS=6\n"
         "srun --ntasks-per-node 8 bash inner.sh 4096\n")


def _imported(tmp_path: Path, outer: str, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    script = tmp_path / "outer.sh"
    script.write_text(outer)
    return import_source(outer, "outer.sh", [], path=script)


def test_the_script_a_job_runs_is_read_with_its_arguments_and_the_exported_variables(tmp_path):
    imported = _imported(tmp_path, OUTER, {"inner.sh": INNER})
    settings = imported.settings
    assert (settings["num_layers"], settings["hidden_size"]) == (6, 4096)  # exported / its own $1
    assert settings["tensor_model_parallel_size"] == 2  # TP=8 was not exported: inner.sh's own default
    assert (imported.launcher["nodes"], imported.launcher["gpus_per_node"]) == (2, 8)  # srun's and the job's
    assert imported.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"  # what inner.sh exports reaches the ranks


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_words_read_are_the_words_bash_passes(tmp_path):
    imported = _imported(tmp_path, OUTER, {"inner.sh": INNER})
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, body in {"srun": 'shift 2; exec "$@"', "python": "shift; printf '%s\\n' \"$@\""}.items():
        (stubs / name).write_text(f"#!/bin/bash\n{body}\n")
        (stubs / name).chmod(stat.S_IRWXU)
    env = {"PATH": f"{stubs}:{os.environ['PATH']}"}
    words = subprocess.run(["bash", "outer.sh"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=10).stdout.split()
    assert words == imported.script_args


@pytest.mark.parametrize(("outer", "name"), [
    ("#!/bin/bash\nexport LAYERS=6\n./run/train.sh 4096\n", "run/train.sh"),
    ("#!/bin/bash\nexport LAYERS=6\nmpirun -n 16 -x PATH numactl -N 0 bash -x inner.sh 4096\n", "inner.sh"),
    ("#!/bin/bash\nexport LAYERS=6\nsbatch -p gpu job.slurm 4096\n", "job.slurm"),
    # a command line sbatch runs as a job of its own (its --wrap string), a remote shell's
    ("#!/bin/bash\nexport LAYERS=6\nsbatch -N 2 --wrap=\"srun --ntasks-per-node 8 bash inner.sh 4096\"\n", "inner.sh"),
    ("#!/bin/bash\nexport LAYERS=6\nssh node1 \"cd run && bash inner.sh 4096\"\n", "run/inner.sh"),
])
def test_each_way_of_running_a_script_file_reads_it(tmp_path, outer, name):
    inner = INNER if name != "job.slurm" else INNER.replace("#!/bin/bash\n", "#!/bin/bash\n#SBATCH -N 4\n").replace(
        "python", "srun --ntasks-per-node 8 python")
    imported = _imported(tmp_path, outer, {name: inner})
    assert imported.settings["hidden_size"] == 4096 and imported.settings["num_layers"] == 6
    if name == "job.slurm":  # its own #SBATCH lines
        assert (imported.launcher.get("nodes"), imported.launcher.get("gpus_per_node")) == (4, 8)


def test_a_script_that_runs_itself_is_read_once(tmp_path):
    outer = "#!/bin/bash\nif [ -z \"$SLURM_JOB_ID\" ]; then sbatch outer.sh; exit; fi\n" + INNER.split("\n", 1)[1]
    imported = _imported(tmp_path, outer.replace("$LAYERS", "6").replace("$1", "1024"), {})
    assert imported.settings["hidden_size"] == 1024


@pytest.mark.parametrize("line", ["mpirun -n 4 bash missing_inner.sh", 'sbatch --wrap "bash missing_inner.sh 8"'])
def test_a_script_file_that_is_not_there_is_still_named(tmp_path, line):
    with pytest.raises(UserError) as caught:
        _imported(tmp_path, f"#!/bin/bash\n{line}\n", {})
    assert "another script, missing_inner.sh, which" in caught.value.problems[0].message
