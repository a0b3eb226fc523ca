"""`launch plan` of a preset that leaves the vocabulary to its tokenizer (no vocab_size, as most imported scripts
do): the tokenizer's own files say it, and the plan counts the embedding and output layer with it; where they
cannot be read here the plan says so (exit 2), where it ended in an internal error."""

import json

from launcher import cli
from launcher.cli.job import JobRequest, job_for
from launcher.estimate.summary import job_facts
from launcher.pipeline.preset import load_preset

SHAPE = ("megatron:\n  model: {num_layers: 2, hidden_size: 256, num_attention_heads: 4, seq_length: 128,\n"
         "    max_position_embeddings: 128}\n  training: {micro_batch_size: 1, global_batch_size: 8, lr: 1.0e-4,\n"
         "    train_iters: 10, bf16: true}\n  logging: {eval_interval: 5, eval_iters: 1}\n  data:\n")


def _gpt2_files(tmp_path, size):
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({f"t{i}": i for i in range(size)}))
    merges = tmp_path / "merges.txt"
    merges.write_text("#version: 0.2\n")
    return vocab, merges


def test_the_plan_counts_the_vocabulary_of_a_readable_tokenizer(tmp_path, capsys):
    vocab, merges = _gpt2_files(tmp_path, 1000)
    preset = tmp_path / "p.yaml"
    preset.write_text(SHAPE + "    tokenizer_type: GPT2BPETokenizer\n"
                      f"    vocab_file: {vocab}\n    merge_file: {merges}\n")
    assert cli.main(["plan", str(preset), "--gpus", "8"]) == 0
    assert "(vocab 1000 padded to 1024)" in capsys.readouterr().out


def test_a_tokenizer_not_readable_here_is_said_not_an_internal_error(tmp_path, capsys):
    preset = tmp_path / "p.yaml"
    preset.write_text(SHAPE + "    tokenizer_type: HuggingFaceTokenizer\n    tokenizer_model: /no/such/tokenizer\n")
    assert cli.main(["plan", str(preset), "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert "vocabulary size is not known here" in err and "--set vocab_size=" in err and "internal error" not in err
    assert cli.main(["plan", str(preset), "--gpus", "8", "--set", "vocab_size=32000"]) == 0
    assert "(vocab 32000, not padded)" in capsys.readouterr().out


def test_estimates_take_the_tokenizers_vocabulary_and_the_command_is_unchanged(tmp_path):
    vocab, merges = _gpt2_files(tmp_path, 700)
    preset = tmp_path / "p.yaml"
    preset.write_text(SHAPE + "    tokenizer_type: GPT2BPETokenizer\n"
                      f"    vocab_file: {vocab}\n    merge_file: {merges}\n")
    job, _ = job_for(load_preset(str(preset)), JobRequest(1, 8, run_dir=False, local=False))
    assert job.tokenizer_vocab == 700 and "vocab_size" not in job.megatron
    assert job_facts(job)["padded_vocab_size"] == 768
    said, _ = job_for(load_preset(str(preset), ["vocab_size=64"]), JobRequest(1, 8, run_dir=False, local=False))
    assert said.tokenizer_vocab is None and job_facts(said)["padded_vocab_size"] == 128


def test_a_cluster_job_whose_tokenizer_is_not_here_is_rendered_and_says_what_its_estimate_leaves_out(
        tmp_path, capsys):
    # the files are on the cluster: the time estimate divided by the output layer's zero width (an internal error)
    preset = tmp_path / "p.yaml"
    preset.write_text(SHAPE + "    tokenizer_type: GPT2BPETokenizer\n    vocab_file: /cluster/gpt2-vocab.json\n"
                      "    merge_file: /cluster/gpt2-merges.txt\n    mock_data: true\n"
                      "launcher: {nodes: 1, gpus_per_node: 8}\n")
    for target in ("--slurm", "--k8s"):
        assert cli.main([str(preset), target, "--dry-run", "--set", f"run_root={tmp_path}"]) == 0, target
        captured = capsys.readouterr()
        assert "the vocabulary size is not known here" in captured.err + captured.out
        assert "internal error" not in captured.err
