"""Every default the launcher changes on the fast path is said in the dry-run header: each variable it exports and
each Megatron setting it adds has a note that names it and says how to turn it off, and every figure a note quotes
is one docs/benchmarks.md records."""

import re
from pathlib import Path

import pytest

from launcher.megatron.pin import Kernels
from launcher.pipeline import kernels as kernel_rules
from launcher.pipeline import startup
from launcher.pipeline.checker import choose_entry
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve
from launcher.pipeline.run_paths import run_dir_megatron_args
from launcher.pipeline.runner import ASYNC_ERRORS, rank_environment

BENCHMARKS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"
BARE = Kernels(False, False, "preset", None)
WITH_TORCHAO = Kernels(False, False, "preset", None, torchao=True)
# where the Python of the image may not write bytecode (the H200 image): the bytecode cache is exported too
NO_BYTECODE = {"PYTHONDONTWRITEBYTECODE": "1"}

JOBS = {
    "345m": ("345m", [], BARE, 1),
    "345m, 2 GPUs through torchrun": ("345m", [], BARE, 2),
    "toy": ("toy", [], BARE, 1),
    "345m, 16 microbatches": ("345m", ["global_batch_size=16", "micro_batch_size=1"], BARE, 1),
    "345m, fp8 without TE": ("345m", ["fp8_format=hybrid"], WITH_TORCHAO, 1),
}

# Exported for the job to run at all, not a default that changes what runs: where the launcher's code is.
NOT_DEFAULTS = {"PYTHONPATH", "CUDA_DEVICE_MAX_CONNECTIONS"}
# Said by the note of the variable they come with.
SAID_WITH = {"MEGATRON_LAUNCH_WRITE_BYTECODE": "PYTHONPYCACHEPREFIX"}
# Megatron settings the `# kernels` line prints (what a missing TE or apex needs; the SDPA spec, which the fast
# spec's note explains) or that say where the run's files go.
KERNEL_LINE = {*kernel_rules.WITHOUT_TE, *kernel_rules.WITHOUT_APEX, *kernel_rules.SDPA_SPEC, "apply_rope_fusion"}


def resolved(name, tmp_path, monkeypatch):
    monkeypatch.setenv("MEGATRON_LAUNCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(startup, "installation_has_bytecode", lambda: False)  # the cache is exported too
    preset_name, overrides, kernels, gpus = JOBS[name]
    return resolve(load_preset(preset_name, overrides=overrides), 1, gpus, kernels=kernels, run_dir=tmp_path / "run",
                   inherited_env=NO_BYTECODE)


def run_dir_settings(job) -> set[str]:
    return set(run_dir_megatron_args(job.run_dir, {}))


def entry_settings(job) -> set[str]:
    """What the entry's choice changed (the toy's one-GPU fallback, said in its own note)."""
    chosen = choose_entry(job.preset, job.world_size)[0].megatron
    return {dest for dest, value in chosen.items() if job.preset.megatron.get(dest) != value}


@pytest.mark.parametrize("name", JOBS)
def test_every_exported_variable_has_a_note_that_names_it_and_how_to_turn_it_off(name, tmp_path, monkeypatch):
    job = resolved(name, tmp_path, monkeypatch)
    assert job.entry == "pretrain_gpt" and job.runner.direct == (job.world_size == 1)
    for variable in job.environment.chosen:
        if variable in NOT_DEFAULTS:
            continue
        if variable in rank_environment() or variable == ASYNC_ERRORS:  # what torchrun gives its worker
            assert ASYNC_ERRORS in job.runner.describe() and "--set runner=torchrun" in job.runner.describe()
            continue
        said = SAID_WITH.get(variable, variable)
        notes = [n for n in job.notes if said in n]
        assert notes, f"{variable} is exported with no header note"
        assert any(f"--set env.{said}=" in n for n in notes), f"the note on {variable} does not say how to undo it"


@pytest.mark.parametrize("name", JOBS)
def test_every_megatron_setting_the_fast_path_adds_has_a_note_that_names_it(name, tmp_path, monkeypatch):
    job = resolved(name, tmp_path, monkeypatch)
    left_open = KERNEL_LINE | run_dir_settings(job) | entry_settings(job) | {"micro_batch_size"}
    for dest, value in job.added.items():
        if dest in left_open and not (dest == "gradient_accumulation_fusion" and value is True):
            continue
        assert any(f"--set {dest}=" in n for n in job.notes), f"{dest}={value} is added with no header note"
    assert any(n.startswith("the layers are the launcher's SDPA spec with fast ops") for n in job.notes)


def test_the_fp8_weight_cache_is_said_and_can_be_turned_off(tmp_path, monkeypatch):
    job = resolved("345m, fp8 without TE", tmp_path, monkeypatch)
    assert any(n.startswith("FP8 weights cast once per optimizer step") for n in job.notes)
    off = resolve(load_preset("345m", overrides=["fp8_format=hybrid", "env.MEGATRON_LAUNCH_FP8_WEIGHT_CACHE=0"]),
                  1, 1, kernels=WITH_TORCHAO)
    assert not any("FP8 weights cast once" in n for n in off.notes)
    assert not any("FP8 weights" in n for n in resolved("345m", tmp_path, monkeypatch).notes)


FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?=(?:-\d+(?:\.\d+)?)? ?(?:%|s\b|x\b|TFLOP))|"
                    r"(?<=-)(\d+(?:\.\d+)?)(?= ?(?:%|s\b|x\b))|(?<![\w.])(\d+\.\d+)")


def figures(note: str) -> set[str]:
    return {next(g for g in match.groups() if g) for match in FIGURE.finditer(note)}


def test_the_figures_a_note_quotes_are_the_ones_the_benchmarks_record(tmp_path, monkeypatch):
    docs = BENCHMARKS.read_text()
    for name in JOBS:
        for note in resolved(name, tmp_path, monkeypatch).notes:
            for figure in figures(note):
                assert re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d])", docs), \
                    f"{figure} (in the note {note[:60]!r}…) is not in docs/benchmarks.md"


def test_the_figure_reader_finds_ranges_and_decimals():
    assert figures("one H200: 3.3-3.9 s sooner, +7.1 %, 0.16x, 639.0 -> 680.8 TFLOP/s, ~900 runs") == {
        "3.3", "3.9", "7.1", "0.16", "639.0", "680.8"}


def test_every_default_said_in_the_header_is_in_the_docs_table(tmp_path, monkeypatch):
    docs = BENCHMARKS.read_text()
    table = docs[docs.index("## Defaults the launcher changes"):]
    table = table[:table.index("\n## ")]
    for name in JOBS:
        job = resolved(name, tmp_path, monkeypatch)
        names = set(job.environment.chosen) - NOT_DEFAULTS - set(rank_environment())
        left_open = KERNEL_LINE | run_dir_settings(job) | entry_settings(job) | {"micro_batch_size"}
        names |= {dest for dest, value in job.added.items()
                  if dest not in left_open or (dest == "gradient_accumulation_fusion" and value is True)}
        for default in names:
            assert f"`{default}" in table, f"{default} is not in docs/benchmarks.md's table of defaults"
