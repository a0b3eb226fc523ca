"""Which Megatron settings the estimate models, which change the cost without being modelled, and which do not
change the cost at all: every argument of the catalog is in exactly one of the three (tests/estimate/
test_cost_coverage.py walks launcher/data/megatron_args.json and fails on a new one that is in none).

`launch plan` names each set, unmodelled setting ("not modelled: X (effect: …)") and widens its time range by
the setting's share, so that a number never looks surer than the model behind it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from launcher.megatron import args as megatron_args

# Read by launcher/estimate (shape, parameters, FLOPs, memory, step time, stages, checkpoint size) or set by
# its search.
READ = frozenset("""
account_for_embedding_in_pipeline_split account_for_loss_in_pipeline_split add_bias_linear add_qkv_bias
attention_output_gate bf16 context_parallel_size cross_entropy_loss_fusion
data_parallel_sharding_strategy defer_embedding_wgrad_compute decoder_first_pipeline_num_layers
decoder_last_pipeline_num_layers
expert_model_parallel_size expert_tensor_parallel_size ffn_hidden_size fp16 fp8 global_batch_size
grad_reduce_in_bf16 group_query_attention hidden_size kv_channels kv_lora_rank
make_vocab_size_divisible_by masked_softmax_fusion max_position_embeddings micro_batch_size moe_ffn_hidden_size
moe_layer_freq moe_router_topk moe_shared_expert_intermediate_size
moe_token_dispatcher_type multi_latent_attention no_save_optim normalization num_attention_heads num_experts
num_layers num_layers_per_virtual_pipeline_stage num_query_groups num_virtual_stages_per_pipeline_rank
overlap_grad_reduce overlap_moe_expert_parallel_comm overlap_p2p_comm overlap_p2p_comm_warmup_flush
overlap_param_gather pad_vocab_size
padded_vocab_size pipeline_model_parallel_layout
pipeline_model_parallel_size position_embedding_type q_lora_rank qk_head_dim qk_layernorm qk_pos_emb_head_dim
recompute_activations recompute_granularity recompute_method recompute_modules recompute_num_layers save_interval
seq_length sequence_parallel spec swiglu tensor_model_parallel_size torch_fsdp2_reshard_after_forward
tp_comm_overlap train_iters train_samples transformer_impl untie_embeddings_and_output_weights
use_distributed_optimizer use_megatron_fsdp use_torch_fsdp2 v_head_dim vocab_size window_attn_skip_freq window_size
step_batch_size_schedule eval_interval eval_iters wgrad_deferral_limit
""".split())
# Modelled by an assumption the estimate states: the dropouts' masks are counted as if on (Korthikanti's
# Table 2; at 0 they are an upper bound), routing is balanced (what forced balancing makes true).
ASSUMED = {
    "hidden_dropout": "its mask is counted in the activations as if on",
    "attention_dropout": "flash attention keeps no mask; unfused attention's is counted",
    "moe_router_force_load_balancing": "the estimate assumes balanced routing",
}
MODELLED = READ | frozenset(ASSUMED)


@dataclass(frozen=True)
class Unmodelled:
    """A setting that changes parameters, FLOPs, memory or communication, and that the estimate leaves out."""

    effect: str
    widen: float  # the time range is widened by this fraction each way when the setting is in use
    # when the setting is in use; default: its value differs from Megatron's default
    active: Callable[[Any, Mapping[str, Any]], bool] | None = None
    # a kernel choice named only when Transformer Engine runs: without it the launcher sets these itself, and
    # the constants for that case come from runs made so (docs/plan.md, "ours")
    te_only: bool = False


SMALL, MEDIUM, LARGE = 0.05, 0.15, 0.5


def _u(effect: str, widen: float = SMALL, active: Callable[[Any, Mapping[str, Any]], bool] | None = None,
       te_only: bool = False) -> Unmodelled:
    return Unmodelled(effect, widen, active, te_only)


def _moe(value: Any, args: Mapping[str, Any]) -> bool:
    return bool(args.get("num_experts"))


_EVAL = "evaluation passes outside the step time (time to train)"
_OFFLOAD = "moves state to host memory: less GPU memory, PCIe traffic in the step"
_FUSION = "an unfused kernel: a few % of the step"
_TP_OVERLAP = "which TP collectives overlap the GEMMs (the tp_comm_overlap constant assumes TE's defaults)"
_COMM_TUNING = "NCCL / collective tuning: communication speed"
_FP8_SCOPE = "which GEMMs run in FP8 / FP4: the GEMM rate"
_ROUTING = "MoE routing and dispatch beyond balanced top-k: the dispatch volume and the expert load"
_HYBRID = "Mamba / linear-attention / hybrid layers: parameters, FLOPs and memory of another layer type"

NOT_MODELLED: dict[str, Unmodelled] = {
    # model shape the estimate does not describe
    "mtp_num_layers": _u("multi-token prediction layers: their parameters, FLOPs and memory on the last stage",
                         MEDIUM),
    "mtp_hybrid_override_pattern": _u(_HYBRID, MEDIUM),
    "mtp_use_repeated_layer": _u("multi-token prediction layers' parameters", SMALL),
    "mtp_standalone": _u("multi-token prediction layers placed on their own pipeline stage", SMALL),
    "moe_latent_size": _u("experts run on a latent width: the expert GEMMs' FLOPs and parameters", MEDIUM),
    "moe_shared_expert_gate": _u("a gate per shared expert: h parameters per MoE layer", SMALL),
    "quick_geglu": _u("a gated MLP (fc1 twice as wide): parameters and FLOPs", LARGE),
    "glu_linear_offset": _u("an offset in the gated MLP", SMALL),
    "add_position_embedding": _u("no position table: fewer parameters", SMALL),
    "softmax_type": _u("attention sinks / off-by-one softmax: per-head parameters and attention time", SMALL),
    "enable_gpt_oss": _u("GPT-OSS layers (attention sinks, clamped SwiGLU, window pattern)", MEDIUM),
    "heterogeneous_layers_config_path": _u("per-layer shapes from a file: parameters, FLOPs and memory", LARGE),
    "heterogeneous_layers_config_encoded_json": _u("per-layer shapes: parameters, FLOPs and memory", LARGE),
    "is_hybrid_model": _u(_HYBRID, LARGE),
    "hybrid_layer_pattern": _u(_HYBRID, LARGE),
    "hybrid_override_pattern": _u(_HYBRID, LARGE),
    "experimental_attention_variant": _u(_HYBRID, LARGE),
    "linear_attention_freq": _u(_HYBRID, LARGE),
    "dsa_indexer_n_heads": _u("DeepSeek sparse attention: an indexer's parameters and FLOPs, sparse core attention",
                              LARGE),
    "dsa_indexer_head_dim": _u("DeepSeek sparse attention's indexer", SMALL),
    "dsa_indexer_topk": _u("DeepSeek sparse attention: keys per query", MEDIUM),
    "mlp_chunks_for_training": _u("the MLP in chunks: less activation memory, more launches", SMALL),
    "fp32_residual_connection": _u("the residual stream in fp32: activation memory", SMALL),
    "yaml_cfg": _u("settings from a YAML file that the plan does not read", LARGE),
    "use_checkpoint_args": _u("the model's settings from the checkpoint it loads", LARGE),
    "use_mp_args_from_checkpoint_args": _u("the parallel layout from the checkpoint it loads", LARGE),
    # MoE beyond balanced top-k routing through grouped GEMMs
    "moe_expert_capacity_factor": _u("token dropping / padding to capacity: expert GEMM sizes", MEDIUM),
    "moe_expert_rank_capacity_factor": _u("token dropping per EP rank: expert GEMM sizes", MEDIUM),
    "moe_pad_expert_input_to_capacity": _u("experts padded to capacity: expert GEMM FLOPs", MEDIUM),
    "moe_token_drop_policy": _u(_ROUTING, SMALL),
    "moe_router_num_groups": _u(_ROUTING, SMALL),
    "moe_router_group_topk": _u(_ROUTING, SMALL),
    "moe_router_dtype": _u("the router's logits in fp32/fp64: memory", SMALL),
    "moe_shared_expert_overlap": _u("the shared expert overlapped with the dispatch: exposed communication", SMALL),
    "overlap_dispatch_backward_with_experts_wgrad": _u("dispatch overlapped with the experts' weight gradients",
                                                       SMALL),
    "ep_overlap_early_attn_memory_release": _u("attention memory released early in EP overlap", SMALL),
    "moe_layer_recompute": _u("MoE layers recomputed: less activation memory, more compute", MEDIUM),
    "moe_enable_deepep": _u("DeepEP's dispatch kernels: dispatch speed", SMALL),
    "moe_flex_dispatcher_backend": _u("the flex dispatcher's backend: dispatch speed", SMALL),
    "moe_deepep_num_sms": _u("SMs given to DeepEP: dispatch and compute speed", SMALL),
    "moe_hybridep_num_sms": _u("SMs given to HybridEP: dispatch and compute speed", SMALL),
    "moe_permute_fusion": _u("fused token permutation: a few % of an MoE step", SMALL),
    "moe_router_fusion": _u("fused routing: a few % of an MoE step", SMALL),
    "moe_paged_stash": _u("paged stashing of MoE activations: memory", SMALL),
    # modelled as on (the calibrated MoE runs use grouped GEMMs); off, the experts run one by one
    "moe_grouped_gemm": _u("experts' GEMMs one at a time (moe_grouped_gemm off): slower expert GEMMs", MEDIUM,
                           lambda value, args: not value and _moe(value, args)),
    # precision
    "fp8_recipe": _u(_FP8_SCOPE, SMALL),
    "fp8_param_gather": _u("FP8 parameters all-gathered: half the gather bytes, FP8 weight copies", SMALL),
    "fp8_wgrad": _u(_FP8_SCOPE, SMALL),
    "first_last_layers_bf16": _u(_FP8_SCOPE, SMALL),
    "num_layers_at_start_in_bf16": _u(_FP8_SCOPE, SMALL),
    "num_layers_at_end_in_bf16": _u(_FP8_SCOPE, SMALL),
    "fp4": _u("FP4 GEMMs: the GEMM rate and stored activations", MEDIUM),
    "fp4_recipe": _u(_FP8_SCOPE, SMALL),
    "fp4_param_gather": _u("FP4 parameters all-gathered", SMALL),
    "te_precision_config_file": _u(_FP8_SCOPE, MEDIUM),
    "keep_fp8_transpose_cache": _u("FP8 transposes kept: memory", SMALL),
    "reuse_grad_buf_for_mxfp8_param_ag": _u("MXFP8 gather buffer reused: memory", SMALL),
    "disable_bf16_reduced_precision_matmul": _u("GEMMs without reduced-precision accumulation: GEMM rate", SMALL),
    "fp8_quantizer_factory": _u(_FP8_SCOPE, SMALL),
    "fp4_quantizer_factory": _u(_FP8_SCOPE, SMALL),
    "use_kitchen_attention": _u("another attention implementation: attention time", SMALL),
    "kitchen_attention_backend": _u("another attention implementation: attention time", SMALL),
    "accumulate_allreduce_grads_in_fp32": _u("fp32 gradient accumulation (fp16): memory and DP bytes", SMALL),
    "ddp_reduce_scatter_with_fp32_accumulation": _u("fp32 accumulation in the reduce-scatter: DP time", SMALL),
    # optimizer
    "optimizer": _u("another optimizer than Adam: optimizer state memory and step time", MEDIUM),
    "use_precision_aware_optimizer": _u("optimizer state in lower precision: memory", MEDIUM),
    "main_grads_dtype": _u("main gradients' precision: memory", SMALL),
    "main_params_dtype": _u("master weights' precision: memory", SMALL),
    "exp_avg_dtype": _u("Adam's first moment precision: memory", SMALL),
    "exp_avg_sq_dtype": _u("Adam's second moment precision: memory", SMALL),
    "num_distributed_optimizer_instances": _u("several distributed-optimizer instances: DP communication", SMALL),
    "optimizer_cpu_offload": _u(_OFFLOAD, MEDIUM),
    "optimizer_offload_fraction": _u(_OFFLOAD, MEDIUM),
    "overlap_cpu_optimizer_d2h_h2d": _u(_OFFLOAD, SMALL),
    "use_torch_optimizer_for_cpu_offload": _u(_OFFLOAD, SMALL),
    "pin_cpu_grads": _u(_OFFLOAD, SMALL),
    "pin_cpu_params": _u(_OFFLOAD, SMALL),
    "optimizer_cuda_graph": _u("the optimizer step as a CUDA graph: optimizer time", SMALL),
    "overlap_param_gather_with_optimizer_step": _u("parameter gather overlapped with the optimizer step", SMALL),
    "megatron_fsdp_main_params_dtype": _u("Megatron-FSDP master weights' precision: memory", SMALL),
    "megatron_fsdp_main_grads_dtype": _u("Megatron-FSDP gradients' precision: memory", SMALL),
    "megatron_fsdp_grad_comm_dtype": _u("Megatron-FSDP gradient communication precision", SMALL),
    "megatron_fsdp_enable_fine_grained_param_gather": _u("finer Megatron-FSDP gathers: overlap", SMALL),
    "fsdp_double_buffer": _u("Megatron-FSDP's double buffer: memory", SMALL),
    "outer_dp_sharding_strategy": _u("hybrid-sharded FSDP: DP communication and memory", MEDIUM),
    "enable_full_sharding_in_hsdp": _u("hybrid-sharded FSDP: DP communication and memory", MEDIUM),
    "use_layer_wise_param_layout": _u("layer-wise parameter buffers: DP buckets", SMALL),
    # activations
    "cpu_offloading_num_layers": _u(_OFFLOAD, MEDIUM),
    "fine_grained_activation_offloading": _u(_OFFLOAD, MEDIUM),
    "offload_modules": _u(_OFFLOAD, MEDIUM),
    "min_offloaded_tensor_size": _u(_OFFLOAD, SMALL),
    "fine_grained_offloading_max_inflight_offloads": _u(_OFFLOAD, SMALL),
    "distribute_saved_activations": _u("recomputed layers' inputs split over TP: memory", SMALL),
    "ddp_bucket_size": _u("the DP bucket size: what overlaps and what is exposed", SMALL),
    "ddp_num_buckets": _u("the number of DP buckets: what overlaps and what is exposed", SMALL),
    "ddp_pad_buckets_for_high_nccl_busbw": _u(_COMM_TUNING, SMALL),
    "align_grad_reduce": _u("gradient reduction across pipeline stages at once: exposed DP time", SMALL),
    "align_param_gather": _u("parameter gather across pipeline stages at once: exposed DP time", SMALL),
    # schedule and communication
    "microbatch_group_size_per_vp_stage": _u("the interleaved schedule's grouping: bubble and memory", SMALL),
    "use_ring_exchange_p2p": _u("ring exchange for pipeline sends", SMALL),
    "pipeline_model_parallel_comm_backend": _u("another pipeline communication backend", SMALL),
    "use_tp_pp_dp_mapping": _u("rank order tp-pp-dp: which groups cross nodes", MEDIUM),
    "cp_comm_type": _u("context-parallel all-to-all / all-gather instead of the P2P ring: CP communication",
                       MEDIUM),
    "hierarchical_context_parallel_sizes": _u("hierarchical context parallel: CP communication", MEDIUM),
    "hybrid_context_parallel": _u("hybrid context parallel for packed sequences", MEDIUM),
    "max_seqlen_per_dp_cp_rank": _u("packed sequences per DP×CP rank: attention FLOPs", MEDIUM),
    "sft": _u("packed fine-tuning sequences: attention per document", MEDIUM),
    "tp_comm_overlap_ag": _u(_TP_OVERLAP, SMALL),
    "tp_comm_overlap_rs": _u(_TP_OVERLAP, SMALL),
    "tp_comm_overlap_rs_dgrad": _u(_TP_OVERLAP, SMALL),
    "tp_comm_bulk_dgrad": _u(_TP_OVERLAP, SMALL),
    "tp_comm_bulk_wgrad": _u(_TP_OVERLAP, SMALL),
    "tp_comm_split_ag": _u(_TP_OVERLAP, SMALL),
    "tp_comm_split_rs": _u(_TP_OVERLAP, SMALL),
    "tp_comm_overlap_cfg": _u(_TP_OVERLAP, SMALL),
    "delay_wgrad_compute": _u("weight gradients delayed to overlap communication", SMALL),
    "nccl_ub": _u(_COMM_TUNING, SMALL),
    "use_sharp": _u(_COMM_TUNING, SMALL),
    "sharp_enabled_group": _u(_COMM_TUNING, SMALL),
    "high_priority_stream_groups": _u(_COMM_TUNING, SMALL),
    "high_priority_a2a_comm_stream": _u(_COMM_TUNING, SMALL),
    "disable_symmetric_registration": _u(_COMM_TUNING, SMALL),
    "symmetric_ar_type": _u(_COMM_TUNING, SMALL),
    "nccl_communicator_config_path": _u(_COMM_TUNING, SMALL),
    "create_all_gather_group": _u(_COMM_TUNING, SMALL),
    # kernels
    "gradient_accumulation_fusion": _u("weight gradients without fused accumulation: a few % slower", SMALL,
                                       te_only=True),
    "cuda_graph_impl": _u("CUDA graphs: less launch overhead, more memory", SMALL),
    "cuda_graph_modules": _u("CUDA graphs: less launch overhead, more memory", SMALL),
    "cuda_graph_scope_deprecated": _u("CUDA graphs: less launch overhead, more memory", SMALL),
    "enable_cuda_graph": _u("CUDA graphs: less launch overhead, more memory", SMALL),
    "external_cuda_graph": _u("CUDA graphs: less launch overhead, more memory", SMALL),
    "attention_backend": _u("which attention kernel runs (flash / fused / unfused): attention time and memory",
                            MEDIUM),
    "use_flash_attn": _u("which attention kernel runs: attention time", SMALL),
    "apply_rope_fusion": _u(_FUSION, SMALL, te_only=True),
    "bias_dropout_fusion": _u(_FUSION, SMALL, te_only=True),
    "bias_gelu_fusion": _u(_FUSION, SMALL, te_only=True),
    "bias_swiglu_fusion": _u(_FUSION, SMALL, te_only=True),
    "cross_entropy_fusion_impl": _u(_FUSION, SMALL, te_only=True),
    "gradient_reduce_div_fusion": _u(_FUSION, SMALL, te_only=True),
    "fused_residual_rmsnorm": _u(_FUSION, SMALL, te_only=True),
    "no_persist_layer_norm": _u(_FUSION, SMALL, te_only=True),
    "mla_down_proj_fusion": _u(_FUSION, SMALL, te_only=True),
    "fp16_lm_cross_entropy": _u("half-precision logits in the loss: the last stage's memory", SMALL),
    "reset_attention_mask": _u("per-document attention masks: an arbitrary mask instead of the causal kernel",
                               MEDIUM),
    "fsdp_manual_registration": _u(_COMM_TUNING, SMALL),
    "use_te_activation_func": _u(_FUSION, SMALL, te_only=True),
    "use_fused_weighted_squared_relu": _u(_FUSION, SMALL, te_only=True),
    "use_transformer_engine_op_fuser": _u(_FUSION, SMALL, te_only=True),
    "use_grouped_gemm_for_dense_mlp": _u("the dense MLP through grouped GEMMs", SMALL),
    "batch_invariant_mode": _u("batch-invariant kernels: slower GEMMs and attention", MEDIUM),
    "deterministic_mode": _u("deterministic kernels: slower attention and reductions", MEDIUM),
    "apply_query_key_layer_scaling": _u("query-key scaling in fp32 softmax", SMALL),
    "attention_softmax_in_fp32": _u("the softmax in fp32 (unfused attention): memory", SMALL),
    # what else a step does
    "empty_unused_memory_level": _u("the allocator's cache emptied every step: a slower step", SMALL),
    "rerun_mode": _u("result validation reruns steps", MEDIUM),
    "check_weight_hash_across_dp_replicas_interval": _u("weight hashes compared across DP replicas", SMALL),
    "log_params_norm": _u("a parameter-norm pass every logged step", SMALL),
    "log_num_zeros_in_grad": _u("a pass over the gradients every logged step", SMALL),
    "timing_log_level": _u("barriers around timed regions", SMALL),
    "barrier_with_L1_time": _u("barriers around timed regions", SMALL),
    "manual_gc": _u("Python garbage collection at fixed steps", SMALL),
    "save_activations_interval": _u("activations dumped to disk", MEDIUM),
    "save_dgrads_interval": _u("gradients dumped to disk", MEDIUM),
    "save_wgrads_interval": _u("weight gradients dumped to disk", MEDIUM),
    "save_params_interval": _u("parameters dumped to disk", MEDIUM),
    "save_tokens_per_expert_interval": _u("expert loads dumped to disk", SMALL),
    "async_save": _u("checkpoint writes in the background: the saves cost less than printed", 0.0),
    # how long training runs (time to train)
    "rampup_batch_size": _u("a growing batch: the early steps are smaller, time to train", SMALL),
    "decrease_batch_size_if_needed": _u("the global batch lowered to fit DP: steps and time to train", SMALL),
    "exit_interval": _u("training stops early: time to train", SMALL),
    "exit_duration_in_mins": _u("training stops early: time to train", SMALL),
    "eval_global_batch_size": _u(_EVAL, SMALL),
    "eval_micro_batch_size": _u(_EVAL, SMALL),
    "full_validation": _u(_EVAL, SMALL),
    "multiple_validation_sets": _u(_EVAL, SMALL),
}


# Reviewed: settings that change neither parameters, FLOPs, memory nor communication of a training step (or do
# so only under a setting named above), by reason.
COST_IRRELEVANT: dict[str, frozenset[str]] = {
    "inference, RL, export and distillation only": frozenset("""
    cache_mla_latents chat_template decode_only_cuda_graphs enable_chunked_prefill export_default_te_spec
    export_force_local_attention export_kd_cfg export_kd_teacher_ckpt_format export_kd_teacher_load
    export_kd_teacher_model_config export_kv_cache_quant export_legacy_megatron export_model_type
    export_moe_apply_probs_on_input export_offline_model export_qk_l2_norm export_quant_cfg export_real_quant_cfg
    export_te_mcore_model flash_decode grpo_clamp_eps_lower grpo_clamp_eps_upper grpo_entropy_term_weight
    grpo_filter_groups_with_same_reward grpo_group_size grpo_iterations grpo_kl_beta grpo_prompts_per_step
    inference_batch_times_seqlen_threshold inference_coordinator_port inference_cuda_graph_all_prefills
    inference_cuda_graph_scope inference_disable_ep_consensus inference_disable_triton_nvls_kernels
    inference_dynamic_batching inference_dynamic_batching_block_size inference_dynamic_batching_buffer_size_gb
    inference_dynamic_batching_cuda_graph_mixed_prefill_count inference_dynamic_batching_enable_prefix_caching
    inference_dynamic_batching_mamba_memory_ratio inference_dynamic_batching_max_requests
    inference_dynamic_batching_max_tokens inference_dynamic_batching_num_cuda_graphs
    inference_dynamic_batching_paused_buffer_size_gb inference_dynamic_batching_prefix_caching_coordinator_policy
    inference_dynamic_batching_prefix_caching_eviction_policy inference_dynamic_batching_prefix_caching_mamba_gb
    inference_dynamic_batching_prefix_caching_routing_alpha inference_dynamic_batching_sampling_backend
    inference_dynamic_batching_track_generated_token_events inference_dynamic_batching_track_paused_request_events
    inference_dynamic_batching_unified_memory_level inference_fuse_tp_communication inference_grouped_gemm_backend
    inference_logging_step_interval inference_max_requests inference_max_seq_length
    inference_moe_disable_fused_quant_kernels inference_moe_token_dispatcher_type inference_rng_tracker
    inference_text_gen_server_logging inference_use_synchronous_zmq_collectives inference_wandb_logging
    langrl_env_config mamba_inference_conv_states_dtype mamba_inference_ssm_states_dtype max_tokens_to_oom
    mlp_chunks_for_prefill modelopt_enabled moe_pad_experts_for_cuda_graph_inference nccl_all_reduce_for_prefill
    num_speculative_tokens perform_rl_step phase_transition_iterations refit_method rl_default_temperature
    rl_default_top_k rl_default_top_p rl_generation_batch_size rl_importance_sampling_truncation_coef
    rl_inference_expert_model_parallel_size rl_inference_expert_tensor_model_parallel_size
    rl_inference_logprobs_is_correction rl_inference_model_unified_memory_level rl_inference_parsers
    rl_inference_pipeline_model_parallel_size rl_inference_tensor_model_parallel_size rl_kv_cache_management_mode
    rl_num_parallel_generation_batches rl_num_parallel_generations rl_offload_inference_model_weights_when_idle
    rl_offload_optimizer_during_inference rl_parallel_generation_tasks rl_partial_rollouts rl_persist_cuda_graphs
    rl_prompts_per_eval rl_sequence_packing_algo rl_sequence_packing_max_sequences_per_bin rl_skip_bos_token
    rl_training_cuda_graphs rl_use_sequence_packing rl_verify_model_weights_swap run_workload_inspector_server
    trust_remote_code use_legacy_static_engine
    """.split()),
    "checkpoints: loading, formats, where and how often (a save's size and rate are modelled apart)": frozenset("""
    async_ckpt_cpu_priority async_ckpt_io_priority async_ckpt_use_cpu_shm async_strategy auto_detect_ckpt_format
    ckpt_assume_constant_structure ckpt_convert_format ckpt_convert_save ckpt_convert_update_legacy_dist_opt_format
    ckpt_format ckpt_fully_parallel_load ckpt_fully_parallel_load_exchange_algo
    ckpt_fully_parallel_load_process_group ckpt_fully_parallel_save ckpt_fully_parallel_save_deprecated
    ckpt_fully_parallel_save_process_group ckpt_load_validate_sharding_integrity ckpt_step
    dist_ckpt_format_deprecated dist_ckpt_optim_fully_reshardable dist_ckpt_save_pre_mcore_014 dist_ckpt_strictness
    dist_ckpt_workers distrib_optim_fully_reshardable_mem_efficient dump_param_to_param_group_map
    exit_on_missing_checkpoint finetune iterations_to_skip load load_main_params_from_ckpt no_load_optim no_load_rng
    no_save_rng non_persistent_ckpt_type non_persistent_global_ckpt_dir non_persistent_local_ckpt_algo
    non_persistent_local_ckpt_dir non_persistent_save_interval override_opt_param_scheduler pretrained_checkpoint
    replication replication_factor replication_jump save save_retain_interval strict_fsdp_dtensor_load
    use_checkpoint_opt_param_scheduler use_dist_ckpt_deprecated use_persistent_ckpt_worker
    use_tokenizer_model_from_checkpoint_args
    """.split()),
    "data and tokenizer (the vocabulary's size enters through vocab_size)": frozenset("""
    allow_ambiguous_pad_tokens block_data_path create_attention_mask_in_dataloader data_args_path data_cache_path
    data_parallel_random_init data_path data_per_class_fraction data_sharding dataloader_defer_npy_index_mmap
    dataloader_fast_cache_load dataloader_type disable_msc_deprecated embedding_path enable_msc eod_mask_loss
    evidence_data_path fim_data fim_eod_token fim_fragment_rate fim_middle_token fim_no_prefix fim_pad_token
    fim_prefix_token fim_rate fim_split_sample fim_spm_rate fim_suffix_token finetune_data_split finetune_hf_dataset
    iter_per_epoch merge_file metadata_path mid_level_dataset_surplus mmap_bin_files mock_data null_tokenizer_eod_id
    null_tokenizer_pad_id num_dataset_builder_threads num_workers object_storage_cache_path
    per_dataset_sequences_path per_split_data_args_path query_in_block_prob reset_position_ids sample_rate
    sft_tokenizer_prompt_format short_seq_prob skip_train special_tokens split start_eval_at_iter test_data_path
    test_mode tiktoken_num_special_tokens tiktoken_pattern titles_data_path tokenizer_hf_no_include_special_tokens
    tokenizer_hf_no_use_fast tokenizer_model tokenizer_sentencepiece_ignore_extra_whitespaces
    tokenizer_sentencepiece_legacy tokenizer_type train_data_path use_one_sent_docs valid_data_path
    validation_set_names vocab_extra_ids vocab_file warmup
    """.split()),
    "logging, profiling, fault tolerance and process control": frozenset("""
    adlr_autoresume adlr_autoresume_interval app_tag_run_name app_tag_run_version calc_ft_timeouts
    check_for_large_grads check_for_nan_in_loss_and_grad check_for_spiky_loss config_logger_dir
    deprecated_use_mcore_models disable_straggler_on_startup distributed_backend distributed_timeout_minutes
    distributed_timeout_seconds_after_init enable_experimental enable_ft_package enable_one_logger
    error_injection_rate error_injection_type exit_signal exit_signal_handler exit_signal_handler_for_dataloader
    exit_signal_handler_for_training fake_process_group fault_injector_delay_start_iteration
    fault_injector_fault_delay fault_injector_fault_probabilities fault_injector_fault_types
    fault_injector_mtti_seconds fault_injector_num_ranks fault_injector_offset_seconds fault_injector_ranks
    fault_injector_seed flight_recorder_dump_on_timeout flight_recorder_dump_path flight_recorder_extra_dump_on_exec
    flight_recorder_include_only_active flight_recorder_include_stack_trace flight_recorder_trace_buffer_size
    ft_num_warmup_iters gpu_sniff_test_interval indexer_log_interval inprocess_active_world_size
    inprocess_barrier_timeout inprocess_completion_timeout inprocess_empty_cuda_cache inprocess_granularity
    inprocess_hard_timeout inprocess_heartbeat_interval inprocess_heartbeat_timeout inprocess_last_call_wait
    inprocess_max_iterations inprocess_monitor_process_interval inprocess_monitor_thread_interval
    inprocess_progress_watchdog_interval inprocess_restart inprocess_soft_timeout inprocess_termination_grace_time
    lazy_mpu_init local_rank log_device_memory_used log_energy log_interval log_loss_scale_to_tensorboard
    log_max_attention_logit log_memory_interval log_memory_to_tensorboard log_progress log_straggler log_throughput
    log_timers_to_tensorboard log_validation_ppl_to_tensorboard log_world_size_to_tensorboard logging_level
    manual_gc_eval manual_gc_interval memory_snapshot_path moe_per_layer_logging nvtx_ranges one_logger_async
    one_logger_project one_logger_run_name onnx_safe profile profile_ranks profile_step_end profile_step_start
    pytorch_profiler_collect_callstack pytorch_profiler_collect_chakra pytorch_profiler_collect_shapes
    record_memory_history record_shapes result_rejected_tracker_filename straggler_ctrlr_port straggler_minmax_count
    suggested_communication_unit_size tensorboard_dir tensorboard_log_interval tensorboard_queue_size
    timing_log_option tp_comm_bootstrap_backend train_sync_interval use_gloo_process_groups use_pytorch_profiler
    verify_integrity wandb_entity wandb_exp_name wandb_project wandb_save_dir
    """.split()),
    "optimizer hyperparameters, schedules, loss scaling, initialisation and numerics (no change in work)": frozenset("""
    activation_func_clamp_value adam_beta1 adam_beta2 adam_eps apply_residual_connection_post_layernorm
    apply_wd_to_qk_layernorm calculate_per_token_loss clip_grad clone_scatter_output_in_embedding
    ddp_average_in_collective ddp_param_name_patterns_for_fp32_local_accumulation decoupled_lr decoupled_min_lr
    disable_jit_fuser dsa_indexer_loss_coeff dsa_indexer_use_sparse_loss embedding_init_method_std end_weight_decay
    fp8_amax_compute_algo fp8_amax_history_len fp8_interval fp8_margin head_lr_mult hysteresis init_method_std
    init_method_xavier_uniform init_model_with_meta_device initial_loss_scale layernorm_epsilon
    layernorm_zero_centered_gamma lion_beta1 lion_beta2 loss_scale loss_scale_window lr lr_decay_iters
    lr_decay_samples lr_decay_style lr_warmup_fraction lr_warmup_init lr_warmup_iters lr_warmup_samples
    lr_wsd_decay_iters lr_wsd_decay_samples lr_wsd_decay_style min_loss_scale min_lr moe_apply_probs_on_input
    moe_aux_loss_coeff moe_enable_routing_replay moe_input_jitter_eps moe_mlp_glu_interleave_size
    moe_router_bias_update_rate moe_router_enable_expert_bias moe_router_force_biased moe_router_load_balancing_type
    moe_router_padding_for_fp8 moe_router_padding_for_quantization moe_router_pre_softmax moe_router_score_function
    moe_router_topk_scaling_factor moe_single_grouped_bias moe_single_grouped_weight moe_upcycling_granularity
    moe_use_upcycling moe_z_loss_coeff mrope_section mscale mscale_all_dim mtp_loss_scaling_factor
    muon_coefficient_type muon_extra_scale_factor muon_fp32_matmul_prec muon_momentum muon_nesterov
    muon_num_ns_steps muon_scalar_optimizer muon_scale_mode muon_split_qkv muon_tp_mode mup_attn_scale_power
    mup_base_head_dim mup_base_hidden_size mup_embedding_mult mup_output_mult mup_width_mult no_rope_freq
    no_weight_decay_cond_type openai_gelu perform_initialization qk_clip qk_clip_alpha qk_clip_threshold qk_l2_norm
    rope_scaling_factor rope_type rotary_base rotary_interleaved rotary_percent rotary_scaling_factor
    rotary_seq_len_interpolation_factor seed sgd_momentum squared_relu start_weight_decay te_rng_tracker
    use_cpu_initialization use_mup use_rope_scaling weight_decay weight_decay_incr_style
    """.split()),
    "other model families (BERT, T5, vision, retrieval) that pretrain_gpt.py does not build": frozenset("""
    bert_binary_head bert_embedder_type bert_load biencoder_projection_dim biencoder_shared_query_context_model
    classes_fraction decoder_num_layers decoder_seq_length dino_bottleneck_size dino_freeze_last_layer
    dino_head_hidden_size dino_local_crops_number dino_local_img_size dino_norm_last_layer dino_teacher_temp
    dino_warmup_teacher_temp dino_warmup_teacher_temp_epochs encoder_num_layers encoder_seq_length ict_head_size
    ict_load img_h img_w indexer_batch_size mask_factor mask_prob mask_type num_channels num_classes
    output_bert_embeddings patch_dim relative_attention_max_distance relative_attention_num_buckets
    retriever_report_topk_accuracies retriever_score_scaling swin_backbone_type vision_backbone_type
    vision_pretraining vision_pretraining_type
    """.split()),
    "sub-settings of a setting named as not modelled (mamba_*, linear_* under a hybrid / linear-attention "
    "setting; MoE dispatch and stash tuning; CUDA-graph warm-up; offload buffers)": frozenset("""
    cpu_offloading_retain_pinned_cpu_buffers cuda_graph_warmup_steps linear_conv_kernel_dim linear_key_head_dim
    linear_num_key_heads linear_num_value_heads linear_value_head_dim mamba_head_dim mamba_num_groups
    mamba_num_heads mamba_state_dim moe_hybridep_num_blocks_permute moe_hybridep_num_blocks_unpermute
    moe_hybridep_num_sms_preprocessing moe_paged_stash_buffer_size_factor_cpu
    moe_paged_stash_buffer_size_factor_cuda moe_paged_stash_page_size moe_permute_fusion_into_hybridep
    use_mamba_mem_eff_path
    """.split()),
    "deprecated aliases Megatron rewrites or refuses": frozenset("""
    batch_size checkpoint_activations model_parallel_size use_rotary_position_embeddings
    """.split()),
}


def classification(name: str) -> str:
    """'modelled', 'not modelled' or 'irrelevant'; '' for a name the catalog test must catch."""
    if name in MODELLED:
        return "modelled"
    if name in NOT_MODELLED:
        return "not modelled"
    if any(name in names for names in COST_IRRELEVANT.values()):
        return "irrelevant"
    return ""


@dataclass(frozen=True)
class Named:
    """A setting in use that the estimate does not model, as `launch plan` prints it."""

    name: str
    value: Any
    effect: str
    widen: float

    def line(self) -> str:
        wider = f"; time range ±{self.widen:.0%} wider" if self.widen else ""
        return f"not modelled: {self.name}={_shown(self.value)} (effect: {self.effect}{wider})"


def _shown(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def in_use(value: Any, default: Any) -> bool:
    """Set to something other than Megatron's default (an empty list or string counts as unset)."""
    return _normal(value) != _normal(default)


def _normal(value: Any) -> Any:
    return None if value is None or value == "" or value == [] or value == () else value


def unmodelled(args: Mapping[str, Any]) -> list[Named]:
    """The cost-relevant settings of `args` in use that the estimate does not model, in catalog order."""
    catalog = megatron_args.catalog()
    found = []
    for name, rule in NOT_MODELLED.items():
        if name not in catalog:
            continue
        value = args.get(name, catalog[name].default)
        default = catalog[name].default
        active = rule.active(value, args) if rule.active else in_use(value, default)
        if rule.te_only and args.get("transformer_impl") == "local":
            active = False
        if active:
            found.append(Named(name, value, rule.effect, rule.widen))
    return sorted(found, key=lambda n: n.name)


def widening(named: list[Named]) -> float:
    """How much wider the time range gets: the settings' shares combined (1 + a)(1 + b)… − 1."""
    total = 1.0
    for n in named:
        total *= 1 + n.widen
    return total - 1

