"""Flags of the common Megatron forks (Megatron-DeepSpeed and BigScience's, PAI-Megatron-Patch, epfLLM/Megatron-LLM,
Swallow's fork, ModelLink / MindSpeed-LLM / MindSpeed) that launcher/data/flag_translations.json covers, read
through the import: carried in the pin's words where the meaning is certain, dropped with a note where they change
nothing the pin cares about, and lost with what the pin offers instead where neither holds."""

from __future__ import annotations

import re

import pytest

from launcher.importer.build import import_source
from launcher.importer.legacy import translations

MODEL = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 64 --num-attention-heads 4 "
         "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --lr 1e-4 "
         "--train-iters 10 --mock-data --tokenizer-type NullTokenizer --vocab-size 1024 --bf16 ")


def imported(extra: str):
    return import_source(MODEL + extra, "train.sh")


@pytest.mark.parametrize(("extra", "expected"), [
    # Swallow's fork: Llama 3.1's RoPE scaling, its three fixed numbers at the pin's values
    ("--position-embedding-type rope --rope-theta 500000.0 --rope-factor 8.0 --rope-low-freq-factor 1.0 "
     "--rope-high-freq-factor 4 --rope-original-max-positional-embeddings 8192",
     {"rotary_base": 500000, "use_rope_scaling": True, "rope_scaling_factor": 8.0}),
    ("--position-embedding-type rope --rotary-position-embeddings-theta 100000000",  # Megatron-DeepSpeed
     {"rotary_base": 100000000}),
    # ModelLink / MindSpeed-LLM: Llama 3.1 scaling under its own name, with the pin's own --rope-scaling-factor
    ("--position-embedding-type rope --rope-scaling-type llama3 --low-freq-factor 1 --high-freq-factor 4.0",
     {"use_rope_scaling": True, "rope_scaling_factor": None}),
    ("--position-embedding-type rope --rope-scaling-type llama3 --rope-scaling-factor 8",
     {"use_rope_scaling": True, "rope_scaling_factor": 8.0}),
    # ModelLink / MindSpeed-LLM names of the pin's MLA and MoE settings
    ("--multi-head-latent-attention --qk-rope-head-dim 64 --qk-nope-head-dim 128 --num-experts 4 "
     "--moe-router-topk 2 --moe-intermediate-size 32 --routed-scaling-factor 2.5 --n-group 2 --topk-group 1",
     {"multi_latent_attention": True, "qk_pos_emb_head_dim": 64, "qk_head_dim": 128, "moe_ffn_hidden_size": 32,
      "moe_router_topk_scaling_factor": 2.5, "moe_router_num_groups": 2, "moe_router_group_topk": 1}),
    ("--context-parallel-algo ulysses_cp_algo", {"cp_comm_type": ["a2a"]}),
    # BigScience / epfLLM: a SiLU-gated MLP, the pin's --swiglu (underscores read as dashes)
    ("--glu_activation swiglu --ffn-hidden-size 128", {"swiglu": True}),
    # epfLLM/Megatron-LLM: its position-embedding names, untied output, and its linear RoPE interpolation, which
    # is not the pin's --rope-scaling-factor (Llama 3.1's) although the names match once dashed
    ("--position_embedding_type rotary --no_tie_embed_logits --rope_scaling_factor 2.0",
     {"position_embedding_type": "rope", "untie_embeddings_and_output_weights": True,
      "rotary_seq_len_interpolation_factor": 2, "rope_scaling_factor": None}),
    ("--position_embedding_type absolute", {"position_embedding_type": "learned_absolute"}),
    # Habana's forks: LayerNorm weight + 1 (zero-centered gamma), its AdamW optimizers, its NCCL (HCCL on Gaudi)
    ("--apply-layernorm-weight-plus-one --optimizer fusedadamw --distributed-backend hccl",
     {"layernorm_zero_centered_gamma": True, "optimizer": "adam", "distributed_backend": "nccl"}),
    ("--optimizer adamw", {"optimizer": "adam"}),
    ("--distributed-backend ccl", {"distributed_backend": "nccl"}),  # Intel's oneCCL on XPU
    # MindSpeed-LLM (Qwen3-Next): RoPE on a fraction of each head, the pin's --rotary-percent; 0 is its "all"
    ("--position-embedding-type rope --partial-rotary-factor 0.25", {"rotary_percent": 0.25}),
    ("--position-embedding-type rope --partial-rotary-factor 0.0", {"rotary_percent": None}),  # the default
])
def test_fork_flags_of_certain_meaning_are_carried_in_the_pins_words(extra, expected):
    found = imported(extra)
    assert found.lost == []
    assert {k: found.settings.get(k) for k in expected} == expected
    fork_flags = [w for w in extra.split() if w.startswith("--") and w.partition("=")[0] in translations()
                  or w.startswith("--position_embedding_type")]
    for flag in fork_flags:
        said = [*found.translated, *found.not_carried]
        assert any(line.startswith(flag) for line in said), (flag, said)


@pytest.mark.parametrize(("extra", "hint"), [
    ("--rope-low-freq-factor 2.0 --rope-factor 8", "fixes it at 1"),  # another value than the pin's fixed one
    ("--rope-scaling-type yarn --multi-head-latent-attention", "rope_type=yarn"),
    ("--glu-activation geglu", "swiglu=true"),
    ("--context-parallel-algo hybrid_cp_algo --ulysses-degree-in-cp 2", "hierarchical_context_parallel_sizes"),
    # a formula of other settings (computed below) whose input the script does not give
    ("--num-experts 8 --n-shared-experts 2", "moe_ffn_hidden_size is not given"),
    ("--num-experts 8 --first-k-dense-replace 1", "moe_layer_freq is not given"),
    ("--num-experts 8 --first-k-dense-replace 4 --moe-layer-freq 1", "not below num_layers 4"),
    ("--num-experts 8 --moe-ffn-hidden-size 32 --moe-shared-expert-intermediate-size 64 --n-shared-experts 2",
     "gives moe_shared_expert_intermediate_size too"),
    ("--num-experts 8 --expert-tensor-parallel-size 2 --moe-tp-extend-ep", "gives expert_tensor_parallel_size too"),
    ("--num-experts 8 --mlp-type residual", "moe_shared_expert_intermediate_size"),
    ("--num-experts 8 --moe-min-capacity 4", "moe_expert_capacity_factor"),
    ("--kd --num-layers-teacher 2 --load-teacher /ckpt/teacher", "plain pretraining"),
    ("--train-mode finetune --max-padding-length 2048", "SFT entry point"),
    ("--is-instruction-dataset --prompt-type llama3", "SFT entry point"),
    ("--lora-target-modules linear_qkv linear_proj --lora-r 8 --lora-alpha 16", "full training"),
    ("--add-rmsnorm-offset", "layernorm_zero_centered_gamma=true"),
    ("--embed-layernorm", "without that norm"),
    ("--tp-2d --tp-x 2 --tp-y 2", "tensor_model_parallel_size=X×Y"),
    ("--noop-layers 3", "uneven pipeline"),
    ("--attention-mask-type general", "causal (the pin's)"),
    ("--beta-fast 16 --beta-slow 1", "leave it at 32"),
    ("--no-scaled-init", "output_layer_init_method=init_method_normal(init_method_std)"),
    ("--do-layernorm-bias-weight-decay", "no decay on norms and biases"),
    ("--use-torch-compile 1", "runs the model uncompiled"),  # on: only the value off is a note
    ("--use-torch-compiled-autograd true", "runs the backward pass uncompiled"),
    ("--optimizer-selection fused_ema_adamw", "without the moving average"),
    ("--eval-loss-exit-value 2.69", "--train-iters/--train-samples"),
    ("--no-seq-len-plus-one-tokens", "seq_length + 1 tokens"),
    # Megatron-DeepSpeed's expert layers count from 1 (layers 2, 4, …), the pin's --moe-layer-freq 2 from 0
    ("--num-experts 4 --expert-interval 2", "moe_layer_freq"),
])
def test_fork_flags_the_pin_cannot_hold_are_lost_with_what_it_offers(extra, hint):
    found = imported(extra)
    refused = [w for w in extra.split() if w.startswith("--") and w in translations()][0]
    (line,) = [n for n in found.lost if n.startswith(refused)]  # one loss: the flags it reads along are notes
    assert hint in line and "instead:" in line, line
    assert len(found.lost) == 1, found.lost


@pytest.mark.parametrize("extra", [
    "--use-fused-rmsnorm --use-fused-swiglu --use-fused-rotary-pos-emb --use-mc2 --use-ascend-mc2 --no-shared-storage "
    "--reuse-fp32-param --swap-attention --recompute-activation-function --tokenizer-not-use-fast --shape-order BSND "
    "--context-parallel-algo megatron_cp_algo --moe-zero-memory level0 --use-cp-send-recv-overlap",
    "--num-experts 4 --moe-eval-capacity-factor 1.0 --create-moe-param-group --cpu-optimizer --cpu_torch_adam "
    "--enable-zbh1-pipeline --enable-zbh1-exact-semantics --checkpoint-in-cpu --universal-checkpoint "
    "--enable-expert-tensor-parallelism --mlp-type standard --no-load-lr-state",
    "--glu-activation swiglu --use_bias --rope_scaling_factor 1.0 --train-mode pretrain --cpu-offloading "
    "--no-scatter-gather-tensors-in-pipeline --use-legacy-models",
    "--beta-fast 32 --beta-slow 1 --attention-mask-type causal --cp-attention-mask-type causal --ai-framework pytorch "
    "--model-type-hf llama2 --enable-hf2mg-convert --mtp-mem-efficient-logits",
    "--fix-position-emb-redundant-alloc --pipeline-model-parallel-size 2",
    # Habana's forks: torch.compile off (their default) and what tunes it, checkpoint checks and I/O, Gaudi kernels
    "--use-torch-compile=0 --use-torch-compiled-autograd false --cache-size-limit 0 --allow-unspec-int-on-nn-module=0 "
    "--use-regional-compilation 0 --verify-checkpoint --verify-checkpoint-model-type LLAMA "
    "--save-distrib-optimizer-method serial_per_node --load-distrib-optimizer-method serial_per_dp_groups "
    "--use-fused-sdpa 1 --use-fused-sdpa-with-recompute 0 --use-te-custom-op 0",
    "--use-fused-rmsnorm 1 --use-fast-softmax 1",  # Gaudi kernels the fork turns off on CUDA (were lost)
    "--rank ${RANK}",  # HYGON-AI/Megatron-LM-das: the process's rank for mpirun launches
    # and its number of processes (was lost where unknown, so every HYGON script was refused over it)
    "--rank ${RANK} --world-size ${WORLD_SIZE} --dist-url tcp://${DIST_URL}:${DIST_PORT}",
    "--world-size 8",
    "--recompute-norm --recompute-norm-num-layers 1 --optimizer-selection fused_torch_adamw",  # MindSpeed
    "--optimizer-selection fused_adamw --experiment-run-id run_1",
    "--trace --continuous-trace-iterations 2 --trace-granularity full --enable-zb-runtime",
    "--ext-lr-steps 6144000",  # Habana's MLPerf GPT-3: MLPerf's log events only
    "--abort-on-unmet-fused-kernel-constraints --use-cached-dataset",
    "--num-experts 4 --expert-interval 1",  # every layer an expert layer, as the pin's default
])
def test_fork_flags_that_change_nothing_the_pin_cares_about_are_notes(extra):
    found = imported(extra)
    assert found.lost == []
    for flag in re.findall(r"--[\w-]+", extra):
        if flag in ("--num-experts", "--glu-activation", "--pipeline-model-parallel-size"):
            continue
        assert any(note.startswith(flag) for note in found.not_carried), flag


@pytest.mark.parametrize(("extra", "stray"), [
    # MindSpeed's switch is HabanaAI's true/false flag (`type=lambda x: x.lower() in ['true', '1']`): its value was a
    # word without a flag, lost, so each Habana script was refused over a kernel choice
    ("--use-fused-rmsnorm 1 --num-layers 6", None),
    ("--use-fused-rmsnorm False --num-layers 6", None),
    ("--use-fused-rmsnorm=0 --num-layers 6", None),
    ("--use-fused-rmsnorm ${USE_FUSED_RMSNORM} --num-layers 6", None),  # a value not known: still the flag's
    ("--use-fused-rmsnorm --num-layers 6", None),  # MindSpeed's switch
    ("--use-fused-rmsnorm 2 --num-layers 6", "2"),  # no value either fork reads: a stray word, as before
    ("--use-fused-rmsnorm data/x --num-layers 6", "data/x"),
])
def test_a_switch_another_fork_gives_a_value_keeps_its_value_and_the_flags_after_it(extra, stray):
    found = imported(extra)
    assert found.settings["num_layers"] == 6  # the flag after it is read, not shifted
    assert [n.split(":")[0] for n in found.lost] == ([stray] if stray else [])
    (note,) = [n for n in found.not_carried if n.startswith("--use-fused-rmsnorm")]
    value = extra.split()[1] if not stray and not extra.split()[1].startswith("--") else ""
    assert note.startswith(f"--use-fused-rmsnorm {value}".strip() if "=" not in extra else "--use-fused-rmsnorm=0")


@pytest.mark.parametrize(("extra", "value"), [
    ("--optimizer ademamix", "ademamix"),  # a fork's optimizer the pin does not have
    ("--distributed-backend mpi", "mpi"),  # not a collective library of the GPUs
])
def test_a_fork_choice_without_a_pin_equivalent_stays_lost(extra, value):
    found = imported(extra)
    (line,) = found.lost
    assert line.startswith(extra.split()[0]) and value in line, line


def test_a_refused_fork_flag_stops_the_import_with_its_hint(tmp_path, launch):
    script = tmp_path / "pretrain_deepseek.sh"
    script.write_text("#!/bin/bash\n" + MODEL + "--num-experts 8 --n-shared-experts 2 --use-fused-rmsnorm\n")
    code, stdout, stderr = launch("import", str(script), "-o", str(tmp_path / "p.yaml"))
    assert code == 2 and not (tmp_path / "p.yaml").exists()
    assert "Traceback" not in stderr and "error:" in stderr and "hint:" in stderr
    assert "--n-shared-experts 2" in stdout and "moe_shared_expert_intermediate_size=N×moe_ffn_hidden_size" in stdout
    assert "moe_ffn_hidden_size is not given" in stdout  # no expert width: the count cannot become a width
    assert "lost (1" in stdout  # the fused kernel is a note



# -- fork flags whose pin settings are a formula of their value and other settings of the script --------------

COMPUTED = ("--n-shared-experts", "--first-k-dense-replace", "--moe-tp-extend-ep")


@pytest.mark.parametrize(("extra", "expected"), [
    # ModelLink: the shared expert is N × --moe-intermediate-size wide; MindSpeed-LLM: N × --moe-ffn-hidden-size
    ("--num-experts 8 --moe-intermediate-size 32 --n-shared-experts 2", {"moe_shared_expert_intermediate_size": 64}),
    ("--num-experts 8 --n-shared-experts 3 --moe-ffn-hidden-size 48", {"moe_shared_expert_intermediate_size": 144}),
    # without an expert width both multiply the dense ffn_hidden_size
    ("--num-experts 8 --ffn-hidden-size 96 --n-shared-experts 2", {"moe_shared_expert_intermediate_size": 192}),
    ("--num-experts 8 --moe-ffn-hidden-size 32 --n-shared-experts 0", {"moe_shared_expert_intermediate_size": None}),
    # ModelLink: layer i is MoE when i >= K and i % --moe-layer-freq == 0 (num_layers 4)
    ("--num-experts 8 --first-k-dense-replace 1 --moe-layer-freq 1", {"moe_layer_freq": "[0]*1+[1]*3"}),
    ("--num-experts 8 --moe-layer-freq 1 --first-k-dense-replace 0", {"moe_layer_freq": "[1]*4"}),
    ("--num-experts 8 --first-k-dense-replace 1 --moe-layer-freq 2", {"moe_layer_freq": "[0,0,1,0]"}),
    ("--num-experts 8 --first-k-dense-replace 1 --moe-layer-freq 1 --num-layers 6", {"moe_layer_freq": "[0]*1+[1]*5"}),
    # MindSpeed: experts whole, spread over EP × TP ranks (absent sizes: Megatron's default 1)
    ("--num-experts 8 --tensor-model-parallel-size 2 --expert-model-parallel-size 2 --moe-tp-extend-ep",
     {"expert_tensor_parallel_size": 1, "expert_model_parallel_size": 4}),
    ("--num-experts 8 --moe-tp-extend-ep --tensor-model-parallel-size 4",
     {"expert_tensor_parallel_size": 1, "expert_model_parallel_size": 4}),
])
def test_fork_flags_of_a_formula_are_computed_from_the_settings_they_read(extra, expected):
    found = imported(extra)
    assert found.lost == []
    assert {k: found.settings.get(k) for k in expected} == expected
    flag = next(w for w in extra.split() if w in COMPUTED)
    (line,) = [n for n in found.translated if n.startswith(flag)]
    assert "computed from" in line, line


@pytest.mark.parametrize(("extra", "missing"), [
    ("--num-experts 8 --moe-ffn-hidden-size $W --ffn-hidden-size 96 --n-shared-experts 2",
     "moe_ffn_hidden_size is not known"),  # not the dense width: the script gave an expert width
    ("--num-experts 8 --moe-intermediate-size $W --n-shared-experts 2", "moe_ffn_hidden_size is not known"),
    ("--num-experts 8 --moe-layer-freq 1 --num-layers $L --first-k-dense-replace 1", "num_layers is not known"),
    ("--moe-layer-freq 1 --first-k-dense-replace 1", "num_experts is not given"),
    ("--num-experts 8 --tensor-model-parallel-size $TP --moe-tp-extend-ep", "tensor_model_parallel_size is not known"),
])
def test_a_formula_whose_input_is_not_known_is_lost_with_what_is_missing(extra, missing):
    found = imported(extra)
    flag = next(w for w in extra.split() if w in COMPUTED)
    (line,) = [n for n in found.lost if n.startswith(flag)]
    assert missing in line and "instead:" in line, line
    assert "moe_shared_expert_intermediate_size" not in found.settings
    assert "expert_tensor_parallel_size" not in found.settings


def test_a_computed_setting_is_no_difference_in_the_round_trip(tmp_path):
    from launcher.cli.job import job_as_declared
    from launcher.importer.report import check_import

    found = imported("--num-experts 8 --moe-intermediate-size 32 --n-shared-experts 2 --moe-layer-freq 1 "
                     "--first-k-dense-replace 1 --eval-interval 5 --eval-iters 1 --tensor-model-parallel-size 2 "
                     "--moe-tp-extend-ep")
    preset = tmp_path / "p.yaml"
    preset.write_text(found.text)
    outcome = check_import(found, preset, job_as_declared)
    assert outcome.differences == [] and outcome.lost == [], outcome.differences
    assert any("--n-shared-experts" in a and "--first-k-dense-replace" in a for a in outcome.apart), outcome.apart
    assert "--moe-shared-expert-intermediate-size" in outcome.argv and "[0]*1+[1]*3" in outcome.argv
    assert outcome.argv[outcome.argv.index("--expert-model-parallel-size") + 1] == "2"


@pytest.mark.parametrize(("extra", "lost", "pp"), [
    # Megatron-DeepSpeed asserts PP 1 with --no-pipeline-parallel: with PP 2 beside it the fork stops at start-up
    # (FlagPerf's Llama 2 job); it was read as PP "given more than once", PP 1 carried, the round trip equal
    ("--pipeline-model-parallel-size 2 --no-pipeline-parallel", True, 2),
    ("--no-pipeline-parallel --pipeline-model-parallel-size=2", True, 2),
    ("--pipeline-model-parallel-size 1 --no-pipeline-parallel", False, 1),
    ("--no-pipeline-parallel", False, 1),
])
def test_a_fork_flag_that_asserts_a_setting_is_lost_beside_another_value_of_it(extra, lost, pp):
    found = imported(extra)
    said = [n for n in found.lost if n.startswith("--no-pipeline-parallel")]
    assert bool(said) == lost and found.settings["pipeline_model_parallel_size"] == pp
    if lost:
        assert "stops at start-up" in said[0] and "--set pipeline_model_parallel_size=2" in said[0]
        assert not any("more than once" in n for n in found.not_carried)


@pytest.mark.parametrize(("flag", "harmless"), [
    # named like a place, an interval or a name, but of a part of the model: the model's, lost
    ("--full-attention-interval 4", False),  # MindSpeed-LLM (Qwen3-Next): one full-attention layer in four
    ("--moe-layer-interval 2", False),
    ("--model-name deepseek-v3", False),  # AIAK: the whole architecture
    ("--tokenizer-path /tok", False),  # FlagScale: the tokenizer, so the vocabulary
    ("--special-tokens-file st.txt", False),
    ("--model-config-file llama.yaml", False),
    ("--hetero-pipeline-stages-file s.txt", False),
    # a place, a name or an interval of what only logs, saves or names the run: a note
    ("--trace-interval 5", True),
    ("--experiment-name run1", True),
    ("--experiment-root-dir /runs", True),
    ("--kill-switch-path /tmp/stop", True),
    ("--log-model-internals", True),  # logging, whatever it logs
    ("--expert-dist-log-path /tmp/e", True),
])
def test_an_unknown_flag_named_like_a_place_is_a_note_only_when_it_names_no_part_of_the_model(flag, harmless):
    found = imported(flag)
    name = flag.split()[0]
    assert any(n.startswith(name) for n in found.not_carried) == harmless, found.not_carried
    assert any(n.startswith(name) for n in found.lost) != harmless, found.lost


@pytest.mark.parametrize(("extra", "said"), [
    # the experts a token goes to was the release's default: 1 before core 0.5 and in Megatron-DeepSpeed, 2 at the pin
    ("--num-experts 8", True),
    ("--num-experts 8 --moe-router-topk 2", False),
    ("--num-experts 8 --topk 1", False),  # Megatron-DeepSpeed's, carried as the pin's top-k
    ("--moe-ffn-hidden-size 32", False),  # no experts
])
def test_experts_without_a_top_k_say_whose_default_the_preset_takes(extra, said):
    found = imported(extra)
    assert any("without a top-k" in w and "moe_router_topk=1" in w for w in found.warnings) == said, found.warnings
