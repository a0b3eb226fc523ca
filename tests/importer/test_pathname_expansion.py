"""Pathname expansion: an unquoted word with `*`, `?` or `[…]` (written so, or an unquoted expansion's value) is, to
bash, the names of the files it matches where the script runs, and itself only where none does. The import cannot
see those files: the word is read as written and said to be undecided, and the training flag it is the value of
depends on it. Quoted, escaped or under `set -f`, the word is itself, as bash runs it."""

from __future__ import annotations

import pytest

from launcher.importer.bash_subset import read_script
from launcher.importer.build import import_source
from tests.importer.test_bash_runs import agree, bash_runs, needs_bash, read_runs

T = "torchrun pretrain_gpt.py"
MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
         "--micro-batch-size 1 --global-batch-size 8 --train-iters 10 --lr 1e-4")

GLOBS = [
    (f"{T} --data-path data/*_text_document\n", "data/web_text_document", "--data-path"),
    (f"{T} --load ckpt/iter_???\n", "ckpt/iter_007", "--load"),
    (f"{T} --load ckpt/iter_[0-9]\n", "ckpt/iter_7", "--load"),
    (f"P='data/*_doc'\n{T} --data-path $P\n", "data/a_doc", "--data-path"),
    (f"P=data/*_doc\n{T} --data-path=$P\n", "--data-path=data/a_doc", "--data-path"),  # the whole word matches
]


@needs_bash
@pytest.mark.parametrize(("script", "file", "flag"), GLOBS)
def test_a_word_bash_matches_against_files_is_undecided(script, file, flag, tmp_path):
    literal = bash_runs(script, tmp_path)  # no file matches: the word itself
    assert read_runs(script, tmp_path) == literal
    (tmp_path / file).parent.mkdir(exist_ok=True)
    (tmp_path / file).write_text("")
    assert bash_runs(script, tmp_path) != literal  # a file matches: its name instead
    reading = read_script(script, [], tmp_path / "train.sh")
    [command] = [c for c in reading.commands if c.argv[0] == "torchrun"]
    at = next(k for k, word in enumerate(command.argv) if word.startswith(flag))
    value = at if "=" in command.argv[at] else at + 1
    assert any("files it matches" in item.what for item in command.depends.get(value, ())), command.depends


@needs_bash
@pytest.mark.parametrize("script", [
    f"{T} --data-path 'data/*_doc' --b \"x?\" --c y\\* --d '[0-9]'\n",
    f"set -f\n{T} --data-path data/*_doc\n",
    f"set -o noglob\nP=data/*_doc\n{T} --data-path $P\n",
    f"P='data/*_doc'\n{T} --data-path \"$P\"\n",
])
def test_a_word_bash_does_not_match_against_files_is_itself(script, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a_doc").write_text("")
    agree(script, tmp_path)
    reading = read_script(script, [], tmp_path / "train.sh")
    assert not any("files it matches" in item.what for c in reading.commands for items in c.depends.values()
                   for item in items)


def test_a_model_flag_given_by_a_glob_is_lost_and_said():
    imported = import_source(f"torchrun --nproc_per_node 8 pretrain_gpt.py {MODEL} --data-path /data/*_text_document "
                             "--load /ckpt/iter_???\n", "train.sh")
    said = " | ".join(imported.not_carried)
    assert "/data/*_text_document: bash replaces the word with the names of the files it matches" in said, said
    assert "--data-path depend(s) on it" in said and "--load depend(s) on it" in said, said


def test_a_pattern_naming_no_directory_or_extension_is_kept_as_bash_passes_it():
    # Megatron's layer-frequency expression: no file of a run's directory is named like it, bash passes it as written
    imported = import_source(f"torchrun pretrain_gpt.py {MODEL} --num-experts 4 --moe-layer-freq [0]*1+[1]*1\n",
                             "train.sh")
    assert not any("files it matches" in note for note in imported.not_carried), imported.not_carried
