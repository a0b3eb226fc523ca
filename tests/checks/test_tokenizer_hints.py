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
