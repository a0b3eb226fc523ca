"""A flag whose value is a variable a job launcher sets in each process (`--local-rank $SLURM_LOCALID`), where the
pin reads that very value from the environment by default (local_rank = $LOCAL_RANK): the launcher gives it to every
process it starts, so the flag is a note, not a loss. Any other variable, or one the script itself decides, stays
lost."""

from __future__ import annotations

import re

import pytest

from launcher.importer.build import import_source
from launcher.importer.per_process import PIN_DEFAULT_FROM
from launcher.megatron.pin import megatron_path

HEAD = """#!/bin/bash
{setup}
torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 \\
  --seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --train-iters 10 \\
  --lr 1e-4 --mock-data --tokenizer-type NullTokenizer --vocab-size 1000 {flag}
"""


def imported(flag: str, setup: str = ""):
    return import_source(HEAD.format(setup=setup, flag=flag), "train.sh")


@pytest.mark.parametrize(("flag", "setup", "variable"), [
    ("--local-rank ${LOCAL_RANK}", "", "LOCAL_RANK"),
    ("--local-rank=$SLURM_LOCALID", "", "SLURM_LOCALID"),
    ("--local-rank $OMPI_COMM_WORLD_LOCAL_RANK", "", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("--local-rank \"$MPI_LOCALRANKID\"", "", "MPI_LOCALRANKID"),
    # the script's own name for the launcher's variable, copied once and for all, possibly through a second name
    ("--local-rank ${LOCAL_RANK}", "LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("--local-rank $LR", "L=$PALS_LOCAL_RANKID\nLR=$L", "PALS_LOCAL_RANKID"),
])
def test_the_launchers_per_process_local_rank_is_a_note_not_a_loss(flag, setup, variable):
    result = imported(flag, setup)
    assert result.lost == []
    assert "local_rank" not in result.settings
    said = [n for n in result.not_carried if "given by the launcher per process" in n]
    assert len(said) == 1 and f"${variable}" in said[0]


@pytest.mark.parametrize(("flag", "setup"), [
    ("--local-rank $MY_GPU", ""),  # not a variable a launcher sets
    ("--local-rank $SLURM_PROCID", ""),  # the global rank, not the local one
    ("--local-rank ${SLURM_LOCALID}1", ""),  # a value made from it is another value
    ("--local-rank $LOCAL_RANK", "LOCAL_RANK=$SLURM_NODEID"),  # the name, but a copy of another value
    ("--local-rank $LOCAL_RANK", "if [ -n \"$X\" ]; then LOCAL_RANK=3; fi"),  # a branch not decided may set it
    ("--local-rank $LR", "LR=$SLURM_LOCALID\nLR=$MY_GPU"),  # set otherwise afterwards
    ("--local-rank $LR", "if [ -n \"$X\" ]; then LR=$SLURM_LOCALID; fi"),  # a copy made on one path only
])
def test_any_other_unknown_value_stays_lost(flag, setup):
    result = imported(flag, setup)
    assert any(line.startswith("--local-rank") for line in result.lost)
    assert not any("given by the launcher" in n for n in result.not_carried)


def test_the_older_spelling_is_a_note_whatever_its_value():
    # --local_rank is the flag of Megatron releases before the pin: torch.distributed.launch's per-process rank
    result = imported("--local_rank=$SLURM_LOCALID")
    assert result.lost == [] and "local_rank" not in result.settings
    assert any(n.startswith("--local_rank=${SLURM_LOCALID}") for n in result.not_carried)


def test_a_flag_whose_pin_default_is_not_the_environments_stays_lost():
    result = imported("--seed $SLURM_LOCALID")  # a per-process variable, but --seed's default is 1234
    assert any("--seed" in line for line in result.lost)


def test_a_known_value_is_carried_as_given():
    assert imported("--local-rank $SLURM_LOCALID", "").settings.get("local_rank") is None
    result = import_source(HEAD.format(setup="", flag="--local-rank $SLURM_LOCALID"), "train.sh",
                           environment={"SLURM_LOCALID": "2"})
    assert result.settings["local_rank"] == 2 and result.lost == []


@pytest.mark.megatron
@pytest.mark.parametrize(("dest", "variable"), sorted(PIN_DEFAULT_FROM.items()))
def test_the_pin_reads_each_such_setting_from_that_variable_by_default(dest, variable):
    config = megatron_path(None, None) / "megatron" / "training" / "config" / "common_config.py"
    if not config.is_file():
        pytest.skip("no Megatron-LM checkout at the pin (set MEGATRON_LM_PATH)")
    default = re.compile(rf"^\s*{dest}\s*:.*os\.getenv\([\"']{variable}[\"']", re.M)
    assert default.search(config.read_text()), (dest, variable)
