"""List-valued flags (argparse nargs '+', '*' or a count: `--data-path 0.5 a 0.5 b`, `--recompute-modules core_attn
mlp`, `--rampup-batch-size 32 32 1000`): the import groups a training command's words as Megatron's parser does, so
a list's value words are never words without a flag, a flag after a list is still read, and what argparse would not
take (a fourth word after a three-word list, a list given as `--flag=a b`) is named as lost. Checked against a parser
built from the pin's own argument table (launcher/data/megatron_args.json), flags, nargs and switches as the pin has
them."""

from __future__ import annotations

import argparse
import contextlib
import io

from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.importer.flags import read_flags
from launcher.megatron.args import catalog

ARGS = catalog()
LISTS = sorted(d for d, a in ARGS.items() if a.nargs is not None)
SCALARS = ["lr", "num_layers", "tokenizer_type", "seq_length"]
SWITCHES = ["bf16", "use_distributed_optimizer", "add_bias_linear"]


def pin_parser() -> argparse.ArgumentParser:
    """The pin's flags, nargs, types and switches (a word of the wrong type or no choice stops
    argparse, as it stops Megatron)."""
    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False, exit_on_error=False)
    for dest, arg in ARGS.items():
        if arg.kind == "true":
            parser.add_argument(*arg.flags, dest=dest, action="store_true", default=None)
        elif arg.kind == "false":
            parser.add_argument(*arg.flags, dest=dest, action="store_false", default=None)
        elif arg.kind == "bool":
            on = [f for f in arg.flags if not f.startswith("--no-")]
            parser.add_argument(*on, dest=dest, action="store_true", default=None)
            parser.add_argument(*[f for f in arg.flags if f.startswith("--no-")], dest=dest, action="store_false")
        else:
            parser.add_argument(*arg.flags, dest=dest, nargs=arg.nargs, default=None,
                                type={"int": int, "float": float}.get(arg.type, str), choices=arg.choices)
    return parser


PARSER = pin_parser()


def argparse_reading(words: list[str]) -> tuple[dict[str, object], list[str]] | None:
    """(dest → the values argparse gave it, the words it did not take), or None where argparse stops with an error
    (a count list given too few words, a word of the wrong type)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            namespace, extra = PARSER.parse_known_args(words)
    except (argparse.ArgumentError, SystemExit):
        return None
    return {k: v for k, v in vars(namespace).items() if v is not None}, extra


def word_of(dest: str) -> st.SearchStrategy[list[str]]:
    arg = ARGS[dest]
    value = st.sampled_from([str(c) for c in arg.choices]) if arg.choices else st.sampled_from(
        {"int": ["1", "2", "16"], "float": ["0.5", "1e-3"]}.get(arg.type, ["a_text_document", "x", "0.3"]))
    if arg.nargs is None:
        return value.map(lambda v: [arg.flags[0], v])
    count = st.just(arg.nargs) if isinstance(arg.nargs, int) else st.integers(0 if arg.nargs == "*" else 1, 4)
    return count.flatmap(lambda n: st.lists(value, min_size=n, max_size=n)).map(lambda vs: [arg.flags[0], *vs])


commands = st.lists(st.one_of(
    st.sampled_from(LISTS).flatmap(word_of),
    # `--flag=a b`: argparse gives the flag one word, and `b` is left over
    st.sampled_from(LISTS).flatmap(word_of).filter(lambda w: len(w) > 1).map(lambda w: [f"{w[0]}={w[1]}", *w[2:]]),
    st.sampled_from(SCALARS).flatmap(word_of),
    st.sampled_from(SWITCHES).map(lambda d: [ARGS[d].flags[0]]),
    st.sampled_from(["stray", "7"]).map(lambda w: [w]),  # a word argparse leaves over, wherever it sits
), min_size=1, max_size=6).map(lambda parts: [w for part in parts for w in part])


def same(ours: object, theirs: object) -> bool:
    if isinstance(theirs, list):
        return isinstance(ours, list) and len(ours) == len(theirs) and all(map(same, ours, theirs))
    if isinstance(ours, bool) or theirs is None or isinstance(theirs, bool):
        return ours == theirs
    try:
        return float(ours) == float(theirs)  # typed by the import: 1e-3 is 0.001
    except (TypeError, ValueError):
        return str(ours) == str(theirs)


@settings(max_examples=300, deadline=None)
@given(commands)
def test_the_import_groups_list_flags_as_the_pins_parser_does(words):
    reading = argparse_reading(words)
    if reading is None:
        return  # argparse refuses the command: compared by test_a_list_given_fewer_words_than_its_count_is_lost
    theirs, extra = reading
    flags = read_flags(words)
    carried = {d: v for d, v in flags.settings.items() if d in ARGS}
    lost = [w for item in flags.of_kind("lost") for w in item.words]
    # every setting argparse reads, the import reads with the same words; nothing else
    assert set(carried) == set(theirs), (words, carried, theirs)
    for dest, value in theirs.items():
        assert same(carried[dest], value), (words, dest, carried[dest], value)
    # the words argparse leaves over are exactly those the import calls lost
    assert sorted(lost) == sorted(extra), (words, lost, extra)


def test_a_value_after_a_list_is_part_of_it_and_the_next_flag_is_read():
    flags = read_flags("--data-path 0.5 a_text_document 0.5 b_text_document --lr 1e-4 --recompute-modules "
                       "core_attn mlp --bf16".split())
    assert flags.settings["data_path"] == ["0.5", "a_text_document", "0.5", "b_text_document"]
    assert flags.settings["recompute_modules"] == ["core_attn", "mlp"]
    assert flags.settings["lr"] == 1e-4 and flags.settings["bf16"] is True
    assert not flags.of_kind("lost")


def test_a_word_past_a_counted_list_is_lost_and_the_list_kept():
    flags = read_flags("--rampup-batch-size 32 32 1000 64 --lr 1e-4".split())
    assert flags.settings["rampup_batch_size"] == [32, 32, 1000] and flags.settings["lr"] == 1e-4
    assert [w.words for w in flags.of_kind("lost")] == [["64"]]


def test_a_list_given_fewer_words_than_its_count_is_lost():
    assert argparse_reading("--rampup-batch-size 32 32 --lr 1e-4".split()) is None  # argparse stops there too
    flags = read_flags("--rampup-batch-size 32 32 --lr 1e-4".split())
    assert "rampup_batch_size" not in flags.settings and flags.settings["lr"] == 1e-4
    assert flags.of_kind("lost")[0].words == ["--rampup-batch-size", "32", "32"]
