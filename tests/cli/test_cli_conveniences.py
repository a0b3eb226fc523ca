"""The small conveniences users look for first: --version, list/show/diff, JSON errors, completion, unsetting."""

import json
import os
import subprocess
import sys

from tests.cli.completion_support import bash_complete
from tests.conftest import MEGATRON, REPO


def test_version(launch):
    code, out, _ = launch("--version")
    assert code == 0 and out.startswith("megatron-launch 0.1.0") and "432d76b2b8bf" in out and "0.18.0" in out


def test_list_as_json(launch):
    code, out, err = launch("list", "--format", "json")
    assert code == 0, err
    rows = {row["preset"]: row for row in json.loads(out)}
    assert rows["toy"]["parameters"] == 6960 and rows["toy"]["entry"] == "simple_loop"
    assert (rows["175b"]["tp"], rows["175b"]["pp"], rows["175b"]["min_gpus"]) == (8, 16, 128)


def test_errors_are_json_on_stdout_when_json_is_asked_for(launch):
    code, out, err = launch("175b", "--nodes", "1", "--dry-run", "--format", "json")
    assert code == 2 and err == ""
    data = json.loads(out)
    assert data["exit_code"] == 2 and "not divisible by TP·PP·CP" in data["error"]
    assert data["problems"][0]["hint"].startswith("use --nodes")
    code, out, err = launch("plan", "175b", "--gpu", "h900", "--format=json")  # another command, the = form
    assert code == 2 and "unknown GPU" in json.loads(out)["error"]
    code, out, err = launch("list", "--format", "json", "--bogus")  # even when parsing fails
    assert code == 2 and "unrecognized arguments" in json.loads(out)["error"]


def test_show_lists_the_flags_that_differ_from_megatrons_defaults(launch):
    code, out, err = launch("show", "175b")
    assert code == 0, err
    assert "--num-layers 96" in out and "--tensor-model-parallel-size 8" in out
    assert "--seq-length 2048" in out and "default: None" in out
    assert "--adam-beta1" not in out  # 0.9 is Megatron's own default: not a difference
    code, out, err = launch("show", "345m", "--gpus-per-node", "8", "--set", "transformer_engine=false",
                            "--format", "json")
    data = json.loads(out)
    rows = {row["dest"]: row for row in data["differs_from_megatron_defaults"]}
    assert rows["micro_batch_size"]["value"] == 4 and rows["micro_batch_size"]["by"] == "launcher"
    assert rows["transformer_impl"]["by"] == "launcher" and rows["num_layers"]["by"] == "preset"
    assert data["launcher"]["max_micro_batch_size"] == 32


def test_diff_two_presets_and_a_run_directory(launch, tmp_path):
    code, out, err = launch("diff", "345m", "175b")
    assert code == 0, err
    assert any(line.split()[:3] == ["num_layers", "24", "96"] for line in out.splitlines())
    assert "launcher.nodes" in out
    code, out, _ = launch("diff", "toy", "toy")
    assert code == 0 and "the same settings" in out
    made = subprocess.run([sys.executable, "-m", "launcher", "345m", "--slurm", "--set", f"run_root={tmp_path}",
                           "--megatron-path", MEGATRON, "--set", "lr=3e-4"], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert made.returncode == 0, made.stderr
    run_dir = os.path.dirname(made.stdout.strip())
    code, out, err = launch("diff", "345m", run_dir, "--format", "json")
    assert code == 0, err
    changed = {row["setting"]: row for row in json.loads(out)["differences"]}
    assert changed["lr"]["a"] == 0.00015 and changed["lr"]["b"] == 0.0003
    # resolved against resolved: what the launcher adds for the run (save_interval, its paths) is on both sides
    assert [name for name, row in changed.items() if row["kind"] == "megatron"] == ["lr"]


def test_completion_completes_presets_and_setting_names(launch, tmp_path):
    code, script, err = launch("completion", "bash")
    assert code == 0, err
    path = tmp_path / "launch.bash"
    path.write_text(script)

    def complete(*words: str) -> list[str]:
        return bash_complete(path, *words)

    assert "175b" in complete("launch", "17") and "plan" in complete("launch", "pl")
    assert "num_layers=" in complete("launch", "345m", "--set", "num_lay")
    assert "slurm.partition=" in complete("launch", "345m", "--set", "slurm.par")
    assert "--dry-run" in complete("launch", "345m", "--dry")
    code, out, _ = launch("completion", "zsh")
    assert code == 0 and "bashcompinit" in out


def test_switching_175b_to_iterations_reports_every_conflict_with_one_command(launch):
    code, _, err = launch("175b", "--set", "train_iters=1000", "--dry-run")
    assert code == 2 and err.count("error:") == 1
    assert "train_iters 1000 is set, so these samples-based settings conflict with it: train_samples 146484375, " \
           "lr_decay_samples 126953125, lr_warmup_samples 183105" in err
    fix = ("launch 175b --set train_iters=1000 --set train_samples=null --set lr_decay_samples=null "
           "--set lr_warmup_samples=null")
    assert fix in err and "lr_decay_iters=82652" in err and "lr_warmup_iters=120" in err
    code, out, err = launch(*fix.split()[1:], "--dry-run")
    assert code == 0, err
    assert "--train-iters 1000" in out and "--train-samples" not in out and "samples" not in out.split("torchrun")[1]
