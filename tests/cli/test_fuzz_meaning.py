"""Fuzz properties with meaning (not only "no crash"), over values a careless user or an attacker gives:

- the words of every printed script are the argv, and its exports are the environment (bash reads them back);
- a preset written by `launch import` or into a run directory loads back to the same settings;
- nothing outside the run directory changes when its files are planted links (a snapshot of the parent);
- no secret value appears in any output.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.cli import main
from launcher.cli.render import command_lines
from launcher.errors import UserError
from launcher.importer.build import import_source
from launcher.pipeline.command import build_command
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve
from launcher.pipeline.shell import shell_word
from launcher.runs import rundir, secrets

FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 40)), deadline=None,
                derandomize=not os.environ.get("FUZZ_EXAMPLES"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# Any text a value can hold on its way to exec: everything but NUL (refused) and lone surrogates.
words = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1, max_size=40)
# Text settings whose words go straight into the argv.
plain_words = words.filter(lambda w: not w.startswith("-") and w.strip() == w and w.strip())
env_names = st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True).filter(lambda n: not secrets.is_secret(n))


def _bash_words(script: str, env_lines: list[str] = ()) -> list[str]:
    out = subprocess.run(["bash", "-c", "\n".join([*env_lines, 'f() { printf "%s\\0" "$@"; }', "f " + script])],
                         capture_output=True, check=True).stdout
    return out.decode("utf-8", "surrogateescape").split("\0")[:-1]


@FUZZ
@given(tokenizer_model=plain_words, data=st.lists(plain_words, min_size=1, max_size=3),
       env=st.dictionaries(env_names, words, max_size=3))
def test_the_printed_script_s_words_are_the_argv_and_its_exports_the_environment(tokenizer_model, data, env):
    overrides = [f"tokenizer_model={tokenizer_model}", "tokenizer_type=SentencePieceTokenizer",
                 *(f"env.{k}={v}" for k, v in env.items())]
    try:
        preset = load_preset("345m", overrides)
        preset = replace(preset, megatron={**preset.megatron, "data_path": data})  # a list value, each a word
        job = resolve(preset, megatron_path=Path("/opt/megatron-lm"))
    except UserError:
        return
    command = build_command(job)
    assert _bash_words("\n".join(command_lines(command))) == command.argv
    exports = [secrets.shell_export(k, v, shell_word) for k, v in command.env.items()]
    for name, value in command.env.items():
        assert _bash_words(f'"${name}"', exports) == [value]


flag_values = st.one_of(st.integers(1, 64), plain_words.filter(lambda w: "$" not in w and "`" not in w))


@FUZZ
@given(tokens=st.lists(flag_values, min_size=1, max_size=3), model=flag_values,
       env=st.dictionaries(words.filter(lambda k: "$" not in k), words.filter(lambda v: "$" not in v), max_size=3))
def test_a_preset_written_by_import_reads_back_as_the_imported_settings(tmp_path_factory, tokens, model, env):
    source = yaml.safe_dump({"MODEL_ARGS": {"--num-layers": 2, "--tokenizer-special-tokens": [str(t) for t in tokens],
                                            "--tokenizer-model": str(model)}, "ENV_VARS": env})
    imported = import_source(source, "fuzz.yaml")
    data = yaml.safe_load(imported.text)
    assert set(data["launcher"]) <= {"transformer_engine", "apex", "env"}  # nothing of the source became a key
    megatron = {k: v for section in data["megatron"].values() for k, v in section.items()}
    assert megatron == imported.settings
    assert data["launcher"].get("env", {}) == imported.env
    path = tmp_path_factory.mktemp("import") / "p.yaml"
    path.write_text(imported.text)
    try:
        preset = load_preset(str(path))
    except UserError:
        return  # a value the loader refuses (an invalid env name): refused, never something else
    assert {k: preset.megatron[k] for k in imported.settings} == imported.settings


@FUZZ
@given(description=words, env=st.dictionaries(env_names, words, max_size=3), tokenizer_model=plain_words)
def test_a_run_directory_s_preset_reads_back_as_the_launched_settings(tmp_path_factory, description, env,
                                                                      tokenizer_model):
    try:
        preset = load_preset("345m", [f"tokenizer_model={tokenizer_model}", *(f"env.{k}={v}" for k, v in env.items())])
    except UserError:
        return
    run_dir = tmp_path_factory.mktemp("runs") / "r"
    rundir.write_run_dir(run_dir, preset={"description": description, "megatron": dict(preset.megatron),
                                          "launcher": {"env": dict(preset.launcher.env)}},
                         manifest={}, argv=["torchrun"], env={})
    again = load_preset(str(run_dir / rundir.PRESET_FILE))
    assert again.megatron == preset.megatron and again.launcher.env == preset.launcher.env
    assert again.description == description


names = st.sampled_from(["logs/attempt-1.log", "logs/attempt-2.log", "metrics.jsonl", "summary.json",
                         "plots/loss.png", "plots/lr.png", "plots/throughput.png", "plots", "manifest.json"])


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()
            and not p.is_symlink()}


@FUZZ
@given(planted=st.sets(names, min_size=1, max_size=4), dangling=st.booleans())
def test_nothing_outside_the_run_directory_changes(tmp_path_factory, planted, dangling):
    from launcher.runs.monitor import Monitor
    from launcher.runs.report import make_report

    parent = tmp_path_factory.mktemp("parent")
    outside = parent / "outside"
    outside.mkdir()
    (outside / "victim").write_text("mine\n")
    run_dir = parent / "run"
    rundir.write_run_dir(run_dir, preset={"megatron": {"seq_length": 64}}, manifest={}, argv=["torchrun"], env={})
    for name in sorted(planted):
        link = run_dir / name
        if link.parent.is_symlink() or (link.exists() and link.is_dir() and not link.is_symlink()):
            continue  # planted inside a planted link, or a directory the run made: no link there
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(outside / ("nothing" if dangling else "victim"))
    before = _snapshot(outside)
    sink = io.StringIO()
    try:
        monitor = Monitor(run_dir, out=sink)
        monitor.feed(" [2026-01-01 00:00:00] iteration        1/      10 | consumed samples:            8 | "
                     "elapsed time per iteration (ms): 10.0 | learning rate: 1.0E-04 | global batch size:     8 | "
                     "lm loss: 1.0E+01 | loss scale: 1.0 | number of skipped iterations:   0 | "
                     "number of nan iterations:   0 |\n")
        monitor.close(0)
    except UserError:
        pass
    try:
        with redirect_stdout(sink), redirect_stderr(sink):
            make_report([run_dir], None, True)
    except (UserError, ImportError):
        pass
    assert _snapshot(outside) == before
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]


secret_values = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_categories=["Cs", "Cc"]),
                        min_size=6, max_size=40).map(lambda v: "Zq" + v)


@FUZZ
@given(value=secret_values, name=st.sampled_from(["HF_TOKEN", "WANDB_API_KEY", "DB_PASSWORD", "AWS_SECRET"]),
       command=st.sampled_from([["--dry-run"], ["--dry-run", "--format", "json"], ["--dry-run", "--slurm"],
                                ["show"], ["show", "--format", "json"], ["--dry-run", "--set", "lr=x"]]))
def test_no_secret_value_appears_in_any_output(value, name, command):
    argv = (["show", "345m", *command[1:]] if command[0] == "show" else ["345m", *command])
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        main([*argv, "--set", f"env.{name}={value}"])
    for text in (out.getvalue(), err.getvalue()):
        assert value not in text and json.dumps(value)[1:-1] not in text
