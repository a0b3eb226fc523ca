"""A Makefile whose recipe runs pretrain_gpt.py: make substitutes its variables into the recipe's text before the
shell reads it, a `NAME=VALUE` argument (`make train TP=4`) over every assignment, `?=` under the environment's."""

from __future__ import annotations

from launcher.importer.build import import_source

MAKEFILE = """\
TP ?= 2
NODES ?= 1
MODEL = --num-layers $(LAYERS) --hidden-size 1024 --num-attention-heads 16
LAYERS := 24
TRAIN = --micro-batch-size 4 --global-batch-size 64 --lr 1e-4 --train-iters 100 \\
\t--seq-length 1024 --max-position-embeddings 1024 --mock-data --bf16 --eval-interval 10
export NCCL_DEBUG = INFO

.PHONY: train lint
lint:
\truff check .
train: data
\t@echo "training on $$(hostname)"
\ttorchrun --nproc_per_node 8 --nnodes $(NODES) pretrain_gpt.py $(MODEL) $(TRAIN) \\
\t\t--tensor-model-parallel-size $(TP) --exit-signal-handler
"""


def test_a_makefile_recipe_is_read_as_make_hands_it_to_the_shell():
    found = import_source(MAKEFILE, "Makefile")
    assert found.settings["num_layers"] == 24 and found.settings["tensor_model_parallel_size"] == 2
    assert found.settings["seq_length"] == 1024 and found.launcher == {"gpus_per_node": 8, "nodes": 1}
    assert found.lost == [] and found.env.get("NCCL_DEBUG") == "INFO"
    assert not any("ruff" in line for line in found.not_carried)  # another target's recipe


def test_make_arguments_and_the_environment_set_its_variables():
    assert import_source(MAKEFILE, "Makefile", ["train", "TP=4", "LAYERS=32"]).settings["num_layers"] == 32
    assert import_source(MAKEFILE, "Makefile", ["TP=4"]).settings["tensor_model_parallel_size"] == 4
    under = import_source(MAKEFILE, "Makefile", environment={"TP": "8", "NODES": "2"})
    assert under.settings["tensor_model_parallel_size"] == 8 and under.launcher["nodes"] == 2


def test_a_bash_script_with_tabs_and_colons_is_still_bash():
    script = ("#!/bin/bash\nMASTER=node1\ntorchrun --nproc_per_node 8 --rdzv_endpoint $MASTER:29500 \\\n"
              "\tpretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
              "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --lr 1e-4 --train-iters 4 "
              "--mock-data\n")
    for text in (script, script.replace("#!/bin/bash\n", "")):
        assert import_source(text, "train.sh").settings["num_layers"] == 2


def test_variables_that_double_at_each_level_end_in_a_bounded_time():
    import time

    levels = "".join(f"V{i} = $(V{i + 1})$(V{i + 1})\n" for i in range(60)) + "V60 = --lr 1e-4\n"
    started = time.monotonic()
    try:
        import_source(levels + "train:\n\ttorchrun pretrain_gpt.py $(V0)\n", "Makefile")
    except Exception as exc:  # an answer (an error) is fine; a hang is not
        assert type(exc).__name__ == "UserError", exc
    assert time.monotonic() - started < 10


def test_many_continuations_and_appends_are_read_in_linear_time():
    import time

    started = time.monotonic()
    for body in ("A = x \\\n" * 100_000 + "\n", "A = x\n" + "A += --lr 1e-4\n" * 60_000):
        try:
            import_source(body + "train:\n\ttorchrun pretrain_gpt.py $(A)\n", "Makefile")
        except Exception as exc:  # an answer (an error) is fine; a hang is not
            assert type(exc).__name__ == "UserError", exc
    assert time.monotonic() - started < 20
