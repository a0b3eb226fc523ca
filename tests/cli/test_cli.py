import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import MEGATRON, REPO, without_run_stamp

GOLDEN = Path(__file__).parents[1] / "golden"
NO_KERNELS = ["--set", "transformer_engine=false", "--set", "apex=false"]
CASES = {
    "toy": ["toy"],  # upstream's simple loop builds its own layers: TE and apex are not its settings
    "toy-1gpu": ["toy", "--gpus-per-node", "1", *NO_KERNELS],
    "345m": ["345m", *NO_KERNELS],
    "345m-tp2": ["345m", "--gpus-per-node", "2", "--set", "tensor_model_parallel_size=2", *NO_KERNELS],
    "175b": ["175b"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dry_run_golden(launch, case):
    code, out, err = launch(*CASES[case], "--dry-run", "--megatron-path", MEGATRON)
    assert code == 0, err
    out = out.replace(str(REPO), "/opt/megatron-launch")  # where this checkout's launcher package lives
    out = without_run_stamp(out)
    golden = GOLDEN / f"{case}.sh"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(out)
    assert out == golden.read_text(), "dry-run output changed; regenerate with UPDATE_GOLDEN=1 if intended"


@pytest.mark.parametrize("case", sorted(CASES))
def test_dry_run_is_valid_bash(case):
    import subprocess

    assert subprocess.run(["bash", "-n", str(GOLDEN / f"{case}.sh")]).returncode == 0


def test_json_contract(launch):
    code, out, _ = launch("175b", "--dry-run", "--format", "json", "--megatron-path", MEGATRON)
    assert code == 0
    data = json.loads(out)
    assert set(data["layout"]) == {"tp", "pp", "cp", "ep", "dp", "vpp", "world_size", "micro_batch_size",
                                   "global_batch_size", "num_microbatches", "sequence_parallel"}
    assert (data["layout"]["tp"], data["layout"]["pp"], data["layout"]["dp"]) == (8, 16, 12)
    assert data["layout"]["world_size"] == 1536
    assert 174e9 < data["parameters"] < 176e9
    assert data["argv"][0] == "torchrun" and f"{MEGATRON}/pretrain_gpt.py" in data["argv"]
    assert data["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_345m_parameters_and_env(launch):
    code, out, _ = launch("345m", "--dry-run", "--format", "json", *NO_KERNELS, "--megatron-path", MEGATRON)
    data = json.loads(out)
    assert data["parameters"] == 354_871_296  # GPT-2 medium with the vocabulary padded to 50304
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in data["env"]  # TP 1: not required, and it would hurt overlap
    assert {"--transformer-impl", "--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion",
            "--no-persist-layer-norm"} <= set(data["argv"])


def test_tp2_sets_cuda_device_max_connections(launch):
    code, out, _ = launch("345m", "--dry-run", "--format", "json", "--gpus-per-node", "2",
                          "--set", "tensor_model_parallel_size=2", "--megatron-path", MEGATRON)
    assert json.loads(out)["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"


def test_preset_values_win_over_kernel_fallbacks(launch):
    code, out, _ = launch("345m", "--dry-run", "--format", "json", *NO_KERNELS, "--set",
                          "masked_softmax_fusion=true", "--megatron-path", MEGATRON)
    assert "--no-masked-softmax-fusion" not in json.loads(out)["argv"]


def test_explicit_transformer_engine_impl_never_meets_the_sdpa_spec(launch):
    code, out, _ = launch("345m", "--dry-run", "--format", "json", "--set", "transformer_engine=true", "--set",
                          "apex=false", "--set", "transformer_impl=transformer_engine", "--megatron-path", MEGATRON)
    argv = json.loads(out)["argv"]
    assert argv[argv.index("--transformer-impl") + 1] == "transformer_engine"
    assert argv.count("--transformer-impl") == 1 and "--spec" not in argv
    # Without TE on the target, Megatron could not build that model: the launcher says so first.
    code, _, err = launch("345m", "--dry-run", *NO_KERNELS, "--set", "transformer_impl=transformer_engine")
    assert code == 2 and "the target has no Transformer Engine" in err


def test_list(launch):
    code, out, _ = launch("list")
    assert code == 0
    for name in ("toy", "345m", "175b"):
        assert name in out
    assert "174.62B" in out and "354.87M" in out


@pytest.mark.parametrize("args, message", [
    (["175b", "--nodes", "1"], "not divisible by TP·PP·CP = 8·16·1 = 128"),
    (["345m", "--nodes", "0"], "at least 1"),
    (["345m", "--set", "lr"], "not NAME=VALUE"),
    (["345m", "--set", "num_layerz=3"], "did you mean num_layers"),
    (["nonexistent"], "no preset named"),
    (["/nonexistent/preset.yaml"], "does not exist"),
    (["345m", "--format", "xml"], "invalid choice"),
    (["345m", "--bogus"], "unrecognized arguments"),
    (["345m", "--set", "env.MEGATRON_LAUNCH_FAST_OPS=ce,fastest"], "unknown fast op(s) ['fastest']"),
])
def test_bad_input_exits_2_without_traceback(launch, args, message):
    code, out, err = launch(*args, "--dry-run")
    assert code == 2
    assert message in err
    assert "Traceback" not in err and out == ""


def test_values_are_shell_quoted(launch, tmp_path):
    evil = "/tmp/a b$(touch " + str(tmp_path / "pwned") + ")'\""
    code, out, _ = launch("345m", "--dry-run", "--set", f"data_cache_path={evil}", "--set", f"env.X={evil}",
                          "--megatron-path", MEGATRON)
    assert code == 0
    script = tmp_path / "cmd.sh"
    # run the printed script with its runner (python3 for one GPU here, else torchrun) replaced by printf, to see
    # the words bash really passes
    script.write_text("torchrun() { printf '%s\\n' \"$@\"; }\npython3() { printf '%s\\n' \"$@\"; }\n" + out)
    import subprocess

    words = subprocess.run(["bash", str(script)], capture_output=True, text=True).stdout.splitlines()
    assert evil in words
    assert not (tmp_path / "pwned").exists()


def test_local_run_without_gpu_explains(launch):
    code, out, err = launch("345m", env={"CUDA_VISIBLE_DEVICES": ""})
    assert code == 2 and "no GPU is visible" in err


def test_local_run_without_checkout_explains(launch, tmp_path):
    code, out, err = launch("345m", "--gpus-per-node", "1", "--megatron-path", str(tmp_path))
    assert code == 2 and "no Megatron-LM checkout" in err and "launch fetch-megatron" in err


def test_dry_run_is_fast_and_imports_no_torch():
    import subprocess
    import sys

    from tests.conftest import REPO

    probe = ("import sys, launcher.cli as c; c.main(['175b', '--dry-run']); "
             "assert 'torch' not in sys.modules and 'megatron' not in sys.modules")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    assert elapsed < 5  # generous for a loaded CI machine; typically ~0.2 s


def test_multi_node_user_values_never_expand(launch, tmp_path):
    marker = tmp_path / "pwned"
    evil = "${MASTER_ADDR}$(touch " + str(marker) + ")"
    code, out, _ = launch("345m", "--nodes", "2", "--dry-run", "--set", f"wandb_project={evil}",
                          "--megatron-path", MEGATRON)
    assert code == 0
    script = tmp_path / "cmd.sh"
    script.write_text("torchrun() { printf '%s\\n' \"$@\"; }\nMASTER_ADDR=head\n" + out)
    import subprocess

    words = subprocess.run(["bash", str(script)], capture_output=True, text=True).stdout.splitlines()
    assert evil in words and "head:29500" in words
    assert not marker.exists()


def test_description_cannot_leave_its_comment(launch, tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text('base: 345m\ndescription: "demo\\necho INJECTED"\n')
    code, out, _ = launch(str(preset), "--dry-run", "--megatron-path", MEGATRON)
    assert code == 0
    assert all(line.startswith("#") or "INJECTED" not in line for line in out.splitlines())


@pytest.mark.parametrize("override", ["global_batch_size=-4", "log_interval=0", "eval_interval=0",
                                      "make_vocab_size_divisible_by=0", "num_virtual_stages_per_pipeline_rank=0",
                                      "master_port=99999", "master_addr=", "transformer_engine=1"])
def test_zero_negative_and_out_of_range_values_exit_2(launch, override):
    code, out, err = launch("345m", "--dry-run", "--set", override)
    assert code == 2 and "error:" in err and "Traceback" not in err


def test_toy_overrides_apply_through_pretrain_gpt(launch):
    """run_simple_mcore_train_loop.py takes no arguments: overrides must apply, never silently vanish."""
    code, out, err = launch("toy", "--gpus-per-node", "2", "--set", "num_layers=4", "--set", "lr=0.5",
                            "--dry-run", "--format", "json", "--megatron-path", MEGATRON)
    assert code == 0, err
    data = json.loads(out)
    assert data["entry"] == "pretrain_gpt" and data["script"].endswith("pretrain_gpt.py")
    argv = data["argv"]
    assert argv[argv.index("--num-layers") + 1] == "4" and argv[argv.index("--lr") + 1] == "0.5"
    assert any("num_layers, lr" in note for note in data["notes"])
    code, out, err = launch("toy", "--set", "entry=simple_loop", "--set", "lr=0.5", "--dry-run")
    assert code == 2 and "lr would not apply" in err


def test_list_gives_the_toy_upstreams_parameter_count(launch):
    code, out, _ = launch("list")
    assert code == 0
    toy = next(line for line in out.splitlines() if line.startswith("toy "))
    assert "6.96K" in toy  # GPTModel(vocab 100, untied) as run_simple_mcore_train_loop.py builds it
    code, out, _ = launch("toy", "--dry-run", "--format", "json", "--megatron-path", MEGATRON)
    data = json.loads(out)
    assert (data["parameters"], data["padded_vocab_size"]) == (6960, 100)


def test_batch_hint_is_the_smallest_change(launch):
    code, _, err = launch("345m", "--nodes", "8", "--gpus-per-node", "8", "--dry-run")
    assert code == 2 and "micro batch 32" not in err
    assert "use global_batch_size 64" in err
    code, _, err = launch("345m", "--gpus-per-node", "8", "--set", "global_batch_size=30", "--dry-run")
    assert code == 2 and "use global_batch_size 24 or 32" in err and "256" not in err


def test_a_huge_setting_is_checked_without_walking_every_integer(launch):
    code, out, err = launch("345m", "--dry-run", "--set", "num_attention_heads=1000000000")
    assert code == 2 and "not divisible by num_attention_heads 1000000000" in err


def test_a_job_whose_memory_estimate_leaves_little_margin_is_warned_before_launch(launch):
    # above 90 % of the GPU but within the one memory rule's line (the GPU less its reserve): a warning, not silence
    code, out, err = launch("345m", "--dry-run", "--set", "micro_batch_size=128", "--set", "global_batch_size=128",
                            "--set", "gpu=h200-141gb")
    assert code == 0, err
    assert ("# warning: the memory estimate, ~132.9 GiB per GPU, is within 10 % of the 139.8 GiB of h200-141gb: "
            "little room for the estimate's error; lower micro_batch_size") in out
    code, out, err = launch("345m", "--dry-run")
    assert code == 0 and "memory estimate" not in out
