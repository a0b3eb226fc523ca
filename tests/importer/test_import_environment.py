"""`launch import SCRIPT --env NAME=VALUE`: the script read as `NAME=VALUE bash SCRIPT` runs it. A variable the
script reads and does not set is otherwise unknown (its value, and every branch on it, lost with its line)."""

from __future__ import annotations

import pytest
import yaml

from launcher.errors import UserError
from launcher.importer.build import import_source
from launcher.importer.run import parse_environment

SCRIPT = """#!/bin/bash
TP=${TP:-1}
if [ -z "$FP32" ]; then PRECISION=--bf16; else PRECISION=; fi
torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 \\
  --group-query-attention --num-query-groups $GQA --tensor-model-parallel-size $TP $PRECISION \\
  --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 32 --lr 1e-4 \\
  --train-iters 100 --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 --eval-interval 10 --eval-iters 1
"""


def test_without_the_variables_their_values_and_branches_are_lost_with_a_way_to_give_them():
    imported = import_source(SCRIPT, "train.sh")
    assert any("$GQA is not known" in line and "--env GQA=VALUE" in line for line in imported.lost)
    assert any("FP32" in line for line in imported.lost)  # the branch that decides --bf16
    assert imported.settings["tensor_model_parallel_size"] == 1


def test_the_variables_given_decide_values_defaults_and_branches_as_bash_would():
    imported = import_source(SCRIPT, "train.sh", environment={"GQA": "4", "TP": "2", "FP32": ""})
    assert imported.lost == []
    settings = imported.settings
    assert (settings["num_query_groups"], settings["tensor_model_parallel_size"], settings["bf16"]) == (4, 2, True)
    fp32 = import_source(SCRIPT, "train.sh", environment={"GQA": "4", "FP32": "1"})
    assert "bf16" not in fp32.settings and fp32.lost == []


def test_the_preset_says_what_it_was_read_with_and_no_secret_in_clear():
    token = "hf_" + "a1b2c3d4e5" * 4
    imported = import_source(SCRIPT, "train.sh", environment={"GQA": "4", "FP32": "", "HF_TOKEN": token})
    first = imported.text.splitlines()[0]
    assert "run with --env GQA=4 FP32='' HF_TOKEN=<redacted>" in first
    assert token not in imported.text


@pytest.mark.parametrize("word", ["GQA", "=4", "1X=2", "A-B=1", "A B=1"])
def test_an_assignment_that_is_not_a_shell_variable_is_refused(word):
    with pytest.raises(UserError) as caught:
        parse_environment([word])
    assert "--env NAME=VALUE" in caught.value.render()


def test_an_empty_value_is_a_set_empty_variable():
    assert parse_environment(["FP32=", "X=a=b"]) == {"FP32": "", "X": "a=b"}


def test_a_yaml_mapping_of_flags_takes_no_environment():
    with pytest.raises(UserError):
        import_source("MODEL_ARGS:\n  --num-layers: 2\n", "flags.yaml", environment={"A": "1"})


def test_an_undecided_branch_names_the_callers_variables_that_decide_it_and_only_those():
    text = SCRIPT.replace("TP=${TP:-1}\n", "TP=${TP:-1}\nif [ -e \"$CKPT/latest\" ]; then TP=4; fi\n")
    lost = import_source(text, "train.sh", environment={"GQA": "4"}).lost
    (fp32,) = [line for line in lost if "FP32" in line]
    assert "--env FP32=VALUE" in fp32
    (file_test,) = [line for line in lost if "CKPT" in line]  # a file decides it: no variable would
    assert "--env" not in file_test


@pytest.mark.parametrize(("assigns", "offered"), [
    ("GQA=${GQA:-$N}", True),  # a default: the caller's GQA decides it
    ("GQA=${GQA=$N}", True),
    ("GQA=$(( N * 2 ))", False),  # the script computes it: --env GQA=4 is overwritten, the loss stays
    ("read -r GQA < groups.txt", False),
    ('GQA=""; for g in $(cat groups.txt); do GQA="$GQA $g"; done', False),
])
def test_the_env_way_is_offered_only_for_a_variable_the_callers_environment_decides(assigns, offered):
    script = SCRIPT.replace("TP=${TP:-1}", f"TP=${{TP:-1}}\n{assigns}")
    line = next(line for line in import_source(script, "train.sh").lost if "--num-query-groups" in line)
    assert ("--env GQA=VALUE" in line) == offered, line
    if offered:  # followed, the hint arrives: nothing is lost
        assert import_source(script, "train.sh", environment={"GQA": "4", "FP32": ""}).lost == []


def test_the_preset_is_named_after_the_script_whatever_the_environment_it_was_read_with():
    script = "torchrun --nproc_per_node 2 pretrain_gpt.py --num-layers $L --hidden-size 64 --num-attention-heads 4\n"
    imported = import_source(script, "runs/train.sh", environment={"L": "2", "DATA_PATH": "/data/corpus/"})
    described = yaml.safe_load(imported.text)["description"]
    assert described == "imported from train.sh"
    assert "DATA_PATH=/data/corpus/" in imported.text.splitlines()[0]  # the header still says what it was read with


COPIED = """#!/bin/bash
export DATA_PREFIX=$DATA_PREFIX
GQA="${GQA}"
torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 \\
  --group-query-attention --num-query-groups $GQA --seq-length 1024 --max-position-embeddings 1024 \\
  --micro-batch-size 4 --global-batch-size 32 --lr 1e-4 --train-iters 100 --eval-interval 10 --eval-iters 1 \\
  --data-path $DATA_PREFIX/datasets/gpt2_text_document --tokenizer-type NullTokenizer --vocab-size 50257
"""


def test_a_variable_the_script_only_copies_from_its_caller_is_the_callers_not_empty():
    # `X=$X` sets nothing of the script's own: bash gives the caller's value, which only --env knows here
    imported = import_source(COPIED, "train.sh")
    assert any("$GQA is not known" in line and "--env GQA=VALUE" in line for line in imported.lost)
    assert "num_query_groups" not in imported.settings
    assert imported.settings.get("data_path") != ["/datasets/gpt2_text_document"]
    given = import_source(COPIED, "train.sh", environment={"GQA": "4", "DATA_PREFIX": "/data"})
    assert given.lost == [] and given.settings["num_query_groups"] == 4
    assert "/data/datasets/gpt2_text_document" in str(given.text)
