"""Derive what each Megatron setting needs on the target from the pinned Megatron source itself.

    python scripts/derive_requirements.py                 # writes launcher/data/megatron_requirements.json
    python scripts/derive_requirements.py --check         # exit 1 when the committed file is out of date
    python scripts/derive_requirements.py --source /work/main/third_party/megatron-lm   # a checkout instead

The source is megatron/core and megatron/training: by default the installed megatron-core wheel (what CI has;
the pinned checkout's copies of these files are 0.18.0's), read as text and AST, never imported.

Two parts come out:
- `requirements`: the curated rules below (RULES), each located in the source by an anchor: the line that raises
  or asserts, and the line that names the minimum version. Line numbers and versions are read from the source,
  never typed here, so a pin that moves a line moves the citation and a pin that drops a check fails loudly
  ("anchor not found: re-curate rule X").
- `guards`: an inventory found by scanning: every optional-import guard (a try/except ImportError around an
  import, usually setting a HAVE_* flag), by top-level package, and every `is_te_min_version("x")` call. Each
  guarded package must be classified in PACKAGES (a rule of the table, or why no setting needs it), and the
  highest TE version any check asks for is recorded: a declared Transformer Engine (the NGC container's) must
  meet it. A new pin that adds a guarded package or a newer TE check changes this file, and the test
  (tests/megatron/test_requirements_table.py) says what changed.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parents[1] / "launcher" / "data" / "megatron_requirements.json"
TE = {"package": "transformer-engine", "module": "transformer_engine"}
NVRX = {"package": "nvidia-resiliency-ext", "module": "nvidia_resiliency_ext"}
EINOPS = {"package": "einops", "module": "einops"}


def rule(id: str, when: dict[str, Any], needs: dict[str, Any], cite: tuple[str, str], why: str, fix: str,
         version: tuple[str, str] | None = None, enforced_by: str | None = None) -> dict[str, Any]:
    """One curated row: `when` holds on Megatron's effective settings ⇒ the target needs `needs`.

    cite/version: (file under megatron/, regex matching one line there); a `version` regex has a group `v`."""
    return {"id": id, "when": when, "needs": needs, "cite": cite, "version": version, "why": why, "fix": fix,
            "enforced_by": enforced_by}


# What `from megatron.rl import rl_utils` (training.py's guarded import) needs beyond megatron-core's own
# dependencies: the third-party modules imported at the top of megatron/rl/__init__.py, rl_utils.py and the
# megatron.rl modules they import (module, distribution). tests/megatron_pin checks it against the checkout.
RL_PACKAGES = (("fastapi", "fastapi"), ("httpx", "httpx"), ("openai", "openai"), ("pydantic", "pydantic"),
               ("uvicorn", "uvicorn"), ("wandb", "wandb"))


# The curation: which setting reaches which guard. Everything else (lines, versions) is read from the source.
RULES = [
    # -- Python packages ---------------------------------------------------------------------------------------
    rule("async-save-nvrx", {"async_save": True, "async_strategy": "nvrx", "ckpt_format": {"not": "fsdp_dtensor"}},
         NVRX, ("core/dist_checkpointing/strategies/torch.py", r"A compatible `nvidia-resiliency-ext` installation"),
         "asynchronous saves with async_strategy nvrx (Megatron's default) import nvidia-resiliency-ext at the "
         "first save", "set async_strategy=mcore or install nvidia-resiliency-ext",
         version=("core/dist_checkpointing/strategies/nvrx.py", r'NVRX_MIN_VERSION = "(?P<v>[\d.]+)"')),
    # fsdp_dtensor's async save works with nvrx only (the next rule), so its fix cannot be async_strategy=mcore
    rule("async-save-nvrx-fsdp-dtensor", {"async_save": True, "async_strategy": "nvrx", "ckpt_format": "fsdp_dtensor"},
         NVRX, ("core/dist_checkpointing/strategies/torch.py", r"A compatible `nvidia-resiliency-ext` installation"),
         "asynchronous saves with async_strategy nvrx (Megatron's default) import nvidia-resiliency-ext at the "
         "first save, and fsdp_dtensor's async save works with no other strategy",
         "install nvidia-resiliency-ext or set async_save=false",
         version=("core/dist_checkpointing/strategies/nvrx.py", r'NVRX_MIN_VERSION = "(?P<v>[\d.]+)"')),
    rule("local-checkpoint-nvrx", {"non_persistent_ckpt_type": "local"}, NVRX,
         ("training/arguments.py", r"nvidia_resiliency_ext is required for local checkpointing"),
         "local non-persistent checkpoints use nvidia-resiliency-ext's checkpoint manager",
         "set non_persistent_ckpt_type=global or install nvidia-resiliency-ext"),
    rule("fault-tolerance-nvrx", {"enable_ft_package": True}, NVRX,
         ("training/ft_integration.py", r"from nvidia_resiliency_ext\.fault_tolerance import RankMonitorClient"),
         "the fault-tolerance package is nvidia-resiliency-ext's", "drop enable_ft_package or install "
         "nvidia-resiliency-ext"),
    rule("inprocess-restart-nvrx", {"inprocess_restart": True}, NVRX,
         ("training/inprocess_restart.py", r'import_module\("nvidia_resiliency_ext\.inprocess"\)'),
         "in-process restart is nvidia-resiliency-ext's", "drop inprocess_restart or install nvidia-resiliency-ext"),
    # parallel_state.create_hierarchical_groups lays out two-level groups with einops (megatron-core's "dev" extra,
    # not a dependency): found rehearsing gpt3_mcore_te_tp2_pp1_multi_dist_optimizer_instances on CPU ranks, it
    # fails at the process groups, and only where DP > 1 (one GPU never builds these groups)
    rule("partial-distributed-optimizer-einops", {"num_distributed_optimizer_instances": {"gt": 1}}, EINOPS,
         ("core/parallel_state.py", r"einops is not installed\. Please install it"),
         "several distributed-optimizer instances build their intra- and inter-instance data-parallel groups "
         "through einops (parallel_state.create_hierarchical_groups) at start-up",
         "set num_distributed_optimizer_instances=1 or install einops"),
    rule("hierarchical-cp-einops", {"hierarchical_context_parallel_sizes": True}, EINOPS,
         ("core/parallel_state.py", r"einops is not installed\. Please install it"),
         "hierarchical context parallelism (cp_comm_type a2a+p2p) builds its groups through einops "
         "(parallel_state.create_hierarchical_groups) at start-up",
         "install einops, or use another cp_comm_type than a2a+p2p"),
    rule("emerging-optimizer", {"optimizer": {"in": ["muon", "dist_muon", "lion", "soap", "adaptive_muon"]}},
         {"package": "emerging-optimizers", "module": "emerging_optimizers"},
         ("core/optimizer/__init__.py", r"emerging-optimizers package is required for optimizer="),
         "Megatron's muon, lion, soap and adaptive_muon optimizers are the emerging-optimizers package's",
         "set optimizer=adam or install emerging-optimizers",
         version=("core/optimizer/__init__.py", r"HAVE_EMERGING_OPTIMIZERS = _eo_ver >= \((?P<v>\d+, *\d+)\)")),
    rule("flashinfer-sampling-backend", {"inference_dynamic_batching_sampling_backend": "flashinfer"},
         {"package": "flashinfer-python", "module": "flashinfer"},
         ("training/arguments.py", r"--inference-dynamic-batching-sampling-backend=flashinfer requires"),
         "validate_args imports flashinfer for this inference setting even in a training job",
         "set inference_dynamic_batching_sampling_backend=torch, or install flashinfer-python"),
    rule("tokenizer-transformers", {"tokenizer_type": {"in": ["GPT2BPETokenizer", "BertWordPieceLowerCase",
                                                              "BertWordPieceCase", "HuggingFaceTokenizer"]}},
         {"package": "transformers", "module": "transformers"},
         ("core/tokenizers/text/libraries/huggingface_tokenizer.py", r"from transformers import AutoTokenizer"),
         "these tokenizers are built through Hugging Face transformers (build_tokenizer.py's megatron and "
         "huggingface libraries)", "use tokenizer_type NullTokenizer with mock data, or install transformers"),
    rule("tokenizer-sentencepiece", {"tokenizer_type": {"in": ["SentencePieceTokenizer", "GPTSentencePieceTokenizer",
                                                               "Llama2Tokenizer"]}},
         {"package": "sentencepiece", "module": "sentencepiece"},
         ("core/tokenizers/text/libraries/sentencepiece_tokenizer.py", r"^\s+import sentencepiece"),
         "SentencePiece tokenizers", "install sentencepiece"),
    rule("tokenizer-tiktoken", {"tokenizer_type": "TikTokenizer"}, {"package": "tiktoken", "module": "tiktoken"},
         ("core/tokenizers/text/libraries/tiktoken_tokenizer.py", r"^\s+import tiktoken"),
         "TikTokenizer", "install tiktoken"),
    rule("wandb-project", {"wandb_project": True}, {"package": "wandb", "module": "wandb"},
         ("training/global_vars.py", r"^\s+import wandb$"),
         "Weights & Biases logging (wandb_project) imports wandb on the last rank at start-up",
         "drop wandb_project (--set wandb_project=null) or install wandb"),
    # -- Transformer Engine -------------------------------------------------------------------------------------
    rule("transformer-impl-te", {"transformer_impl": "transformer_engine"}, TE,
         ("core/models/gpt/gpt_layer_specs.py", r"^if HAVE_TE:"),
         "the job uses --transformer-impl transformer_engine (the default): the TE layer spec",
         "set transformer_impl: local in the preset (or --set transformer_engine=false), or install "
         "Transformer Engine", enforced_by="target_rules.without_te"),
    rule("context-parallel-te", {"context_parallel_size": {"gt": 1}}, TE,
         ("core/transformer/dot_product_attention.py", r"Context parallelism is only supported by TEDot"),
         "context parallelism is TE's attention", "set context_parallel_size=1 or install Transformer Engine",
         enforced_by="layout.context_parallel"),
    rule("precision-aware-optimizer-te", {"use_precision_aware_optimizer": True, "optimizer_cpu_offload": False}, TE,
         ("core/optimizer/optimizer_config.py", r"--use-precision-aware-optimizer requires FusedAdam from "
                                                r"TransformerEngine"),
         "the precision-aware optimizer is Transformer Engine's FusedAdam (apex's has no low-precision states): "
         "OptimizerConfig raises when TE is missing, at the optimizer's creation",
         "set use_precision_aware_optimizer=false or install Transformer Engine"),
    rule("tp-comm-overlap-te", {"tp_comm_overlap": True}, TE,
         ("training/initialize.py", r"Overlap optimization needs 'yaml' and"),
         "TP communication/GEMM overlap is TE's userbuffers", "set tp_comm_overlap=false or install "
         "Transformer Engine"),
    rule("moe-permute-fusion-te", {"moe_permute_fusion": True}, TE,
         ("core/transformer/transformer_config.py", r"fused permutation is not available"),
         "MoE permute fusion is TE's fused permutation", "set moe_permute_fusion=false or install Transformer "
         "Engine", version=("core/transformer/transformer_config.py",
                            r"fused permutation is not available\. Please install TE >= (?P<v>\d+\.\d+\.\d+)")),
    rule("moe-router-fusion-te", {"moe_router_fusion": True}, TE,
         ("core/transformer/moe/moe_utils.py", r"fused_topk_with_score_function is not available"),
         "MoE router fusion is TE's fused top-k with score function: the router raises at the first step",
         "set moe_router_fusion=false or install Transformer Engine",
         version=("core/transformer/moe/moe_utils.py",
                  r"fused_topk_with_score_function is not available\. Please install TE >= (?P<v>\d+\.\d+\.\d+)")),
    rule("delay-wgrad-te", {"delay_wgrad_compute": True}, TE,
         ("training/arguments.py", r"Delaying wgrad compute is only supported with transformer_engine"),
         "delay_wgrad_compute is TE's (its linear layers split off the weight-gradient GEMM)",
         "set delay_wgrad_compute=false or install Transformer Engine",
         version=("core/extensions/transformer_engine.py", r"Only TE with version >=(?P<v>[\d.]+) supports "
                                                           r"delay_wgrad_compute")),
    rule("delay-wgrad-no-fusion-te", {"delay_wgrad_compute": True, "gradient_accumulation_fusion": False}, TE,
         ("training/arguments.py", r"disabling gradient_accumulation_fusion is only supported with TE"),
         "delay_wgrad_compute without gradient accumulation fusion", "set delay_wgrad_compute=false",
         version=("training/arguments.py", r"disabling gradient_accumulation_fusion is only supported with TE >= "
                                           r"(?P<v>[\d.]+)")),
    rule("delay-wgrad-overlap-grad-te", {"delay_wgrad_compute": True, "overlap_grad_reduce": True}, TE,
         ("training/arguments.py", r"overlap_grad_reduce is only supported with TE >= [\d.]+ when enabling"),
         "delay_wgrad_compute with overlap_grad_reduce", "set delay_wgrad_compute=false",
         version=("training/arguments.py", r"overlap_grad_reduce is only supported with TE >= (?P<v>\d+(?:\.\d+)*)")),
    rule("qk-clip-te", {"qk_clip": True}, TE,
         ("training/arguments.py", r"--qk-clip is only supported with TE >= "),
         "QK-clip reads the attention logits' maximum from Transformer Engine's attention", "set qk_clip=false",
         version=("training/arguments.py", r"--qk-clip is only supported with TE >= (?P<v>\d+(?:\.\d+)*)")),
    rule("max-attention-logit-te", {"log_max_attention_logit": True}, TE,
         ("training/arguments.py", r"--log-max-attention-logit is only supported with TE >= "),
         "the maximum attention logit comes from Transformer Engine's attention",
         "set log_max_attention_logit=false",
         version=("training/arguments.py",
                  r"--log-max-attention-logit is only supported with TE >= (?P<v>\d+(?:\.\d+)*)")),
    rule("fp4-te", {"fp4": {"given": True}}, TE,
         ("training/arguments.py", r"--fp4-format requires Transformer Engine >= "),
         "NVFP4 block scaling is Transformer Engine's", "set fp4_format=null",
         version=("training/arguments.py",
                  r"--fp4-format requires Transformer Engine >= (?P<v>\d+(?:\.\d+)*(?:\.dev\d+)?)")),
    rule("delay-wgrad-moe-overlap", {"delay_wgrad_compute": True},
         {"setting": {"overlap_moe_expert_parallel_comm": True}},
         ("core/transformer/transformer_config.py",
          r"overlap_moe_expert_parallel_comm must be enabled when enabling delay_wgrad_compute"),
         "delay_wgrad_compute overlaps the weight gradients with MoE expert-parallel communication",
         "set delay_wgrad_compute=false (it only overlaps with overlap_moe_expert_parallel_comm, which needs "
         "expert parallelism)"),
    # -- NVIDIA apex's CUDA extensions --------------------------------------------------------------------------
    rule("gradient-accumulation-fusion-apex", {"gradient_accumulation_fusion": True},
         {"apex": "fused_weight_gradient_mlp_cuda"},
         ("core/tensor_parallel/layers.py", r"^\s+import fused_weight_gradient_mlp_cuda"),
         "gradient_accumulation_fusion is on (Megatron's default): apex's fused_weight_gradient_mlp_cuda",
         "set gradient_accumulation_fusion: false in the preset (--no-gradient-accumulation-fusion) or "
         "--set apex=false, or build NVIDIA apex with --cuda_ext"),
    rule("masked-softmax-fusion-apex", {"masked_softmax_fusion": True}, {"apex": "scaled_masked_softmax_cuda"},
         ("core/fusions/fused_softmax.py", r"^\s+import scaled_masked_softmax_cuda"),
         "masked_softmax_fusion is on (Megatron's default): apex's scaled_masked_softmax_cuda",
         "set masked_softmax_fusion: false in the preset (--no-masked-softmax-fusion) or --set apex=false, or "
         "build NVIDIA apex with --cuda_ext"),
    # -- settings and layouts that only the model build or the first step meets ----------------------------------
    rule("p2p-warmup-flush-overlap", {"overlap_p2p_comm_warmup_flush": True},
         {"setting": {"overlap_p2p_comm": True}},
         ("core/model_parallel_config.py", r"Pipeline parallel communication overlapping in warmup and flush"),
         "overlap_p2p_comm_warmup_flush needs overlap_p2p_comm, which Megatron keeps only for the interleaved "
         "pipeline schedule (PP > 1 with a virtual pipeline; batch_p2p_comm is its negation, argument_utils.py)",
         "set overlap_p2p_comm_warmup_flush=false, or use PP > 1 with num_virtual_stages_per_pipeline_rank"),
    # -- validate_args' own implications between settings (arguments.py): each would stop pretrain_gpt.py at start-up.
    # A `needs` value is a test of requirements._holds (true/false, a value, {"not": v}, {"gt": n}, {"in": [...]}).
    rule("full-iteration-cuda-graph-nan-check", {"cuda_graph_impl": "full_iteration"},
         {"setting": {"check_for_nan_in_loss_and_grad": False}},
         ("training/arguments.py", r"--no-check-for-nan-in-loss-and-grad should be set with --cuda-graph-impl"),
         "a full-iteration CUDA graph cannot stop on a NaN found on the host",
         "set check_for_nan_in_loss_and_grad=false (Megatron's --no-check-for-nan-in-loss-and-grad), or "
         "cuda_graph_impl=local (per-layer graphs)"),
    rule("full-iteration-cuda-graph-modules",
         {"cuda_graph_impl": "full_iteration", "cuda_graph_modules": {"given": True}},
         {"setting": {"cuda_graph_modules": []}},
         ("training/arguments.py", r"--cuda-graph-modules must be empty when --cuda-graph-impl=full_iteration"),
         "a full-iteration graph captures the whole step, not chosen modules", "set cuda_graph_modules=[]"),
    rule("deprecated-cuda-graph-flags-with-impl", {"enable_cuda_graph": True, "cuda_graph_impl": {"given": True}},
         {"setting": {"enable_cuda_graph": False}},
         ("training/arguments.py", r"Do not use --enable-cuda-graph or --external-cuda-graph with --cuda-graph-impl"),
         "--enable-cuda-graph is the deprecated spelling of --cuda-graph-impl local",
         "set enable_cuda_graph=false (cuda_graph_impl already chooses the graphs)"),
    rule("deprecated-external-cuda-graph-with-impl", {"external_cuda_graph": True, "cuda_graph_impl": {"given": True}},
         {"setting": {"external_cuda_graph": False}},
         ("training/arguments.py", r"Do not use --enable-cuda-graph or --external-cuda-graph with --cuda-graph-impl"),
         "--external-cuda-graph is the deprecated spelling of --cuda-graph-impl transformer_engine",
         "set external_cuda_graph=false (cuda_graph_impl already chooses the graphs)"),
    rule("deprecated-cuda-graph-flags-together", {"enable_cuda_graph": True, "external_cuda_graph": True},
         {"setting": {"external_cuda_graph": False}},
         ("training/arguments.py", r"--enable-cuda-graph and --external-cuda-graph cannot be enabled at the same"),
         "the two deprecated flags choose different graph implementations",
         "set external_cuda_graph=false (--enable-cuda-graph alone is the deprecated spelling of --cuda-graph-impl "
         "local)"),
    rule("no-position-embedding-deprecated", {"add_position_embedding": False,
                                              "position_embedding_type": {"not": "rope"}},
         {"setting": {"add_position_embedding": True}},
         ("training/arguments.py", r"--no-position-embedding is deprecated, use --position-embedding-type"),
         "--no-position-embedding is a flag of an older Megatron; the pin raises on it unless the model uses RoPE",
         "set add_position_embedding=true --set position_embedding_type=none (Megatron's replacement for "
         "--no-position-embedding), or position_embedding_type=rope"),
    rule("relative-position-embedding-te", {"position_embedding_type": "relative"},
         {"setting": {"transformer_impl": "transformer_engine"}},
         ("training/arguments.py", r"Local transformer implementation currently does not support attention bias"),
         "relative position embeddings are attention biases, which only TE's attention takes",
         "set position_embedding_type=rope, or transformer_impl=transformer_engine (with Transformer Engine)"),
    rule("mrope-section", {"position_embedding_type": "mrope"}, {"setting": {"mrope_section": {"given": True}}},
         ("training/arguments.py", r"--mrope-section should be set when using --position-embedding-type mrope"),
         "multimodal RoPE splits the rotary dimensions into sections", "set position_embedding_type=rope, or "
         "mrope_section (e.g. [16,24,24])"),
    rule("mtp-position-embedding", {"mtp_num_layers": True,  # validate_args: `if args.mtp_num_layers` (-1 too)
                                    "position_embedding_type": {"in": ["learned_absolute", "relative", "mrope",
                                                                       "yarn"]}},
         {"setting": {"position_embedding_type": {"in": ["rope", "none"]}}},
         ("training/arguments.py", r"Multi-Token Prediction \(MTP\) is not supported with \{args.position_"),
         "multi-token prediction supports RoPE or no position embedding",
         "set position_embedding_type=rope, or mtp_num_layers=null"),
    rule("mla-not-gqa", {"multi_latent_attention": True, "group_query_attention": True},
         {"setting": {"group_query_attention": False}},
         ("training/arguments.py", r"Group query attention is mutually exclusive with multi latent attention"),
         "multi-latent attention compresses keys and values its own way",
         "set group_query_attention=false, or multi_latent_attention=false --set mla_down_proj_fusion=false"),
    rule("mla-down-proj-fusion", {"mla_down_proj_fusion": True}, {"setting": {"multi_latent_attention": True}},
         ("training/arguments.py", r"--mla-down-proj-fusion requires --multi-latent-attention"),
         "the fusion is of multi-latent attention's down projections", "set mla_down_proj_fusion=false"),
    rule("moe-latent-size-positive", {"moe_latent_size": {"given": True}}, {"setting": {"moe_latent_size": {"gt": 0}}},
         ("training/arguments.py", r"MoE latent projection dimension has to be greater than zero"),
         "it is the dimension the experts' input is projected to", "set moe_latent_size=null (no projection)"),
    rule("moe-latent-size-moe", {"moe_latent_size": {"given": True}}, {"setting": {"num_experts": {"given": True}}},
         ("training/arguments.py", r"MoE latent projections are applicable only for MoE models"),
         "the latent projection is of the experts' input", "set moe_latent_size=null"),
    rule("distribute-saved-activations-tp", {"distribute_saved_activations": True},
         {"setting": {"tensor_model_parallel_size": {"gt": 1}, "recompute_granularity": "full",
                      "recompute_method": {"given": True}}},
         ("training/arguments.py", r"assert args.tensor_model_parallel_size > 1, 'can distribute '"),
         "the saved activations of full recompute are split over the tensor-parallel ranks",
         "set distribute_saved_activations=false"),
    rule("optimizer-cpu-offload-precision-aware", {"optimizer_cpu_offload": True},
         {"setting": {"use_precision_aware_optimizer": True}},
         ("training/arguments.py", r"The optimizer cpu offload must be used in conjunction with `--use-precision"),
         "the hybrid device optimizer is the precision-aware one",
         "set optimizer_cpu_offload=false, or use_precision_aware_optimizer=true --set "
         "use_distributed_optimizer=true"),
    rule("load-main-params-no-optim", {"load_main_params_from_ckpt": True}, {"setting": {"no_load_optim": True}},
         ("training/arguments.py", r"--load-main-params-from-ckpt must be used with --no-load-optim"),
         "the main parameters come from the checkpoint in place of the optimizer state",
         "set no_load_optim=true, or load_main_params_from_ckpt=false"),
    rule("local-checkpoint-dir", {"non_persistent_ckpt_type": "local"},
         {"setting": {"non_persistent_local_ckpt_dir": {"given": True}}},
         ("training/arguments.py", r"Tried to use local checkpointing without specifying --local-ckpt-dir"),
         "local non-persistent checkpoints are written to a directory of each node",
         "set non_persistent_local_ckpt_dir=DIR (a node-local directory), or non_persistent_ckpt_type=global"),
    rule("replication-local", {"replication": True},
         {"setting": {"replication_jump": {"given": True}, "non_persistent_ckpt_type": "local"}},
         ("training/arguments.py", r"--replication requires the value of --replication-jump"),
         "replication copies local non-persistent checkpoints to other nodes", "set replication=false"),
    rule("upcycling-save", {"moe_use_upcycling": True}, {"setting": {"save": {"given": True}}},
         ("training/arguments.py", r"When using upcycling, the --save option must be specified"),
         "upcycling writes the MoE model converted from the dense checkpoint", "set moe_use_upcycling=false"),
    rule("pp-microbatched-inference", {"inference_batch_times_seqlen_threshold": {"gt": -1}},
         {"setting": {"pipeline_model_parallel_size": {"gt": 1}, "cuda_graph_impl": "none"}},
         ("training/arguments.py", r"--inference-batch-times-seqlen-threshold requires setting --pipeline-model"),
         "the threshold splits inference batches into pipeline microbatches",
         "set inference_batch_times_seqlen_threshold=-1"),
    rule("hybrid-context-parallel", {"hybrid_context_parallel": True},
         {"setting": {"calculate_per_token_loss": True, "pipeline_model_parallel_size": 1,
                      "dataloader_type": {"in": ["single", None]}, "enable_cuda_graph": False,
                      "use_megatron_fsdp": False}},
         ("training/arguments.py", r"Hybrid context parallelism must be used with --calculate-per-token-loss"),
         "hybrid context parallelism balances sequences per token",
         "set hybrid_context_parallel=false"),
    rule("encoder-num-layers", {"encoder_num_layers": {"given": True}}, {"setting": {"encoder_num_layers": None}},
         ("training/arguments.py", r"cannot have both num-layers and encoder-num-layers specified"),
         "num_layers is the GPT model's depth; encoder_num_layers is an encoder-decoder model's",
         "set encoder_num_layers=null"),
    rule("fp4-not-fp8", {"fp4": {"given": True}, "fp8": {"given": True}}, {"setting": {"fp8": None}},
         ("training/arguments.py", r"--fp4-format and --fp8-format cannot be used simultaneously"),
         "a job trains in FP4 or in FP8", "set fp8_format=null (keeping FP4), or fp4_format=null"),
    rule("fp4-param-gather", {"fp4_param_gather": True}, {"setting": {"fp4": {"given": True}}},
         ("training/arguments.py", r"--fp4-param-gather must be used together with --fp4-format"),
         "FP4 parameters are gathered only in FP4 training", "set fp4_param_gather=false"),
    rule("gloo-free-distributed-optimizer", {"use_gloo_process_groups": False, "use_distributed_optimizer": True},
         {"setting": {"ckpt_format": {"not": "torch"}}},
         ("training/arguments.py", r"^\s+assert args\.use_dist_ckpt$"),
         "without Gloo the distributed optimizer saves its state only through distributed checkpoints",
         "set use_gloo_process_groups=true, or ckpt_format=torch_dist"),
    rule("fake-process-group-flex", {"fake_process_group": True, "moe_token_dispatcher_type": "flex"},
         {"setting": {"moe_token_dispatcher_type": {"in": ["allgather", "alltoall"]}}},
         ("training/arguments.py", r"Fake process group is not supported with flex token dispatcher"),
         "the flex dispatcher needs real process groups",
         "set moe_token_dispatcher_type=alltoall (fake process groups stand in for communication in benchmarks)"),
    rule("qk-clip-alpha", {"qk_clip": True}, {"setting": {"qk_clip_alpha": {"between": [0.0, 1.0]},
                                                        "qk_clip_threshold": {"gt": 0}}},
         ("training/arguments.py", r"--qk-clip-alpha must be between 0.0 and 1.0 when using --qk-clip"),
         "QK-clip scales the query and key weights by a factor in (0, 1) above a positive logit threshold",
         "set qk_clip_alpha=0.5 --set qk_clip_threshold=100 (Megatron's defaults)"),
    rule("ckpt-convert", {"ckpt_convert_format": {"given": True}},
         {"setting": {"ckpt_convert_save": {"given": True}, "load": {"given": True}}},
         ("training/arguments.py", r"assert args.ckpt_convert_save is not None"),
         "converting a checkpoint reads --load and writes --ckpt-convert-save",
         "set ckpt_convert_format=null (training needs no conversion)"),
    rule("non-persistent-in-memory", {"non_persistent_ckpt_type": "in_memory"},
         {"setting": {"non_persistent_ckpt_type": {"in": ["global", "local"]}}},
         ("training/arguments.py", r"Currently only global and local checkpoints are supported"),
         "the parser offers in_memory, which validate_args then refuses", "set non_persistent_ckpt_type=global"),
    rule("constant-weight-decay", {"weight_decay_incr_style": "constant", "start_weight_decay": {"given": True}},
         {"setting": {"start_weight_decay": None}},
         ("training/arguments.py", r"^\s+assert args.start_weight_decay is None$"),
         "a constant weight decay is weight_decay; start/end_weight_decay are for an increasing one",
         "set start_weight_decay=null --set end_weight_decay=null (or weight_decay_incr_style linear, with both)"),
    rule("constant-weight-decay-end", {"weight_decay_incr_style": "constant", "end_weight_decay": {"given": True}},
         {"setting": {"end_weight_decay": None}},
         ("training/arguments.py", r"^\s+assert args.end_weight_decay is None$"),
         "a constant weight decay is weight_decay; start/end_weight_decay are for an increasing one",
         "set end_weight_decay=null --set start_weight_decay=null (or weight_decay_incr_style linear, with both)"),
    rule("increasing-weight-decay", {"weight_decay_incr_style": {"in": ["linear", "cosine"]}},
         {"setting": {"start_weight_decay": {"given": True}, "end_weight_decay": {"given": True}}},
         ("training/arguments.py", r"^\s+assert args.start_weight_decay is not None$"),
         "an increasing weight decay goes from start_weight_decay to end_weight_decay",
         "set weight_decay_incr_style=constant --set start_weight_decay=null --set end_weight_decay=null "
         "(weight_decay throughout), or give both start_weight_decay and end_weight_decay"),
    rule("encoder-seq-length", {"encoder_seq_length": {"given": True}}, {"setting": {"encoder_seq_length": None}},
         ("training/arguments.py", r"^\s+assert args.encoder_seq_length is None$"),
         "seq_length is the GPT model's sequence length; encoder_seq_length is an encoder-decoder model's",
         "set encoder_seq_length=null"),
    rule("save-params-interval-param-gather", {"save_params_interval": {"given": True}, "overlap_param_gather": True},
         {"setting": {"overlap_param_gather": False}},
         ("training/arguments.py", r"^\s+assert not args.overlap_param_gather$"),
         "saving parameters on their own interval reads them while their all-gather may still be in flight",
         "set save_params_interval=null, or overlap_param_gather=false"),
    rule("cpu-offload-fp8-param-gather", {"optimizer_cpu_offload": True, "fp8_param_gather": True},
         {"setting": {"fp8_recipe": "delayed"}},
         ("training/arguments.py", r"When `--fp8-param-gather` is enabled, the optimizer cpu offload "),
         "the offloaded optimizer updates FP8 parameters only with delayed scaling",
         "set fp8_recipe=delayed, or fp8_param_gather=false"),
    rule("wgrad-deferral-limit", {"defer_embedding_wgrad_compute": True},
         {"setting": {"wgrad_deferral_limit": {"gt": -1}}},
         ("core/model_parallel_config.py", r"Wgrad deferral limit should be greater than or equal to 0"),
         "the limit counts the micro-batches whose embedding weight gradients wait", "set wgrad_deferral_limit=0"),
    rule("one-data-source", {"mock_data": True, "data_path": {"given": True}}, {"setting": {"data_path": None}},
         ("training/arguments.py", r"A single data source must be provided in training mode"),
         "mock data and a data path are two data sources", "set data_path=null (mock data), or mock_data=false"),
    rule("data-path-or-args-path", {"data_path": {"given": True}, "data_args_path": {"given": True}},
         {"setting": {"data_args_path": None}},
         ("training/arguments.py", r"^\s+assert \(args.data_path is None\) or \(args.data_args_path is None\)$"),
         "data_args_path is a file that holds the data path", "set data_args_path=null, or data_path=null"),
    rule("deprecated-cuda-graph-scope", {"cuda_graph_scope_deprecated": {"given": True},
                                         "cuda_graph_modules": {"given": True}},
         {"setting": {"cuda_graph_scope_deprecated": None}},
         ("training/arguments.py", r"--cuda-graph-scope and --cuda-graph-modules cannot be used together"),
         "--cuda-graph-scope is the deprecated spelling of --cuda-graph-modules",
         "set cuda_graph_scope_deprecated=null (cuda_graph_modules already chooses the modules)"),
    rule("fsdp-manual-registration-nccl-ub", {"fsdp_manual_registration": True}, {"setting": {"nccl_ub": True}},
         ("training/arguments.py", r"FSDP manual registration is only supported with --nccl-ub argument"),
         "manual registration registers Megatron-FSDP's buffers with NCCL's user buffers",
         "set nccl_ub=true, or fsdp_manual_registration=false"),
    rule("fim-rates-and-tokens", {"fim_data": True},
         {"setting": {"fim_rate": {"gt": 0}, "fim_spm_rate": {"gt": 0}}},
         ("training/arguments.py", r"--fim-rate should be specified"),
         "fill-in-the-middle rearranges samples at these rates",
         "set fim_rate=0.5 --set fim_spm_rate=0.5 (Megatron's defaults), or fim_data=false"),
    rule("gloo-free-reshardable-mem-efficient", {"use_gloo_process_groups": False, "use_distributed_optimizer": True,
                                                 "dist_ckpt_optim_fully_reshardable": True},
         {"setting": {"distrib_optim_fully_reshardable_mem_efficient": False}},
         ("training/arguments.py", r"--distrib-optim-fully-reshardable-mem-efficient requires -enable-gloo-process"),
         "the memory-efficient fully reshardable save gathers through Gloo",
         "set distrib_optim_fully_reshardable_mem_efficient=false, or use_gloo_process_groups=true"),
    # -- TransformerConfig.__post_init__ (stage "config" of Megatron's start-up) ----------------------------------
    rule("shared-expert-overlap-dispatcher", {"moe_shared_expert_overlap": True, "num_experts": {"given": True}},
         {"setting": {"moe_token_dispatcher_type": {"in": ["alltoall", "flex"]}}},
         ("core/transformer/transformer_config.py", r"moe_shared_expert_overlap only works with alltoall or flex"),
         "the shared expert overlaps with the all-to-all token exchange",
         "set moe_token_dispatcher_type=alltoall, or moe_shared_expert_overlap=false"),
    rule("selective-recompute-num-layers", {"recompute_granularity": "selective",
                                             "recompute_num_layers": {"given": True}},
         {"setting": {"recompute_num_layers": None}},
         ("core/transformer/transformer_config.py", r"recompute_num_layers must be None\."),
         "selective recompute chooses modules, not a number of layers", "set recompute_num_layers=null"),
    rule("squared-relu-not-swiglu", {"squared_relu": True, "swiglu": True}, {"setting": {"swiglu": False}},
         ("training/argument_utils.py", r"assert not args\.swiglu"),
         "squared ReLU replaces the activation that SwiGLU would gate (core_transformer_config_from_args asserts)",
         "set squared_relu=false, or swiglu=false --set bias_gelu_fusion=false"),
    rule("squared-relu-bias-fusion", {"squared_relu": True, "swiglu": False, "bias_gelu_fusion": True},
         {"setting": {"bias_gelu_fusion": False}},
         ("core/transformer/transformer_config.py", r"When bias_activation_fusion is True, activation function should"),
         "the fused bias-activation kernels are GeLU's and SwiGLU's, not squared ReLU's",
         "set bias_gelu_fusion=false"),
    rule("inference-fuse-tp-communication", {"inference_fuse_tp_communication": True},
         {"setting": {"transformer_impl": "inference_optimized"}},
         ("core/transformer/transformer_config.py", r"\"inference_fuse_tp_communication is only supported \""),
         "the fused reduce-scatter/norm/all-gather kernel belongs to the inference-optimized layers (an inference "
         "setting; a training job has no use for it)", "set inference_fuse_tp_communication=false"),
    rule("deepep-pad-to-capacity", {"moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep",
                                    "moe_pad_expert_input_to_capacity": True, "num_experts": {"given": True}},
         {"setting": {"moe_pad_expert_input_to_capacity": False}},
         ("core/transformer/transformer_config.py", r"\"Flex token dispatcher with deepep backend does not support \""),
         "DeepEP exchanges exactly the routed tokens, without padding to the capacity",
         "set moe_pad_expert_input_to_capacity=false, or moe_token_dispatcher_type=alltoall"),
    rule("mla-rotary-interleaved", {"multi_latent_attention": True, "rotary_interleaved": True},
         {"setting": {"rotary_interleaved": False}},
         ("core/transformer/transformer_config.py", r"rotary_interleaved does not work with multi_latent_attention"),
         "multi-latent attention applies its own rotary layout", "set rotary_interleaved=false"),
    rule("expert-bias-score-function", {"moe_router_enable_expert_bias": True},
         {"setting": {"moe_router_score_function": {"in": ["sigmoid", "sqrtsoftplus"]}}},
         ("core/transformer/transformer_config.py", r"Expert bias for aux-loss-free routing only supports"),
         "aux-loss-free routing adds its bias to sigmoid scores",
         "set moe_router_score_function=sigmoid, or moe_router_enable_expert_bias=false"),
    rule("bf16-ends-delayed-scaling", {"first_last_layers_bf16": True, "fp8": {"given": True}, "fp8_recipe": "delayed"},
         {"setting": {"fp8_recipe": {"in": ["tensorwise", "mxfp8", "blockwise"]}}},
         ("core/transformer/transformer_config.py", r"Delayed scaling does not support first / last layer in BF16"),
         "delayed scaling keeps one history for every FP8 layer", "set fp8_recipe=tensorwise, or "
         "first_last_layers_bf16=false"),
    rule("batch-invariant-flash", {"batch_invariant_mode": True}, {"setting": {"attention_backend": "flash"}},
         ("core/transformer/transformer_config.py", r"Batch invariant mode only supports FlashAttention"),
         "batch-invariant kernels exist for FlashAttention only", "set attention_backend=flash"),
    rule("mup-base-hidden-size", {"use_mup": True, "mup_base_hidden_size": {"given": True}},
         {"setting": {"mup_base_hidden_size": {"gt": 0}}},
         ("core/transformer/transformer_config.py", r"--mup-base-hidden-size must be positive"),
         "muP scales by hidden_size / mup_base_hidden_size", "set mup_base_hidden_size=null (hidden_size)"),
    rule("single-grouped-bias-grouped-gemm", {"moe_single_grouped_bias": True},
         {"setting": {"moe_grouped_gemm": True}},
         ("core/transformer/transformer_config.py", r"moe_single_grouped_weight and moe_single_grouped_bias require "),
         "a single grouped bias belongs to the grouped GEMM experts",
         "set moe_single_grouped_bias=false, or moe_grouped_gemm=true"),
    rule("single-grouped-weight-grouped-gemm", {"moe_single_grouped_weight": True},
         {"setting": {"moe_grouped_gemm": True}},
         ("core/transformer/transformer_config.py", r"moe_single_grouped_weight and moe_single_grouped_bias require "),
         "a single grouped weight belongs to the grouped GEMM experts",
         "set moe_single_grouped_weight=false, or moe_grouped_gemm=true"),
    rule("pad-to-capacity-factor", {"moe_pad_expert_input_to_capacity": True},
         {"setting": {"moe_expert_capacity_factor": {"given": True}}},
         ("core/transformer/transformer_config.py", r"moe_expert_capacity_factor must be set to use moe_pad_"),
         "the experts' input is padded up to the capacity the factor sets",
         "set moe_pad_expert_input_to_capacity=false (padding goes with a capacity factor, "
         "moe_expert_capacity_factor)"),
    rule("shared-expert-size", {"moe_shared_expert_intermediate_size": {"given": True}},
         {"setting": {"moe_shared_expert_intermediate_size": {"gt": 0}}},
         ("core/transformer/transformer_config.py", r"moe_shared_expert_intermediate_size must be "),
         "it is num_shared_experts × the shared expert's FFN size",
         "set moe_shared_expert_intermediate_size=null (no shared expert)"),
    rule("router-padding-low-precision", {"moe_router_padding_for_quantization": True,
                                          "fp4": None},
         {"setting": {"fp8": {"given": True}}},
         ("core/transformer/transformer_config.py", r"fp8/fp4 must be specified when moe_router_padding_"),
         "the router pads tokens for FP8/FP4 GEMMs", "set moe_router_padding_for_quantization=false"),
    rule("early-attn-release-ep-overlap", {"ep_overlap_early_attn_memory_release": True},
         {"setting": {"overlap_moe_expert_parallel_comm": True}},
         ("core/transformer/transformer_config.py", r"^\s+'ep_overlap_early_attn_memory_release'$"),
         "the early release is part of the expert-parallel overlap schedule",
         "set ep_overlap_early_attn_memory_release=false"),
    rule("moe-layer-recompute-full", {"moe_layer_recompute": True, "recompute_granularity": "full"},
         {"setting": {"moe_layer_recompute": False}},
         ("core/transformer/transformer_config.py", r"Do not set --moe-layer-recompute with full recompute"),
         "--moe-layer-recompute is deprecated (Megatron: --recompute-granularity selective --recompute-modules "
         "moe_layer), and full recompute already recomputes the MoE layers",
         "set moe_layer_recompute=false"),
    rule("router-padding-dispatcher", {"moe_router_padding_for_quantization": True,
                                       "moe_token_dispatcher_type": {"in": ["allgather", "alltoall_seq"]}},
         {"setting": {"moe_token_dispatcher_type": {"in": ["alltoall", "flex"]}}},
         ("core/transformer/transformer_config.py", r"allgather and alltoall_seq dispatcher does not support "),
         "the padding is done in the all-to-all dispatcher", "set moe_token_dispatcher_type=alltoall, or "
         "moe_router_padding_for_quantization=false"),
    # TransformerConfig checks these whether or not the model has experts (transformer_config.py, top level of
    # __post_init__): a dense job that carries an MoE setting is refused as well
    rule("moe-ffn-without-experts", {"moe_ffn_hidden_size": {"given": True}, "num_experts": None,
                                     "moe_layer_freq": 1},
         {"setting": {"num_experts": {"given": True}}},
         ("core/transformer/transformer_config.py", r"Please set num_moe_experts or remove moe_ffn_hidden_size"),
         "moe_ffn_hidden_size is the experts' FFN size, and a model without experts has none",
         "set moe_ffn_hidden_size=null (a dense model; give num_experts for an MoE one)"),
    rule("rank-capacity-op-fuser", {"moe_expert_rank_capacity_factor": {"given": True}},
         {"setting": {"use_transformer_engine_op_fuser": True}},
         ("core/transformer/transformer_config.py",
          r"moe_expert_rank_capacity_factor requires use_transformer_engine_op_fuser"),
         "the per-rank expert capacity is a feature of Transformer Engine's operation fuser (and of the HybridEP "
         "backend)",
         "set moe_expert_rank_capacity_factor=null"),
    rule("paged-stash-rank-capacity", {"moe_paged_stash": True},
         {"setting": {"moe_expert_rank_capacity_factor": {"given": True}}},
         ("core/transformer/transformer_config.py", r"moe_paged_stash requires moe_expert_rank_capacity_factor"),
         "paged stashing pages the tokens a per-rank capacity drops", "set moe_paged_stash=false"),
    rule("symmetric-all-reduce-te", {"symmetric_ar_type": {"given": True}}, TE,
         ("core/transformer/transformer_config.py", r"Must have at least TE version 2\.3 or higher to use symmetric"),
         "the symmetric-memory all-reduce is Transformer Engine's", "set symmetric_ar_type=null"),
    rule("dispatch-wgrad-overlap-te", {"overlap_dispatch_backward_with_experts_wgrad": True}, TE,
         ("core/transformer/transformer_config.py", r"required for overlap_dispatch_backward_with_experts_wgrad"),
         "the overlap splits the experts' weight gradient with Transformer Engine's delayed wgrad",
         "set overlap_dispatch_backward_with_experts_wgrad=false"),
    rule("quick-geglu-swiglu", {"quick_geglu": True, "swiglu": True},  # said with squared ReLU's, at once
         {"setting": {"swiglu": False}},
         ("training/argument_utils.py", r"elif args\.quick_geglu:"),
         "quick GeGLU is its own gated activation: core_transformer_config_from_args asserts not swiglu",
         "set quick_geglu=false (swiglu is the gated activation the job keeps)"),
    rule("rope-type-mla", {"rope_type": {"given": True}, "multi_latent_attention": False},
         {"setting": {"rope_type": "rope"}},
         ("training/argument_utils.py", r"Common attention only support rope_type"),
         "YaRN scaling is multi-latent attention's; other attention takes plain RoPE",
         "set rope_type=null (plain RoPE; YaRN goes with multi_latent_attention)"),
    rule("inference-optimized-rmsnorm", {"transformer_impl": "inference_optimized"},
         {"setting": {"normalization": "RMSNorm"}},
         ("core/transformer/transformer_config.py", r'^\s+assert self\.normalization == "RMSNorm"$'),
         "the inference-optimized layers are built for RMSNorm models",
         "set transformer_impl=null (the launcher chooses for the target), or normalization=RMSNorm"),
    # the inference-optimized MoE layers (transformer_config.py, `transformer_impl == "inference_optimized" and
    # self.num_moe_experts is not None`); its first way out leaves the layers to the launcher, as the RMSNorm row's
    rule("inference-optimized-moe-router-fp32", {"transformer_impl": "inference_optimized",
                                                 "num_experts": {"given": True}},
         {"setting": {"moe_router_dtype": "fp32"}},
         ("core/transformer/transformer_config.py", r"inference_optimized' requires --moe-router-dtype=fp32"),
         "the inference-optimized MoE layers route in fp32 (no dtype conversions at decode)",
         "set transformer_impl=null (the launcher chooses for the target), or moe_router_dtype=fp32"),
    rule("inference-optimized-moe-dropless", {"transformer_impl": "inference_optimized",
                                              "num_experts": {"given": True},
                                              "moe_expert_capacity_factor": {"given": True}},
         {"setting": {"moe_expert_capacity_factor": None}},
         ("core/transformer/transformer_config.py", r"Inference-optimized MoE layers only support dropless MoE"),
         "the inference-optimized MoE layers are dropless: they take no expert capacity",
         "set transformer_impl=null (the launcher chooses for the target), or moe_expert_capacity_factor=null "
         "--set moe_pad_expert_input_to_capacity=false (padding is to the capacity)"),
    rule("inference-optimized-moe-no-glu", {"transformer_impl": "inference_optimized",
                                            "num_experts": {"given": True}, "swiglu": True},
         {"setting": {"swiglu": False}},
         ("core/transformer/transformer_config.py", r"inference_optimized' does not yet support \"$"),
         "the inference-optimized MoE layers do not yet take gated linear units (SwiGLU/GeGLU)",
         "set transformer_impl=null (the launcher chooses for the target), or swiglu=false --set "
         "bias_gelu_fusion=false (the fused bias-activation left is GeLU's)"),
    rule("msc-package", {"enable_msc": True}, {"package": "multi-storage-client", "module": "multistorageclient"},
         ("training/arguments.py", r"--enable-msc was passed but the multistorageclient package is not "),
         "--enable-msc reads and writes through the Multi-Storage Client",
         "set enable_msc=false, or install multi-storage-client where the job runs"),
    rule("deepep-flex-dispatcher", {"moe_enable_deepep": True},
         {"setting": {"moe_token_dispatcher_type": "flex"}},
         ("core/transformer/transformer_config.py", r"DeepEP backend is only supported with flex token dispatcher"),
         "--moe-enable-deepep (deprecated: --moe-flex-dispatcher-backend deepep) is a backend of the flex token "
         "dispatcher only; TransformerConfig refuses it with any other dispatcher, MoE or not",
         "set moe_enable_deepep=false (the other dispatchers need no DeepEP; for DeepEP itself: the flex "
         "dispatcher, at TP·EP > 1)"),
    rule("deepep-one-backend", {"moe_enable_deepep": True, "moe_flex_dispatcher_backend": "hybridep"},
         {"setting": {"moe_enable_deepep": False}},
         ("core/transformer/transformer_config.py", r"Only one backend is supported for flex token dispatcher"),
         "--moe-enable-deepep names the DeepEP backend and moe_flex_dispatcher_backend names HybridEP: the flex "
         "dispatcher takes one", "set moe_enable_deepep=false (HybridEP stays the backend)"),
    rule("router-padding-fp8-deprecated", {"moe_router_padding_for_fp8": True,
                                           "fp4": None},
         {"setting": {"fp8": {"given": True}}},
         ("core/transformer/transformer_config.py", r"fp8/fp4 must be specified when moe_router_padding_"),
         "--moe-router-padding-for-fp8 is the deprecated spelling of --moe-router-padding-for-quantization, which "
         "pads for FP8/FP4 GEMMs", "set moe_router_padding_for_fp8=false"),
    rule("distopt-instances-dp", {"num_distributed_optimizer_instances": {"gt": 1}},
         {"layout": "dp_divisible_by_instances"},
         ("core/parallel_state.py", r"Data parallel size should be divisible by partial DistOpt shard factor"),
         "the distributed optimizer's instances split the data-parallel ranks (DP·CP, and the expert DP)",
         "use a num_distributed_optimizer_instances that divides DP·CP and the expert data-parallel size"),
    *(rule(f"rl-step-{module}", {"perform_rl_step": True}, {"package": package, "module": module},
           ("training/training.py", r"RL cannot run without the megatron\.rl package"),
           f"RL training (perform_rl_step) imports megatron.rl, which imports {package} (the Megatron-LM "
           "checkout's megatron/rl; megatron-core's wheel has none of it)",
           f"install {package} (every one of {', '.join(p for _, p in RL_PACKAGES)}), or drop perform_rl_step")
      for module, package in RL_PACKAGES),
    rule("fsdp-dtensor-async-mcore", {"ckpt_format": "fsdp_dtensor", "async_save": True, "async_strategy": "mcore"},
         {"unsupported": "save_state_dict_async_plan(enable_cache=…)"},
         ("training/checkpointing.py", r"planner=planner, enable_cache=args\.ckpt_assume_constant_structure"),
         "fsdp_dtensor's async save calls the strategy's save_state_dict_async_plan(…, enable_cache=…), which only "
         "nvidia-resiliency-ext's takes; megatron-core's own (async_strategy mcore, "
         "dist_checkpointing/strategies/state_dict_saver.py) has no such parameter: a TypeError at the first save "
         "(seen on an H200)",
         "set async_save=false, or async_strategy=nvrx with nvidia-resiliency-ext installed"),
    rule("torch-fsdp2-finish-grad-sync", {"use_torch_fsdp2": True}, {"unsupported": "finish_grad_sync"},
         ("core/distributed/finalize_model_grads.py", r"model_chunk\.finish_grad_sync\(force_all_reduce="),
         "finalize_model_grads calls finish_grad_sync(force_all_reduce=…) on every model chunk, but torch-FSDP2's "
         "TorchFullyShardedDataParallel inherits _BaseDataParallel.finish_grad_sync(self), which takes no "
         "arguments: a TypeError at the first training step",
         "use use_megatron_fsdp (with ckpt_format fsdp_dtensor) or plain data parallelism"),
]

# Every package the scan finds behind an optional-import guard: a rule id of RULES that covers it, or why no
# Megatron setting of a GPT job needs it on the target. A new pin's new guarded package fails the test until
# it is classified here.
PACKAGES = {
    "transformer_engine": "rules: transformer-impl-te, context-parallel-te, tp-comm-overlap-te, "
                          "precision-aware-optimizer-te, "
                          "moe-permute-fusion-te, moe-router-fusion-te, delay-wgrad-*",
    "apex": "rules: gradient-accumulation-fusion-apex, masked-softmax-fusion-apex (other apex kernels fall back "
            "to torch)",
    "fused_weight_gradient_mlp_cuda": "rule: gradient-accumulation-fusion-apex",
    "scaled_masked_softmax_cuda": "rule: masked-softmax-fusion-apex",
    "scaled_upper_triang_masked_softmax_cuda": "rule: masked-softmax-fusion-apex (the same fusion)",
    "scaled_softmax_cuda": "rule: masked-softmax-fusion-apex (the same fusion)",
    "nvidia_resiliency_ext": "rules: async-save-nvrx, async-save-nvrx-fsdp-dtensor, local-checkpoint-nvrx, "
                             "fault-tolerance-nvrx, inprocess-restart-nvrx",
    "emerging_optimizers": "rule: emerging-optimizer",
    "einops": "rules: partial-distributed-optimizer-einops, hierarchical-cp-einops (also imported, guarded, by "
              "Megatron-FSDP, hyper-comm grids and attention's inference-only paths)",
    "transformers": "rule: tokenizer-transformers",
    "sentencepiece": "rule: tokenizer-sentencepiece",
    "tiktoken": "rule: tokenizer-tiktoken",
    "wandb": "rules: wandb-project, rl-step-wandb",
    "flashinfer": "rule: flashinfer-sampling-backend (validate_args imports it; otherwise inference only)",
}
NOT_A_SETTING = {
    "triton": "ships with CUDA torch wheels (a hard import of training.py)",
    "packaging": "a dependency of megatron-core itself",
    "yaml": "PyYAML, a hard import of megatron.training",
    "tqdm": "progress bars; optional",
    "zmq": "inference only",
    "msgpack": "inference only",
    "flask": "inference text-generation server only",
    "flask_restful": "inference text-generation server only",
    "trtllm": "inference only",
    "tensorrt_llm": "inference only",
    "nvshmem": "experimental MoE dispatch kernels",
    "cupy": "experimental kernels",
    "torch_memory_saver": "RL / inference memory offload",
    "psutil": "optional diagnostics",
    "mamba_ssm": "Mamba/hybrid models, not GPT",
    "causal_conv1d": "Mamba/hybrid models, not GPT",
    "kitchen": "NVIDIA-internal quantization kitchen",
    "nv_one_logger": "one_logger telemetry: a warning when absent",
    "one_logger": "one_logger telemetry: a warning when absent",
    "wget": "tokenizer download helper",
    "modelopt": "ModelOpt post-training (megatron/post_training, outside megatron-core)",
    "flash_attn": "only with --use-flash-attn on the local spec or inference",
    "flash_attn_interface": "flash-attention 3, inference",
    "flash_mla": "inference only",
    "deep_ep": "MoE flex dispatcher (moe_token_dispatcher_type flex); a GPU-build package",
    "grouped_gemm": "legacy GroupedMLP; TE's grouped GEMM is used with TE",
    "multistorageclient": "rule: msc-package",
    "pynvml": "only with --log-energy",
    "nvtx": "profiling ranges",
    "opentelemetry": "telemetry",
    "torch": "megatron-core's own dependency",
    "numpy": "megatron-core's own dependency",
    "tensorboard": "only with --tensorboard-dir (a warning when absent)",
    "torchvision": "vision models",
    "PIL": "vision models",
    "datasets": "data preparation tools",
    "nltk": "data preparation tools",
    "omegaconf": "config utilities; try/except",
    "hydra": "config utilities",
    "dill": "optional pickling",
    "cuda": "cuda-python: experimental kernels",
    "cutlass": "experimental kernels",
    "cudnn": "experimental kernels",
    "nemo": "NeMo integration",
    "megatron": "Megatron's own subpackages",
    "transformer_engine_torch": "part of Transformer Engine",
    "te_kernels": "part of Transformer Engine",
    "sonic": "experimental kernels",
    "amp_C": "apex's multi-tensor kernels: Megatron falls back to torch's",
    "absl": "inference tooling",
    "boto3": "object-storage checkpoints (multistorageclient)",
    "botocore": "object-storage checkpoints (multistorageclient)",
    "fast_hadamard_transform": "experimental quantization kernels",
    "fla": "flash-linear-attention: linear-attention models, not GPT",
    "flash_attn_3": "flash-attention 3, inference",
    "flashattn_hopper": "flash-attention 3, inference",
    "flashinfer_cubin": "inference only",
    "flashinfer_jit_cache": "inference only",
    "hypercorn": "inference server only",
    "quart": "inference server only",
    "orjson": "inference server only",
    "nvidia_kitchen": "NVIDIA-internal quantization kitchen",
    "userlib": "NVIDIA-internal autoresume (--adlr-autoresume)",
    "workload_inspector": "NVIDIA-internal profiling",
    "importlib": "standard library (a guard around a version lookup)",
    "inspect": "standard library",
    "threading": "standard library",
}


def default_source() -> Path:
    """The installed megatron-core's `megatron` directory, found without importing it."""
    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("megatron-core is not installed here; pass --source DIR")
    for location in spec.submodule_search_locations:
        if (Path(location) / "core").is_dir():
            return Path(location)
    raise SystemExit("no megatron/core found; pass --source DIR")


def megatron_dir(source: Path) -> Path:
    return source / "megatron" if (source / "megatron" / "core").is_dir() else source


def version_of(root: Path) -> str:
    text = (root / "core" / "package_info.py").read_text()
    parts = [re.search(rf"^{name} = (\d+)", text, re.M) for name in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) if m else "?" for m in parts)


def locate(root: Path, where: tuple[str, str], rule_id: str) -> tuple[int, re.Match[str]]:
    path, pattern = where
    lines = (root / path).read_text().splitlines()
    for number, line in enumerate(lines, 1):
        match = re.search(pattern, line)
        if match:
            return number, match
    raise SystemExit(f"anchor not found for rule {rule_id}: /{pattern}/ in megatron/{path}; re-curate it")


def derive_rules(root: Path) -> list[dict[str, Any]]:
    out = []
    for row in RULES:
        line, _ = locate(root, row["cite"], row["id"])
        entry = {"id": row["id"], "when": row["when"], "needs": dict(row["needs"]),
                 "cite": f"megatron/{row['cite'][0]}:{line}", "why": row["why"], "fix": row["fix"]}
        if row["version"]:
            vline, match = locate(root, row["version"], row["id"])
            entry["needs"]["min_version"] = ".".join(p.strip() for p in match.group("v").split(","))
            entry["version_cite"] = f"megatron/{row['version'][0]}:{vline}"
        if row["enforced_by"]:
            entry["enforced_by"] = row["enforced_by"]
        if row["needs"].get("unsupported") == "finish_grad_sync" and not fsdp2_finish_grad_sync_breaks(root):
            continue  # the pin fixed it: the rule goes, and the test shows the change
        out.append(entry)
    return out


def fsdp2_finish_grad_sync_breaks(root: Path) -> bool:
    """True when TorchFullyShardedDataParallel cannot take finalize_model_grads' force_all_reduce: it does not
    define finish_grad_sync and the base class's takes no such argument."""
    torch_fsdp = ast.parse((root / "core/distributed/torch_fully_sharded_data_parallel.py").read_text())
    base = ast.parse((root / "core/distributed/data_parallel_base.py").read_text())

    def method(tree: ast.Module, cls: str) -> ast.FunctionDef | None:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == cls:
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "finish_grad_sync":
                        return item
        return None

    if method(torch_fsdp, "TorchFullyShardedDataParallel") is not None:
        return False
    inherited = method(base, "_BaseDataParallel")
    if inherited is None:
        return False
    names = [a.arg for a in (*inherited.args.args, *inherited.args.kwonlyargs)]
    return "force_all_reduce" not in names and inherited.args.kwarg is None


def _imported(node: ast.AST) -> list[str]:
    names = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Import):
            names += [a.name.split(".")[0] for a in sub.names]
        elif isinstance(sub, ast.ImportFrom) and sub.level == 0 and sub.module:
            names.append(sub.module.split(".")[0])
        elif isinstance(sub, ast.Call) and getattr(sub.func, "attr", getattr(sub.func, "id", "")) in (
                "import_module",) and sub.args and isinstance(sub.args[0], ast.Constant) and \
                isinstance(sub.args[0].value, str):
            names.append(sub.args[0].value.split(".")[0])
    return names


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type
    if kinds is None:
        return True
    names = [kinds] if not isinstance(kinds, ast.Tuple) else list(kinds.elts)
    return any(getattr(n, "id", getattr(n, "attr", "")) in ("ImportError", "ModuleNotFoundError", "Exception")
               for n in names)


def scan_guards(root: Path) -> dict[str, Any]:
    """Optional-import guards by package (files where they are) and every is_te_min_version("x") call."""
    packages: dict[str, set[str]] = {}
    te_versions: dict[str, set[str]] = {}
    for path in sorted([*(root / "core").rglob("*.py"), *(root / "training").rglob("*.py")]):
        relative = f"megatron/{path.relative_to(root).as_posix()}"
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
                for name in _imported(ast.Module(body=node.body, type_ignores=[])):
                    packages.setdefault(name, set()).add(relative)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == \
                    "is_te_min_version" and node.args and isinstance(node.args[0], ast.Constant):
                te_versions.setdefault(str(node.args[0].value), set()).add(relative)
    guarded = {name: sorted(files) for name, files in sorted(packages.items()) if name != "megatron"}
    return {
        "packages": {name: {"files": files, "classified": PACKAGES.get(name) or NOT_A_SETTING.get(name)}
                     for name, files in guarded.items()},
        "te_min_versions": {v: sorted(files) for v, files in sorted(te_versions.items(), key=lambda i: _key(i[0]))},
        "highest_te_version": max(te_versions, key=_key) if te_versions else None,
    }


def rl_imports(root: Path) -> set[str]:
    """Third-party top-level modules that importing megatron.rl.rl_utils runs into (module-level imports of it,
    its packages' __init__ and the megatron.rl modules they import). Needs a checkout: the wheel has no rl/."""
    seen: set[str] = set()
    found: set[str] = set()

    def visit(module: str) -> None:
        if module in seen:
            return
        seen.add(module)
        base = root.parent.joinpath(*module.split("."))
        path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if not path.is_file():
            return
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                prefix = package[:len(package) - node.level + 1] if node.level else []
                names = [".".join([*prefix, *([node.module] if node.module else [])])]
            else:
                continue
            for name in names:
                if name.startswith("megatron.rl"):
                    visit(name)
                elif not name.startswith("megatron"):
                    found.add(name.split(".")[0])

    for module in ("megatron.rl", "megatron.rl.rl_utils"):
        visit(module)
    return found - set(sys.stdlib_module_names) - {"torch", "numpy", "yaml", "typing_extensions"}


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def derive(source: Path) -> dict[str, Any]:
    root = megatron_dir(source)
    return {
        "_generated_by": "python scripts/derive_requirements.py (from megatron/core and megatron/training)",
        "megatron_core": version_of(root),
        "requirements": derive_rules(root),
        "guards": scan_guards(root),
    }


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="a Megatron-LM checkout or a megatron/ directory")
    parser.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render(derive(args.source or default_source()))
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python scripts/derive_requirements.py", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
