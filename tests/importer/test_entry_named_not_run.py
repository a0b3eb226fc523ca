"""A command that names pretrain_gpt.py is not always one that runs it: Fugaku's jobs stage the file into the
node-local cache (`llio_transfer $DSF_HOME/pretrain_gpt.py`) before `mpirun … bash inner.sh` runs it, and a YAML
file read as bash has `training_script: pretrain_gpt.py`. Such a line was imported as the training command: a preset
of no settings, "round trip: equal", and where it came after the real command it replaced it."""

from __future__ import annotations

import pytest

from launcher.errors import UserError
from launcher.importer.build import import_source

MODEL = "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512"
RUN = f"torchrun --nproc_per_node 8 pretrain_gpt.py {MODEL}"


@pytest.mark.parametrize("names", [
    "llio_transfer ${DSF_HOME}/pretrain_gpt.py",
    "md5sum pretrain_gpt.py",
    "dos2unix /work/Megatron-LM/pretrain_gpt.py",
    "training_script: pretrain_gpt.py",
])
def test_a_program_given_the_entrys_path_does_not_run_it(names):
    script = f"#!/bin/bash\nDSF_HOME=/vol/dsf\n{RUN}\n{names}\n"  # after the run: it was imported in its place
    imported = import_source(script, "train.sh")
    assert imported.settings["num_layers"] == 4 and imported.settings["hidden_size"] == 256
    assert imported.launcher.get("gpus_per_node") == 8
    assert any("not the training command" in note for note in imported.not_carried)


def test_a_script_that_only_stages_the_entry_and_runs_another_script_names_that_script():
    script = ("#!/bin/bash\n#PJM -L node=4\nllio_transfer /vol/dsf/pretrain_gpt.py\n"
              "mpirun -n 4 -x PATH --vcoordfile /vol/rankmap bash 13b_inner.sh \"$LP\"\n")
    with pytest.raises(UserError) as caught:
        import_source(script, "outer.sh")
    message = caught.value.problems[0].message
    assert "13b_inner.sh" in message and "does not open" in message


@pytest.mark.parametrize("runs", [
    "python pretrain_gpt.py",  # a runner with no flags: still the run (its settings are all missing)
    "$LAUNCHER pretrain_gpt.py",  # a program not known may start python
    "./launch.sh pretrain_gpt.py",  # a launch script of the user's
    "srun --ntasks-per-node 8 pretrain_gpt.py",
])
def test_a_runner_given_the_entry_alone_still_runs_it(runs):
    imported = import_source(f"#!/bin/bash\n{runs}\n", "train.sh")
    assert not any(runs in note and "not the training command" in note for note in imported.not_carried)
