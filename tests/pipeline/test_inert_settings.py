"""A setting Megatron reads only under another one, set while that one is off, is said in the job's warnings:
Megatron accepts it silently and trains another model than the one written."""

from __future__ import annotations

import pytest

from launcher.megatron import args as megatron_args
from launcher.megatron.effective import effective_settings
from launcher.pipeline.inert_settings import dependences, inert_settings
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve


def _warnings(*overrides: str) -> list[str]:
    job = resolve(load_preset("345m", list(overrides)), 1, 1)
    return [w for w in job.warnings if ("without" in w or "never uses" in w) and "(" in w]


@pytest.mark.parametrize("overrides, named, condition", [
    (["num_query_groups=4"], "num_query_groups=4", "group_query_attention=true"),
    # multi-query attention asked for with Megatron's default value: without the flag, 16 groups
    (["num_query_groups=1"], "num_query_groups=1", "group_query_attention=true"),
    (["rotary_base=500000", "rotary_percent=0.5"], "rotary_base=500000, rotary_percent=0.5",
     "position_embedding_type=rope"),
    (["q_lora_rank=64"], "q_lora_rank=64", "multi_latent_attention=true"),
    (["moe_router_topk=4", "moe_grouped_gemm=true"], "moe_grouped_gemm=True, moe_router_topk=4", "num_experts=N"),
    (["fp8_recipe=tensorwise"], "fp8_recipe=tensorwise", "fp8_format=hybrid"),
    (["initial_loss_scale=4096"], "initial_loss_scale=4096.0", "fp16=true"),
    # a constant scale replaces the dynamic scaler in fp16 too
    (["fp16=true", "bf16=false", "loss_scale=1024", "loss_scale_window=500"], "loss_scale_window=500.0",
     "fp16=true with loss_scale unset"),
    (["recompute_num_layers=2"], "recompute_num_layers=2", "recompute_granularity=full"),
    (["window_attn_skip_freq=2"], "window_attn_skip_freq=2", "window_size"),
    (["mtp_loss_scaling_factor=0.3"], "mtp_loss_scaling_factor=0.3", "mtp_num_layers=N"),
    (["mtp_use_repeated_layer=true"], "mtp_use_repeated_layer=True", "mtp_num_layers=N"),
    (["apply_wd_to_qk_layernorm=true"], "apply_wd_to_qk_layernorm=True", "qk_layernorm=true"),
    # the learning-rate schedule (the 345m preset: cosine, lr_warmup_fraction 0.01, min_lr 1e-5)
    (["lr_wsd_decay_iters=100", "lr_wsd_decay_style=linear"], "lr_wsd_decay_style=linear, lr_wsd_decay_iters=100",
     "lr_decay_style=WSD"),
    (["lr_warmup_init=1e-7", "lr_warmup_fraction=null"], "lr_warmup_init=1e-07", "lr_warmup_iters=N"),
    # the decay length still sizes lr_warmup_fraction's warmup: only min_lr is named
    (["lr_decay_style=constant"], "min_lr=1e-05", "a decaying lr_decay_style"),
    # the optimizer
    (["sgd_momentum=0.8"], "sgd_momentum=0.8", "optimizer=sgd"),
    (["optimizer=sgd", "adam_beta2=0.95", "adam_eps=1e-5"], "adam_beta2=0.95, adam_eps=1e-05", "optimizer=adam"),
    (["muon_momentum=0.8"], "muon_momentum=0.8", "optimizer=muon"),
    (["decoupled_min_lr=1e-6"], "decoupled_min_lr=1e-06", "decoupled_lr"),
    (["optimizer_offload_fraction=0.5"], "optimizer_offload_fraction=0.5", "optimizer_cpu_offload=true"),
    (["ddp_bucket_size=1000000"], "ddp_bucket_size=1000000", "overlap_grad_reduce=true"),
    (["qk_clip_threshold=50"], "qk_clip_threshold=50.0", "qk_clip=true"),
    # checkpoints
    (["ckpt_fully_parallel_save=false", "ckpt_fully_parallel_save_process_group=ep_dp"],
     "ckpt_fully_parallel_save_process_group=ep_dp", "ckpt_fully_parallel_save=true"),
    (["ckpt_fully_parallel_load_exchange_algo=gather_rounds"], "ckpt_fully_parallel_load_exchange_algo=gather_rounds",
     "ckpt_fully_parallel_load=true"),
    # the training loop
    (["profile_step_start=3", "profile_step_end=5"], "profile_step_start=3, profile_step_end=5", "profile=true"),
    (["profile=true", "pytorch_profiler_collect_shapes=true"], "pytorch_profiler_collect_shapes=True",
     "profile=true and use_pytorch_profiler=true"),
    (["profile=true", "use_pytorch_profiler=true", "record_shapes=true"], "record_shapes=True",
     "profile=true with use_pytorch_profiler=false"),
    (["memory_snapshot_path=/tmp/m.pickle"], "memory_snapshot_path=/tmp/m.pickle", "record_memory_history=true"),
    (["manual_gc_interval=10", "manual_gc_eval=false"], "manual_gc_interval=10, manual_gc_eval=False",
     "manual_gc=true"),
    (["straggler_minmax_count=4"], "straggler_minmax_count=4", "log_straggler=true"),
    (["adlr_autoresume_interval=10"], "adlr_autoresume_interval=10", "adlr_autoresume=true"),
    # data and tokenizer (the 345m preset: mock data, NullTokenizer)
    (["fim_rate=0.3"], "fim_rate=0.3", "fim_data=true"),
    (["split=98,2,0"], "split=98,2,0", "data_path"),
    (["tokenizer_model=/models/tokenizer.model"], "tokenizer_model=/models/tokenizer.model",
     "tokenizer_type=HuggingFaceTokenizer"),
    (["merge_file=/models/merges.txt"], "merge_file=/models/merges.txt", "tokenizer_type=GPT2BPETokenizer"),
    (["tokenizer_type=GPT2BPETokenizer", "null_tokenizer_pad_id=5"], "null_tokenizer_pad_id=5",
     "tokenizer_type=NullTokenizer"),
    (["tiktoken_pattern=v2"], "tiktoken_pattern=v2", "tokenizer_type=TikTokenizer"),
    # model and precision
    (["mup_base_hidden_size=256"], "mup_base_hidden_size=256", "use_mup=true"),
    (["bias_swiglu_fusion=false"], "bias_swiglu_fusion=False", "swiglu=true"),
    (["swiglu=true", "bias_gelu_fusion=false"], "bias_gelu_fusion=False", "swiglu=false"),
    (["cross_entropy_fusion_impl=te"], "cross_entropy_fusion_impl=te", "cross_entropy_loss_fusion=true"),
    (["clone_scatter_output_in_embedding=false"], "clone_scatter_output_in_embedding=False", "sequence_parallel=true"),
    (["tp_comm_overlap_ag=false", "tp_comm_bootstrap_backend=mpi"], "tp_comm_overlap_ag=False, tp_comm_bootstrap_"
     "backend=mpi", "tp_comm_overlap=true"),
    (["fp8_margin=1"], "fp8_margin=1", "fp8_format with fp8_recipe=delayed"),
    (["fp4_recipe=custom"], "fp4_recipe=custom", "fp4_format=e2m1"),
    # checkpoints and the training loop
    (["dist_ckpt_optim_fully_reshardable=true"], "dist_ckpt_optim_fully_reshardable=True",
     "use_distributed_optimizer=true"),
    (["use_distributed_optimizer=true", "distrib_optim_fully_reshardable_mem_efficient=true"],
     "distrib_optim_fully_reshardable_mem_efficient=True", "dist_ckpt_optim_fully_reshardable=true"),
    (["exit_signal=SIGINT"], "exit_signal=SIGINT", "exit_signal_handler=true"),
    (["enable_one_logger=false", "one_logger_project=p"], "one_logger_project=p", "enable_one_logger=true"),
    (["mscale=0.7", "rope_type=rope"], "rope_type=rope, mscale=0.7", "multi_latent_attention=true"),
    (["trust_remote_code=true"], "trust_remote_code=True", "tokenizer_type=GPT2BPETokenizer"),
    (["sft_tokenizer_prompt_format=chatml"], "sft_tokenizer_prompt_format=chatml", "tokenizer_type=SFTTokenizer"),
    (["align_grad_reduce=false"], "align_grad_reduce=False", "overlap_grad_reduce=true"),
    (["torch_fsdp2_reshard_after_forward=false"], "torch_fsdp2_reshard_after_forward=False", "use_torch_fsdp2=true"),
    (["offload_modules=[core_attn]"], "offload_modules=['core_attn']", "fine_grained_activation_offloading=true"),
    (["num_layers_at_start_in_bf16=2"], "num_layers_at_start_in_bf16=2", "first_last_layers_bf16=true"),
    (["ckpt_convert_save=/ckpt/converted"], "ckpt_convert_save=/ckpt/converted", "ckpt_convert_format"),
    (["non_persistent_local_ckpt_algo=atomic"], "non_persistent_local_ckpt_algo=atomic",
     "non_persistent_ckpt_type=local"),
    (["replication_factor=3"], "replication_factor=3", "replication=true"),
    (["error_injection_type=persistent_error"], "error_injection_type=persistent_error", "error_injection_rate=N"),
    (["inprocess_soft_timeout=30"], "inprocess_soft_timeout=30.0", "inprocess_restart=true"),
    (["ft_num_warmup_iters=2"], "ft_num_warmup_iters=2", "enable_ft_package=true"),
    (["bf16=false", "disable_bf16_reduced_precision_matmul=true"], "disable_bf16_reduced_precision_matmul=True",
     "bf16=true"),
])
def test_a_setting_without_the_one_it_needs_is_named(overrides: list[str], named: str, condition: str) -> None:
    (warning,) = _warnings(*overrides)
    assert warning.startswith(f"{named}: no effect without {condition}")
    assert "drop" in warning


@pytest.mark.parametrize("overrides", [
    ["num_query_groups=4", "group_query_attention=true"],
    ["num_query_groups=16"],  # as many groups as the 345m's 16 heads: plain multi-head attention either way
    ["rotary_base=500000", "position_embedding_type=rope"],
    ["rotary_base=500000", "use_rotary_position_embeddings=true"],  # Megatron's own rewrite to rope
    ["moe_router_topk=4", "num_experts=4", "add_bias_linear=false"],
    ["initial_loss_scale=4096", "fp16=true", "bf16=false"],
    ["recompute_modules=[core_attn,mlp]", "recompute_granularity=selective"],
    ["rotary_percent=1.0"],  # Megatron's default, written out: nothing to say
    ["lr_wsd_decay_iters=100", "lr_decay_style=WSD"],
    ["lr_warmup_init=1e-7"],  # the preset warms up (lr_warmup_fraction 0.01)
    ["min_lr=1e-6"],  # cosine decays to it
    ["lr_decay_style=inverse-square-root"],
    ["sgd_momentum=0.8", "optimizer=sgd"],
    ["adam_beta2=0.95", "adam_eps=1e-5"],
    ["muon_momentum=0.8", "optimizer=muon"],
    ["muon_momentum=0.8", "optimizer=dist_muon"],  # Megatron's own rewrite to muon
    ["decoupled_min_lr=1e-6", "decoupled_lr=1e-4"],
    ["ddp_bucket_size=1000000", "overlap_grad_reduce=true"],
    ["ckpt_fully_parallel_save_process_group=ep_dp"],  # fully parallel saves are Megatron's default
    ["ckpt_fully_parallel_load_exchange_algo=gather_rounds", "ckpt_fully_parallel_load=true"],
    ["profile_step_start=3", "profile_step_end=5", "profile=true"],
    ["profile=true", "use_pytorch_profiler=true", "pytorch_profiler_collect_shapes=true"],
    ["profile=true", "record_shapes=true"],  # the nsys profiler records the shapes
    ["memory_snapshot_path=/tmp/m.pickle", "record_memory_history=true"],
    ["manual_gc_interval=10", "manual_gc=true"],
    ["straggler_minmax_count=4", "log_straggler=true"],
    ["split=98,2,0", "mock_data=false", "data_path=[/data/corpus_text_document]"],
    ["tokenizer_model=/models/tokenizer", "tokenizer_type=HuggingFaceTokenizer"],
    ["tiktoken_pattern=v2", "tokenizer_type=TikTokenizer", "tokenizer_model=/models/tiktoken.json"],
    ["rope_scaling_factor=8.0"],  # GPTModel's own factor, written out
    ["async_save=true", "use_persistent_ckpt_worker=true", "dist_ckpt_workers=8"],  # the preset's constant structure
    ["mup_base_hidden_size=256", "use_mup=true"],
    ["bias_swiglu_fusion=false", "swiglu=true"],
    ["bias_gelu_fusion=false"],  # the fusion GELU models take
    ["dist_ckpt_optim_fully_reshardable=true", "use_distributed_optimizer=true"],
    ["use_distributed_optimizer=true", "dist_ckpt_optim_fully_reshardable=true",
     "distrib_optim_fully_reshardable_mem_efficient=true"],
    ["exit_signal=SIGINT", "exit_signal_handler=true"],
    ["one_logger_project=p"],  # the one logger is on by default
])
def test_a_setting_that_takes_effect_is_not_named(overrides: list[str]) -> None:
    assert _warnings(*overrides) == []


@pytest.mark.parametrize("user", [
    # the job would be refused for other reasons here (no TE, no cluster library): judged alone
    {"optimizer_offload_fraction": 0.5, "optimizer_cpu_offload": True},
    {"qk_clip_threshold": 50.0, "qk_clip": True},
    {"adlr_autoresume_interval": 10, "adlr_autoresume": True},
    {"clone_scatter_output_in_embedding": False, "sequence_parallel": True, "tensor_model_parallel_size": 2},
    {"tp_comm_overlap_ag": False, "tp_comm_overlap": True, "sequence_parallel": True,
     "tensor_model_parallel_size": 2},
    {"fp4_recipe": "custom", "fp4": "e2m1", "fp4_quantizer_factory": "quant.factory"},
    {"cross_entropy_fusion_impl": "te", "cross_entropy_loss_fusion": True},
    {"fp8_margin": 1, "fp8": "hybrid"},  # delayed scaling is the default recipe
    {"mscale": 0.7, "multi_latent_attention": True},
    {"trust_remote_code": True, "tokenizer_type": "HuggingFaceTokenizer"},
    {"sft_tokenizer_prompt_format": "chatml", "tokenizer_type": "SFTTokenizer"},
    {"align_grad_reduce": False, "overlap_grad_reduce": True},
    {"torch_fsdp2_reshard_after_forward": False, "use_torch_fsdp2": True},
    {"offload_modules": ["core_attn"], "fine_grained_activation_offloading": True},
    {"num_layers_at_start_in_bf16": 2, "first_last_layers_bf16": True, "fp8": "hybrid"},
    {"ckpt_convert_save": "/ckpt/converted", "ckpt_convert_format": "torch_dist"},
    {"non_persistent_local_ckpt_algo": "atomic", "non_persistent_ckpt_type": "local"},
    {"replication_factor": 3, "replication": True, "non_persistent_ckpt_type": "local"},
    {"error_injection_type": "persistent_error", "error_injection_rate": 1000},
    {"inprocess_soft_timeout": 30, "inprocess_restart": True},
    {"ft_num_warmup_iters": 2, "enable_ft_package": True},
    {"disable_bf16_reduced_precision_matmul": True, "bf16": True},
    {"mtp_use_repeated_layer": True, "mtp_num_layers": 2},
    {"apply_wd_to_qk_layernorm": True, "qk_layernorm": True},
])
def test_a_setting_whose_condition_holds_is_not_named(user: dict[str, object]) -> None:
    assert inert_settings(user, effective_settings(user).__getitem__) == []


def test_a_decay_length_on_a_constant_schedule_is_named_without_a_warmup_fraction() -> None:
    """With a constant schedule the decay length counts only as lr_warmup_fraction's base."""
    named = _warnings("lr_decay_style=constant", "lr_warmup_fraction=null", "lr_warmup_iters=10")
    assert [w.split(":")[0] for w in named] == ["min_lr=1e-05", "lr_decay_iters=320000"]


def test_asynchronous_save_settings_are_named_for_a_synchronous_save() -> None:
    named = _warnings("async_save=false")
    assert [w.split(":")[0] for w in named] == ["use_persistent_ckpt_worker=True, async_strategy=mcore",
                                                "dist_ckpt_workers=4"]
    assert all("without async_save=true" in w for w in named)


def test_settings_pretrain_gpt_never_passes_on_are_named_whatever_else_is_set() -> None:
    (warning,) = _warnings("position_embedding_type=rope", "use_rope_scaling=true", "rope_scaling_factor=16",
                           "rotary_seq_len_interpolation_factor=2")
    assert warning.startswith("rope_scaling_factor=16.0, rotary_seq_len_interpolation_factor=2: no effect, "
                              "Megatron never uses them")
    assert warning.endswith("drop them")


@pytest.mark.parametrize("overrides, named", [
    # parsed, then read by nothing
    (["openai_gelu=true"], "openai_gelu=True"),
    (["apply_residual_connection_post_layernorm=true", "head_lr_mult=2"],
     "apply_residual_connection_post_layernorm=True, head_lr_mult=2.0"),
    (["mup_width_mult=2", "use_mup=true"], "mup_width_mult=2.0"),  # recomputed from mup_base_hidden_size
    (["inprocess_restart=true", "inprocess_max_iterations=3"], "inprocess_max_iterations=3"),
    # other models' settings in a GPT job
    (["mask_prob=0.2", "vocab_extra_ids=100", "short_seq_prob=0.2"],
     "mask_prob=0.2, short_seq_prob=0.2, vocab_extra_ids=100"),
])
def test_a_setting_nothing_reads_is_named(overrides: list[str], named: str) -> None:
    (warning,) = _warnings(*overrides)
    assert warning.startswith(f"{named}: no effect, Megatron never uses")


def test_another_models_defining_settings_are_refused_not_warned() -> None:
    """bert_binary_head makes the configuration a BERT one: the launcher refuses it (checker.model_family) and
    says it once."""
    user = {"bert_binary_head": False}
    assert inert_settings(user, effective_settings(user).__getitem__) == []


def test_a_tokenizer_taken_from_the_checkpoint_may_read_any_file() -> None:
    """With use_checkpoint_args the checkpoint's tokenizer type replaces the job's: its files may be read."""
    user = {"tokenizer_type": "NullTokenizer", "tokenizer_model": "/models/tokenizer.model"}
    assert inert_settings(user, effective_settings(user).__getitem__) != []
    user["use_checkpoint_args"] = True
    assert inert_settings(user, effective_settings(user).__getitem__) == []


def test_what_the_launcher_adds_is_never_blamed() -> None:
    """Only the user's own settings are judged: the fast path's additions are the launcher's business."""
    job = resolve(load_preset("345m", []), 1, 1)
    assert job.added and _warnings() == []


def test_every_rule_names_megatron_arguments() -> None:
    catalog = megatron_args.catalog()
    for rule in dependences():
        assert rule.names and all(name in catalog for name in rule.names), rule.names


def test_skip_train_says_that_nothing_is_trained() -> None:
    job = resolve(load_preset("345m", ["skip_train=true"]), 1, 1)
    (warning,) = [w for w in job.warnings if w.startswith("skip_train")]
    assert "trains nothing" in warning and "drop skip_train" in warning
    assert not [w for w in resolve(load_preset("345m", []), 1, 1).warnings if "skip_train" in w]
