"""Small things a new user trips over first: bare `launch`, a YAML tab, a misspelled preset, a world-size hint
that suggests only fixes that work, a derived preset's description, the toy dry-run's working directory."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import MEGATRON


def test_bare_launch_prints_usage(launch):
    code, out, err = launch()
    assert code == 0 and err == ""
    assert out.startswith("usage: launch [-h] [--resume RUN_DIR]")
    assert "Other commands: launch fetch-megatron, launch runs, launch ls, launch import, launch list" in " ".join(
        out.split())


def test_options_without_a_preset_say_so(launch):
    code, _, err = launch("--dry-run")
    assert code == 2
    assert err.startswith("error: no preset given\n  hint: for example: launch toy --dry-run")


def test_a_tab_in_yaml_says_use_spaces(launch, tmp_path):
    (tmp_path / "p.yaml").write_text("base: 345m\nmegatron:\n\tnum_layers: 2\n")
    code, _, err = launch(str(tmp_path / "p.yaml"), "--dry-run")
    assert code == 2
    assert err == (f"error: {tmp_path / 'p.yaml'} is not valid YAML at line 3, column 1: found character that "
                   "cannot start any token\n  hint: YAML indents with spaces, never tabs: use spaces\n")


def test_a_misspelled_preset_gets_did_you_mean(launch):
    code, _, err = launch("354m", "--dry-run")
    assert code == 2
    assert err == ("error: no preset named '354m'\n  hint: did you mean 345m? shipped presets: 175b, 345m, toy; or "
                   "give a path to a YAML file\n")


def test_world_size_hint_for_three_gpus_at_tp2_suggests_what_fits_them(launch):
    code, _, err = launch("345m", "--nodes", "1", "--gpus-per-node", "3", "--set", "tensor_model_parallel_size=2",
                          "--dry-run", "--megatron-path", MEGATRON)
    assert code == 2
    assert ("  hint: use --gpus-per-node 2 (world 2), or --set tensor_model_parallel_size=1\n") in err
    assert "--nodes 2" not in err


def test_a_derived_preset_says_what_it_is_based_on(launch, tmp_path):
    (tmp_path / "mine.yaml").write_text("base: 345m\nmegatron:\n  model:\n    num_layers: 48\n")
    code, out, err = launch(str(tmp_path / "mine.yaml"), "--dry-run", "--megatron-path", MEGATRON)
    assert code == 0, err
    assert out.splitlines()[0] == ("# megatron-launch: preset mine (based on 345m: GPT-2 medium (345M) on mock "
                                   "data, one GPU)")


def test_toy_dry_run_says_where_the_pasted_script_writes(launch):
    code, out, err = launch("toy", "--dry-run", "--megatron-path", MEGATRON)
    assert code == 0, err
    assert ("# a launch runs this command with the run directory as its working directory (upstream's loop "
            "writes ./ckpt); pasted, ./ckpt is made in the current directory") in out.splitlines()
    assert "inside the run directory" not in out
    assert not any(line.startswith("cd ") for line in out.splitlines())  # nothing to cd into: a dry-run makes none


def test_readme_says_how_to_get_python_312_without_pyenv():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "uv python install 3.12" in readme and "apt-get install python3.12" in readme
