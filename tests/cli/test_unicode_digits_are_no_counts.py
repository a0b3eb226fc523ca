"""A count read from text (a checkpoint tracker, a script's `shift N`, sacct's exit code, a --nodes value) is ASCII
digits only: '²' is a digit to str.isdigit() but not to int(), and each such reader ended in an internal error."""

from launcher import cli
from launcher.pipeline.node_range import parse_nodes
from launcher.runs.triage import exit_status

SCRIPT = ("#!/bin/bash\nset -- a b c\nshift {n}\nfor x in 1 2; do break {n}; done\n"
          "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
          "--seq-length 32 --max-position-embeddings 32 --micro-batch-size 1 --global-batch-size 8 --lr 1e-4 "
          "--train-iters 10 --eval-interval 5 --eval-iters 1 --mock-data --tokenizer-type NullTokenizer "
          "--vocab-size 100\n")


def test_a_tracker_of_unicode_digits_is_no_iteration(tmp_path, capsys):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("²")
    assert cli.main(["345m", "--dry-run", "--set", f"load={tmp_path}"]) in (0, 2)
    assert "internal error" not in capsys.readouterr().err


def test_a_scripts_shift_and_break_of_unicode_digits_import(tmp_path, capsys):
    for n in ("²", "٣", "1"):
        script = tmp_path / "train.sh"
        script.write_text(SCRIPT.format(n=n))
        assert cli.main(["import", str(script)]) in (0, 2), n
        assert "internal error" not in capsys.readouterr().err, n


def test_exit_codes_and_node_counts_of_unicode_digits_are_not_numbers():
    assert exit_status("0:²") == 0 and exit_status("²:0") is None and exit_status("1:0") == 1
    assert exit_status("0:9") == 137
    try:
        parse_nodes("²")
    except Exception as error:  # the user's input: a UserError, not int()'s ValueError
        assert type(error).__name__ == "UserError"
