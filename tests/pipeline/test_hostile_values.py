"""Hostile and careless values in presets and --set: refused with the right diagnosis (exit 2, before anything
is created), never passed on as something else (a list word as a flag, a NUL byte, a 10^30 integer)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launcher.cli import main
from launcher.errors import UserError
from launcher.pipeline.command import build_command
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve


def _preset(tmp_path: Path, body: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text("base: 345m\n" + body + "\n")
    return str(path)


def _dry_run(capsys, *args: str) -> tuple[int, str, str]:
    code = main([*args, "--dry-run"])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_list_setting_given_as_one_string_never_puts_a_flag_into_the_argv(tmp_path, capsys):
    preset = _preset(tmp_path,
                     'megatron: {special_tokens: "a --tensor-model-parallel-size 8 --spec evil_module evil_fn"}')
    code, out, err = _dry_run(capsys, preset)
    assert (code, out) == (2, "")
    assert err.splitlines()[0] == ("error: special_tokens (" + preset + "): the value '--tensor-model-parallel-size' "
                                   "starts with '-', which Megatron's parser reads as a flag, not a value")


def test_a_list_setting_given_as_a_yaml_list_cannot_hold_a_flag_either(tmp_path):
    with pytest.raises(UserError, match="the value '--spec' starts with '-'"):
        load_preset(_preset(tmp_path, "megatron: {special_tokens: [a, --spec, evil]}"))


def test_negative_numbers_in_lists_stay_values():
    preset = load_preset("345m", ["rampup_batch_size=[16, 16, 1000]", "lr=-0.5"])
    assert preset.megatron["lr"] == -0.5


@pytest.mark.parametrize("body, setting", [
    ('launcher: {run_root: "r\\0x"}', "launcher.run_root"),
    ('megatron: {tensorboard_dir: "/x\\0y"}', "megatron.tensorboard_dir"),
    ('launcher: {env: {A: "x\\0"}}', "launcher.env.A"),
    ('megatron: {data_path: ["1", "a\\0b"]}', "megatron.data_path"),
])
def test_a_nul_byte_in_any_string_setting_is_exit_2_before_anything_is_created(tmp_path, capsys, monkeypatch,
                                                                                body, setting):
    monkeypatch.chdir(tmp_path)  # a launch (not a dry-run) whose run_root is ./runs or ./r…
    preset = _preset(tmp_path, body)
    code = main([preset, "--gpus-per-node", "1", "--no-doctor"])
    _, err = capsys.readouterr()
    assert code == 2
    assert f"error: {setting} holds a NUL byte (\\0), which no path, argument or environment value can hold" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]


def test_an_env_name_with_a_trailing_newline_is_not_a_name(tmp_path, capsys):
    code, out, err = _dry_run(capsys, _preset(tmp_path, 'launcher: {env: {"A\\n": "1"}}'))
    assert (code, out) == (2, "")
    assert err.startswith("error: 'A\\n' in launcher.env (")


def test_a_huge_env_value_gets_its_own_message_not_argument_list_too_long(tmp_path, capsys):
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump({"base": "345m", "launcher": {"env": {"BIG": "a" * 1_000_000}}}))
    code, out, err = _dry_run(capsys, str(path))
    assert code == 2
    assert err == ("error: env.BIG is 1,000,004 bytes; the system passes at most 131,071 bytes per environment "
                   "variable to a program (MAX_ARG_STRLEN)\n  hint: put the value in a file and pass its path in "
                   "env.BIG\n")


def test_an_argv_word_too_long_for_exec_is_named():
    job = resolve(load_preset("345m", ["tokenizer_model=" + "m" * 200_000]))
    with pytest.raises(UserError, match="per argument to a program"):
        build_command(job)


@pytest.mark.parametrize("body, message", [
    ("megatron: {num_layers: 1.0e+30}", "num_layers ({preset}) is 1e+30: at most 9,223,372,036,854,775,807 "
                                        "(a 64-bit integer)"),
    ("megatron: {eval_micro_batch_size: -1}", "eval_micro_batch_size must be at least 1, got -1"),
    ("megatron: {eval_global_batch_size: 0}", "eval_global_batch_size must be at least 1, got 0"),
    ("description: !!binary aGVsbG8=", "description in {preset} must be text, got bytes"),
])
def test_absurd_values_are_refused(tmp_path, capsys, body, message):
    preset = _preset(tmp_path, body)
    code, out, err = _dry_run(capsys, preset)
    assert code == 2
    assert f"error: {message.format(preset=preset)}" in err.splitlines()


def test_a_ten_thousand_digit_integer_is_refused_quickly():
    with pytest.raises(UserError, match="num_layers .* must be an integer"):
        load_preset("345m", ["num_layers=" + "9" * 10_000])
