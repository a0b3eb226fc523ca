"""Work bounded whatever the input's size: each of these took from 20 s to minutes (or ran out of memory) before
its bound; the limits here are generous for a loaded 2-core machine and far below the old times."""

from __future__ import annotations

import time

import pytest

from launcher.cli import main, run_parser
from launcher.errors import UserError


def test_thirty_thousand_set_options_parse_in_linear_time():
    words = [w for i in range(30_000) for w in ("--set", f"lr={i}e-5")]
    started = time.monotonic()
    args = run_parser().parse_args(["345m", "--dry-run", *words])
    assert time.monotonic() - started < 5  # argparse's own handling: 34 s to minutes
    assert len(args.overrides) == 30_000 and args.overrides[-1] == "lr=29999e-5"


def test_set_keeps_its_place_among_other_options():
    args = run_parser().parse_args(["345m", "--set=a=1", "--nodes", "2", "--set", "b=2"])
    assert args.overrides == ["a=1", "b=2"] and args.nodes == 2


def test_one_long_string_aliased_many_times_is_refused_quickly(tmp_path, capsys):
    path = tmp_path / "alias.yaml"
    path.write_text('base: 345m\nmegatron:\n  data_cache_path: &x "' + "a" * 7_000_000 + '"\n  special_tokens: ['
                    + ", ".join(["*x"] * 99_000) + "]\n")
    started = time.monotonic()
    code = main([str(path), "--dry-run"])
    _, err = capsys.readouterr()
    assert time.monotonic() - started < 10  # > 20 s, and MemoryError in show
    assert code == 2
    assert err.splitlines()[0] == (f"error: {path} expands to more than 16,777,216 characters of values (a long "
                                   "value repeated through aliases?)")


def test_plan_of_a_model_that_fits_nowhere_answers_before_searching_every_world(capsys):
    started = time.monotonic()
    code = main(["plan", "345m", "--set", "num_layers=1000000000", "--gpus", "8"])
    _, err = capsys.readouterr()
    assert time.monotonic() - started < 15  # ~60 s
    assert code == 2
    assert err.splitlines()[0] == "error: no layout of 345m fits on any number of h100-80gb GPUs tried"


def test_a_file_at_the_byte_cap_is_parsed_in_seconds(tmp_path):
    from launcher import untrusted

    text = "description: " + "b" * (untrusted.MAX_FILE_BYTES - 100) + "\n"
    started = time.monotonic()
    assert len(untrusted.load_yaml(text, "big")["description"]) == untrusted.MAX_FILE_BYTES - 100
    assert time.monotonic() - started < 5  # the pure-Python scanner: ~11 s
    try:
        untrusted.load_yaml("a: [" * 100 + "]" * 100, "deep")
    except UserError as exc:
        assert "nesting deeper than 64 levels" in str(exc)


def test_a_layer_pattern_is_read_not_evaluated_and_bounded(capsys):
    # Megatron evals --moe-layer-freq after a character filter that [0]*10**12 passes; the launcher reads the syntax
    cases = {
        "[0]*10**12": "a layer pattern has only integers, [lists], + and * (and parentheses)",
        "[0]*65536*65536": "the pattern is longer than 65,536 layers",
        "__import__('os').system('id')": "expected an integer or a list expression such as ([0]*1+[1]*3)",
        "(" * 3000 + "[1]" + ")" * 3000: "is not a list expression such as ([0]*1+[1]*3)",
    }
    for value, reason in cases.items():
        started = time.monotonic()
        code = main(["345m", "--dry-run", "--set", "num_experts=4", "--set", f"moe_layer_freq={value}"])
        err = capsys.readouterr().err
        assert time.monotonic() - started < 10 and code == 2, err
        assert err.startswith("error: moe_layer_freq (--set moe_layer_freq) is not a layer pattern: ") and reason in err


def test_a_moe_pattern_that_does_not_name_every_layer_is_refused_before_launch(capsys):
    # gpt_layer_specs asserts the length at model build, after validate_args has passed it
    moe = ["--set", "num_experts=4", "--set", "add_bias_linear=false"]
    code = main(["345m", "--dry-run", *moe, "--set", "moe_layer_freq=([0]*1+[1]*3)"])
    err = capsys.readouterr().err
    assert code == 2
    assert ("error: moe_layer_freq lists 4 layers, and the model has num_layers 24\n"
            "  hint: --set moe_layer_freq=[0]*1+[1]*23 (a 0 for each dense layer, a 1 for each MoE layer, one per "
            "layer)") in err
    assert main(["345m", "--dry-run", *moe, "--set", "moe_layer_freq=[0]*1+[1]*23"]) == 0


@pytest.mark.parametrize("settings", [
    ["num_attention_heads=99999999989", "group_query_attention=true", "num_query_groups=8"],
    ["num_experts=99999999989", "moe_router_num_groups=8"],
    ["num_layers=99999999989", "no_rope_freq=8"],
])
def test_a_hint_listing_the_divisors_of_a_huge_size_is_bounded(settings, capsys):
    # each hint listed every divisor by trial division up to the size itself (import of `--num-attention-heads
    # 99999999999` ran for minutes); divisors() stops at √n and 2^20 trials
    started = time.monotonic()
    code = main(["345m", "--dry-run", *[w for s in settings for w in ("--set", s)]])
    capsys.readouterr()
    assert code == 2
    assert time.monotonic() - started < 20


MODEL = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "128",
         "--max-position-embeddings", "128", "--micro-batch-size", "1", "--global-batch-size", "8", "--train-iters",
         "4", "--eval-interval", "4", "--eval-iters", "1", "--mock-data", "--tokenizer-type", "NullTokenizer",
         "--vocab-size", "128"]


@pytest.mark.parametrize("command", [
    # the memory verdict looked for a smaller expert-parallel size by counting down from EP itself
    ["import", "--", "torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", *MODEL, "--num-experts", "8",
     "--expert-model-parallel-size", "99999999989"],
    # the world-size hint looked for fewer GPUs per node by counting down from the count given
    ["345m", "--dry-run", "--gpus-per-node", "99999999999", "--set", "tensor_model_parallel_size=199999999999"],
])
def test_a_check_of_a_huge_size_computes_its_way_out_instead_of_counting_down(command, capsys):
    started = time.monotonic()
    code = main(command)
    capsys.readouterr()
    assert code == 2
    assert time.monotonic() - started < 20
