"""What a new user trips over, seen on a fresh clone: each small friction, as the user meets it."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.errors import UserError
from launcher.gpus import gpu_by_name


@pytest.mark.parametrize(("typed", "meant"), [("h100", "h100-80gb"), ("H200", "h200-141gb"),
                                               ("a100", "a100-40gb or a100-80gb"), ("h200-14gb", "h200-141gb")])
def test_a_gpu_named_without_its_memory_gets_did_you_mean(typed, meant):
    with pytest.raises(UserError) as info:
        gpu_by_name(typed)
    assert info.value.problems[0].hint.startswith(f"did you mean {meant}? known GPUs: ")


def test_a_gpu_name_without_its_memory_on_the_command_line(launch):
    code, _, err = launch("plan", "345m", "--gpu", "h100")
    assert code == 2 and "hint: did you mean h100-80gb?" in err


def in_a_terminal(*args: str) -> str:
    """What `launch ARGS` shows in a terminal: stdout and stderr on one pseudo-terminal."""
    import os
    import pty
    import subprocess
    import sys

    from tests.conftest import REPO

    main_fd, terminal = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "4000"}
    env.pop("MEGATRON_LM_PATH", None)
    process = subprocess.Popen([sys.executable, "-m", "launcher", *args], stdout=terminal, stderr=terminal,
                               stdin=subprocess.DEVNULL, env=env, cwd=REPO)
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    process.wait(timeout=120)
    os.close(main_fd)
    return shown.decode(errors="replace").replace("\r\n", "\n")


@pytest.mark.parametrize("where", [[], ["--slurm"]], ids=["here", "slurm"])
def test_each_warning_is_shown_once_in_a_terminal(where):
    shown = in_a_terminal("345m", *where, "--dry-run", "--megatron-path", "/nonexistent/megatron-lm")
    warning = "/nonexistent/megatron-lm/pretrain_gpt.py does not exist here"
    assert shown.count(warning) == 1, shown[:3000]


def test_the_resume_hints_lead_somewhere_else_than_each_other(launch, tmp_path):
    # a run directory to resume: a Slurm job's, written here
    code, out, err = launch("345m", "--slurm", "--set", f"run_root={tmp_path}", "--megatron-path", str(tmp_path))
    assert code == 0, err
    run_dir = str(Path(out.strip()).parent)
    _, _, no_dry_run = launch("--resume", run_dir, "--dry-run")
    assert "no --dry-run" in no_dry_run and f"{run_dir}/command.sh" in no_dry_run
    assert "--dry-run" not in no_dry_run.split("hint:", 1)[1]
    code, _, no_gpu = launch("--resume", run_dir, "--megatron-path", str(tmp_path), env={"CUDA_VISIBLE_DEVICES": ""})
    assert code == 2 and "no GPU is visible" in no_gpu, no_gpu
    assert "--dry-run" not in no_gpu.split("hint:", 1)[1] and "--slurm" in no_gpu


def test_the_175b_header_says_why_megatrons_own_estimate_differs_from_ours(launch):
    code, out, err = launch("175b", "--dry-run", "--megatron-path", "/opt/megatron-lm")
    assert code == 0, err
    (memory,) = [line for line in out.splitlines() if line.startswith("# memory ")]
    assert ("(Megatron's own estimate 40.5 GiB; ours is 21.0 GiB lower, mostly sequence parallel (-19.7 GiB): "
            "Megatron's report uses its sequence-parallel formula only with selective recompute") in memory


def test_the_preflight_header_estimates_the_memory_the_dry_run_does(launch):
    lines = []
    for extra in ([], ["--preflight"]):
        code, out, err = launch("345m", *extra, "--dry-run", "--megatron-path", "/opt/megatron-lm",
                                env={"CUDA_VISIBLE_DEVICES": ""})
        assert code == 0, err
        lines += [line for line in out.splitlines() if line.startswith("# memory ")]
    assert len(lines) == 2 and lines[0] == lines[1]


@pytest.mark.parametrize("where", [["--slurm"], ["--k8s"]], ids=["slurm", "k8s"])
def test_diff_of_an_unchanged_run_and_its_preset_finds_no_difference(launch, tmp_path, where):
    code, out, err = launch("345m", *where, cwd=tmp_path)
    assert code == 0, err
    (run_dir,) = (tmp_path / "runs").iterdir()
    code, out, err = launch("diff", str(run_dir), "345m", cwd=tmp_path)
    assert code == 0 and out == f"{run_dir} and 345m: the same settings\n", out + err


FLAGS = ["--", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
         "--seq-length", "128", "--max-position-embeddings", "128", "--micro-batch-size", "2", "--global-batch-size",
         "16", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "1000", "--lr", "1e-4",
         "--train-iters", "10", "--eval-interval", "10", "--eval-iters", "1"]


def test_import_answers_in_json_like_every_command(launch, tmp_path):
    import json

    code, out, err = launch("import", "--format", "json", "-o", str(tmp_path / "mine.yaml"), *FLAGS)
    assert code == 0, out + err
    answer = json.loads(out)
    assert answer["written_to"] == str(tmp_path / "mine.yaml") and answer["launcher"]["ok"] is True
    assert answer["preset"] == (tmp_path / "mine.yaml").read_text() and answer["round_trip"]["equal"] is True


def test_the_import_summary_names_no_empty_launcher_field(launch):
    code, out, err = launch("import", *FLAGS)
    assert code == 0, err
    (summary,) = [line for line in err.splitlines() if line.startswith("imported: ")]
    assert summary == "imported: 14 Megatron settings → standard output"


def test_the_plans_sdpa_note_states_its_own_number(launch):
    import re

    code, out, err = launch("plan", "345m", "--gpus", "1", "--gpu", "h200-141gb", "--set", "transformer_engine=false")
    assert code == 0, err
    (rate,) = re.findall(r"tokens/s, (\d+) model TFLOP/s per GPU", out)
    (note,) = [line for line in out.splitlines() if "SDPA attention spec" in line]
    assert f"this plan predicts {rate} for the preset's layout on h200-141gb" in note
    assert "slower" not in note  # a claim the numbers beside it did not bear out


def test_a_bf16_gradient_plan_explains_the_gradients_row_as_gradients():
    from launcher.estimate import formulas as est

    args = {"num_layers": 2, "hidden_size": 256, "num_attention_heads": 4, "seq_length": 128,
            "max_position_embeddings": 128, "vocab_size": 1000, "micro_batch_size": 2, "global_batch_size": 2,
            "bf16": True, "grad_reduce_in_bf16": True}
    training = est.training_of(args, 1)
    shape = est.model_shape(args, 1)
    terms = {d.what: d.bytes for d in est.memory_difference(shape, training)}
    megatron, complete = est.megatron_memory(shape, training), est.complete_memory(shape, training)
    assert terms["gradients in 16 bits"] == -megatron.gradients / 2
    assert abs(terms["parameters"]) < abs(complete.gradients - megatron.gradients) / 4  # the count only
    assert abs(sum(terms.values()) - (complete.total - megatron.total)) < 1e-3 * megatron.total


def test_a_scripts_own_options_are_given_after_a_double_dash(launch, tmp_path):
    # `bash train.sh --tp 2`: the script's arguments begin with -, and `launch import train.sh -- --tp 2` was refused
    # as unrecognized arguments of launch import, so such a script could be read only without them
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\nTP=1\nwhile [[ $# -gt 0 ]]; do\n  case $1 in\n    --tp) TP=$2; shift 2 ;;\n"
                      "    *) shift ;;\n  esac\ndone\ntorchrun --nproc_per_node 8 " + " ".join(FLAGS[1:])
                      + " --tensor-model-parallel-size $TP\n")
    preset = tmp_path / "p.yaml"
    code, out, err = launch("import", str(script), "-o", str(preset), "--", "--tp", "2")
    assert code == 0, out + err
    assert "tensor_model_parallel_size: 2" in preset.read_text()
    code, out, err = launch("import", str(script), "--tp", "2")
    assert code == 2 and "Traceback" not in err
    assert "error: launch import: unrecognized arguments: --tp 2" in err and "go after --" in err
