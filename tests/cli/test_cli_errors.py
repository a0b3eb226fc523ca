"""Every subcommand reports its argument errors the same way: `error:`/`hint:` lines on stderr, exit 2, no usage
text and no traceback; a misspelled option or choice gets a "did you mean"."""

import pytest

from launcher.cli import SUBCOMMANDS


def assert_one_error_style(code: int, out: str, err: str) -> None:
    assert code == 2, err
    assert out == ""
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: ") and lines[1].startswith("  hint: "), err
    assert "usage:" not in err and "Traceback" not in err


@pytest.mark.parametrize("command", [[], *[[name] for name in sorted(SUBCOMMANDS)]], ids=lambda c: c[0] if c else "run")
def test_unknown_option_is_an_error_line_and_a_hint(launch, command):
    code, out, err = launch(*command, "--bogus")
    assert_one_error_style(code, out, err)


@pytest.mark.parametrize("args, suggestion", [
    (["toy", "--dry-rn"], "did you mean --dry-run?"),
    (["toy", "--dry-run", "--format", "jsn"], "did you mean json?"),
    (["list", "--verbose"], "see launch list --help"),
    (["doctor", "--torhc"], "did you mean --torch?"),
    (["doctor", "--fromat=json"], "did you mean --format?"),
    (["plan", "toy", "--gpus-per-nodes", "8"], "did you mean --gpus-per-node?"),
    (["plan", "toy", "--top", "x"], "see launch plan --help"),
    (["report", "runs/x", "--partail"], "did you mean --partial?"),
    (["prepare-data", "a.jsonl", "--output-prefx", "out"], "did you mean --output-prefix?"),
    (["prepare-data", "a.jsonl", "--tokenizer", "gtp2"], "did you mean gpt2?"),
    (["docter"], "did you mean launch doctor?"),
])
def test_misspelled_option_gets_a_suggestion(launch, args, suggestion):
    code, out, err = launch(*args)
    assert_one_error_style(code, out, err)
    assert suggestion in err


def test_help_still_prints_usage_and_exits_0(launch):
    for command in ([], *([name] for name in SUBCOMMANDS)):
        code, out, err = launch(*command, "--help")
        assert code == 0 and out.startswith("usage: launch"), (command, err)
