"""`launch import` compares every word of the script's training command with the preset's argv: what changes the
model, its numerics or its layout and is not carried (an unknown flag, a value the pin cannot take, a fork's flag
with no equivalent) stops the import unless the user accepts the loss; flags of older Megatron releases and of
forks are translated where their meaning is certain, each named."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.importer.build import import_source
from launcher.importer.flags import read_flags
from launcher.importer.report import round_trip

BASE = ("torchrun --nproc_per_node 1 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
        "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --lr 1e-4 "
        "--train-iters 10 --eval-interval 10 --eval-iters 1 --mock-data --tokenizer-type NullTokenizer "
        "--vocab-size 1024 --bf16 ")


def settings(extra: str) -> dict:
    return import_source(BASE + extra, "train.sh").settings


def lost(extra: str) -> list[str]:
    return import_source(BASE + extra, "train.sh").lost


# -- what is carried, in the pin's words ------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "expected"), [
    ("--moe-num-experts 64", {"num_experts": 64}),  # MegaBlocks: a MoE, not a dense model
    ("--moe-num-experts=8 --moe-top-k=1 --moe-loss-weight=0.1", {"num_experts": 8, "moe_router_topk": 1,
                                                                 "moe_aux_loss_coeff": [0.1]}),
    ("--rms-norm", {"normalization": "RMSNorm"}),
    ("--normalization rmsnorm", {"normalization": "RMSNorm"}),  # Megatron-DeepSpeed's spelling
    ("--position-embedding-type rope --rotary-base 500000.0", {"rotary_base": 500000}),
    ("--rotary-base 5e5 --position-embedding-type rope", {"rotary_base": 500000}),
    ("--fp8-hybrid", {"fp8": "hybrid"}),
    ("--layernorm-epsilon 1e-6", {"layernorm_epsilon": 1e-6}),
    ("--no-query-key-layer-scaling", {"apply_query_key_layer_scaling": False}),
    ("--checkpoint-activations", {"recompute_granularity": "full", "recompute_method": "uniform",
                                  "recompute_num_layers": 1}),
    ("--checkpoint-num-layers 2 --checkpoint-activations", {"recompute_granularity": "full",
                                                            "recompute_num_layers": 2}),
    ("--model-parallel-size 1", {"tensor_model_parallel_size": 1}),
    ("--num-experts 4 --moe-expert-parallel-size 1 --topk 1", {"expert_model_parallel_size": 1,
                                                              "moe_router_topk": 1}),  # Megatron-DeepSpeed
    ("--activations-checkpoint-method uniform", {"recompute_granularity": "full", "recompute_method": "uniform",
                                                 "recompute_num_layers": 1}),  # v2.6: chunks of 1 by default
    # epfLLM/Megatron-LLM spells every flag with underscores; argparse at the pin takes only dashes
    ("--ffn_hidden_size 256 --use_rms_norm --lr_warmup_iters=2", {"ffn_hidden_size": 256, "lr_warmup_iters": 2,
                                                                   "normalization": "RMSNorm"}),
    ("--num_attention_heads_kv 2 --rope_theta 1e6 --position-embedding-type rope",
     {"group_query_attention": True, "num_query_groups": 2, "rotary_base": 1000000}),
    ("--num-key-value-heads 2", {"group_query_attention": True, "num_query_groups": 2}),  # Megatron-DeepSpeed
    ("--tokenizer-type HFTokenizer --tokenizer-model gpt2", {"tokenizer_type": "HuggingFaceTokenizer"}),
    ("--activations_checkpoint_method block", {"recompute_granularity": "full", "recompute_method": "block"}),
])
def test_other_releases_and_forks_flags_are_carried_by_their_meaning(extra, expected):
    imported = import_source(BASE + extra, "train.sh")
    assert imported.lost == []
    assert {k: imported.settings.get(k) for k in expected} == expected
    assert "checkpoint_activations" not in imported.settings  # the pin stops in validate_args on it
    flag = {"--position-embedding-type": "--rotary-base", "--num-experts": "--topk"}.get(
        extra.split()[0], extra.split()[0].partition("=")[0])
    assert any(flag in note for note in imported.translated), imported.translated


@pytest.mark.parametrize(("extra", "why"), [
    ("--msamp --fp8-hybrid", "fp8=hybrid"),  # MS-AMP: what the pin offers instead
    ("--rotary-base 1.5 --position-embedding-type rope", "must be an integer"),
    ("--num-experts 8 --moe-capacity-factor 1.25", "moe_expert_capacity_factor"),
    ("--my-fork-attention-sink 4", "not an argument of pretrain_gpt.py at the pin"),
    ("--fp32-allreduce", "removed before the pin"),  # a flag of Megatron v1.0–v2.0, from its history
    ("--zero-stage 2", "use_distributed_optimizer"),
    ("--ds-sequence-parallel-size 2", "context_parallel_size"),
])
def test_what_changes_the_model_and_is_not_carried_is_lost(extra, why):
    found = lost(extra)
    assert found and why in " ".join(found), found


def test_harmless_flags_are_notes_not_losses():
    imported = import_source(BASE + "--comet-exp-name x --my-log-dir /tmp/l --data-impl mmap", "train.sh")
    assert imported.lost == []
    assert sum("--comet-exp-name" in n or "--my-log-dir" in n or "--data-impl" in n
               for n in imported.not_carried) == 3


def test_an_unknown_value_of_a_model_setting_is_lost():
    imported = import_source("TP=$1\n" + BASE + "--tensor-model-parallel-size $TP\n", "train.sh")
    assert any("--tensor-model-parallel-size" in n and "$TP" in n for n in imported.lost), imported.lost


def test_no_hint_names_the_opposite_of_a_no_flag():
    # --no-x turns x off: "did you mean x?" would lead the other way
    (word,) = [w for w in read_flags(["--no-qk-layernorm-fake"]).words]
    assert "qk_layernorm" not in word.why


# -- the round trip compares every word -------------------------------------------------------------------------

def test_round_trip_counts_unknown_and_ill_typed_words():
    words = BASE.split("pretrain_gpt.py ", 1)[1].split()
    assert round_trip(words, words, set()) == ([], [], [])
    differences, found, _ = round_trip([*words, "--moe-num-experts", "4"], words, set())
    assert differences == ["num_experts: the script gives 4, the preset (absent)"] and found == []
    _, found, _ = round_trip([*words, "--frobnicate", "3", "--rotary-base", "1.5"], words, set())
    assert [f.split(":")[0] for f in found] == ["--frobnicate 3", "--rotary-base 1.5"]


def test_cli_refuses_to_write_what_it_cannot_carry_unless_accepted(tmp_path, launch):
    script = tmp_path / "msamp.sh"
    script.write_text("#!/bin/bash\n" + BASE + "--msamp --fp8-hybrid --transformer-impl transformer_engine\n")
    out = tmp_path / "p.yaml"
    code, stdout, stderr = launch("import", str(script), "-o", str(out))
    assert code == 2 and not out.exists(), stdout + stderr
    assert "lost (1" in stdout and "--msamp" in stdout and "round trip: the preset's argv differs" in stdout
    assert "error: the preset would not hold 1 thing(s)" in stderr and "--accept-loss" in stderr
    code, stdout, stderr = launch("import", str(script), "-o", str(out), "--accept-loss")
    assert out.is_file(), stderr
    header = out.read_text().split("description:")[0]
    assert "# LOST (1; written because --accept-loss was given)" in header and "--msamp" in header
    assert "    fp8: hybrid\n" in out.read_text()
    code, stdout, stderr = launch("import", str(script))  # printed: nothing on standard output when refused
    assert code == 2 and stdout == ""


def test_equal_is_said_only_when_nothing_differs(tmp_path, launch):
    script = tmp_path / "train.sh"
    script.write_text(BASE + "--foo-bar 1\n")
    _, stdout, _ = launch("import", str(script), "-o", str(tmp_path / "a.yaml"), "--accept-loss")
    assert "equals the script's" not in stdout and "round trip: equal" not in stdout


def test_the_committed_translations_speak_the_pins_settings():
    from launcher.importer import legacy
    from launcher.megatron import args as megatron_args

    catalog = megatron_args.catalog()
    history = legacy.history()
    rows = [(flag, row) for flag, top in legacy.translations().items()  # a meaning for each value, and the flag's
            for row in [*([top] if top.to or top.refuse or top.harmless or not top.by_value else []),
                        *top.by_value.values()]]
    for flag, row in rows:
        assert flag not in {f for a in catalog.values() for f in a.flags} or flag in (
            "--checkpoint-activations", "--batch-size", "--model-parallel-size", "--warmup"), flag
        # one meaning, or two with the fork's choice that decides between them (only_with)
        assert bool(row.to) + bool(row.refuse) + bool(row.harmless) == 1 + bool(row.only_with), flag
        assert set(row.to) | set(row.unless_given) <= set(catalog), flag
        assert row.why or row.refuse or row.harmless, flag
        if row.origin.startswith("an older Megatron-LM") and flag not in {f for a in catalog.values() for f in a.flags}:
            assert flag in history, f"{flag} is not in Megatron-LM's history (megatron_legacy_flags.json)"


def test_fork_rows_name_their_source():
    import json

    raw = json.loads((Path(__file__).resolve().parents[2] / "launcher" / "data" / "flag_translations.json")
                     .read_text())["flags"]
    for flag, row in raw.items():
        assert row["origin"] == "megatron" or "(" in row["origin"], f"{flag}: name where the fork defines it"


def test_a_preset_refused_before_it_resolves_is_reported_with_what_was_lost(tmp_path, launch):
    # every problem at once: the preset's own refusal and the script's lost flags, never only the first
    code, stdout, stderr = launch("import", "--", "torchrun", "--master_port", "70000", "pretrain_gpt.py",
                                  "--num-layers", "2", "--foo", "1")
    assert code == 2 and "Traceback" not in stderr
    assert "launcher.master_port" in stderr and "TCP port" in stderr and "--foo 1" in stderr


def test_a_layout_set_under_an_undecided_branch_is_lost_not_the_other_branch():
    # seen: TP 4 · PP 2 under an `if` the import could not decide became TP 1 · PP 1, silently
    script = ('TP=1\nif [ "$MODE" = big ]; then\n  TP=4\n  PP=2\n  LOG="--log-interval 5"\nfi\n'
              + BASE + "--tensor-model-parallel-size $TP --pipeline-model-parallel-size ${PP:-1}\n")
    found = import_source(script, "train.sh").lost
    # each flag the branch feeds is unknown, and the branch itself is named with its line and what it decides
    assert {n.split(" ")[0] for n in found if n.startswith("--")} == {"--pipeline-model-parallel-size",
                                                                       "--tensor-model-parallel-size"}
    (branch,) = [n for n in found if n.startswith("line 2:")]
    assert "cannot be decided" in branch and "--tensor-model-parallel-size" in branch
    assert "--log-interval" not in branch  # a logging flag is not a loss
    decided = script.replace('"$MODE"', "small")
    assert import_source(decided, "train.sh").lost == []


def test_a_nan_value_is_carried_and_refused_by_the_check_not_an_internal_error(tmp_path, launch):
    # NaN != NaN: the import's read-back of its own preset called this an internal error
    imported = import_source(BASE + "--lr nan --moe-loss-weight nan --num-experts 4", "train.sh")
    assert str(imported.settings["lr"]) == "nan" and imported.lost == []
    code, stdout, stderr = launch("import", "--", *(BASE.replace("--lr 1e-4", "--lr nan")).split())
    assert code == 2 and "internal" not in stderr.lower() and "lr is nan" in stderr
    assert "round trip: equal" in stderr and "(lr)" not in stderr  # the user's NaN, not one the launcher added


def test_full_recompute_of_megatron_deepspeed_keeps_its_chunk_of_one_layer():
    # a 2026 Megatron-DeepSpeed launch gives --recompute-granularity full --recompute-method uniform and relies on
    # its --recompute-num-layers default 1; the pin has none and TransformerConfig asserts
    deepspeed = import_source(BASE + "--deepspeed --recompute-granularity full --recompute-method uniform", "t.sh")
    assert deepspeed.settings["recompute_num_layers"] == 1 and deepspeed.lost == []
    assert any("Megatron-DeepSpeed's default chunk" in n for n in deepspeed.translated)
    assert "recompute_num_layers" not in settings("--recompute-granularity full --recompute-method uniform")


def test_the_full_recompute_refusal_names_what_is_missing_as_a_set(tmp_path, launch):
    code, _, stderr = launch("import", "--", *(BASE + "--recompute-granularity full --recompute-method block").split())
    assert "full recompute needs recompute_num_layers (" in stderr and "--set recompute_num_layers=1" in stderr
    assert "--set recompute_method" not in stderr


def test_one_expert_is_dense_in_megatron_deepspeed_and_a_moe_at_the_pin():
    """Megatron-DeepSpeed's --num-experts defaults to 1, its dense model ("EP_SIZE 1 means dense model without
    MoE"); the pin's --num-experts 1 builds a one-expert MoE layer. The fork's script keeps its dense model."""
    deepspeed = settings("--deepspeed --zero-stage 0 --num-experts 1 --moe-expert-parallel-size 1")
    assert "num_experts" not in deepspeed
    assert settings("--num-experts 1")["num_experts"] == 1
    assert settings("--deepspeed --num-experts 8")["num_experts"] == 8


def test_a_translation_to_the_pins_default_is_no_difference(tmp_path):
    # Megatron-DeepSpeed scripts give --no-query-key-layer-scaling, the pin's default: the preset needs no word for
    # it, and the round trip is not "differs" for a flag it translated on purpose
    from launcher.cli.job import job_as_declared
    from launcher.importer.report import check_import

    imported = import_source(BASE + "--no-query-key-layer-scaling", "train.sh")
    preset = tmp_path / "p.yaml"
    preset.write_text(imported.text)
    outcome = check_import(imported, preset, job_as_declared)
    assert outcome.differences == [] and "--no-query-key-layer-scaling" in " ".join(outcome.apart)


# -- an unknown variable whose every possible value is only checkpoint, data or logging flags -------------------

@pytest.mark.parametrize("branches", [
    'LOAD="--load /ckpt"\nelse\n  LOAD="--load /init --no-load-optim --no-load-rng"',
    'LOAD=(--load /ckpt --finetune)\nelse\n  LOAD=()',
    'LOAD="--data-cache-path /c --log-interval 5"\nelse\n  LOAD=""',
])
def test_a_branch_of_checkpoint_flags_only_is_named_not_lost(branches):
    script = f'if [ -f /ckpt/latest ]; then\n  {branches}\nfi\n{BASE} ${{LOAD[@]}}\n'
    imported = import_source(script, "train.sh")
    assert imported.lost == [] and len(imported.set_aside) == 1
    assert any("${LOAD}" in n and "only data, checkpoint or logging" in n for n in imported.not_carried)
    _, found, apart = round_trip(imported.script_args, imported.script_args, set(), imported.set_aside)
    assert found == [] and any("${LOAD}" in a for a in apart)


@pytest.mark.parametrize("branches", [
    'LOAD="--load /ckpt"\nelse\n  LOAD="--num-layers 4"',  # the model may hide in it
    'LOAD="--load /ckpt"\nelse\n  LOAD="$(cat flags.txt)"',  # not known what the other branch gives
    'LOAD="/ckpt"\nelse\n  LOAD=""',  # a word without its flag
    'LOAD="--load /ckpt"\nelse\n  LOAD="--frobnicate 3"',  # not the pin's flag
    'LOAD="--load /ckpt 7"\nelse\n  LOAD=""',  # a stray word Megatron's parser refuses
])
def test_a_branch_that_may_give_more_stays_lost(branches):
    script = f'if [ -f /ckpt/latest ]; then\n  {branches}\nfi\n{BASE} $LOAD\n'
    imported = import_source(script, "train.sh")
    assert any("${LOAD}" in n for n in imported.lost) and imported.set_aside == []


@pytest.mark.parametrize("extra", ["--yaml-cfg gpt_config.yaml", "--yaml-cfg=/abs/gpt_config.yaml --log-interval 1"])
def test_a_yaml_config_replacing_the_command_line_is_lost(extra):
    # the pin's --yaml-cfg ignores every command-line flag: the model is in the file, which the import does not read
    imported = import_source(BASE + extra, "train.sh")
    assert any(n.startswith("--yaml-cfg") and "ignores the command line" in n for n in imported.lost)
    assert "yaml_cfg" not in imported.settings


def test_llm_jp_forks_rank_switch_is_harmless_and_its_z_loss_is_lost():
    imported = import_source(BASE + "--use-mpi --use-z-loss --z-loss-strength 1e-4", "train.sh")
    assert not any(n.startswith("--use-mpi") for n in imported.lost)
    assert any(n.startswith("--use-mpi") and "torchrun" in n for n in imported.not_carried)
    assert any(n.startswith("--use-z-loss") and "z-loss" in n for n in imported.lost)
    assert any(n.startswith("--z-loss-strength 1e-4") for n in imported.lost)


def test_megatron_deepspeeds_token_schedule_is_lost_with_the_samples_to_give():
    found = lost("--train-tokens 300000000000 --lr-decay-tokens 260000000000 --lr-warmup-tokens 375000000")
    assert len(found) == 3 and all("Megatron-DeepSpeed" in n for n in found)
    assert any("lr_decay_samples=TOKENS÷seq_length" in n for n in found)


@pytest.mark.parametrize("extra", ["--save-interval $SI", "--log-interval $LI", "--eval-iters $EI"])
def test_a_data_checkpoint_or_logging_value_not_known_is_not_carried_and_not_lost(extra):
    # an integer flag whose value the script decides at run time: the import leaves it to the user, and the round
    # trip, which reads the script's words again, does not count it as lost either
    imported = import_source('SI=${SAVE_INTERVAL:-$1}\nLI=$2\nEI=$3\n' + BASE + extra, "train.sh")
    assert imported.lost == []
    flag = extra.split()[0]
    assert any(note.startswith(flag) and "not known" in note for note in imported.not_carried)
    _, lost_words, apart = round_trip(imported.script_args, [], set(), imported.set_aside)
    assert lost_words == [] and any(flag in a for a in apart)


def test_a_model_value_not_known_is_still_lost():
    imported = import_source('N=$1\n' + BASE + "--ffn-hidden-size $N", "train.sh")
    assert any(line.startswith("--ffn-hidden-size") for line in imported.lost)


def test_an_unknown_word_after_a_logging_list_may_be_flags_and_is_lost():
    # `--profile-ranks 0 1 $EXTRA`: argparse gives the list what follows unless it is a flag, which $EXTRA may be
    imported = import_source('EXTRA=$1\n' + BASE + "--profile-ranks 0 1 $EXTRA", "train.sh")
    _, lost_words, _ = round_trip(imported.script_args, [], set(), imported.set_aside)
    assert any(word.startswith("--profile-ranks") for word in lost_words), lost_words
    assert "\\x00" not in " ".join(lost_words) and "$EXTRA is not known" in " ".join(lost_words)


RUN = ("torchrun --nproc_per_node 1 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
       "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --lr 1e-4 "
       "--train-iters 10 --mock-data --tokenizer-type NullTokenizer --vocab-size 1024")
FP16_IF_ASKED = 'OPTS="--eval-iters 1"\nif [ -z "$FP32" ]; then\n  OPTS="$OPTS --fp16"\nfi\n'


@pytest.mark.parametrize("run", [
    f'CMD="{RUN} $OPTS"\neval $CMD',
    f'CMD="{RUN} $OPTS"\nbash -c "$CMD"',
    f'CMD="{RUN} $OPTS"\nsrun bash -c "$CMD"',
    f'CMD="{RUN} $OPTS"\nif [ -n "$PROFILED" ]; then\n  CMD="nsys profile -o prof $CMD"\nfi\neval $CMD',
])
def test_a_flag_an_undecided_branch_adds_stays_named_through_a_command_string(run):
    # the string a shell runs again says no longer which variable --fp16 came from: the branch is still named
    imported = import_source(FP16_IF_ASKED + run, "train.sh")
    assert imported.settings.get("num_layers") == 2
    assert any("decides --fp16" in line for line in imported.lost), imported.lost


def test_a_wrapper_an_undecided_branch_puts_before_the_command_string_keeps_the_command():
    # `CMD="nsys profile … $CMD"` under `if [ -n "$PROFILED" ]`: the training command is the same either way
    imported = import_source(f'CMD="{RUN}"\nif [ -n "$PROFILED" ]; then\n  CMD="nsys profile -o prof $CMD"\nfi\n'
                             'eval $CMD', "train.sh")
    assert imported.settings.get("num_layers") == 2 and imported.lost == []
    nsys = import_source(f'CMD="{RUN}"\nif [ -n "$PROFILED" ]; then\n  CMD="nsys profile --output prof $CMD"\nfi\n'
                         'eval $CMD', "train.sh")
    assert nsys.lost == [], nsys.lost


@pytest.mark.parametrize(("added", "is_lost"), [
    ("--enable-zero-bubble", True),  # a fork's flag: lost where the script writes it, so also where a branch may
    ("--zero-bubble-max-pending-backward 4", True),
    ("--wandb-project p", False),  # harmless by its name
    ("--log-interval 5", False),  # the pin's, of the logging section
])
def test_a_foreign_flag_an_undecided_branch_may_add_to_the_training_flags_is_lost(added, is_lost):
    script = f'OPTS="--eval-iters 1"\nif [ -n "$ZB" ]; then\n  OPTS="$OPTS {added}"\nfi\n{RUN} $OPTS\n'
    imported = import_source(script, "train.sh")
    flag = added.split()[0]
    assert any(f"decides {flag}" in line for line in imported.lost) == is_lost, imported.lost


@pytest.mark.parametrize(("flag", "is_lost"), [
    ("--valid-num-workers 0", False),  # Megatron-DeepSpeed's and bigcode's loader workers for validation
    ("--eval-data-workers 2", False),
    ("--workers-per-expert 2", True),  # a name that merely holds the word is no loader count
    ("--embed-layernorm", True),
])
def test_an_unknown_flag_that_counts_loader_workers_is_harmless(flag, is_lost):
    imported = import_source(f"{RUN} {flag}\n", "train.sh")
    assert any(line.startswith(flag.split()[0]) for line in imported.lost) == is_lost, imported.lost
    assert is_lost or any(line.startswith(flag.split()[0]) for line in imported.not_carried)


def test_a_runner_option_the_same_branch_sets_is_not_a_foreign_flag():
    script = ('OPTS="--eval-iters 1"\nDIST="--nproc_per_node 1"\nif [ -n "$SLURM_JOB_ID" ]; then\n'
              '  DIST="$DIST --node_rank $SLURM_NODEID"\n  OPTS="$OPTS --log-interval 5"\nfi\n'
              + RUN.replace("--nproc_per_node 1", "$DIST") + " $OPTS\n")
    assert import_source(script, "train.sh").lost == []


def test_a_foreign_flag_an_undecided_branch_may_add_is_lost_through_eval_too():
    script = (f'OPTS="--eval-iters 1"\nif [ -n "$ZB" ]; then\n  OPTS="$OPTS --enable-zero-bubble"\nfi\n'
              'DIST="--nproc_per_node 1"\nif [ -n "$SLURM_JOB_ID" ]; then\n'
              '  DIST="$DIST --node_rank $SLURM_NODEID"\nfi\n'
              f'CMD="{RUN.replace("--nproc_per_node 1", "$DIST")} $OPTS"\neval $CMD\n')
    lost = import_source(script, "train.sh").lost
    assert any("decides --enable-zero-bubble" in line for line in lost), lost
    assert not any("node_rank" in line for line in lost), lost
