"""The rules of launcher/pipeline/inert_settings.py: which Megatron settings count only under another one (or
never, for a GPT model), each with where Megatron at the pin decides it.

Each was verified by reading 432d76b2b8bf: every read of the setting (attribute or getattr, in megatron/,
pretrain_gpt.py, gpt_builders.py, model_provider.py) sits under the condition. The conditions read the settings
after Megatron's own rewrites (launcher/megatron/effective.py).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher.megatron import args as megatron_args
from launcher.megatron.model_families import FAMILY_SETTINGS

Arg = Callable[[str], Any]  # a setting's value as Megatron sees it (the job's, else Megatron's default)
_NO_POSITION_ROTATION = ("learned_absolute", "relative", "none")
# build_tokenizer.py (megatron/core/tokenizers/utils): which tokenizer types read which file settings
_MEGATRON_TOKENIZERS = ("BertWordPieceLowerCase", "BertWordPieceCase", "GPT2BPETokenizer")
_SENTENCEPIECE = ("SentencePieceTokenizer", "GPTSentencePieceTokenizer", "Llama2Tokenizer")
_MUON = ("muon", "dist_muon", "adaptive_muon")
_OTHER_MODELS = ("bert_", "biencoder_", "dino_", "ict_", "retriever_")
_OTHER_MODEL_SETTINGS = ("block_data_path", "classes_fraction", "data_per_class_fraction", "embedding_path",
                         "evidence_data_path", "img_h", "img_w", "iter_per_epoch", "mask_factor", "mask_prob",
                         "mask_type", "num_channels", "num_classes", "output_bert_embeddings", "patch_dim",
                         "query_in_block_prob", "sample_rate", "short_seq_prob", "swin_backbone_type",
                         "titles_data_path", "use_one_sent_docs", "vision_backbone_type", "vocab_extra_ids")
# the settings that make a configuration another model's: refused as such (checker.model_family), not warned
_FAMILY_NAMES = frozenset(name for names in FAMILY_SETTINGS.values() for name in names)


def _never(arg: Arg) -> bool:
    return False


def _tokenizer_reads(*types: str) -> Callable[[Arg], bool]:
    """The tokenizer type reads it, or may: a checkpoint's arguments replace the type (checkpointing.py
    load_args_from_checkpoint, use_tokenizer_model_from_checkpoint_args)."""
    return lambda arg: arg("tokenizer_type") in types or bool(
        arg("use_checkpoint_args") and arg("use_tokenizer_model_from_checkpoint_args"))


def _sharded_optimizer(arg: Arg) -> bool:
    """training/checkpointing.py _build_sharded_state_dict_metadata: a distributed (or layer-wise) optimizer
    whose state is saved as sharded tensors."""
    return bool(arg("use_distributed_optimizer") or arg("use_layer_wise_distributed_optimizer")) \
        and arg("ckpt_format") != "fsdp_dtensor"


def _warmup(arg: Arg) -> bool:
    return bool(arg("lr_warmup_fraction") or arg("lr_warmup_iters") or arg("lr_warmup_samples"))


@dataclass(frozen=True)
class Dependence:
    names: tuple[str, ...]  # read by Megatron only while `takes_effect` holds
    takes_effect: Callable[[Arg], bool]
    condition: str | None  # the setting that makes them count, as the user sets it (None: nothing does)
    where: str  # where Megatron at 432d76b2b8bf decides it
    effect: str = "no effect"  # what setting them changes while the condition does not hold
    # Any value written is a request, Megatron's default included (`--num-query-groups 1`, multi-query attention,
    # is the default's value, yet without the flag the job has a group per head)
    any_value: bool = False


@functools.cache
def dependences() -> tuple[Dependence, ...]:
    moe = tuple(sorted(name for name in megatron_args.catalog() if name.startswith("moe_")))
    return (
        Dependence(("num_query_groups",),
                   lambda arg: bool(arg("group_query_attention") or arg("heterogeneous_layers_config_path")
                                    or arg("num_query_groups") == arg("num_attention_heads")),  # a group per head
                   "group_query_attention=true",
                   "training/argument_utils.py: num_query_groups is None without group_query_attention, so every "
                   "head has its own key and value", any_value=True),
        Dependence(("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "rope_type",
                    "rotary_scaling_factor", "mscale", "mscale_all_dim"),
                   lambda arg: bool(arg("multi_latent_attention")), "multi_latent_attention=true",
                   "training/argument_utils.py: only MLATransformerConfig has these fields"),
        Dependence(("rotary_base", "rotary_percent", "rotary_interleaved", "use_rope_scaling"),
                   lambda arg: bool(arg("multi_latent_attention"))
                   or arg("position_embedding_type") not in _NO_POSITION_ROTATION,
                   "position_embedding_type=rope",
                   "core/models/gpt/gpt_model.py: the rotary embedding is built only for rope, yarn and mrope"),
        Dependence(moe, lambda arg: arg("num_experts") is not None, "num_experts=N",
                   "gpt_builders.py: without num_experts every layer gets the dense layer spec"),
        Dependence(("window_attn_skip_freq",), lambda arg: bool(arg("window_size")), "window_size",
                   "core/transformer/utils.py is_layer_window_attention: no window, no windowed layer"),
        Dependence(("mtp_loss_scaling_factor", "mtp_use_repeated_layer"), lambda arg: bool(arg("mtp_num_layers")),
                   "mtp_num_layers=N",
                   "core/transformer/multi_token_prediction.py: the factor scales the MTP layers' loss; "
                   "gpt_layer_specs.py get_gpt_mtp_block_spec repeats the layer only when there are MTP layers"),
        Dependence(("apply_wd_to_qk_layernorm",),
                   lambda arg: bool(arg("qk_layernorm") or arg("multi_latent_attention")
                                    or arg("experimental_attention_variant")),
                   "qk_layernorm=true",
                   "core/optimizer/__init__.py get_standard_config_overrides: it changes only the weight decay of "
                   "q_layernorm/k_layernorm parameters, which exist only with query-key normalization (or MLA)"),
        Dependence(("fp8_recipe",), lambda arg: arg("fp8") is not None, "fp8_format=hybrid (or e4m3)",
                   "core/fp8_utils.py: the recipe is made only when fp8 is set"),
        Dependence(("fp8_margin", "fp8_amax_history_len", "fp8_amax_compute_algo"),
                   lambda arg: arg("fp8") is not None and arg("fp8_recipe") == "delayed",
                   "fp8_format with fp8_recipe=delayed",
                   "core/fp8_utils.py get_fp8_recipe: only TEDelayedScaling (extensions/transformer_engine.py) "
                   "takes a margin and an amax history"),
        Dependence(("fp8_quantizer_factory",), lambda arg: arg("fp8") is not None and arg("fp8_recipe") == "custom",
                   "fp8_format with fp8_recipe=custom",
                   "core/fp8_utils.py get_fp8_recipe: read only for the custom recipe"),
        Dependence(("fp4_recipe",), lambda arg: arg("fp4") is not None, "fp4_format=e2m1",
                   "core/fp4_utils.py get_fp4_context: the FP4 recipe is made only when fp4 is set"),
        Dependence(("fp4_quantizer_factory",), lambda arg: arg("fp4") is not None and arg("fp4_recipe") == "custom",
                   "fp4_format with fp4_recipe=custom",
                   "core/fp4_utils.py get_fp4_recipe: read only for the custom recipe"),
        Dependence(("initial_loss_scale", "min_loss_scale", "loss_scale_window", "hysteresis"),
                   lambda arg: bool(arg("fp16") and not arg("loss_scale")), "fp16=true with loss_scale unset",
                   "core/optimizer/__init__.py: the dynamic loss scaler exists only in fp16 (bf16 scales no loss), "
                   "and a constant loss_scale replaces it"),
        Dependence(("recompute_method", "recompute_num_layers"),
                   lambda arg: arg("recompute_granularity") is not None, "recompute_granularity=full",
                   "core/transformer/transformer_config.py: read only with a recompute granularity"),
        Dependence(("recompute_modules",), lambda arg: arg("recompute_granularity") == "selective",
                   "recompute_granularity=selective",
                   "core/transformer/transformer_layer.py and attention.py: the modules are recomputed only in "
                   "selective recomputation (full recomputes whole layers)"),
        Dependence(("tensorboard_log_interval", "tensorboard_queue_size", "log_timers_to_tensorboard",
                    "log_memory_to_tensorboard", "log_validation_ppl_to_tensorboard", "log_world_size_to_tensorboard",
                    "log_loss_scale_to_tensorboard"),
                   lambda arg: bool(arg("tensorboard_dir")), "tensorboard_dir",
                   "training/global_vars.py: the TensorBoard writer is made only for a tensorboard_dir"),
        Dependence(("wandb_project",), lambda arg: bool(arg("tensorboard_dir")), "tensorboard_dir",
                   "training/training.py training_log: every W&B metric is logged inside `if writer`, the "
                   "TensorBoard writer", effect="no metric logged"),
        Dependence(("wandb_exp_name", "wandb_save_dir", "wandb_entity"), lambda arg: bool(arg("wandb_project")),
                   "wandb_project", "training/global_vars.py: the W&B writer is made only for a wandb_project"),
        # pretrain_gpt.py builds GPTModel through gpt_builders.py, which passes rope_scaling but neither of
        # these: the factor stays GPTModel's 8.0, the interpolation None
        Dependence(("rope_scaling_factor", "rotary_seq_len_interpolation_factor"), _never, None,
                   "gpt_builders.py gpt_builder passes GPTModel neither the factor nor the interpolation"),
        # parsed, and then read by nothing at the pin (no attribute access outside their argument definitions)
        Dependence(("apply_residual_connection_post_layernorm", "openai_gelu", "head_lr_mult", "onnx_safe",
                    "enable_full_sharding_in_hsdp", "exit_signal_handler_for_dataloader",
                    "dist_ckpt_save_pre_mcore_014", "max_tokens_to_oom", "inprocess_max_iterations",
                    "inprocess_progress_watchdog_interval"), _never, None,
                   "no code in megatron/ or pretrain_gpt.py reads the value after parsing"),
        Dependence(("mup_width_mult",), _never, None,
                   "core/transformer/transformer_config.py __post_init__ recomputes it as hidden_size / "
                   "mup_base_hidden_size under use_mup, and only use_mup reads it"),
        # other models' settings: pretrain_gpt.py builds a GPT model on GPT datasets
        Dependence(tuple(name for name in sorted({*(name for name in megatron_args.catalog()
                                                     if name.startswith(_OTHER_MODELS)), *_OTHER_MODEL_SETTINGS})
                         if name not in _FAMILY_NAMES), _never, None,
                   "BERT, T5, retrieval and vision settings: nothing on pretrain_gpt.py's path reads them"),
        Dependence(("mup_base_hidden_size", "mup_base_head_dim", "mup_attn_scale_power", "mup_embedding_mult"),
                   lambda arg: bool(arg("use_mup")), "use_mup=true",
                   "core/transformer/transformer_config.py __post_init__ and language_model_embedding.py: read "
                   "only under use_mup"),
        Dependence(("bias_swiglu_fusion",), lambda arg: bool(arg("swiglu")), "swiglu=true",
                   "training/argument_utils.py core_transformer_config_from_args: the bias-activation fusion "
                   "comes from bias_gelu_fusion without swiglu"),
        Dependence(("bias_gelu_fusion",), lambda arg: not arg("swiglu"), "swiglu=false",
                   "training/argument_utils.py core_transformer_config_from_args: with swiglu the "
                   "bias-activation fusion comes from bias_swiglu_fusion"),
        Dependence(("cross_entropy_fusion_impl",), lambda arg: bool(arg("cross_entropy_loss_fusion")),
                   "cross_entropy_loss_fusion=true",
                   "core/models/common/language_module/language_module.py: read inside `if "
                   "self.config.cross_entropy_loss_fusion`"),
        Dependence(("clone_scatter_output_in_embedding",), lambda arg: bool(arg("sequence_parallel")),
                   "sequence_parallel=true (at TP > 1)",
                   "core/models/common/embeddings/language_model_embedding.py: read inside `if "
                   "self.config.sequence_parallel`"),
        Dependence(("tp_comm_overlap_ag", "tp_comm_overlap_rs", "tp_comm_overlap_rs_dgrad", "tp_comm_bulk_wgrad",
                    "tp_comm_bulk_dgrad", "tp_comm_split_ag", "tp_comm_split_rs", "tp_comm_overlap_cfg",
                    "tp_comm_bootstrap_backend"),
                   lambda arg: bool(arg("tp_comm_overlap")), "tp_comm_overlap=true",
                   "core/extensions/transformer_engine.py and training/initialize.py: read inside `if "
                   "tp_comm_overlap`"),
        # the learning-rate schedule: core/optimizer_param_scheduler.py get_lr
        Dependence(("lr_wsd_decay_style", "lr_wsd_decay_iters", "lr_wsd_decay_samples"),
                   lambda arg: arg("lr_decay_style") == "WSD", "lr_decay_style=WSD",
                   "core/optimizer_param_scheduler.py get_lr: read only in the WSD branch"),
        Dependence(("lr_warmup_init",), _warmup, "lr_warmup_iters=N (or lr_warmup_fraction)",
                   "core/optimizer_param_scheduler.py get_lr: the initial rate is read only while warming up"),
        Dependence(("min_lr",), lambda arg: arg("lr_decay_style") != "constant",
                   "a decaying lr_decay_style (linear, cosine, ...)",
                   "core/optimizer_param_scheduler.py get_lr: a constant schedule returns the peak rate after "
                   "warmup"),
        Dependence(("lr_decay_iters", "lr_decay_samples"),
                   lambda arg: arg("lr_decay_style") != "constant" or arg("lr_warmup_fraction") is not None,
                   "a decaying lr_decay_style (or lr_warmup_fraction)",
                   "core/optimizer_param_scheduler.py get_lr returns before the decay length with a constant "
                   "schedule; training.py get_optimizer_param_scheduler reads it otherwise only for "
                   "lr_warmup_fraction"),
        # the optimizer: core/optimizer/__init__.py
        Dependence(("sgd_momentum",), lambda arg: arg("optimizer") == "sgd", "optimizer=sgd",
                   "core/optimizer/__init__.py: only the SGD branches pass momentum"),
        Dependence(("adam_beta1", "adam_beta2", "adam_eps"), lambda arg: arg("optimizer") != "sgd",
                   "optimizer=adam", "core/optimizer/__init__.py: the SGD branches pass neither betas nor eps"),
        Dependence(tuple(sorted(name for name in megatron_args.catalog() if name.startswith("muon_"))),
                   lambda arg: arg("optimizer") in _MUON, "optimizer=muon",
                   "core/optimizer/emerging_optimizers.py: the muon_* settings are read into the Muon "
                   "optimizer only"),
        Dependence(("decoupled_min_lr",), lambda arg: arg("decoupled_lr") is not None, "decoupled_lr",
                   "core/optimizer/__init__.py: read inside `if config.decoupled_lr is not None`"),
        Dependence(("optimizer_offload_fraction", "overlap_cpu_optimizer_d2h_h2d", "pin_cpu_grads",
                    "pin_cpu_params", "use_torch_optimizer_for_cpu_offload"),
                   lambda arg: bool(arg("optimizer_cpu_offload")), "optimizer_cpu_offload=true",
                   "core/optimizer/__init__.py: read only to build the HybridDeviceOptimizer"),
        Dependence(("ddp_bucket_size", "ddp_num_buckets"),
                   lambda arg: bool(arg("overlap_grad_reduce") or arg("use_megatron_fsdp")),
                   "overlap_grad_reduce=true",
                   "training.py get_model: without overlap_grad_reduce the bucket size is set to None, one "
                   "bucket"),
        Dependence(("align_grad_reduce",), lambda arg: bool(arg("overlap_grad_reduce")), "overlap_grad_reduce=true",
                   "training/training.py train: read inside `if ... args.overlap_grad_reduce`"),
        Dependence(("torch_fsdp2_reshard_after_forward",), lambda arg: bool(arg("use_torch_fsdp2")),
                   "use_torch_fsdp2=true",
                   "training/training.py get_megatron_ddp_config: read only for Torch FSDP2"),
        Dependence(("offload_modules", "min_offloaded_tensor_size", "fine_grained_offloading_max_inflight_offloads"),
                   lambda arg: bool(arg("fine_grained_activation_offloading")),
                   "fine_grained_activation_offloading=true",
                   "core/models/gpt/gpt_model.py, transformer_layer.py, attention.py: read only with "
                   "fine_grained_activation_offloading"),
        Dependence(("disable_bf16_reduced_precision_matmul",), lambda arg: bool(arg("bf16")), "bf16=true",
                   "core/transformer/transformer_config.py __post_init__: read inside `if self.bf16 and ...`"),
        Dependence(("num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16"),
                   lambda arg: bool(arg("first_last_layers_bf16")), "first_last_layers_bf16=true",
                   "core/fp8_utils.py and fp4_utils.py: the counts are read only with first_last_layers_bf16"),
        Dependence(("qk_clip_alpha", "qk_clip_threshold"), lambda arg: bool(arg("qk_clip")), "qk_clip=true",
                   "core/transformer/attention.py clip_qk: clipping (and its settings) only with qk_clip"),
        # checkpoints: training/checkpointing.py save_checkpoint and _load_global_dist_base_checkpoint
        Dependence(("ckpt_fully_parallel_save_process_group",), lambda arg: bool(arg("ckpt_fully_parallel_save")),
                   "ckpt_fully_parallel_save=true",
                   "training/checkpointing.py save_checkpoint: read inside `if args.ckpt_fully_parallel_save`"),
        Dependence(("ckpt_fully_parallel_load_process_group", "ckpt_fully_parallel_load_exchange_algo"),
                   lambda arg: bool(arg("ckpt_fully_parallel_load")), "ckpt_fully_parallel_load=true",
                   "training/checkpointing.py: read inside `if args.ckpt_fully_parallel_load`"),
        Dependence(("dist_ckpt_optim_fully_reshardable", "distrib_optim_fully_reshardable_mem_efficient"),
                   _sharded_optimizer, "use_distributed_optimizer=true",
                   "training/checkpointing.py _build_sharded_state_dict_metadata: the optimizer's sharding type "
                   "is written only for a distributed optimizer (not with fsdp_dtensor)"),
        Dependence(("distrib_optim_fully_reshardable_mem_efficient",),
                   lambda arg: not _sharded_optimizer(arg) or bool(arg("dist_ckpt_optim_fully_reshardable")),
                   "dist_ckpt_optim_fully_reshardable=true",
                   "training/checkpointing.py _build_sharded_state_dict_metadata: read inside `if "
                   "args.dist_ckpt_optim_fully_reshardable`"),
        Dependence(("ckpt_convert_save",), lambda arg: arg("ckpt_convert_format") is not None,
                   "ckpt_convert_format",
                   "training/training.py: read inside `if args.ckpt_convert_format is not None`"),
        Dependence(("non_persistent_local_ckpt_dir", "non_persistent_local_ckpt_algo"),
                   lambda arg: arg("non_persistent_ckpt_type") == "local", "non_persistent_ckpt_type=local",
                   "training/training.py and checkpointing.py: read only for local non-persistent checkpoints"),
        Dependence(("replication_factor",), lambda arg: bool(arg("replication")), "replication=true",
                   "training/training.py: read inside `if cfg_container.checkpoint.replication`"),
        Dependence(("use_persistent_ckpt_worker", "async_strategy", "async_ckpt_cpu_priority",
                    "async_ckpt_io_priority"),
                   lambda arg: bool(arg("async_save")), "async_save=true",
                   "training/async_utils.py and checkpointing.py read them only for asynchronous saves; "
                   "arguments.py:1630 sets async_strategy to mcore without async_save"),
        Dependence(("dist_ckpt_workers",),
                   lambda arg: bool(arg("async_save") and (arg("ckpt_format") in ("torch_dcp", "fsdp_dtensor")
                                                            or arg("ckpt_assume_constant_structure"))),
                   "async_save=true with ckpt_assume_constant_structure=true",
                   "training/checkpointing.py save_checkpoint: a synchronous torch_dist save writes with one "
                   "thread, an asynchronous one reads the count only with a constant structure"),
        # the training loop: training/training.py train and train_step
        Dependence(("profile_step_start", "profile_step_end", "profile_ranks", "use_pytorch_profiler",
                    "nvtx_ranges"),
                   lambda arg: bool(arg("profile")), "profile=true",
                   "training/training.py train: every profiler setting is read inside `if args.profile`"),
        Dependence(("pytorch_profiler_collect_shapes", "pytorch_profiler_collect_callstack",
                    "pytorch_profiler_collect_chakra"),
                   lambda arg: bool(arg("profile") and arg("use_pytorch_profiler")),
                   "profile=true and use_pytorch_profiler=true",
                   "training/training.py train: read only to build the PyTorch profiler"),
        Dependence(("record_shapes",), lambda arg: bool(arg("profile") and not arg("use_pytorch_profiler")),
                   "profile=true with use_pytorch_profiler=false",
                   "training/training.py train: read only by the nsys (emit_nvtx) profiler"),
        Dependence(("memory_snapshot_path",), lambda arg: bool(arg("record_memory_history")),
                   "record_memory_history=true",
                   "model_provider.py and training/training.py training_log: the snapshot is written only "
                   "with record_memory_history"),
        Dependence(("manual_gc_interval", "manual_gc_eval"), lambda arg: bool(arg("manual_gc")), "manual_gc=true",
                   "training/training.py: read inside `if args.manual_gc`"),
        Dependence(("straggler_ctrlr_port", "straggler_minmax_count", "disable_straggler_on_startup"),
                   lambda arg: bool(arg("log_straggler")), "log_straggler=true",
                   "training/training.py train: the straggler detector is configured only with log_straggler"),
        Dependence(tuple(sorted(name for name in megatron_args.catalog() if name.startswith("inprocess_")
                                and name not in ("inprocess_restart", "inprocess_max_iterations",
                                                 "inprocess_progress_watchdog_interval"))),
                   lambda arg: bool(arg("inprocess_restart")), "inprocess_restart=true",
                   "training/inprocess_restart.py: read only to wrap training for an in-process restart"),
        Dependence(("calc_ft_timeouts", "ft_num_warmup_iters"), lambda arg: bool(arg("enable_ft_package")),
                   "enable_ft_package=true",
                   "training/ft_integration.py setup: returns before reading them without enable_ft_package"),
        Dependence(("error_injection_type",), lambda arg: bool(arg("error_injection_rate")),
                   "error_injection_rate=N",
                   "core/rerun_state_machine.py RerunErrorInjector.maybe_inject: no rate, no injection"),
        Dependence(("exit_signal",), lambda arg: bool(arg("exit_signal_handler")), "exit_signal_handler=true",
                   "training/global_vars.py and datasets/data_samplers.py: the handler for it is installed only "
                   "with exit_signal_handler"),
        Dependence(("one_logger_project", "one_logger_run_name", "one_logger_async"),
                   lambda arg: bool(arg("enable_one_logger")), "enable_one_logger=true",
                   "training/global_vars.py _set_one_logger: read only with enable_one_logger"),
        Dependence(("adlr_autoresume_interval",), lambda arg: bool(arg("adlr_autoresume")),
                   "adlr_autoresume=true", "training/training.py train_step: read only with adlr_autoresume"),
        # data and tokenizer: pretrain_gpt.py core_gpt_dataset_config_from_args, build_tokenizer.py
        Dependence(tuple(sorted(name for name in megatron_args.catalog() if name.startswith("fim_"))),
                   lambda arg: bool(arg("fim_data")), "fim_data=true",
                   "pretrain_gpt.py core_gpt_dataset_config_from_args: read inside `if args.fim_data`"),
        Dependence(("split",),
                   lambda arg: any(arg(name) for name in ("data_path", "data_args_path", "train_data_path",
                                                          "valid_data_path", "test_data_path",
                                                          "per_split_data_args_path")),
                   "data_path",
                   "core/datasets/blended_megatron_dataset_config.py: mock data is split 1,1,1 whatever "
                   "split says"),
        Dependence(("merge_file", "trust_remote_code", "tokenizer_hf_no_use_fast",
                    "tokenizer_hf_no_include_special_tokens"),
                   _tokenizer_reads(*_MEGATRON_TOKENIZERS, "HuggingFaceTokenizer"),
                   "tokenizer_type=GPT2BPETokenizer (or HuggingFaceTokenizer)",
                   "core/tokenizers/utils/build_tokenizer.py: only the BPE/WordPiece and HuggingFace tokenizers "
                   "read a merge file and the Hugging Face options"),
        Dependence(("sft_tokenizer_prompt_format",), _tokenizer_reads("SFTTokenizer"), "tokenizer_type=SFTTokenizer",
                   "core/tokenizers/utils/build_tokenizer.py: read only for the SFTTokenizer"),
        Dependence(("tokenizer_model",),
                   _tokenizer_reads(*_SENTENCEPIECE, "TikTokenizer", "HuggingFaceTokenizer", "SFTTokenizer"),
                   "tokenizer_type=HuggingFaceTokenizer (or a SentencePiece or TikToken one)",
                   "core/tokenizers/utils/build_tokenizer.py: GPT2BPE, WordPiece and Null tokenizers take no "
                   "model"),
        Dependence(("null_tokenizer_eod_id", "null_tokenizer_pad_id"), _tokenizer_reads("NullTokenizer"),
                   "tokenizer_type=NullTokenizer", "core/tokenizers/utils/build_tokenizer.py: read only for "
                   "the NullTokenizer"),
        Dependence(("tiktoken_pattern", "tiktoken_num_special_tokens"), _tokenizer_reads("TikTokenizer"),
                   "tokenizer_type=TikTokenizer", "core/tokenizers/utils/build_tokenizer.py: read only for "
                   "the TikTokenizer"),
        Dependence(("tokenizer_sentencepiece_ignore_extra_whitespaces", "tokenizer_sentencepiece_legacy"),
                   _tokenizer_reads(*_SENTENCEPIECE), "a SentencePiece tokenizer_type",
                   "core/tokenizers/utils/build_tokenizer.py: read only for the SentencePiece tokenizers"),
    )
