"""Fuzzing the launcher's input boundaries: only UserError (exit 2 with a message) ever leaves them.

Preset loader, --set parser, layout checks, Slurm renderer and log parser get arbitrary text, YAML and values
built from the names they really know. Any other exception is a bug (it would be a traceback, or now an
"internal error" line). Examples are bounded so the whole file runs in about half a minute.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.backends import slurm
from launcher.errors import UserError
from launcher.pipeline.command import build_command
from launcher.pipeline.field_types import field_types
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve, target_for
from launcher.pipeline.slurm_settings import SlurmSettings
from launcher.runs import logparse
from launcher.runs.verdict import RunLog

# FUZZ_EXAMPLES=2000 for a longer hunt; the suite's default keeps the file near half a minute.
FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 60)), deadline=None,
                derandomize=not os.environ.get("FUZZ_EXAMPLES"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# Names the loader knows, so examples reach past "unknown setting".
LAYOUT_NAMES = ["num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "seq_length",
                "max_position_embeddings", "micro_batch_size", "global_batch_size", "tensor_model_parallel_size",
                "pipeline_model_parallel_size", "context_parallel_size", "expert_model_parallel_size",
                "num_experts", "num_layers_per_virtual_pipeline_stage", "pipeline_model_parallel_layout",
                "step_batch_size_schedule", "vocab_size", "ffn_hidden_size", "train_iters", "train_samples",
                "sequence_parallel", "bf16", "fp16", "lr", "decoder_first_pipeline_num_layers", "data_path",
                "tokenizer_type", "mtp_num_layers", "make_vocab_size_divisible_by"]
LAUNCHER_NAMES = ["nodes", "gpus_per_node", "entry", "master_addr", "master_port", "torchrun", "run_root",
                  "transformer_engine", "apex", "gpu", "max_micro_batch_size", "megatron_path"]
SLURM_NAMES = sorted(field_types(SlurmSettings))

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**12), max_value=10**12),
    st.sampled_from([0, 1, 2, 3, 4, 8, 16, 64, 10**9, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["2024-13-45", "1e999", "nan", "E|t*3|L", "0:16 1.2.3B:32", "${MASTER_ADDR}", "$(x)", "auto",
                     "[1, 2]", "!!int abc", "\n", "~", "USR1", "1:00:00"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=8)


def _load_or_user_error(ref: str, overrides: list[str] = ()):
    try:
        return load_preset(ref, list(overrides))
    except UserError:
        return None


def _plan_or_user_error(preset, nodes=None, gpus=None):
    try:
        return resolve(preset, nodes, gpus, megatron_path=Path("/opt/megatron-lm"))
    except UserError:
        return None


@FUZZ
@given(st.text(max_size=300))
def test_preset_loader_any_text(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("fuzz") / "p.yaml"
    path.write_bytes(text.encode("utf-8", errors="replace"))
    preset = _load_or_user_error(str(path))
    if preset is not None:
        _plan_or_user_error(preset)


@FUZZ
@given(st.dictionaries(st.sampled_from(LAYOUT_NAMES), values, max_size=5),
       st.dictionaries(st.sampled_from(LAUNCHER_NAMES), values, max_size=3),
       st.dictionaries(st.sampled_from(SLURM_NAMES), values, max_size=3),
       st.dictionaries(st.text(max_size=6), values, max_size=2),
       values)
def test_preset_loader_and_layout_any_values(tmp_path_factory, megatron, launcher, slurm_section, env, description):
    data = {"base": "345m", "description": description,
            "launcher": {**launcher, "slurm": slurm_section, "env": env}, "megatron": megatron}
    path = tmp_path_factory.mktemp("fuzz") / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    preset = _load_or_user_error(str(path))
    if preset is not None:
        _plan_or_user_error(preset)


@FUZZ
@given(st.lists(st.one_of(
    st.text(max_size=40),
    st.builds(lambda n, v: f"{n}={v}", st.sampled_from(LAYOUT_NAMES + LAUNCHER_NAMES
                                                        + [f"slurm.{k}" for k in SLURM_NAMES]
                                                        + ["env.A", "env.HF_TOKEN", "env.1x"]),
              st.one_of(st.text(max_size=30), scalars.map(str)))), max_size=4),
       st.sampled_from([None, 1, 2, 3, 8]), st.sampled_from([None, 1, 2, 8]))
def test_set_parser_and_layout_any_overrides(overrides, nodes, gpus):
    preset = _load_or_user_error("345m", overrides)
    if preset is not None:
        _plan_or_user_error(preset, nodes, gpus)


@FUZZ
@given(st.dictionaries(st.sampled_from(SLURM_NAMES), values, max_size=4),
       st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=2),
       st.text(max_size=20), st.sampled_from([1, 2, 4]))
def test_slurm_renderer_any_settings(tmp_path_factory, slurm_section, env, name, nodes):
    try:
        overrides = [f"slurm.{k}={v}" for k, v in slurm_section.items()] + [f"env.{k}={v}" for k, v in env.items()]
        preset = replace(load_preset("345m", overrides), name=name or "x")
        job = resolve(preset, nodes, 8, megatron_path=Path("/opt/megatron-lm"), target=target_for(preset, slurm=True),
                      run_dir=tmp_path_factory.mktemp("run"))
        slurm.render_batch_script(slurm.prepare_job(job, build_command(job)).job)
    except UserError:
        pass


log_line = st.one_of(
    st.text(max_size=120),
    st.builds(lambda a, b, c: f" [2026-01-01 00:00:00.000000] iteration {a}/{b} | elapsed time per iteration (ms): "
                              f"{c} | lm loss: {c} | number of nan iterations: {a} |",
              st.sampled_from(["1", "9" * 5000, "-3", "x"]), st.sampled_from(["10", "0", "9" * 5000]),
              st.sampled_from(["1.0", "-5", "nan", "inf", "1.2.3", "9" * 400])),
    st.sampled_from([
        "[Rank 0] (after 1 iterations) memory (MB) | allocated: 1.2.3 | max allocated: 5 |",
        "Theoretical memory footprints: weight and optimizer=1.2.3 MB, total=. MB",
        "saving checkpoint at iteration " + "9" * 5000 + " to /x in torch format",
        "validation loss at iteration 5 | lm loss value: 1.2.3 | lm loss PPL: nan |",
        "Iteration " + "9" * 5000 + ": loss=1",
        "-------------------- arguments --------------------",
        "  seq_length ...................................... 99999999999999999999",
        "[exiting program after receiving SIGTERM.]",
    ]),
)


@FUZZ
@given(st.lists(log_line, max_size=30))
def test_log_parser_any_lines(lines):
    events = list(logparse.parse_lines(lines))
    runlog = RunLog()
    runlog.feed_attempt(lines)
    runlog.summary()
    assert len(events) <= len(lines)
