import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.checks.data import check_job_data
from launcher.cli.render import batch_line
from launcher.errors import UserError
from launcher.megatron.pin import Kernels
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve


def plan(preset="345m", overrides=(), nodes=None, gpus=None, te=False, apex=False):
    return resolve(load_preset(preset, list(overrides)), nodes, gpus, kernels=Kernels(te, apex, "preset"),
                   data_check=check_job_data)


def problems(*args, **kwargs) -> str:
    with pytest.raises(UserError) as err:
        plan(*args, **kwargs)
    return err.value.render()


def test_175b_default_world():
    lay = plan("175b", te=True, apex=True).layout
    assert (lay.world_size, lay.tp, lay.pp, lay.dp, lay.num_microbatches) == (1536, 8, 16, 12, 128)


def test_world_not_divisible_names_every_factor_and_valid_node_counts():
    text = problems("175b", nodes=1, gpus=8, te=True, apex=True)
    assert "world size 8 = 1 node(s) × 8 GPUs is not divisible by TP·PP·CP = 8·16·1 = 128" in text
    assert "--nodes 16 (128 GPUs), 32 (256 GPUs)" in text


def test_global_batch_suggests_nearest_valid():
    text = problems(overrides=["global_batch_size=30", "micro_batch_size=4"], gpus=8)
    assert "global batch size 30 is not divisible by micro batch 4 × data-parallel size 8 = 32" in text
    assert "use global_batch_size 32" in text


def test_heads_vs_tp_lists_allowed_values():
    text = problems(overrides=["tensor_model_parallel_size=3"], gpus=3)
    assert "num_attention_heads 16 is not a multiple of tensor_model_parallel_size 3" in text
    assert "[1, 2, 4, 8, 16]" in text


def test_layers_vs_pp():
    text = problems(overrides=["pipeline_model_parallel_size=5"], gpus=5)
    assert "num_layers 24 is not divisible by pipeline_model_parallel_size 5" in text


def test_hidden_vs_heads_unless_kv_channels():
    assert "hidden_size 1000 is not divisible by num_attention_heads 16" in problems(overrides=["hidden_size=1000"])
    plan(overrides=["hidden_size=1000", "kv_channels=64", "ffn_hidden_size=4096"])


def test_query_groups_multiple_or_divisor_of_tp():
    base = ["group_query_attention=true", "tensor_model_parallel_size=4"]
    assert "num_query_groups 3 must be a multiple or divisor of TP 4" in problems(
        overrides=[*base, "num_query_groups=3"], gpus=4)
    plan(overrides=[*base, "num_query_groups=2"], gpus=4)
    plan(overrides=[*base, "num_query_groups=8"], gpus=4)


def test_seq_length_vs_max_positions():
    assert "max_position_embeddings 1024 is smaller than seq_length 2048" in problems(overrides=["seq_length=2048"])


MBS4 = "micro_batch_size=4"  # the batch arithmetic below was written for micro batch 4


def test_virtual_pipeline_and_interleaved_microbatch_rule():
    ok = plan(overrides=[MBS4, "pipeline_model_parallel_size=4", "num_layers_per_virtual_pipeline_stage=3"], gpus=4)
    assert ok.layout.vpp == 2 and ok.layout.num_microbatches == 8
    text = problems(overrides=[MBS4, "pipeline_model_parallel_size=4", "num_layers_per_virtual_pipeline_stage=3",
                               "global_batch_size=24"], gpus=4)
    assert "needs the number of microbatches 6" in text and "multiple of PP 4" in text
    assert "per pipeline stage" in problems(
        overrides=[MBS4, "pipeline_model_parallel_size=4", "num_layers_per_virtual_pipeline_stage=4"], gpus=4)
    assert "needs PP > 1" in problems(overrides=["num_virtual_stages_per_pipeline_rank=2"])


def test_only_one_virtual_pipeline_option():
    text = problems(overrides=["pipeline_model_parallel_size=2", "num_layers_per_virtual_pipeline_stage=3",
                               "num_virtual_stages_per_pipeline_rank=2"], gpus=2)
    assert "only one of" in text


def test_uneven_stages():
    ok = plan(overrides=["pipeline_model_parallel_size=4", "decoder_first_pipeline_num_layers=3",
                         "decoder_last_pipeline_num_layers=3"], gpus=4)
    assert ok.layout.pp == 4
    assert "middle layers" in problems(overrides=["pipeline_model_parallel_size=4",
                                                  "decoder_first_pipeline_num_layers=5"], gpus=4)


def test_context_parallel_rules():
    assert "seq_length 1024 is not a multiple of 2·CP = 2·3 = 6" in problems(
        overrides=["context_parallel_size=3"], gpus=3, te=True)
    assert "needs Transformer Engine" in problems(overrides=["context_parallel_size=2"], gpus=2)
    plan(overrides=["context_parallel_size=2"], gpus=2, te=True)


def test_sequence_parallel():
    assert "needs Transformer Engine or NVIDIA apex" in problems(
        overrides=["tensor_model_parallel_size=2", "sequence_parallel=true"], gpus=2)
    p = plan(overrides=["sequence_parallel=true"])
    assert not p.layout.sequence_parallel and any("ignored with TP 1" in w for w in p.warnings)


def test_precision_and_optimizer_flags():
    assert "fp16 and bf16 are both set" in problems(overrides=["fp16=true"])
    text = problems(overrides=["overlap_param_gather=true"])
    assert "needs use_distributed_optimizer" in text and "needs overlap_grad_reduce" in text


def test_training_length_and_lr_schedule():
    # 345m counts iterations: switching it to samples reports every iterations-based setting at once
    switched = problems(overrides=["train_samples=1000"])
    assert "train_samples 1000 is set, so these iters-based settings conflict with it: train_iters 500000, " \
           "lr_decay_iters 320000" in switched and "--set train_iters=null --set lr_decay_iters=null" in switched
    assert "conflict with it: lr_decay_samples 10" in problems(overrides=["lr_decay_samples=10"])
    assert "warmup" in problems(overrides=["train_iters=10", "lr_decay_iters=null", "lr_warmup_fraction=null",
                                           "lr_warmup_iters=20"])
    assert "min_lr 0.1 is larger than lr" in problems(overrides=["min_lr=0.1"])


def test_step_batch_size_schedule():
    assert "cannot be set together" in problems(overrides=["step_batch_size_schedule=0:16 1M:32"])
    base = [MBS4, "global_batch_size=null", "train_iters=null", "lr_decay_iters=null", "train_samples=100000"]
    assert "must start at threshold 0" in problems(overrides=[*base, "step_batch_size_schedule=5:16 1M:32"])
    assert "not multiples of micro batch 4" in problems(overrides=[*base, "step_batch_size_schedule=0:16 1M:30"])
    assert "must not decrease" in problems(overrides=[*base, "step_batch_size_schedule=0:32 1M:16"])
    plan(overrides=[*base, "step_batch_size_schedule=0:16 2.4B:320"])


def test_the_header_gives_the_batch_a_schedule_trains_on_not_megatrons_mbs_dp():
    base = [MBS4, "global_batch_size=null", "train_iters=null", "lr_decay_iters=null", "train_samples=100000"]
    job = plan(overrides=[*base, "step_batch_size_schedule=0:16 2.4B:320"])
    assert job.layout.global_batch_size == 4  # Megatron's args.global_batch_size under a schedule: MBS·DP
    assert job.layout.batch_schedule == (16, 320)
    assert batch_line(job.layout) == ("# batch 16 → 320 by step_batch_size_schedule = micro batch 4 × DP 1 × "
                                      "4 → 80 microbatch(es)")
    assert job.layout.as_dict()["batch_schedule"] == [16, 320]
    plain = plan(overrides=[MBS4]).layout
    assert batch_line(plain) == "# batch 32 = micro batch 4 × DP 1 × 8 microbatch(es)"
    assert "batch_schedule" not in plain.as_dict()


def test_data_sources_and_required_settings():
    assert "both mock data (mock_data) and real data (data_path)" in problems(overrides=["data_path=/d/x"])
    assert "eval_interval is not set" in problems(overrides=["eval_interval=null"])
    assert "lr is not set" in problems(overrides=["lr=null", "min_lr=0"])


def test_save_needs_interval():
    assert "save is set without save_interval" in problems(overrides=["save=/ckpt"])


def test_toy_simple_loop_needs_tp2_and_even_gpus():
    assert plan("toy", gpus=2).entry == "simple_loop"
    fallback = plan("toy", gpus=1)
    assert fallback.entry == "pretrain_gpt" and fallback.layout.tp == 1 and fallback.notes
    assert "hard-codes TP 2" in problems("toy", gpus=3)
    # Another TP is a Megatron override: it applies through pretrain_gpt.py (the simple loop takes no arguments).
    routed = plan("toy", overrides=["tensor_model_parallel_size=4"], gpus=4)
    assert (routed.entry, routed.layout.tp) == ("pretrain_gpt", 4)


def test_toy_yaml_states_exactly_what_the_simple_loop_hard_codes():
    from launcher.pipeline.checker import SIMPLE_LOOP_SETTINGS

    assert load_preset("toy").megatron == SIMPLE_LOOP_SETTINGS


def test_toy_overrides_route_through_pretrain_gpt_with_a_note():
    routed = plan("toy", overrides=["num_layers=4", "lr=0.5"], gpus=2)
    assert routed.entry == "pretrain_gpt"
    assert routed.preset.arg("num_layers") == 4 and routed.preset.arg("lr") == 0.5
    assert any("num_layers, lr" in note and "pretrain_gpt.py" in note for note in routed.notes)
    one_gpu = plan("toy", overrides=["num_layers=4"], gpus=1)
    assert (one_gpu.entry, one_gpu.layout.tp) == ("pretrain_gpt", 1)


def test_toy_overrides_with_an_explicit_simple_loop_are_refused():
    text = problems("toy", overrides=["entry=simple_loop", "lr=0.5"], gpus=2)
    assert "takes no arguments: lr would not apply" in text


def test_simple_loop_parameters_are_upstream_models():
    """GPTModel as upstream's script builds it: vocabulary 100 unpadded, output layer untied (6,960)."""
    from launcher.estimate.formulas import parameter_count
    from launcher.pipeline.checker import model_args

    toy = plan("toy", gpus=2)
    assert toy.entry == "simple_loop"
    assert parameter_count(model_args(toy.effective(), toy.entry), toy.layout.tp) == 6960


def test_batch_hint_never_blames_the_auto_picked_micro_batch():
    text = problems(nodes=8, gpus=8)  # 345m: global batch 32 on DP 64
    assert "micro batch 32" not in text
    assert "not divisible by data-parallel size 64" in text
    assert "use global_batch_size 64" in text and "--nodes 4 (32 GPUs, DP 32)" in text
    text = problems(overrides=["global_batch_size=30"], gpus=8)
    assert "use global_batch_size 24 or 32" in text and "256" not in text


def test_batch_hint_offers_a_micro_batch_that_divides():
    text = problems(overrides=["global_batch_size=64", "micro_batch_size=3"], gpus=8)
    assert "use micro_batch_size 2 (global batch 64 / DP 8 = 8 per rank), or global_batch_size 48 or 72" in text
    text = problems(overrides=["global_batch_size=32", "micro_batch_size=32"], nodes=8, gpus=8)
    assert "global_batch_size 64 with micro_batch_size 1" in text


def test_every_problem_at_once():
    with pytest.raises(UserError) as err:
        plan(overrides=["tensor_model_parallel_size=3", "seq_length=4096", "fp16=true"], gpus=3)
    assert [p.message for p in err.value.problems] == [
        "num_attention_heads 16 is not a multiple of tensor_model_parallel_size 3",
        "ffn_hidden_size 4096 is not divisible by TP 3",
        "fp16 and bf16 are both set",
        "max_position_embeddings 1024 is smaller than seq_length 4096",
    ]


# -- properties of the arithmetic ---------------------------------------------------------------------------------

sizes = st.sampled_from([1, 2, 4, 8])


@settings(max_examples=150, deadline=None)
@given(tp=sizes, pp=st.sampled_from([1, 2, 3, 4, 6]), nodes=st.integers(1, 8), gpus=st.sampled_from([1, 2, 4, 8]),
       mbs=st.sampled_from([1, 2, 4]), gbs=st.integers(1, 256))
def test_layout_arithmetic(tp, pp, nodes, gpus, mbs, gbs):
    overrides = [f"tensor_model_parallel_size={tp}", f"pipeline_model_parallel_size={pp}",
                 f"micro_batch_size={mbs}", f"global_batch_size={gbs}"]
    world = nodes * gpus
    valid = world % (tp * pp) == 0 and gbs % (mbs * (world // (tp * pp) or 1)) == 0
    try:
        lay = plan(overrides=overrides, nodes=nodes, gpus=gpus).layout
    except UserError as err:
        assert not valid, err.render()
        return
    assert valid
    assert lay.tp * lay.pp * lay.cp * lay.dp == world
    assert lay.micro_batch_size * lay.dp * lay.num_microbatches == gbs


@settings(max_examples=60, deadline=None)
@given(tp=sizes, pp=st.sampled_from([1, 2, 3, 4, 6, 8]), gpus=st.sampled_from([1, 2, 4, 8]))
def test_suggested_node_counts_are_valid(tp, pp, gpus):
    overrides = [f"tensor_model_parallel_size={tp}", f"pipeline_model_parallel_size={pp}",
                 "global_batch_size=null"]
    try:
        plan(overrides=overrides, nodes=1, gpus=gpus)
        return
    except UserError as err:
        text = err.render()
    if "is not divisible by TP·PP·CP" not in text:
        return  # another rule (layers per stage, heads) refused first
    # more GPUs when the model needs them: every node count named works
    match = re.search(r"use --nodes ([\d ,()GPUs]+)", text)
    assert bool(match) == (tp * pp > gpus), text
    for nodes in re.findall(r"(\d+) \(", match.group(1) if match else ""):
        assert "is not divisible by TP·PP·CP" not in world_problems(overrides, int(nodes), gpus)
    # the same GPUs, fewer per node, only where the model fits in fewer; each size named divides the world
    fixes = [("gpus", int(g)) for g in re.findall(r"--gpus-per-node (\d+)", text)]
    fixes += re.findall(r"--set (tensor_model_parallel_size|pipeline_model_parallel_size)=(\d+)", text)
    assert fixes or tp * pp > gpus, text
    for kind, value in fixes:
        fixed = [*[o for o in overrides if not o.startswith(f"{kind}=")], f"{kind}={value}"]
        assert "is not divisible by TP·PP·CP" not in world_problems(
            overrides if kind == "gpus" else fixed, 1, int(value) if kind == "gpus" else gpus), (kind, value)


def world_problems(overrides, nodes, gpus) -> str:
    try:
        plan(overrides=overrides, nodes=nodes, gpus=gpus)
    except UserError as still:
        return still.render()
    return ""


@pytest.mark.parametrize("sizes", [
    ["tensor_model_parallel_size=16"], ["pipeline_model_parallel_size=12"], ["context_parallel_size=16"],
    ["num_experts=6", "add_bias_linear=false", "expert_model_parallel_size=3"],
    ["num_experts=16", "add_bias_linear=false", "expert_model_parallel_size=16"],
    ["num_experts=8", "add_bias_linear=false", "expert_tensor_parallel_size=3"],
    ["num_experts=8", "add_bias_linear=false", "expert_model_parallel_size=8", "expert_tensor_parallel_size=2"],
])
def test_every_world_size_refusal_names_more_nodes_and_they_hold_the_job(sizes):
    """Whichever size makes the world too small (TP, PP, CP) or not divide (EP, ETP), more GPUs are a way out; the
    counts named hold both grids (TP·PP·CP and ETP·EP·PP), and every `--set` named gives a world that divides."""
    te = any(s.startswith("context_parallel_size") for s in sizes)  # CP > 1 needs TE
    text = problems(overrides=sizes, nodes=1, gpus=8, te=te, apex=te)
    refusal = next(line for line in text.splitlines() if "world size 8" in line and "not divisible" in line)
    hint = text.splitlines()[text.splitlines().index(refusal) + 1]
    counts = re.search(r"--nodes ((?:\d+ \(\d+ GPUs\)(?:, )?)+)", hint)
    assert counts, hint
    for nodes in re.findall(r"(\d+) \(", counts.group(1)):
        still = world_problems_te(sizes, int(nodes), te)
        assert "not divisible by TP·PP·CP" not in still and "not divisible by expert" not in still, (nodes, still)
    for name, value in re.findall(r"--set ([a-z_]+)=(\d+)", hint):
        still = world_problems_te([*sizes, f"{name}={value}"], 1, te)
        assert "world size 8" not in still, (name, value, still)


def world_problems_te(overrides, nodes, te) -> str:
    try:
        plan(overrides=overrides, nodes=nodes, gpus=8, te=te, apex=te)
    except UserError as still:
        return still.render()
    return ""


@settings(max_examples=60, deadline=None)
@given(dp=st.sampled_from([1, 2, 3, 4, 8]), mbs=st.sampled_from([1, 2, 4]), gbs=st.integers(1, 200))
def test_suggested_global_batches_are_valid(dp, mbs, gbs):
    overrides = [f"micro_batch_size={mbs}", f"global_batch_size={gbs}"]
    try:
        plan(overrides=overrides, gpus=dp)
        return
    except UserError as err:
        text = err.render()
    hint = text.split("hint: use ", 1)[1]
    options = 0
    for option in hint.split(", or "):  # every option works, changing only what it names
        micro = re.search(r"micro_batch_size (\d+)", option)
        batches = re.search(r"global_batch_size (\d+)(?: or (\d+))?", option)
        for value in filter(None, batches.groups()) if batches else [gbs]:
            plan(overrides=[f"micro_batch_size={micro.group(1) if micro else mbs}", f"global_batch_size={value}"],
                 gpus=dp)
            options += 1
    assert options, text


MOE_DP_LAST = ["num_experts=4", "moe_router_topk=2", "add_bias_linear=false", "tensor_model_parallel_size=2",
               "pipeline_model_parallel_size=2", "expert_model_parallel_size=2", "use_tp_pp_dp_mapping=true",
               "global_batch_size=32", "sequence_parallel=true"]


@pytest.mark.parametrize("etp, refused_too", [(2, True), (1, False)], ids=["etp-2", "etp-1"])
def test_data_parallel_ranks_last_needs_equal_data_parallel_sizes_for_attention_and_experts(etp, refused_too):
    """initialize_model_parallel asserts it with PP > 1 when the rank order does not end in PP (found rehearsing
    moe/gpt3_mcore_tp2_pp2_ep2_etp2_te_4experts2parallel_dp_last at 8 GPUs): DP world/(TP·CP·PP) must equal the
    experts' world/(ETP·EP·PP)."""
    preset = load_preset("345m", [*MOE_DP_LAST, f"expert_tensor_parallel_size={etp}"])
    if not refused_too:
        assert resolve(preset, 1, 8, kernels=Kernels(True, True, "preset")).layout.dp == 2
        return
    with pytest.raises(UserError) as err:
        resolve(preset, 1, 8, kernels=Kernels(True, True, "preset"))
    text = err.value.render()
    assert "use_tp_pp_dp_mapping (data-parallel ranks last) with PP 2 needs the MoE layers' data-parallel size to " \
           "equal the attention's: expert TP·EP = 2·2 = 4 is not TP·CP = 2·1 = 2" in text
    assert "drop use_tp_pp_dp_mapping" in text


@pytest.mark.parametrize("sp, tp, refused", [(False, 2, True), (True, 2, False), (False, 1, False)])
def test_experts_at_tp_above_1_need_sequence_parallel(sp, tp, refused):
    """Megatron's MoE layer raises at the first training step when TP > 1 runs without sequence parallelism
    (moe_layer.py:621); validate_args only warns. Found rehearsing TP 2 · expert TP 4 · EP 2 on CPU processes."""
    preset = load_preset("345m", ["num_experts=4", "moe_router_topk=2", "add_bias_linear=false",
                                  f"tensor_model_parallel_size={tp}", "expert_model_parallel_size=2",
                                  f"sequence_parallel={str(sp).lower()}", "global_batch_size=32"])
    if not refused:
        resolve(preset, 1, 8, kernels=Kernels(True, True, "preset"))
        return
    with pytest.raises(UserError) as err:
        resolve(preset, 1, 8, kernels=Kernels(True, True, "preset"))
    text = err.value.render()
    assert "MoE experts with TP 2 need sequence_parallel" in text and "set sequence_parallel=true" in text
