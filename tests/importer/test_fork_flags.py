"""Fork flags whose meaning at the pin depends on the rest of the command: ModelLink's tokenizer named by
--tokenizer-name-or-path (read only for its --tokenizer-type PretrainedFromHF), and MegaBlocks' expert parallelism
(its experts sharded over the data-parallel group, a size the job's GPUs decide). Carried where certain, else lost
with what to set."""

from __future__ import annotations

from launcher.importer.build import import_source
from launcher.importer.legacy import choices, translations

MODEL = ("pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 "
         "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --lr 1e-4 --train-iters 10 "
         "--mock-data --bf16 ")
TORCHRUN = "torchrun --nproc_per_node 8 --nnodes 2 "


def test_modellink_hugging_face_tokenizer_is_the_pins():
    found = import_source(TORCHRUN + MODEL + "--tokenizer-type PretrainedFromHF --tokenizer-name-or-path "
                          "/models/llama3", "train.sh")
    assert found.settings["tokenizer_type"] == "HuggingFaceTokenizer"
    assert found.settings["tokenizer_model"] == "/models/llama3"
    assert found.lost == []
    assert any(t.startswith("--tokenizer-name-or-path /models/llama3 → tokenizer_model") for t in found.translated)


def test_modellink_reads_the_name_or_path_over_a_tokenizer_model_given_after_it():
    found = import_source(TORCHRUN + MODEL + "--tokenizer-name-or-path=/hf/qwen --tokenizer-type PretrainedFromHF "
                          "--tokenizer-model /other/tok.model", "train.sh")
    assert found.settings["tokenizer_model"] == "/hf/qwen" and found.lost == []


def test_the_name_or_path_without_pretrained_from_hf_is_not_read():
    found = import_source(TORCHRUN + MODEL + "--tokenizer-type SentencePieceTokenizer --tokenizer-model /t.model "
                          "--tokenizer-name-or-path /hf/qwen", "train.sh")
    assert found.settings["tokenizer_model"] == "/t.model" and found.lost == []
    assert any("--tokenizer-name-or-path /hf/qwen" in n and "PretrainedFromHF" in n for n in found.not_carried)


def test_megablocks_expert_parallelism_is_the_data_parallel_size():
    # 16 GPUs, TP 2: MegaBlocks' expert-parallel group is the data-parallel group of 8
    found = import_source(TORCHRUN + MODEL + "--tensor-model-parallel-size 2 --moe-num-experts 16 "
                          "--moe-expert-model-parallelism", "train.sh")
    assert found.settings["expert_model_parallel_size"] == 8 and found.lost == []
    assert any("16 GPUs ÷ (TP 2 · PP 1)" in t for t in found.translated)


def test_megablocks_expert_parallelism_the_pin_cannot_hold_is_lost_with_what_to_set():
    # 16 data-parallel ranks over 8 experts: MegaBlocks splits each expert's hidden units two ways
    found = import_source(TORCHRUN + MODEL + "--moe-num-experts 8 --moe-expert-model-parallelism", "train.sh")
    assert "expert_model_parallel_size" not in found.settings
    (line,) = [n for n in found.lost if n.startswith("--moe-expert-model-parallelism")]
    assert "does not divide the 8 experts" in line and "--set expert_model_parallel_size=" in line


def test_megablocks_expert_parallelism_without_a_gpu_count_is_lost_with_what_to_set():
    found = import_source("python " + MODEL + "--moe-num-experts 8 --moe-expert-model-parallelism", "train.sh")
    assert "expert_model_parallel_size" not in found.settings
    (line,) = [n for n in found.lost if n.startswith("--moe-expert-model-parallelism")]
    assert "cannot size it here" in line and "--set expert_model_parallel_size=" in line


def test_fork_choices_and_conditional_rows_name_their_source():
    assert ("tokenizer_type", "PretrainedFromHF") in choices() and ("tokenizer_type", "HFTokenizer") in choices()
    for choice in choices().values():
        assert "(" in choice.origin and choice.why
    for flag, row in translations().items():
        if row.only_with:  # carried with the fork's choice, else dropped: both meanings said
            assert row.to and row.harmless and set(row.only_with) <= {c[0] for c in choices()}, flag
        if row.unknown:
            assert row.instead, flag


def test_bigcodes_attention_head_type_is_read_by_its_value():
    multiquery = import_source(TORCHRUN + MODEL + "--attention-head-type multiquery", "train.sh")
    assert multiquery.settings["group_query_attention"] is True and multiquery.settings["num_query_groups"] == 1
    assert multiquery.lost == []
    multihead = import_source(TORCHRUN + MODEL + "--attention-head-type=multihead", "train.sh")
    assert "num_query_groups" not in multihead.settings and multihead.lost == []
    other = import_source(TORCHRUN + MODEL + "--attention-head-type groupedquery", "train.sh")
    assert "num_query_groups" not in other.settings
    assert [line.split(":")[0] for line in other.lost] == ["--attention-head-type groupedquery"]
    for flag, row in translations().items():
        for value, sub in row.by_value.items():  # every value's row says what it becomes
            assert (sub.to and sub.why) or sub.harmless or sub.refuse, (flag, value)


def test_zero_stage_0_shards_nothing_and_another_stage_is_lost():
    assert import_source(TORCHRUN + MODEL + "--deepspeed --zero-stage=0", "train.sh").lost == []
    (line,) = import_source(TORCHRUN + MODEL + "--deepspeed --zero-stage 2", "train.sh").lost
    assert line.startswith("--zero-stage 2") and "use_distributed_optimizer" in line


def test_an_encoder_sequence_length_without_seq_length_is_the_sequence_length():
    # CSC's GPT jobs give --encoder-seq-length only: the pin's validate_args makes it seq_length
    model = MODEL.replace("--seq-length 128 ", "")
    found = import_source(TORCHRUN + model + "--encoder-seq-length 256", "train.sh")
    assert found.settings["seq_length"] == 256 and "encoder_seq_length" not in found.settings and found.lost == []
    assert any(t.startswith("--encoder-seq-length 256 → seq_length 256") for t in found.translated)
    both = import_source(TORCHRUN + MODEL + "--encoder-seq-length 256", "train.sh")  # Megatron asserts: left as given
    assert both.settings["seq_length"] == 128 and both.settings["encoder_seq_length"] == 256


def test_a_fork_size_at_its_no_op_value_is_harmless_however_it_is_spelled():
    # one Ulysses rank, no extra tokens, a z-loss of weight 0: the pin's model and layout as they are
    for given in ("--ds-sequence-parallel-size 1", "--ds-sequence-parallel-size=01", "--extra-vocab-size 0",
                  "--z-loss-strength 0.0", "--zero-stage 00", "--low-freq-factor 1.00"):
        found = import_source(TORCHRUN + MODEL + "--deepspeed " + given, "train.sh")
        assert found.lost == [], (given, found.lost)
    for given in ("--ds-sequence-parallel-size 4", "--extra-vocab-size 293", "--z-loss-strength 1e-4",
                  "--zero-stage 1", "--low-freq-factor 1.5"):
        (line,) = import_source(TORCHRUN + MODEL + "--deepspeed " + given, "train.sh").lost
        assert line.startswith(given.split()[0]), (given, line)


def test_a_setting_two_different_flags_give_is_said_with_both_not_as_one_flag_given_twice():
    # Megatron-DeepSpeed's --no-pipeline-parallel asserts PP 1: beside --pipeline-model-parallel-size 1 it repeats
    # nothing; --num-key-value-heads and --num-query-groups are two spellings of one setting
    base = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 8 "
            "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 ")
    asserted = import_source(base + "--pipeline-model-parallel-size 1 --no-pipeline-parallel\n", "train.sh")
    assert not [n for n in asserted.not_carried if "more than once" in n or "both set" in n]
    assert asserted.settings["pipeline_model_parallel_size"] == 1 and asserted.lost == []
    spelled = import_source(base + "--num-query-groups 4 --num-key-value-heads 2\n", "train.sh")
    (note,) = [n for n in spelled.not_carried if "both set" in n or "more than once" in n]
    assert note.startswith("--num-query-groups and --num-key-value-heads both set num_query_groups")
    assert spelled.settings["num_query_groups"] == 2
    twice = import_source(base + "--num-layers 4\n", "train.sh")
    assert any(n.startswith("--num-layers is given more than once") for n in twice.not_carried)
    first = import_source(base + "--no-pipeline-parallel --pipeline-model-parallel-size 1\n", "train.sh")
    assert not [n for n in first.not_carried if "more than once" in n or "both set" in n]
