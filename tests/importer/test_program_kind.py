"""A Python program that builds the training command, or a Jupyter notebook, names pretrain_gpt.py but is no shell
script: the import says which it is and how to import the command it runs (exit 2), where it read a Python list of
flags as flags with commas, or said that no line runs pretrain_gpt.py."""

from __future__ import annotations

import json

import pytest

from launcher.errors import UserError
from launcher.importer.build import import_source

FLAGS = ["--num-layers", "24", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "1024",
         "--max-position-embeddings", "1024", "--micro-batch-size", "4", "--global-batch-size", "32"]
LIST_LAUNCHER = "import subprocess\ncmd = [\n    \"torchrun\", \"--nproc_per_node\", \"8\", \"pretrain_gpt.py\",\n" + \
    "".join(f"    \"{word}\",\n" for word in FLAGS) + "]\nsubprocess.run(cmd, check=True)\n"
FSTRING_LAUNCHER = ("#!/usr/bin/env python3\nimport os\n\ndef main(tp=2):\n"
                    "    os.system(f\"torchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size {tp} "
                    + " ".join(FLAGS) + "\")\n\nmain()\n")
NO_IMPORT = "#!/usr/bin/python\nargs = ['--num-layers', '2']\nprint('torchrun pretrain_gpt.py', *args)\n"
NOTEBOOK = json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                  "source": ["!torchrun --nproc_per_node 2 pretrain_gpt.py \\\n",
                                             "    " + " ".join(FLAGS)]}],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.mark.parametrize(("text", "kind"), [(LIST_LAUNCHER, "a Python program"), (FSTRING_LAUNCHER, "a Python program"),
                                            (NO_IMPORT, "a Python program"), (NOTEBOOK, "a Jupyter notebook")])
def test_a_python_launcher_or_a_notebook_is_named_for_what_it_is(text, kind):
    with pytest.raises(UserError) as raised:
        import_source(text, "launch")
    (problem,) = raised.value.problems
    assert problem.message.startswith(f"cannot read the script: it is {kind}") and "import" in problem.hint


@pytest.mark.parametrize("text", [
    "TP=2\nPP=4\ntorchrun --nproc_per_node 8 pretrain_gpt.py --tensor-model-parallel-size $TP " + " ".join(FLAGS),
    "python - <<EOF\nimport torch\nprint(torch.__version__)\nEOF\ntorchrun pretrain_gpt.py " + " ".join(FLAGS),
    "#!/bin/bash\n# import the data first\nfrom=/data\ntorchrun pretrain_gpt.py --data-path $from/x " + " ".join(FLAGS),
])
def test_a_shell_script_is_still_read_as_one(text):
    assert import_source(text, "train.sh").settings["num_layers"] == 24
