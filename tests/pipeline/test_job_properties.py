"""Properties with meaning, for any overrides: the dry-run script bash would run holds exactly the command's argv and
environment, and `launch show` says what the dry-run prints."""

import contextlib
import io
import json
import os
import subprocess
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.cli import main
from launcher.cli.render import text
from launcher.pipeline.command import build_command
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve
from tests.conftest import without_run_stamp

# words a user may put anywhere: spaces, quotes, $(…), backticks, globs, newlines are all just text
hostile = st.text(st.sampled_from(list("ab $`'\"\\;|&*?[]{}()<>!#~\n\t=-_./")), min_size=1, max_size=12)
overrides = st.lists(st.one_of(
    st.sampled_from(["tensor_model_parallel_size=2", "micro_batch_size=8", "lr=3e-4", "global_batch_size=64",
                     "use_torch_fsdp2=true", "untie_embeddings_and_output_weights=true", "log_interval=5"]),
    hostile.map(lambda v: f"data_cache_path=/tmp/{v}"),
    hostile.map(lambda v: f"env.NCCL_DEBUG={v}"),
    hostile.map(lambda v: f"wandb_exp_name={v}"),
), max_size=4)

STUB = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('NCCL_DEBUG')]))"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(overrides)
def test_the_dry_run_script_runs_exactly_the_commands_argv(tmp_path, sets):
    stub = tmp_path / "torchrun"
    stub.write_text(f"#!{sys.executable}\n{STUB}\n")
    stub.chmod(0o755)
    try:
        job = resolve(load_preset("345m", [*sets, f"torchrun={stub}"]), 1, 2, inherited_env={})
    except Exception as exc:  # a refused preset has no script; refusing is the checks' business, tested elsewhere
        assert type(exc).__name__ == "UserError"
        return
    command = build_command(job)
    result = subprocess.run(["bash", "-c", text(job, command)], capture_output=True, text=True, timeout=60,
                            env={"PATH": os.environ["PATH"]})
    assert result.returncode == 0, result.stderr
    argv, nccl_debug = json.loads(result.stdout)
    assert argv == command.argv[1:]
    assert nccl_debug == command.env.get("NCCL_DEBUG")


def run_json(*argv: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*argv, "--format", "json"])
    return {"code": code, **json.loads(without_run_stamp(out.getvalue()))}


@settings(max_examples=20, deadline=None)
@given(overrides, st.sampled_from([None, "1", "2", "8"]))
def test_show_says_what_the_dry_run_prints(sets, gpus):
    args = [word for item in sets for word in ("--set", item)] + (["--gpus-per-node", gpus] if gpus else [])
    shown = run_json("show", "345m", *args)
    printed = run_json("345m", *args, "--dry-run")
    if printed["code"] != 0:  # refused: show names the same problems
        assert [p["message"] for p in printed["problems"]] == [p.splitlines()[0].removeprefix("error: ")
                                                               for p in shown["problems"]]
        return
    for key in ("entry", "nodes", "gpus_per_node", "layout", "added", "env", "notes", "warnings", "overrides"):
        assert shown[key] == printed[key], key
