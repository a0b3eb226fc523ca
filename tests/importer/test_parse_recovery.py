"""A part of a script that the grammar cannot read (bash can) no longer costs the rest: the lines around it are read
on their own, the part is named with its lines, what it may assign is unknown (never resolved), and a training
command in it is said to be there."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from launcher.errors import UserError
from launcher.importer.bash_subset import MARK, read_script, show
from launcher.importer.build import import_source

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash judges what the grammar cannot read")

MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
         "--micro-batch-size 1 --global-batch-size 8 --train-iters 4 --mock-data --tokenizer-type NullTokenizer "
         "--vocab-size 128")
TRAIN = f"torchrun --nproc_per_node 8 pretrain_gpt.py {MODEL} --tensor-model-parallel-size $TP"

# constructs bash runs that tree-sitter-bash 0.25 cannot read (each swallowed the rest of the script before)
UNREADABLE = {
    "for with braces": "for i in 1 2; { echo $i; }",
    "for with braces over lines": "for i in 1 2; {\n  echo $i\n}",
    "braces after a function's for": "f() {\n  for i in 1 2; { echo $i; }\n}",
    "upper-casing and a tilde": "echo ${X,,} ${X~}",
}


def notes(reading) -> str:
    return " | ".join(why for _, why in reading.skipped)


@pytest.mark.parametrize("part", list(UNREADABLE.values()), ids=list(UNREADABLE))
def test_the_training_command_around_an_unreadable_part_is_read(part):
    script = f"A=1\nTP=2\n{part}\nB=3\n{TRAIN}\n"
    assert subprocess.run(["bash", "-n"], input=script.encode(), check=False).returncode == 0
    reading = read_script(script)
    command = reading.commands[-1]
    assert [show(w) for w in command.argv[-2:]] == ["--tensor-model-parallel-size", "2"]
    last = 2 + part.count("\n") + 1
    through = "" if last == 3 else f", through line {last}"
    assert f"not read{through}: bash accepts this" in notes(reading)
    assert [line for line, why in reading.skipped if "not read" in why] == [3]
    imported = import_source(script, "train.sh")
    assert imported.settings["tensor_model_parallel_size"] == 2 and not imported.lost


@pytest.mark.parametrize("part", [
    "for i in 1 2; { TP=$i; }",
    "if [ -n \"$X\" ]; then\n  for i in 1 2; { echo $i; }\n  TP=4\nfi",
    "for i in 1 2; { echo $i; } && \\\n  TP=8",
    "while read -r l; do\n  for i in 1; { echo; }\n  export TP=4\ndone < cfg",
])
def test_what_an_unreadable_part_may_assign_is_unknown_never_resolved(part):
    script = f"TP=2\n{part}\n{TRAIN}\n"
    reading = read_script(script)
    assert MARK in reading.commands[-1].argv[-1]  # not 2: the part may have changed it
    imported = import_source(script, "train.sh")
    assert any("--tensor-model-parallel-size" in loss for loss in imported.lost)


def test_the_part_runs_to_the_words_that_close_what_it_opened():
    # the `fi` and `done` after the broken line belong to it: TP=4 inside is not read as run
    script = f"TP=2\nif [ -n \"$X\" ]; then\n  for i in 1; {{ echo; }}\n  TP=4\nfi\nPP=1\n{TRAIN}\n"
    reading = read_script(script)
    assert "not read, through line 5:" in notes(reading)
    assert reading.shell.scalars["PP"] == "1"


def test_a_string_or_here_document_that_goes_on_past_the_broken_line_stays_whole():
    script = (f"TP=2\nX=\"a\nfor i in 1; {{ b }}\nc\"\nfor i in 1 2; {{ echo $i; }}\ncat <<EOF\nTP=8\n"
              f"for i in 1; {{ x; }}\nEOF\n{TRAIN}\n")
    reading = read_script(script)
    assert show(reading.commands[-1].argv[-1]) == "2"
    assert reading.shell.scalars["X"] == "a\nfor i in 1; { b }\nc"
    assert [line for line, why in reading.skipped if "not read" in why] == [5]


def test_a_training_command_in_an_unreadable_part_is_named_even_when_another_is_read():
    script = f"TP=2\nif [ -n \"$X\" ]; then\n  for i in 1; {{ python pretrain_gpt.py --num-layers 8; }}\nfi\n{TRAIN}\n"
    imported = import_source(script, "train.sh")
    assert any("lines 2-4" in loss and "training command" in loss for loss in imported.lost)


def test_a_function_defined_in_an_unreadable_part_is_not_run_as_another_program():
    script = f"TP=2\nrun() {{\n  for i in 1; {{ echo; }}\n  {TRAIN}\n}}\nrun\n"
    with pytest.raises(UserError) as caught:
        import_source(script, "train.sh")
    message = caught.value.problems[0].message
    assert "lines 2-5" in message and "near line 3" in message
    reading = read_script("f() {\n  for i in 1; { echo; }\n}\nW=$(f)\n" + TRAIN.replace("$TP", "$W"))
    assert MARK in reading.commands[-1].argv[-1]  # what f prints is not known


@pytest.mark.parametrize("timed", ["time { %s; }", "time -p {\n  %s\n}", "time ( %s )"])
def test_time_before_a_group_times_what_it_runs(timed):
    reading = read_script("TP=2\n" + timed % TRAIN + "\n")
    assert [show(w) for w in reading.commands[-1].argv[-2:]] == ["--tensor-model-parallel-size", "2"]
    assert "not read" not in notes(reading)


def test_an_extglob_pattern_after_a_single_equals_is_read_as_a_test():
    # `=` was rewritten `==` for the grammar, which reads an extglob pattern after `=` only
    script = f"shopt -s extglob\nTP=2\nA=x.a\nif [[ $A = *.@(a|b) ]]; then\n  TP=4\nfi\n{TRAIN}\n"
    reading = read_script(script)
    assert "not read" not in notes(reading)
    assert MARK in reading.commands[-1].argv[-1]  # the extglob is not decided: the if is named, TP unknown
    assert any(u.what.startswith("if [[ $A = *.@(a|b) ]]") for u in reading.undecided)


@pytest.mark.parametrize("code", ['W=`echo "a \\`echo b\\`"`', "W=`echo \\$HOME-x`", 'W=`echo a\\\\b`'])
def test_backslashes_inside_backticks_are_removed_before_the_command_is_read(code):
    reading = read_script(code + "\ntorchrun pretrain_gpt.py $W\n")
    real = subprocess.run(["bash", "-c", code + "\nprintf '%s\\n' $W"], capture_output=True, text=True, timeout=10,
                          env={"HOME": "/h", "PATH": "/usr/bin:/bin"}, check=False)
    ours = [show(w) for w in reading.commands[-1].argv[2:]]
    assert ours == real.stdout.splitlines() or any("${" in w for w in ours)
    assert "`" not in " ".join(ours)


@pytest.mark.parametrize("line", ["for i in 1 2; { echo $i; }\n", "fi\n", "for i in 1; {\n"])
def test_many_unreadable_parts_end_in_bounded_time(line):
    # every part costs a parse of the text after it: the parses are bounded by a budget, past which the rest is one
    # part not read
    text = line * (300_000 // len(line)) + "TP=2\n" + TRAIN + "\n"
    began = time.monotonic()
    try:
        read_script(text)
    except Exception as exc:  # a bound reached is said as such, never a traceback
        assert type(exc).__name__ == "ShellSyntaxError", exc
    assert time.monotonic() - began < 10


# -- a here-document no line ends ---------------------------------------------------------------------------------

@pytest.mark.parametrize("line", ["x ${A\n", "${\n", "$(\n", "a $(date) ${B:-c} \\\n", "x \\ \n", "\tcat <<B\n"])
def test_a_here_document_never_ended_takes_the_rest_and_ends_in_bounded_time(line):
    # `cat <<A` and no line A: bash reads every later line as the document's text (it warns). 4,000 lines of
    # `x ${A` after it took 78 s to read, and one of `$(` lines was imported as a training command bash never runs
    text = "TP=2\ncat <<A\n" + line * 3_000 + TRAIN + "\n"
    began = time.monotonic()
    with pytest.raises(UserError) as caught:
        import_source(text, "train.sh")
    assert time.monotonic() - began < 10
    message = caught.value.problems[0].message
    assert "here-document of line 2 is never ended" in message


def test_a_here_document_never_ended_is_its_text_not_commands():
    reading = read_script(f"TP=2\nX=$(cat <<'EOF'\n{TRAIN}\n")
    assert reading.commands == [] and reading.unended_heredocs == [2]
    reading = read_script(f"TP=2\ncat <<EOF\nTP=4\nEOF\n{TRAIN}\n")  # ended: read on after it
    assert show(reading.commands[-1].argv[-1]) == "2" and reading.unended_heredocs == []


def test_a_here_document_marker_in_a_comment_or_a_string_ends_nothing():
    for line in ("# usage: cat <<EOF", "echo 'cat <<EOF'", 'echo "a <<EOF"'):
        reading = read_script(f"TP=2\n{line}\n{TRAIN}\n")
        assert show(reading.commands[-1].argv[-1]) == "2" and reading.unended_heredocs == []


@pytest.mark.parametrize("part", ['for i in 1; { : "${TP:=8}"; }', "for i in 1; { eval \"TP=8\"; }",
                                  "for i in 1; { source ./model.sh; }"])
def test_every_way_an_unreadable_part_may_set_a_name_makes_it_unknown(part):
    # (a file sourced there is as one that could not be read: an unset name is unknown from then on, not empty)
    scripts = [f"{part}\n{TRAIN}\n"] + ([f"TP=2\n{part}\n{TRAIN}\n"] if "source" not in part else [])
    for script in scripts:
        reading = read_script(script)
        assert MARK in reading.commands[-1].argv[-1], script
