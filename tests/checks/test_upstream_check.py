"""Every shipped preset, at several world sizes, through Megatron's own parser and checks; typos get a
suggestion with and without megatron-core; `launch PRESET --check` shows both verdicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from upstream_support import megatron_request, shared_checker, target_env_only  # noqa: F401 (autouse)

from launcher.checks.megatron_verdict import (
    UpstreamChecker,
    check_preset,
    nearest_flag,
    target_env,
    unknown_flags,
)
from launcher.errors import UserError
from launcher.megatron import args as megatron_args
from launcher.megatron.pin import Kernels, megatron_path
from launcher.pipeline.command import build_command
from launcher.pipeline.environment import launcher_connections
from launcher.pipeline.preset import available_presets, load_preset
from launcher.pipeline.resolve import attempt, resolve

REPO = Path(__file__).resolve().parents[2]
# (nodes, gpus per node) beyond each preset's own; the launcher must accept them for the test to mean much.
WORLDS = {
    "345m": [(1, 1), (1, 2), (1, 4), (1, 8), (2, 4)],  # global batch 32 of micro batch 4: DP up to 8
    "175b": [(16, 8), (128, 8), (192, 8), (384, 8)],
    "toy": [(1, 1)],  # one GPU: the toy model runs through pretrain_gpt.py with TP 1
}


def kernel_choices(setting: str | bool) -> list[bool]:
    """A preset that names its kernels (175B: TE and apex) is checked with them; "auto" with and without."""
    return [True, False] if setting == "auto" else [bool(setting)]


def preset_worlds():
    for name in available_presets():
        preset = load_preset(name)
        worlds = [(preset.launcher.nodes, preset.launcher.gpus_per_node), *WORLDS.get(name, [])]
        for nodes, gpus in dict.fromkeys(worlds):
            for te in kernel_choices(preset.launcher.transformer_engine):
                for apex in kernel_choices(preset.launcher.apex):
                    yield pytest.param(name, nodes, gpus, Kernels(te, apex, "preset"),
                                       id=f"{name}-{nodes}x{gpus}-te{int(te)}-apex{int(apex)}")



@pytest.mark.megatron
@pytest.mark.parametrize(("name", "nodes", "gpus", "kernels"), list(preset_worlds()))
def test_preset_passes_megatrons_own_checks(name, nodes, gpus, kernels):
    job = resolve(load_preset(name), nodes, gpus, kernels=kernels, megatron_path=Path("/opt/megatron-lm"))
    if job.entry != "pretrain_gpt":
        pytest.skip(f"entry {job.entry} takes no Megatron flags at world {nodes * gpus}")
    command = build_command(job)
    env = target_env(job)
    verdict = shared_checker().check(command.script_args, job.layout.world_size, env, apex=kernels.apex,
                                     te=kernels.transformer_engine)
    assert verdict.ok, verdict.render()
    # Megatron derives the same layout the launcher printed.
    facts = verdict.facts
    lay = job.layout
    assert (facts["data_parallel_size"], facts["num_microbatches"], facts["global_batch_size"]) == (
        lay.dp, lay.num_microbatches, lay.global_batch_size)
    assert facts["virtual_pipeline_model_parallel_size"] == lay.vpp


@pytest.mark.megatron
def test_megatron_rejects_what_the_launcher_rejects_for_a_preset():
    """The 175B preset on one node: both refuse, each in its own words."""
    preset = load_preset("175b")
    with pytest.raises(UserError, match="not divisible by TP·PP·CP"):
        resolve(preset, 1, 8, kernels=Kernels(True, True, "preset"))
    verdict = shared_checker().check_many([megatron_request(preset, 8, te=True, apex=True)])[0]
    assert not verdict.ok
    assert verdict.stage == "validate"
    assert "world size (8) is not divisible by total_model_size (total_model_size=128)" in verdict.error


@pytest.mark.megatron
def test_xavier_initialization_is_refused_by_both_and_the_hint_passes_megatron():
    """--init-method-xavier-uniform: the pin parses it, then its config builder passes a keyword TransformerConfig
    no longer has; the dry-run refuses it, and the job its hint gives passes Megatron's checks."""
    with pytest.raises(UserError, match="init_method_xavier_uniform") as err:
        resolve(load_preset("345m", ["init_method_xavier_uniform=true"]), 1, 1)
    (problem,) = err.value.problems
    assert problem.hint.startswith("set init_method_xavier_uniform=false ")
    refused = shared_checker().check_many([megatron_request(load_preset("345m", ["init_method_xavier_uniform=true"]), 1,
                                                            te=False, apex=False)])[0]
    assert not refused.ok and "scaled_init_method" in refused.error
    followed = load_preset("345m", ["init_method_xavier_uniform=true", "init_method_xavier_uniform=false"])
    assert shared_checker().check_many([megatron_request(followed, 1, te=False, apex=False)])[0].ok


@pytest.mark.megatron
def test_misspelled_flag_gets_megatrons_nearest_name():
    argv = build_command(resolve(load_preset("345m"), 1, 8)).script_args
    typo = ["--num-layerz" if word == "--num-layers" else word for word in argv]
    typo += ["--sequence-paralel"]
    verdict = shared_checker().check(typo, 8)
    assert verdict.stage == "parse"
    assert "unrecognized arguments" in verdict.error
    assert verdict.suggestions == {"--num-layerz": "--num-layers", "--sequence-paralel": "--sequence-parallel"}
    # The launcher's catalog of flags is the parser's own: the checkout's when the worker imported Megatron from
    # one; the installed megatron-core's parser may know more (tests/megatron_pin/test_megatron_args.py).
    catalog_flags = {f for arg in megatron_args.catalog().values() for f in arg.flags}
    known = set(shared_checker().known_flags) - {"--help"}
    checkout = megatron_path(None, None)
    if Path(shared_checker().megatron_origin).resolve().is_relative_to(checkout.resolve()):
        assert known == catalog_flags
    else:
        assert catalog_flags <= known


def test_misspelled_key_is_caught_without_megatron_or_torch():
    """The plain launcher catches the typo from its data file, with both packages made unimportable."""
    code = (
        "import sys\n"
        "sys.modules['torch'] = None; sys.modules['megatron'] = None\n"
        "from launcher.cli import main\n"
        "rc = main(['345m', '--dry-run', '--set', 'num_layerz=12', '--set', 'hiden_size=512'])\n"
        "assert 'torch' not in sys.modules or sys.modules['torch'] is None\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert "unknown setting 'num_layerz'" in proc.stderr
    assert "did you mean num_layers" in proc.stderr
    assert "did you mean hidden_size" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_flags_and_nearest_flag_read_argparse_message():
    message = "unrecognized arguments: --num-layerz 24 --fp17 7"
    assert unknown_flags(message) == ["--num-layerz", "--fp17"]
    assert nearest_flag("--fp17", ["--fp16", "--bf16", "--fp8-format"]) == "--fp16"
    assert nearest_flag("--zzzz", ["--fp16"]) is None


def test_check_env_sets_connections_only_for_tensor_or_context_parallel():
    assert launcher_connections("pretrain_gpt", 1, 1, fsdp=False) is None
    assert launcher_connections("pretrain_gpt", 1, 2, fsdp=False) == "1"
    assert launcher_connections("pretrain_gpt", 8, 1, fsdp=False) == "1"
    assert launcher_connections("pretrain_gpt", 8, 1, fsdp=True) is None


def test_checker_without_a_usable_python_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot start"):
        UpstreamChecker(str(tmp_path / "no-such-python"))
    with pytest.raises(UserError, match="could not start"):
        UpstreamChecker("/bin/false")


@pytest.mark.megatron
def test_check_cli_shows_megatrons_verdict_next_to_ours(launch_cli):
    rc, out, err = launch_cli("175b", "--check", "--nodes", "1", "--format", "json")
    assert rc == 2, err
    report = json.loads(out)
    assert report["agree"] is True
    assert not report["launcher"]["ok"] and not report["megatron"]["ok"]
    assert "world size (8) is not divisible" in report["megatron"]["error"]
    assert any("not divisible by TP·PP·CP" in p["message"] for p in report["launcher"]["problems"])



def check_text(capsys, overrides: list[str], gpus: int) -> tuple[int, str]:
    """`launch 345m --check` on one node of `gpus` GPUs without TE or apex: (exit code, text output)."""
    rc = check_preset(*attempt(load_preset("345m", overrides), 1, gpus, kernels=Kernels(False, False, "preset")),
                      checker=shared_checker())
    return rc, capsys.readouterr().out


@pytest.mark.megatron
def test_check_text_output_for_a_good_and_a_bad_layout(capsys):
    rc, out = check_text(capsys, ["micro_batch_size=4"], 2)
    assert rc == 0, out
    assert out.startswith("assumed: GPU h100-80gb (compute capability 9.0), no Transformer Engine, no apex")
    assert "\nlauncher: ok (world 2 = 1 × 2: TP 1 · PP 1 · CP 1 · DP 2; 4 microbatch(es) of 4)" in out
    assert "megatron: ok (" in out and "4 microbatch(es), padded vocab 50304" in out

    rc, out = check_text(capsys, ["tensor_model_parallel_size=3"], 3)
    assert rc == 2
    assert "error: num_attention_heads 16 is not a multiple of tensor_model_parallel_size 3" in out
    assert "megatron: config: ValueError: num_attention_heads (16) must be a multiple of " \
           "tensor_model_parallel_size (3)." in out
    assert "disagree" not in out


@pytest.mark.megatron
def test_a_refusal_of_what_megatron_meets_after_its_checks_is_no_disagreement(capsys):
    # multi-token prediction with MLA and no TE: Megatron's argument checks pass, its model build would fail
    rc, out = check_text(capsys, ["multi_latent_attention=true", "position_embedding_type=rope", "mtp_num_layers=1"], 1)
    assert rc == 2 and "megatron: ok (" in out
    assert "error: multi-latent attention (multi_latent_attention) needs Transformer Engine" in out
    assert "disagree" not in out


@pytest.mark.megatron
def test_zero_centered_gamma_on_the_sdpa_spec_passes_megatrons_model_build_checks(capsys):
    # its own norm implements it; Megatron's torch fallback (the local spec without apex) would assert
    rc, out = check_text(capsys, ["layernorm_zero_centered_gamma=true"], 1)
    assert rc == 0 and "megatron: ok (" in out, out


@pytest.fixture
def launch_cli():
    def run(*args: str):
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("MEGATRON_LM_PATH", None)
        proc = subprocess.run([sys.executable, "-m", "launcher", *args], check=False, capture_output=True,
                              text=True, env=env, cwd=REPO, timeout=300)
        return proc.returncode, proc.stdout, proc.stderr

    return run


def _preset_file(tmp_path, text: str) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return str(path)


TARGET_PRESET = """
base: 345m
launcher:
  gpus_per_node: 8
  transformer_engine: true
  apex: true
  gpu: h200-141gb
  env: {NCCL_ALGO: Tree, NVTE_CPU_OFFLOAD_V1: "1"}
megatron:
  tensor_model_parallel_size: 2
  sequence_parallel: true
  position_embedding_type: rope
  num_experts: 8
  expert_model_parallel_size: 4
  moe_grouped_gemm: true
  add_bias_linear: false
  deterministic_mode: true
  async_save: true
  use_persistent_ckpt_worker: false   # the 345m preset ships it; without it validate_args turns async_save off
  save: /ckpt
  save_interval: 100
  export_te_mcore_model: true
  micro_batch_size: 1
"""


@pytest.mark.megatron
def test_check_judges_the_declared_target_not_this_machine(tmp_path, capsys):
    """NCCL_ALGO from launcher.env, grouped GEMM's capability question, TE's fused RoPE and a ModelOpt flag:
    each failed on this CPU machine before; all are answered for the declared H200 + TE container."""
    preset = load_preset(_preset_file(tmp_path, TARGET_PRESET))
    rc = check_preset(*attempt(preset, kernels=Kernels(True, True, "preset")), checker=shared_checker())
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "assumed: GPU h200-141gb (compute capability 9.0), Transformer Engine 2.14.0" in out
    assert "NCCL_ALGO=Tree" in out and "CUDA_DEVICE_MAX_CONNECTIONS=1 (added by the launcher)" in out
    assert "megatron: ok (" in out
    # validate_args' silent rewrite, said by both sides
    assert "rewritten by validate_args: --async-save True → False" in out
    assert "async_save is disabled by Megatron without use_persistent_ckpt_worker" in out


@pytest.mark.megatron
def test_check_forwards_the_presets_own_value_when_the_launcher_refuses(tmp_path, capsys):
    preset = load_preset(_preset_file(tmp_path, TARGET_PRESET), ["env.CUDA_DEVICE_MAX_CONNECTIONS=8"])
    rc = check_preset(*attempt(preset, kernels=Kernels(True, True, "preset")), "json", checker=shared_checker())
    report = json.loads(capsys.readouterr().out)
    assert rc == 2 and report["agree"], report
    assert report["assumed"]["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"
    assert "CUDA_DEVICE_MAX_CONNECTIONS to 1" in report["megatron"]["error"]


@pytest.mark.megatron
def test_what_only_the_gpu_machine_can_answer_is_not_a_rejection():
    argv = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "128",
            "--max-position-embeddings", "128", "--micro-batch-size", "1", "--lr", "1e-4", "--train-iters", "10",
            "--eval-interval", "10", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "128",
            "--position-embedding-type", "rope", "--bf16"]
    with_te = shared_checker().check(argv, 1, te=True, apex=True)
    assert with_te.ok, with_te.render()
    without_te = shared_checker().check(argv + ["--transformer-impl", "local"], 1, te=False)
    assert not without_te.ok and "apply_rope_fusion is not available" in without_te.error


def test_fsdp_never_gets_one_connection_and_fsdp2_needs_untied_embeddings(tmp_path):
    preset = load_preset("345m", ["tensor_model_parallel_size=2", "use_torch_fsdp2=true",
                                  "gradient_accumulation_fusion=false", "micro_batch_size=4"])
    with pytest.raises(UserError, match="requires untie_embeddings_and_output_weights"):
        resolve(preset, 1, 8)
    with pytest.raises(UserError) as err:  # then the one problem left: its finish_grad_sync TypeError at this pin
        resolve(load_preset("345m", [*preset.overrides, "untie_embeddings_and_output_weights=true"]), 1, 8)
    assert [p.message.split(" (")[0] for p in err.value.problems] == [
        "use_torch_fsdp2 cannot train at this Megatron pin"]
    # Megatron-FSDP, which trains, gets the same connections treatment
    plan = resolve(load_preset("345m", ["tensor_model_parallel_size=2", "use_megatron_fsdp=true",
                                        "ckpt_format=fsdp_dtensor", "gradient_accumulation_fusion=false",
                                        "micro_batch_size=4", "async_save=false"]), 1, 8)
    command = build_command(plan)
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in command.env
    assert any("FSDP" in w for w in plan.warnings)
    with pytest.raises(UserError, match="FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset"):
        resolve(load_preset("345m", [*plan.preset.overrides, "env.CUDA_DEVICE_MAX_CONNECTIONS=1"]), 1, 8)


def test_moe_overlap_only_warns_about_connections():
    preset = load_preset("345m", ["tensor_model_parallel_size=2", "num_experts=8", "expert_model_parallel_size=4",
                                  "add_bias_linear=false", "overlap_moe_expert_parallel_comm=true",
                                  "moe_token_dispatcher_type=alltoall", "env.CUDA_DEVICE_MAX_CONNECTIONS=32",
                                  "micro_batch_size=4", "sequence_parallel=true"])
    plan = resolve(preset, 1, 8, kernels=Kernels(True, True, "preset"))
    assert any("only warns" in w for w in plan.warnings)


def test_without_te_rope_gets_no_fusion_and_the_rest_is_refused_before_launch():
    plan = resolve(load_preset("345m", ["position_embedding_type=rope"]), 1, 1)
    assert "--no-rope-fusion" in build_command(plan).script_args
    for overrides, message in [
        (["position_embedding_type=rope", "apply_rope_fusion=true"], "fused RoPE"),
        (["num_experts=4", "fp8=hybrid", "add_bias_linear=false"], "MoE with fp8 needs Transformer Engine"),
        (["pipeline_model_parallel_size=2", "defer_embedding_wgrad_compute=true"], "needs NVIDIA apex"),
    ]:
        with pytest.raises(UserError, match=message):
            resolve(load_preset("345m", overrides), 1, 2)


def test_a_switch_set_to_megatrons_default_is_reported_not_dropped():
    plan = resolve(load_preset("345m", ["ckpt_fully_parallel_save=true"]), 1, 1)
    assert any("ckpt_fully_parallel_save: true is Megatron's default and emits no flag "
               "(only --no-ckpt-fully-parallel-save exists)" in w for w in plan.warnings)
    plan = resolve(load_preset("345m", ["ckpt_fully_parallel_save=false"]), 1, 1)
    assert "--no-ckpt-fully-parallel-save" in build_command(plan).script_args


def test_multi_valued_flags_given_as_one_string_are_split(tmp_path):
    preset = load_preset(_preset_file(tmp_path, "base: 345m\nmegatron:\n  context_parallel_size: 4\n"
                                      "  hierarchical_context_parallel_sizes: \"2 2\"\n  cp_comm_type: a2a+p2p\n"))
    assert preset.megatron["hierarchical_context_parallel_sizes"] == [2, 2]
    plan = resolve(preset, 1, 4, kernels=Kernels(True, True, "preset"))
    argv = build_command(plan).script_args
    at = argv.index("--hierarchical-context-parallel-sizes")
    assert argv[at + 1:at + 3] == ["2", "2"]


def test_modelopt_arguments_are_in_the_catalog_marked_by_their_provider():
    arg = megatron_args.catalog()["export_te_mcore_model"]
    assert arg.provider == "modelopt" and arg.flags == ("--export-te-mcore-model",)
    assert megatron_args.catalog()["num_layers"].provider == "megatron"
    plan = resolve(load_preset("345m", ["export_te_mcore_model=true"]), 1, 1)
    assert "--export-te-mcore-model" in build_command(plan).script_args


@pytest.mark.megatron
def test_a_missing_data_file_is_no_disagreement(capsys, tmp_path):
    # seen after an import: only the data path was missing, and --check asked the user to report a disagreement
    from launcher.checks.data import check_job_data

    job, problems = attempt(load_preset("345m", ["mock_data=false", f"data_path={tmp_path}/corpus",
                                                 "tokenizer_type=NullTokenizer"]), 1, 1,
                            kernels=Kernels(False, False, "preset"), data_check=check_job_data)
    assert problems and all(p.stage == "data" for p in problems), problems
    rc = check_preset(job, problems, checker=shared_checker())
    out = capsys.readouterr().out
    assert rc == 2 and "megatron: ok" in out and "disagree" not in out, out


def test_a_disagreement_says_which_check_megatron_refused_at():
    # seen: "the launcher and Megatron disagree about this layout; please report it" said neither side's reason
    from launcher.checks.megatron_verdict import Verdict, disagreement
    from launcher.errors import Problem

    refused = Verdict(False, "validate", "AssertionError: --no-check-for-nan-in-loss-and-grad should be set",
                      where={"file": "megatron/training/arguments.py", "line": 1187, "function": "validate_args"})
    text = disagreement(True, [], refused)
    assert text is not None and "the launcher accepted this job" in text
    assert "refuses it at megatron/training/arguments.py:1187 (validate_args): AssertionError: " \
           "--no-check-for-nan-in-loss-and-grad should be set" in text
    assert "a check the launcher does not mirror yet" in text
    assert disagreement(False, [Problem("x", "", "validate")], refused) is None
    stricter = disagreement(False, [Problem("num_layers 5 is odd", "", "validate")], Verdict(True))
    assert stricter is not None and "(num_layers 5 is odd)" in stricter and "accept it" in stricter
    assert disagreement(False, [Problem("no data file", "", "data")], Verdict(True)) is None


@pytest.mark.megatron
def test_check_names_a_megatron_check_the_launcher_does_not_mirror(capsys):
    # mla_up_proj recompute without MLA raises in TransformerConfig (transformer_config.py:1609), which the dry-run
    # does not mirror (a config_not_yet check of tests/megatron_pin/validation_checks.yaml)
    rc, out = check_text(capsys, ["recompute_granularity=selective", "recompute_modules=[mla_up_proj]"], 1)
    assert rc == 2 and "launcher: ok" in out, out
    assert "megatron: config: ValueError: mla_up_proj in recompute_modules is only supported with " \
           "multi_latent_attention. (at megatron/core/transformer/transformer_config.py:" in out
    assert "note: the launcher and Megatron disagree: the launcher accepted this job" in out
    assert "does not mirror yet" in out


@pytest.mark.megatron
def test_megatrons_exit_says_what_it_printed_and_ends_no_later_check(capsys):
    # validate_args answers --checkpoint-activations with print + exit(); exit() also closed the worker's stdin
    exits = megatron_request(load_preset("345m", ["checkpoint_activations=true"]), 1, False, False)
    fine = megatron_request(load_preset("345m"), 1, False, False)
    first, second = shared_checker().check_many([exits, fine])
    assert first.error.startswith("Megatron called exit(None) after printing: --checkpoint-activations is no "
                                  "longer valid, use --recompute-activations")
    assert first.where is not None and first.where["function"] == "validate_args"
    assert second.ok, second.render()
