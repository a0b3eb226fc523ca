"""Templates' placeholders (`CHECKPOINT_PATH=<Specify path>`, `DATA_PATH=/data/<Specify path here>_text_document`)
are, to bash, redirections: `<Specify` reads the file `Specify`, `>` writes one. Where the operator ends the line,
bash stops the script with a syntax error; where the words around it make a command, the assignment is that
command's and is not kept; under `set -e` a missing input file ends the script. Each is compared with real bash."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.importer.bash_subset import read_script, show
from tests.importer.test_bash_runs import agree, bash_runs, needs_bash, read_runs

T = "torchrun pretrain_gpt.py"

# the redirection operator ends its line: bash stops with "syntax error near unexpected token `newline'"
SYNTAX_ERRORS = [
    (f"CKPT=<Specify path>\n{T} --load $CKPT\n", 1, "CKPT"),
    (f"A=1\nDATA_PATH=/data/<Specify path here>\n{T} --data-path $DATA_PATH --a $A\n", 2, "DATA_PATH"),
    (f"MASTER_ADDR=<Specify Your Master Addr>\n{T} --master $MASTER_ADDR\n", 1, "MASTER_ADDR"),
    (f"LOG=x 2>\n{T} --log $LOG\n", 1, "LOG"),
]


@needs_bash
@pytest.mark.parametrize(("script", "line", "name"), SYNTAX_ERRORS)
def test_a_redirection_that_ends_its_line_stops_the_script(script, line, name, tmp_path):
    assert bash_runs(script, tmp_path) == []  # bash never reaches the training command
    reading = read_script(script, [], tmp_path / "train.sh")
    assert reading.stopped == (line, "a syntax error"), reading.stopped
    assert any(at == line and "bash cannot parse this" in why for at, why in reading.skipped), reading.skipped
    # the training command is still read (said to be past the stop), with the placeholder's variable unknown
    [command] = [c for c in reading.commands if c.argv[0] == "torchrun"]
    assert f"${{{name}}}" in [show(word) for word in command.argv], command.argv
    assert any(name in item.names for item in reading.undecided), reading.undecided


def test_the_next_lines_command_is_not_taken_for_the_redirections_target(tmp_path):
    script = f"DATA_PATH=/data/<Specify path here>\n{T} --num-layers 2\n"
    assert read_runs(script, tmp_path) == [["pretrain_gpt.py", "--num-layers", "2"]]


# bash accepts these: the target is on the operator's line, or a line continuation brings it there
ACCEPTED = [
    f"echo x > \\\nout.log\n{T} --a 1\n",
    f"DATA=/data/<Specify path and file prefix>_text_document\n{T} --data $DATA --a 1\n",
    f"DATA=/data/<path>_text_document\n{T} --data $DATA --a 1\n",
    f"X=4 <in.txt\n{T} --num-layers $X\n",
]


@needs_bash
@pytest.mark.parametrize("script", ACCEPTED)
def test_placeholders_bash_reads_as_redirections_give_what_bash_runs(script, tmp_path):
    agree(script, tmp_path)
    assert read_script(script, [], tmp_path / "train.sh").stopped is None


# set -e: a missing input file ends the script there; whether it is missing is decided where the script runs
SET_E_INPUTS = [
    (f"set -e\nDATA=/data/<path>_text_document\n{T} --data $DATA\n", "path"),
    (f"set -e\nX=4 <in.txt\n{T} --num-layers $X\n", "in.txt"),
    (f"set -euo pipefail\nsort < hosts.txt\n{T} --num-layers 2\n", "hosts.txt"),
]


@needs_bash
@pytest.mark.parametrize(("script", "file"), SET_E_INPUTS)
def test_under_set_e_an_input_file_not_seen_may_end_the_script(script, file, tmp_path):
    assert bash_runs(script, tmp_path) == []
    (tmp_path / file).write_text("")
    there = bash_runs(script, tmp_path)
    assert there and read_runs(script, tmp_path) == there  # read as bash runs it where the file is there
    reading = read_script(script, [], tmp_path / "train.sh")
    said = [why for at, why in reading.skipped if at == 2]
    assert said and f"reads {file}" in said[0] and "end the script" in said[0], reading.skipped


def test_an_input_file_the_script_wrote_or_without_set_e_is_read_without_a_fork(tmp_path: Path):
    for script in (f"set -e\necho 4 > tp.txt\nread TP < tp.txt\n{T} --tp $TP\n",
                   f"X=4 <in.txt\n{T} --num-layers $X\n",
                   f"set -e\nX=$(wc -l < in.txt)\n{T} --num-layers 2\n"):
        reading = read_script(script, [], tmp_path / "train.sh")
        assert not [why for _, why in reading.skipped if "cannot see" in why], (script, reading.skipped)
