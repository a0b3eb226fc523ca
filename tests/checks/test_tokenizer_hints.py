"""A tokenizer hint names the job's own tokenizer: GPT-2's vocabulary only for a job that names GPT-2's tokenizer."""

from __future__ import annotations

from launcher.checks.data import training_tokenizer


def test_a_job_that_names_no_tokenizer_is_not_told_its_data_is_gpt2():
    # seen after importing a Llama 3 script whose tokenizer flag was not carried: "NullTokenizer with vocab_size=50257
    # for GPT-2-tokenized data"
    _, problems = training_tokenizer({"data_path": ["/data/x"]})
    (problem,) = problems
    assert problem.message.startswith("tokenizer_type is not set, so Megatron builds GPT2BPETokenizer")
    assert "50257 only for GPT-2 token ids" in problem.hint and "HuggingFaceTokenizer" in problem.hint


def test_a_job_that_names_gpt2_gets_gpt2s_vocabulary():
    _, problems = training_tokenizer({"tokenizer_type": "GPT2BPETokenizer"})
    assert "vocab_size=50257 for GPT-2-tokenized data" in problems[0].hint


def test_a_negative_vocabulary_is_refused_before_any_estimate(tmp_path):
    # `--vocab-size -1` with NullTokenizer: Megatron pads it to an embedding of no rows; the memory and step-time
    # estimates divided by that width (an internal error) before a check said so
    from launcher.cli.job import job_as_declared
    from launcher.importer.build import import_source
    from launcher.importer.report import check_import

    _, problems = training_tokenizer({"tokenizer_type": "NullTokenizer", "vocab_size": -1})
    assert problems and "vocab_size -1 is no vocabulary" in problems[0].message
    imported = import_source("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 "
                             "--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
                             "--micro-batch-size 1 "
                             "--global-batch-size 8 --train-iters 4 --lr 1e-4 --eval-interval 10 --mock-data "
                             "--tokenizer-type NullTokenizer --vocab-size -1\n", "train.sh", [])
    preset = tmp_path / "imported.yaml"
    preset.write_text(imported.text)
    check_import(imported, preset, job_as_declared)
