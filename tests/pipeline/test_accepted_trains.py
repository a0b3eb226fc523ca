"""What the dry-run accepts must train: each rule here was a job accepted (often after an import) that then did not
train on an H200. Each refusal's hint, followed in one round (every `--set X=V` of its first way out), gives a job
that is accepted or has strictly fewer problems."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from launcher.errors import UserError
from launcher.megatron.pin import Kernels
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve
from tests.pipeline.refusals import refused

SET = re.compile(r"(?:--)?set ([a-z_][a-z0-9_.]*|env\.[A-Za-z_][A-Za-z0-9_]*)=([^\s,;)]+)")


def problems_of(overrides: list[str], te: bool = False, run_dir: Path | None = None) -> list:
    try:
        resolve(load_preset("345m", overrides), kernels=Kernels(te, te, "preset"), run_dir=run_dir)
    except UserError as err:
        return err.problems
    return []


def first_way_out(hint: str) -> list[str]:
    """Every `set X=V` of a hint before its first alternative (", or", " (")."""
    head = re.split(r",? or |\s\(", hint.removeprefix("unset them: "), maxsplit=1)[0]
    return [f"{m[1]}={m[2]}" for m in SET.finditer(head)]


def follow(overrides: list[str], te: bool = False, run_dir: Path | None = None) -> tuple[list, list]:
    """(problems before, problems after one round of every problem's first way out)."""
    before = problems_of(overrides, te, run_dir)
    fixes = list(dict.fromkeys(fix for p in before for fix in first_way_out(p.hint)))
    assert fixes, [p.render() for p in before]
    return before, problems_of([*overrides, *fixes], te, run_dir)


CASES = {
    "checkpoint_activations": (["checkpoint_activations=true"], False),
    "no attention heads in a model with query groups": (["num_attention_heads=0", "group_query_attention=true",
                                                        "num_query_groups=4"], False),
    "no attention heads with query groups the hidden size takes only in pairs": (
        ["num_attention_heads=0", "group_query_attention=true", "num_query_groups=3", "hidden_size=1536"], False),
    "more attention heads than the hidden size has units": (["num_attention_heads=2147483648"], False),
    "Xavier initialization, which the pin's config builder passes under a removed keyword": (
        ["init_method_xavier_uniform=true"], False),
    "batch_size": (["batch_size=4"], False),
    "the flex dispatcher at TP 1 and EP 1": (["num_experts=4", "add_bias_linear=false",
                                              "moe_token_dispatcher_type=flex"], True),
    "DeepEP with padding to capacity": (["num_experts=4", "add_bias_linear=false", "moe_token_dispatcher_type=flex",
                                         "moe_expert_capacity_factor=1.0", "moe_pad_expert_input_to_capacity=true"],
                                        True),
    "an expert capacity with sinkhorn balancing": (["num_experts=4", "add_bias_linear=false",
                                                    "moe_router_load_balancing_type=sinkhorn",
                                                    "moe_expert_capacity_factor=1.0"], False),
    "optimizer CPU offload without the precision-aware optimizer": (["optimizer_cpu_offload=true"], False),
    "a lower optimizer precision with TE": (["exp_avg_dtype=bf16"], True),
    "an inference-only fused TP kernel in training": (["inference_fuse_tp_communication=true"], False),
    "multi-token prediction with the old rotary flag": (["mtp_num_layers=1", "use_rotary_position_embeddings=true"],
                                                        False),
    "batch_size that does not divide the global batch": (["batch_size=3"], False),
    "selective recompute of layernorm alone without TE": (["recompute_granularity=selective",
                                                            "recompute_modules=[layernorm]"], False),
    "recompute_activations of layernorm alone without TE": (["recompute_activations=true",
                                                              "recompute_modules=[layernorm]"], False),
    "torch FSDP2 with the distributed optimizer's overlap": (
        ["use_torch_fsdp2=true", "use_distributed_optimizer=true", "overlap_grad_reduce=true",
         "overlap_param_gather=true", "untie_embeddings_and_output_weights=true"], False),
    "the param gather overlapped with the step at PP 1": (["use_distributed_optimizer=true",
                                                           "overlap_param_gather_with_optimizer_step=true"], False),
    "fp8 param gather without the distributed optimizer": (["fp8_format=e4m3", "fp8_param_gather=true"], True),
    "squared ReLU with the fused bias GeLU": (["squared_relu=true"], False),
    "squared ReLU with SwiGLU": (["squared_relu=true", "swiglu=true"], False),
    "the local attention backend on the launcher's spec": (["attention_backend=local"], False),
    "the local attention backend on TE's spec": (["attention_backend=local"], True),
    "an older Megatron's attention variable (several backends allow it)": (["env.NVTE_FUSED_ATTN=0"], False),
    "older Megatron's attention variables naming one backend": (["env.NVTE_FUSED_ATTN=0", "env.NVTE_UNFUSED_ATTN=0"],
                                                                True),
    "an older Megatron's CPU backend (gloo) on GPUs": (["distributed_backend=gloo"], False),
    "the residual fused into RMSNorm on a LayerNorm model": (["fused_residual_rmsnorm=true"], False),
    "per-layer CUDA graphs with full recompute": (["cuda_graph_impl=local", "recompute_granularity=full",
                                                   "recompute_method=uniform", "recompute_num_layers=1"], False),
    "the deprecated CUDA graph flag with graphed attention recompute": (
        ["enable_cuda_graph=true", "recompute_activations=true", "attention_dropout=0.1"], False),
    "per-layer CUDA graphs with graphed MLP recompute": (
        ["cuda_graph_impl=local", "recompute_activations=true", "recompute_modules=[mlp]", "hidden_dropout=0.1"],
        False),
    "checkpoint_activations with a recompute method": (["checkpoint_activations=true", "recompute_method=uniform",
                                                        "recompute_num_layers=1"], False),
    "recompute_activations with a recompute method": (["recompute_activations=true", "recompute_method=uniform"],
                                                      False),
    "wsd in samples at an iteration length": (["lr_decay_style=WSD", "lr_wsd_decay_samples=3200"], False),
    "wsd without its length": (["lr_decay_style=WSD"], False),
    "samples with every iteration setting": (["train_iters=null", "train_samples=3200000",
                                              "lr_decay_style=WSD", "lr_wsd_decay_iters=100"], False),
    "precision-aware optimizer without TE": (["use_precision_aware_optimizer=true",
                                              "use_distributed_optimizer=true"], False),
    "precision-aware optimizer without the distributed optimizer": (["use_precision_aware_optimizer=true"], True),
    "reuse grad buffer without fp8 params": (["reuse_grad_buf_for_mxfp8_param_ag=true"], False),
    "fp8 MoE without TE": (["num_experts=4", "add_bias_linear=false", "fp8_format=e4m3", "fp8_param_gather=true",
                            "use_distributed_optimizer=true", "reuse_grad_buf_for_mxfp8_param_ag=true"], False),
    "checkpoint flags with a new load": (["exit_on_missing_checkpoint=true", "use_checkpoint_args=true",
                                          "perform_initialization=false"], False),
    "a virtual pipeline at PP 1 that does not divide": (["num_layers_per_virtual_pipeline_stage=5"], False),
    "a virtual pipeline at PP 1": (["num_layers_per_virtual_pipeline_stage=4"], False),
    "virtual stages at PP 1": (["num_virtual_stages_per_pipeline_rank=2"], False),
    # found by moving the import corpus to one GPU (scripts/import_corpus_gpu.py): refusals that named no --set
    "expert all-to-all overlap at EP 1": (["num_experts=4", "add_bias_linear=false",
                                           "moe_token_dispatcher_type=alltoall",
                                           "overlap_moe_expert_parallel_comm=true"], False),
    "deferred embedding wgrad at PP 1": (["defer_embedding_wgrad_compute=true"], False),
    "p2p warm-up flush without the p2p overlap": (["overlap_p2p_comm_warmup_flush=true"], False),
    "fp16 shorter than its loss scale warm-up": (["fp16=true", "bf16=false", "train_iters=4"], False),
    "precision-aware optimizer without TE, with its lower precisions": (
        ["use_precision_aware_optimizer=true", "use_distributed_optimizer=true", "main_grads_dtype=bf16",
         "exp_avg_dtype=bf16"], False),
    "lower optimizer precisions without the precision-aware optimizer": (["main_grads_dtype=bf16"], False),
    "top-2 routing over one expert": (["num_experts=1", "add_bias_linear=false"], False),
    "top-1 routing with the softmax after selection": (["num_experts=4", "add_bias_linear=false",
                                                        "moe_router_topk=1"], False),
    # validate_args' own implications (requirements rows of kind "setting"), each once accepted by the dry-run
    "a full-iteration CUDA graph with the NaN check": (["cuda_graph_impl=full_iteration"], False),
    "the deprecated --enable-cuda-graph with cuda_graph_impl": (["enable_cuda_graph=true", "cuda_graph_impl=local"],
                                                                False),
    "the deprecated --no-position-embedding": (["add_position_embedding=false"], False),
    "multi-token prediction with learned positions": (["mtp_num_layers=1"], False),
    "multimodal RoPE without its sections": (["position_embedding_type=mrope"], False),
    "relative positions without TE": (["position_embedding_type=relative"], False),
    "MLA with GQA": (["multi_latent_attention=true", "group_query_attention=true", "num_query_groups=4"], False),
    "optimizer CPU offload alone": (["optimizer_cpu_offload=true"], False),
    "main params from the checkpoint with its optimizer": (["load_main_params_from_ckpt=true"], False),
    "local checkpoints without their directory": (["non_persistent_ckpt_type=local"], False),
    "an encoder depth next to num_layers": (["encoder_num_layers=4"], False),
    "distributed saved activations at TP 1": (["distribute_saved_activations=true"], False),
    "an increasing weight decay without its ends": (["weight_decay_incr_style=linear"], False),
    "weight decay ends with a constant style": (["start_weight_decay=0.0", "end_weight_decay=0.1"], False),
    "FP4 and FP8 together": (["fp4_format=e2m1", "fp8_format=e4m3"], True),
    "mock data and a data path": (["data_path=/tmp/corpus_text_document"], False),
    "in-memory non-persistent checkpoints": (["non_persistent_ckpt_type=in_memory"], False),
    "fill-in-the-middle at rate 0": (["mock_data=false", "data_path=/tmp/corpus_text_document", "fim_data=true",
                                      "fim_rate=0"], False),
    "QK-clip outside its range": (["qk_clip=true", "qk_clip_alpha=1.5"], True),
    # TransformerConfig's checks (Megatron's "config" stage)
    "aux-loss-free expert bias with softmax scores": (["num_experts=4", "add_bias_linear=false",
                                                       "moe_router_enable_expert_bias=true"], False),
    "a shared-expert overlap with the all-gather dispatcher": (
        ["num_experts=4", "add_bias_linear=false", "moe_shared_expert_intermediate_size=1024",
         "moe_shared_expert_overlap=true"], False),
    "selective recompute with a layer count": (["recompute_granularity=selective", "recompute_num_layers=1"], False),
    "MLA with interleaved rotary": (["multi_latent_attention=true", "rotary_interleaved=true",
                                     "position_embedding_type=rope"], False),
    "router groups that do not divide the experts": (["num_experts=4", "add_bias_linear=false",
                                                      "moe_router_num_groups=3", "moe_router_group_topk=1"], False),
    "a no-RoPE frequency that does not divide the layers": (["position_embedding_type=rope", "no_rope_freq=5"], False),
    "batch-invariant mode without FlashAttention": (["batch_invariant_mode=true"], False),
    "padding to capacity without a capacity factor": (["num_experts=4", "add_bias_linear=false",
                                                       "moe_pad_expert_input_to_capacity=true"], False),
    "a single grouped bias without grouped GEMM": (["num_experts=4", "add_bias_linear=false",
                                                    "moe_single_grouped_bias=true"], False),
    "a no-RoPE pattern shorter than the model": (["position_embedding_type=rope", "no_rope_freq=[0]*3+[1]"], False),
    "the deprecated MoE layer recompute with full recompute": (
        ["num_experts=4", "add_bias_linear=false", "moe_layer_recompute=true", "recompute_granularity=full",
         "recompute_method=uniform", "recompute_num_layers=1"], False),
    "the deprecated router padding for FP8 without FP8": (["num_experts=4", "add_bias_linear=false",
                                                           "moe_router_padding_for_fp8=true"], False),
    "more BF16 end layers than a stage holds": (["fp8_format=e4m3", "fp8_recipe=tensorwise",
                                                 "first_last_layers_bf16=true", "num_layers_at_start_in_bf16=30"],
                                                True),
    # found by varying real jobs (scripts/accept_variations.py): accepted, then refused by Megatron's config stage,
    # or a way out that led into another rule
    "DeepEP's old flag with the default dispatcher": (["num_experts=4", "add_bias_linear=false",
                                                       "moe_enable_deepep=true"], False),
    "DeepEP's old flag with the flex dispatcher at TP·EP 1": (["num_experts=4", "add_bias_linear=false",
                                                               "moe_token_dispatcher_type=flex",
                                                               "moe_enable_deepep=true"], False),
    "DeepEP's old flag in a dense model": (["moe_enable_deepep=true"], False),
    "DeepEP's old flag with HybridEP": (["num_experts=4", "add_bias_linear=false", "moe_token_dispatcher_type=flex",
                                         "moe_enable_deepep=true", "moe_flex_dispatcher_backend=hybridep"], False),
    "a graphed MoE router in a dense model": (["cuda_graph_impl=local", "cuda_graph_modules=[attn,moe_router]"],
                                              False),
    "a graphed MoE layer alone in a dense model": (["cuda_graph_impl=local", "cuda_graph_modules=[moe]"], False),
    "a graphed dense MLP when every layer is MoE": (["num_experts=4", "add_bias_linear=false",
                                                     "cuda_graph_impl=local", "cuda_graph_modules=[attn,mlp]"], False),
    "a graphed MoE layer without drop-and-pad": (["num_experts=4", "add_bias_linear=false", "cuda_graph_impl=local",
                                                  "cuda_graph_modules=[attn,moe]"], False),
    "a graphed MoE layer and its router": (["num_experts=4", "add_bias_linear=false", "cuda_graph_impl=local",
                                            "moe_expert_capacity_factor=1.0", "moe_pad_expert_input_to_capacity=true",
                                            "cuda_graph_modules=[attn,moe,moe_router]"], False),
    "a graphed MoE preprocessing with a capacity factor (local graphs take the router with it)": (
        ["num_experts=4", "add_bias_linear=false", "moe_token_dispatcher_type=alltoall",
         "moe_expert_capacity_factor=1.0", "cuda_graph_impl=local", "cuda_graph_modules=[attn,moe_router]"], False),
    "a graphed MoE preprocessing with a capacity factor on TE's graphs": (
        ["num_experts=4", "add_bias_linear=false", "moe_token_dispatcher_type=alltoall",
         "moe_expert_capacity_factor=1.0", "cuda_graph_impl=transformer_engine",
         "cuda_graph_modules=[attn,moe_router,moe_preprocess]"], True),
    "a graphed MoE preprocessing without its router": (
        ["num_experts=4", "add_bias_linear=false", "cuda_graph_impl=transformer_engine",
         "cuda_graph_modules=[attn,moe_preprocess]"], True),
    "a graphed MoE router with MoE recompute on TE's graphs": (
        ["num_experts=4", "add_bias_linear=false", "cuda_graph_impl=transformer_engine",
         "cuda_graph_modules=[attn,moe_router]", "recompute_granularity=selective",
         "recompute_modules=[moe]"], True),
    "the old checkpoint flag under per-layer CUDA graphs with attention dropout": (
        ["enable_cuda_graph=true", "checkpoint_activations=true", "attention_dropout=0.1"], False),
    "the old checkpoint flag under per-layer CUDA graphs": (["cuda_graph_impl=local", "checkpoint_activations=true",
                                                             "attention_dropout=0.0"], False),
    # found by the wide variation search (accept_variations --odd --triples): values the presets never use
    "an old flag at 0 (validate_args asserts it is None)": (["warmup=0"], False),
    "the old batch size at 0": (["batch_size=0"], False),
    "the old model-parallel size at 0": (["model_parallel_size=0"], False),
    "a hidden size of 0": (["hidden_size=0"], False),
    "a negative sequence length": (["seq_length=-1"], False),
    "a micro batch of 0": (["micro_batch_size=0"], False),
    "an evaluation interval of 0": (["eval_interval=0"], False),
    "a tensor-parallel size of 0": (["tensor_model_parallel_size=0"], False),
    "an experts' FFN size in a dense model": (["moe_ffn_hidden_size=768"], False),
    "group-limited routing without groups in a dense model": (["moe_router_group_topk=2"], False),
    "group-limited routing without groups": (["num_experts=4", "add_bias_linear=false",
                                              "moe_router_group_topk=-1"], False),
    "top-1 routing in a dense model": (["moe_router_topk=1"], False),
    "a single grouped weight in a dense model": (["moe_single_grouped_weight=true"], False),
    "padding to capacity in a dense model": (["moe_pad_expert_input_to_capacity=true"], False),
    "expert bias in a dense model": (["moe_router_enable_expert_bias=true"], False),
    "a shared expert of size 0 in a dense model": (["moe_shared_expert_intermediate_size=0"], False),
    "a per-rank expert capacity without TE's op fuser": (["moe_expert_rank_capacity_factor=1.0"], False),
    "paged stashing without a per-rank capacity": (["moe_paged_stash=true"], False),
    "a per-rank capacity with paged stashing": (["moe_expert_rank_capacity_factor=1.0", "moe_paged_stash=true"],
                                                False),
    "the deprecated router padding in a dense model": (["moe_router_padding_for_fp8=true"], False),
    "a symmetric all-reduce without TE": (["symmetric_ar_type=two_shot"], False),
    "the dispatch/wgrad overlap without TE": (["overlap_dispatch_backward_with_experts_wgrad=true"], False),
    "quick GeGLU with SwiGLU": (["quick_geglu=true", "swiglu=true"], False),
    "YaRN without multi-latent attention": (["rope_type=yarn"], False),
    "YaRN with multi-latent attention and GQA": (["multi_latent_attention=true", "rope_type=yarn",
                                                  "group_query_attention=true", "num_query_groups=4"], False),
    "inference-optimized layers with LayerNorm": (["transformer_impl=inference_optimized"], False),
    "a negative multi-token prediction depth": (["mtp_num_layers=-1"], False),
    "an LR decay of 0 samples in an iteration-based run": (["lr_decay_samples=0"], False),
    "a GLU offset with the fused bias GeLU": (["glu_linear_offset=1.0"], False),
    "TE's activation with the fused bias GeLU": (["use_te_activation_func=true"], False),
    "more CPU-offloaded layers than the model has": (["cpu_offloading_num_layers=100"], False),
    "ADLR autoresume off NVIDIA's clusters": (["adlr_autoresume=true"], False),
    "CPU offloading with full recompute": (["cpu_offloading_num_layers=2", "recompute_granularity=full",
                                            "recompute_method=uniform", "recompute_num_layers=1"], False),
    "no training samples next to a length in iterations": (["train_samples=0"], False),
    "a negative training length": (["train_iters=-1"], False),
    "Megatron-FSDP's checkpoint format with one CUDA connection": (
        ["ckpt_format=fsdp_dtensor", "async_save=false", "env.CUDA_DEVICE_MAX_CONNECTIONS=1"], False),
    "the param gather overlap with an emerging optimizer": (["optimizer=soap", "overlap_param_gather=true",
                                                            "overlap_grad_reduce=true"], False),
    "the MXFP8 grad-buffer reuse without fp8": (["reuse_grad_buf_for_mxfp8_param_ag=true"], False),
    "Megatron-FSDP's checkpoint format without it": (["ckpt_format=fsdp_dtensor", "async_save=false"], False),
    # Megatron-FSDP's own refusals (arguments.py), each with the way out that keeps the run's numerics
    "Megatron-FSDP with the Muon optimizer": (["use_megatron_fsdp=true", "ckpt_format=fsdp_dtensor",
                                               "async_save=false", "optimizer=muon"], False),
    "a weight-hash check with FSDP's full sharding": (
        ["use_megatron_fsdp=true", "ckpt_format=fsdp_dtensor", "async_save=false",
         "data_parallel_sharding_strategy=optim_grads_params", "check_weight_hash_across_dp_replicas_interval=10"],
        False),
    "meta-device initialization without sharding": (
        ["use_megatron_fsdp=true", "ckpt_format=fsdp_dtensor", "async_save=false",
         "data_parallel_sharding_strategy=no_shard", "init_model_with_meta_device=true"], False),
    "FSDP's manual registration without FSDP": (["fsdp_manual_registration=true"], False),
    # refusals that named no way out
    "fp16's cross entropy without fp16": (["fp16_lm_cross_entropy=true", "fp16=false", "bf16=true"], False),
    "an fp32 residual without half precision": (["fp32_residual_connection=true", "fp16=false", "bf16=false"], False),
    "a final learning rate above the peak": (["lr=1e-4", "min_lr=1e-3"], False),
    "a retained save that is no save": (["save=/tmp/checkpoints", "save_interval=10", "save_retain_interval=15"],
                                        False),
    "a memory log that is no log": (["log_interval=10", "log_memory_interval=15"], False),
    "torch DCP checkpoints without FSDP2": (["ckpt_format=torch_dcp", "async_save=false"], False),
    "deterministic mode with the fused cross entropy": (["deterministic_mode=true", "cross_entropy_loss_fusion=true",
                                                         "env.NCCL_ALGO=Ring"], False),
    "activation offloading without Transformer Engine": (["fine_grained_activation_offloading=true"], False),
    "the MoE all-to-all overlap without bf16": (
        ["num_experts=4", "add_bias_linear=false", "expert_model_parallel_size=2",
         "overlap_moe_expert_parallel_comm=true", "moe_token_dispatcher_type=alltoall", "bf16=false", "fp16=false"],
        True),
    "delayed wgrad without the expert overlap": (["delay_wgrad_compute=true"], False),
    "padding to capacity with sinkhorn balancing": (["num_experts=4", "add_bias_linear=false",
                                                     "moe_router_load_balancing_type=sinkhorn",
                                                     "moe_pad_expert_input_to_capacity=true"], False),
    "a parameter-save interval with the param all-gather overlapped": (
        ["save=/tmp/checkpoints", "save_interval=10", "save_params_interval=5", "overlap_param_gather=true",
         "use_distributed_optimizer=true", "overlap_grad_reduce=true"], False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_every_hint_followed_gives_an_accepted_job_or_fewer_problems(name, tmp_path):
    overrides, te = CASES[name]
    before, after = follow(overrides, te, tmp_path / "run")
    assert before, name
    assert after == [] or len(after) < len(before), [p.render() for p in after]


def test_checkpoint_activations_is_refused_with_megatrons_own_replacement():
    # the pin's validate_args prints its message and calls exit(): status 0, no training, nothing in --check
    text = refused(["checkpoint_activations=true"])
    assert "validate_args calls exit(), so the job ends with status 0 before any training" in text
    assert "--checkpoint-activations is no longer valid, use --recompute-activations" in text
    assert "--set recompute_activations=true" in text


def test_recompute_activations_is_selective_recompute_and_takes_no_method():
    # seen by varying imported jobs: a script's recompute_method with --recompute-activations was accepted, and
    # validate_args (which turns recompute_activations into selective granularity first) asserts
    text = refused(["recompute_activations=true", "recompute_method=block"])
    assert "recompute_activations cannot be combined with recompute_method block" in text
    assert "recompute method is not yet supported for selective recomputing granularity" in text
    assert "hint: set recompute_method=null" in text


def test_dropping_the_distributed_optimizer_for_fsdp2_drops_its_overlap():
    # seen by varying imported jobs: "set use_distributed_optimizer=false" was answered by "overlap_param_gather needs
    # use_distributed_optimizer / set use_distributed_optimizer=true", a circle
    text = refused(["use_torch_fsdp2=true", "use_distributed_optimizer=true", "overlap_grad_reduce=true",
                    "overlap_param_gather=true", "untie_embeddings_and_output_weights=true"])
    assert "set use_distributed_optimizer=false --set overlap_param_gather=false" in text
    text = refused(["use_torch_fsdp2=true", "overlap_grad_reduce=true", "overlap_param_gather=true",
                    "untie_embeddings_and_output_weights=true"])
    assert "hint: set overlap_param_gather=false" in text and "use_distributed_optimizer=true" not in text


def test_multi_token_prediction_sees_the_position_embedding_before_the_old_rotary_flag_is_read():
    # seen by varying an imported script (--use-rotary-position-embeddings): accepted, and validate_args asserted
    text = refused(["mtp_num_layers=1", "use_rotary_position_embeddings=true"])
    assert "Multi-Token Prediction (MTP) is not supported with learned_absolute position embedding type" in text
    assert "hint: set position_embedding_type=rope --set use_rotary_position_embeddings=false" in text


def test_the_unit_switch_names_the_wsd_decay_of_the_other_unit():
    # seen on an H200: lr_wsd_decay_samples survived the samples→iterations hint (assert wsd_decay_steps)
    text = refused(["lr_decay_style=WSD", "lr_wsd_decay_samples=3200"])
    assert "lr_wsd_decay_samples 3200" in text and "--set lr_wsd_decay_samples=null" in text
    assert "--set lr_wsd_decay_iters=100" in text  # converted at global batch 32, in the same round


def test_wsd_needs_its_decay_length_in_the_training_unit():
    text = refused(["lr_decay_style=WSD"])
    assert "lr_decay_style WSD needs lr_wsd_decay_iters" in text and "--set lr_wsd_decay_iters=50000" in text


def test_precision_aware_optimizer_needs_transformer_engines_fused_adam():
    text = refused(["use_precision_aware_optimizer=true", "use_distributed_optimizer=true"])
    assert ("use_precision_aware_optimizer with optimizer_cpu_offload false (Megatron's default) needs Transformer "
            "Engine") in text
    assert "set use_precision_aware_optimizer=false or install Transformer Engine" in text
    assert problems_of(["use_precision_aware_optimizer=true", "use_distributed_optimizer=true"], te=True) == []


def test_dropping_fp8_drops_what_only_fp8_reads():
    text = refused(["num_experts=4", "add_bias_linear=false", "fp8_format=e4m3", "fp8_param_gather=true",
                    "use_distributed_optimizer=true", "reuse_grad_buf_for_mxfp8_param_ag=true"])
    assert ("drop fp8 and what only it reads: --set fp8=null --set fp8_param_gather=false "
            "--set reuse_grad_buf_for_mxfp8_param_ag=false, or run") in text


def test_checkpoint_loading_flags_need_a_checkpoint(tmp_path):
    text = refused(["exit_on_missing_checkpoint=true"])
    assert "--exit-on-missing-checkpoint (exits at start-up when --load holds no checkpoint)" in text
    assert "drop it: --set exit_on_missing_checkpoint=false, or --set load=DIR (a checkpoint to start from)" in text
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "does not exist or is empty here" in refused(["use_checkpoint_args=true", f"load={empty}"])
    (empty / "latest_checkpointed_iteration.txt").write_text("10")
    assert problems_of(["use_checkpoint_args=true", f"load={empty}"]) == []


def test_a_virtual_pipeline_hint_at_pp_1_never_offers_another_virtual_pipeline():
    # seen: "use num_layers_per_virtual_pipeline_stage in [1, 2, 4]" at PP 1, then "needs PP > 1 … drop"
    text = refused(["num_layers_per_virtual_pipeline_stage=5"])
    assert "hint: set num_layers_per_virtual_pipeline_stage=null (PP 1 has no interleaved schedule)" in text
    assert "use num_layers_per_virtual_pipeline_stage in" in refused(["num_layers_per_virtual_pipeline_stage=5",
                                                                      "pipeline_model_parallel_size=2"], 1, 2)


def test_the_expert_world_size_hint_names_nodes():
    text = refused(["num_experts=8", "expert_model_parallel_size=8", "add_bias_linear=false"], 1, 4)
    assert "world size 4 is not divisible by expert TP·EP·PP = 1·8·1" in text
    assert "hint: use --nodes 2 (8 GPUs), 4 (16 GPUs), 6 (24 GPUs), or --set expert_model_parallel_size=4" in text


def test_precision_aware_optimizer_needs_the_distributed_optimizer():
    text = refused(["use_precision_aware_optimizer=true"], te=True, apex=True)
    assert "use_precision_aware_optimizer needs the distributed optimizer" in text
    assert "hint: set use_distributed_optimizer=true, or use_precision_aware_optimizer=false" in text


def test_mla_sent_off_the_sdpa_spec_is_given_a_way_out_this_target_can_take():
    # seen on a DeepSeek-V3 script moved to one GPU without TE: the only ways out were TE or dropping MLA, while
    # dropping multi-token prediction (what sent the job to Megatron's local spec) lets the SDPA spec build MLA
    mla = ["multi_latent_attention=true", "mtp_num_layers=1", "position_embedding_type=rope"]  # MTP needs RoPE
    (problem,) = problems_of(mla)
    assert "or set mtp_num_layers=null (the launcher's SDPA spec then builds multi-latent attention" in problem.hint
    assert problems_of([*mla, "mtp_num_layers=null"]) == []


@pytest.mark.parametrize("overrides", [
    # seen in the CPU rehearsal of import-corpus scripts moved to one GPU after their hints were followed:
    # main_grads_dtype bf16 left behind (optimizer_config.py:458 asserts), top-1 routing without the pre-softmax
    # (transformer_config.py:2099 raises)
    ["use_precision_aware_optimizer=true", "use_distributed_optimizer=true", "main_grads_dtype=bf16"],
    ["num_experts=1", "add_bias_linear=false", "moe_router_topk=2"],
])
def test_a_hint_followed_leaves_nothing_that_megatron_then_refuses(overrides, tmp_path):
    before, after = follow(overrides, run_dir=tmp_path / "run")
    assert before and after == [], [p.render() for p in after]
    assert problems_of(["main_grads_dtype=bf16"]) and problems_of(["num_experts=4", "add_bias_linear=false",
                                                                   "moe_router_topk=1"])


def test_memory_is_said_with_an_expert_layout_the_world_does_not_hold():
    # a job whose experts do not fit the world was estimated with its experts split over ranks that do not exist:
    # the memory refusal came only once the expert-parallel size was fixed
    big = ["num_experts=64", "add_bias_linear=false", "expert_model_parallel_size=2", "num_layers=48",
           "hidden_size=4096", "num_attention_heads=32"]
    from launcher.cli.job import JobRequest, job_for

    _, problems = job_for(load_preset("345m", [*big, "nodes=1", "gpus_per_node=1"]),
                          JobRequest(judge=True, local=False))
    said = [p.message for p in problems]
    assert "world size 1 is not divisible by expert TP·EP·PP = 1·2·1" in said
    assert any(m.startswith("at expert_model_parallel_size 1, the largest this world holds: the memory estimate")
               for m in said), said


def test_transformer_engines_graphs_with_expandable_segments_need_nccl_graph_registration_off():
    graphs = ["cuda_graph_impl=transformer_engine", "env.PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"]
    (problem,) = problems_of(graphs, te=True)
    assert "NCCL_GRAPH_REGISTER=0" in problem.message and problem.hint == "set env.NCCL_GRAPH_REGISTER=0"
    assert problems_of([*graphs, "env.NCCL_GRAPH_REGISTER=0"], te=True) == []


def test_a_refused_size_does_not_hide_the_settings_problems():
    # each was said only once the size was fixed: one more problem per round
    said = [p.message for p in problems_of(["hidden_size=0", "fp16=true", "optimizer_offload_fraction=-1.0",
                                            "exp_avg_dtype=fp8"])]
    assert any(m.startswith("exp_avg_dtype fp8 needs use_precision_aware_optimizer") for m in said), said
    assert "hidden_size must be at least 1, got 0" in said
    assert "fp16 and bf16 are both set" in said
    assert any(m.startswith("optimizer_offload_fraction -1.0") for m in said), said



# `X=V` after "or" needs no "set": "set a=1, or b=2 --set c=3"
ANY_SET = re.compile(r"(?:(?<=\s)|^)(?:--)?(?:set )?([a-z_][a-z0-9_.]*)=([^\s,;)]+)")


def every_way_out(hint: str) -> list[list[str]]:
    """Each alternative of a hint (split at ", or"), outside its parentheses, as its `X=V`s."""
    ways = [re.sub(r"\([^()]*\)", "", way) for way in re.split(r",? or ", hint)]
    return [sets for way in ways if (sets := [f"{m[1]}={m[2]}" for m in ANY_SET.finditer(way)])]


@pytest.mark.parametrize(("overrides", "te"), [
    (["recompute_granularity=selective", "recompute_method=uniform"], False),
    # TE's per-layer graphs take no full recompute: the hint offers only dropping the method
    (["cuda_graph_impl=transformer_engine", "recompute_granularity=selective", "recompute_method=uniform"], True),
    (["cuda_graph_impl=local", "recompute_granularity=selective", "recompute_method=uniform"], False),
])
def test_each_way_out_of_a_recompute_method_under_selective_recompute_arrives(overrides, te, tmp_path):
    before = [p for p in problems_of(overrides, te, tmp_path / "run") if "recompute_method" in p.message]
    assert before
    for way in every_way_out(before[0].hint):
        after = problems_of([*overrides, *way], te, tmp_path / "run")
        assert after == [], (way, [p.render() for p in after])


@pytest.mark.parametrize("length", [["train_iters=-1"], ["train_iters=0"],
                                    ["train_iters=null", "train_samples=-64"]])
def test_a_training_length_below_1_is_one_problem_not_three(length, tmp_path):
    # the save interval the launcher derives from the length, and fp16's warm-up against it, were said as problems
    # of their own, whose hints (drop the interval, lower the loss scale) then changed nothing
    fp16 = ["fp16=true", "bf16=false", "use_distributed_optimizer=true", "initial_loss_scale=4294967296"]
    found = problems_of([*length, *fp16], run_dir=tmp_path / "run")
    assert len(found) == 1 and "must be at least 1" in found[0].message, [p.render() for p in found]


@pytest.mark.parametrize(("overrides", "said"), [
    # a refused size said alone: the layout's rules that do not read it waited for it to be fixed
    (["hidden_size=-1", "num_experts=4", "add_bias_linear=false", "moe_layer_freq=([0]*3+[1]*58)"],
     ["hidden_size must be at least 1", "moe_layer_freq lists 61 layers"]),
    (["eval_global_batch_size=0", "num_layers_per_virtual_pipeline_stage=2"],
     ["eval_global_batch_size must be at least 1", "needs PP > 1, got PP 1"]),
    (["tensor_model_parallel_size=0", "num_attention_heads=36", "hidden_size=2048"],
     ["tensor_model_parallel_size must be at least 1", "hidden_size 2048 is not divisible by num_attention_heads 36"]),
    (["expert_model_parallel_size=-1", "tp_comm_overlap=true", "tensor_model_parallel_size=2", "gpus_per_node=2"],
     ["expert_model_parallel_size must be at least 1", "tp_comm_overlap needs sequence_parallel"]),
    # dropping the virtual pipeline drops the overlap only it keeps on
    (["num_layers_per_virtual_pipeline_stage=-1", "overlap_p2p_comm_warmup_flush=true",
      "pipeline_model_parallel_size=2", "gpus_per_node=2"],
     ["num_layers_per_virtual_pipeline_stage must be at least 1"]),
])
def test_a_refused_size_does_not_hide_the_layouts_other_rules_and_one_round_arrives(overrides, said, tmp_path):
    te = "tp_comm_overlap=true" in overrides  # TP overlap is Transformer Engine's
    before = problems_of(overrides, te, run_dir=tmp_path / "run")
    for text in said:
        assert any(text in p.message for p in before), (text, [p.render() for p in before])
    _, after = follow(overrides, te, run_dir=tmp_path / "run")
    assert after == [], [p.render() for p in after]


SAMPLE_BASED = ["train_iters=null", "lr_decay_iters=null", "lr_warmup_fraction=null", "global_batch_size=32"]


@pytest.mark.parametrize(("samples", "refused_for_it"), [(1, True), (31, True), (32, False), (100, False)])
def test_a_sample_budget_under_one_global_batch_is_refused_and_its_hint_arrives(samples, refused_for_it, tmp_path):
    # Megatron trains train_samples // global_batch_size iterations: 0 of them, a run that updates nothing
    overrides = [*SAMPLE_BASED, f"train_samples={samples}"]
    found = [p for p in problems_of(overrides, run_dir=tmp_path / "run") if "train_samples" in p.message]
    assert bool(found) == refused_for_it, [p.render() for p in found]
    if found:
        assert "0 iterations" in found[0].message
        before, after = follow(overrides, run_dir=tmp_path / "run")
        assert after == [], [p.render() for p in after]


def test_the_end_of_run_save_interval_is_megatrons_count_of_iterations(tmp_path):
    from launcher.pipeline.run_paths import end_of_training_interval
    # 100 samples at a batch of 32: Megatron trains 3 iterations (the last 4 samples are not trained)
    assert end_of_training_interval({"train_samples": 100, "global_batch_size": 32}) == 3
    assert end_of_training_interval({"train_samples": 96, "global_batch_size": 32}) == 3


@pytest.mark.parametrize("sequence_parallel", ["false", "true"])
def test_moe_at_tp_2_without_te_or_apex_is_led_to_tp_1_not_round_a_circle(sequence_parallel, tmp_path):
    # MoE at TP > 1 needs sequence parallelism, which needs TE or apex: each hint pointed at the other's problem
    overrides = ["num_experts=4", "add_bias_linear=false", "tensor_model_parallel_size=2", "gpus_per_node=2",
                 f"sequence_parallel={sequence_parallel}", "apex=false"]
    before, after = follow(overrides, run_dir=tmp_path / "run")
    assert any("sequence_parallel" in p.message for p in before), [p.render() for p in before]
    assert not any("sequence_parallel" in p.message for p in after), [p.render() for p in after]
    assert len(after) < len(before)
