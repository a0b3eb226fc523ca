"""A configuration file that the script writes itself (`cat > ds_config.json <<EOF`, `echo '{…}' > f.json`) and gives
to the training command: its text is known, so the import says what it holds, compared with the Megatron flags beside
it, and names what is not carried; it is never called a file the import does not read."""

from __future__ import annotations

import pytest

from launcher.importer.build import import_source

MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
         "--train-iters 4 --lr 1e-4 --mock-data --tokenizer-type NullTokenizer --vocab-size 128 --bf16")
RUN = f"torchrun --nproc_per_node 8 pretrain_gpt.py {MODEL} --micro-batch-size $MBS --global-batch-size $GBS "


def heredoc(body: str, path: str = "ds_config.json") -> str:
    return f"GBS=16\nMBS=2\ncat > {path} <<EOF\n{body}\nEOF\n"


def test_a_deepspeed_json_the_script_writes_is_read_and_compared_with_the_flags():
    body = ('{"train_batch_size": $GBS, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,\n'
            ' "zero_optimization": {"stage": 2, "overlap_comm": true}, "bf16": {"enabled": true},\n'
            ' "optimizer": {"type": "Adam", "params": {"lr": 3e-4}}}')
    imported = import_source(heredoc(body) + RUN + "--deepspeed_config ds_config.json\n", "train.sh")
    (line,) = [n for n in imported.lost if n.startswith("--deepspeed_config")]
    assert "does not read" not in line and "the script writes ds_config.json itself (line 3)" in line
    assert "train_batch_size 16 = --global-batch-size 16" in line and "bf16.enabled true = --bf16 true" in line
    assert "train_micro_batch_size_per_gpu 4, --micro-batch-size 2" in line  # DeepSpeed's engine trains with 4
    assert "zero_optimization.stage 2" in line and "overlap_comm" in line and 'optimizer {"type":"Adam"' in line


def test_a_deepspeed_json_that_only_repeats_the_flags_is_not_a_loss():
    body = ('{"train_batch_size": $GBS, "train_micro_batch_size_per_gpu": $MBS, "steps_per_print": 10,\n'
            ' "zero_optimization": {"stage": 0}, "bf16": {"enabled": true}, "gradient_clipping": 1.0}')
    imported = import_source(heredoc(body) + RUN + "--deepspeed --deepspeed_config ./ds_config.json\n", "train.sh")
    assert imported.lost == []
    assert any(n.startswith("--deepspeed_config ./ds_config.json: the script writes") and "nothing else" in n
               for n in imported.not_carried)


def test_a_json_echoed_into_a_file_is_read_and_one_not_known_is_said_so():
    script = ("GBS=16\nMBS=2\necho '{\"train_batch_size\": 32}' > ds.json\n" + RUN + "--deepspeed_config ds.json\n")
    (line,) = [n for n in import_source(script, "train.sh").lost if n.startswith("--deepspeed_config")]
    assert "train_batch_size 32, --global-batch-size 16" in line and "(line 3)" in line
    script = heredoc('{"train_batch_size": $CALLER_GBS}') + RUN + "--deepspeed_config ds_config.json\n"
    (line,) = [n for n in import_source(script, "train.sh").lost if n.startswith("--deepspeed_config")]
    assert "$CALLER_GBS not known without running the script" in line
    script = "GBS=16\nMBS=2\necho $CALLER_JSON > ds.json\n" + RUN + "--deepspeed_config ds.json\n"
    (line,) = [n for n in import_source(script, "train.sh").lost if n.startswith("--deepspeed_config")]
    assert "does not read" in line  # its text is not known: a file like any other


def test_the_last_text_written_is_the_one_read_and_a_file_not_written_stays_unread():
    script = (heredoc('{"train_batch_size": 99}') + "echo '{\"train_batch_size\": 16}' > ds_config.json\n" + RUN
              + "--deepspeed_config ds_config.json\n")
    assert not any(n.startswith("--deepspeed_config") for n in import_source(script, "train.sh").lost)
    script = "GBS=16\nMBS=2\n" + RUN + "--deepspeed_config ds_config.json\n"
    (line,) = [n for n in import_source(script, "train.sh").lost if n.startswith("--deepspeed_config")]
    assert "does not read" in line


def test_another_flag_given_a_written_file_says_what_the_file_held():
    script = "cat > cfg.yaml <<'EOF'\nnum_layers: 48\nEOF\ntorchrun pretrain_gpt.py --yaml-cfg=cfg.yaml\n"
    (line,) = [n for n in import_source(script, "train.sh").lost if n.startswith("--yaml-cfg")]
    assert "the script writes cfg.yaml itself (line 1)" in line and "num_layers: 48" in line


def test_deepspeeds_loss_scaler_is_compared_with_megatrons():
    body = ('{"train_batch_size": 16, "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 16,\n'
            ' "loss_scale_window": 500, "hysteresis": 2}}')
    script = heredoc(body) + RUN.replace("--bf16", "--fp16") + "--deepspeed_config ds_config.json\n"
    (line,) = [n for n in import_source(script, "train.sh").lost if n.startswith("--deepspeed_config")]
    assert "fp16.hysteresis 2 = --hysteresis 2" in line
    assert "fp16.loss_scale 0, a scale of null = --loss-scale null" in line  # dynamic, as Megatron's default
    assert "fp16.initial_scale_power 16, a scale of 65536, --initial-loss-scale 4294967296" in line
    assert "fp16.loss_scale_window 500, --loss-scale-window 1000" in line


def test_a_json_written_from_values_a_file_not_read_may_change_is_not_certain():
    body = '{"train_batch_size": $GBS, "train_micro_batch_size_per_gpu": $MBS}'
    script = "GBS=16\nMBS=2\nsource cluster.sh\n" + heredoc(body).split("\n", 2)[2] + RUN + \
        "--deepspeed_config ds_config.json\n"
    (line,) = [n for n in import_source(script, "train.sh").lost if n.startswith("--deepspeed_config")]
    assert "train_batch_size 16 = --global-batch-size 16" in line
    assert line.endswith("written from values that the file sourced on line(s) 3, not read, may change")


def test_the_json_is_the_one_written_where_the_training_command_runs():
    body = '{"train_batch_size": $GBS, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}'
    # written after `cd $REPO` (a directory not known) and named there: the same file
    for script in (f"cd $REPO\n{heredoc(body)}{RUN}--deepspeed_config ds_config.json\n",
                   f"mkdir -p run\ncd run\n{heredoc(body)}cd ..\n{RUN}--deepspeed_config run/./ds_config.json\n",
                   f"{heredoc(body, 'a//ds_config.json')}{RUN}--deepspeed_config a/ds_config.json\n"):
        imported = import_source(script, "train.sh")
        (line,) = [n for n in imported.lost if n.startswith("--deepspeed_config")]
        assert "the script writes" in line and "train_micro_batch_size_per_gpu 4" in line, line
    # named from another directory than the one it was written in: another file, whose text is not known
    for script in (f"{heredoc(body)}cd $MODEL_DIR\n{RUN}--deepspeed_config ds_config.json\n",
                   f"{heredoc(body)}cd run\n{RUN}--deepspeed_config ds_config.json\n",
                   f"cd $REPO\n{heredoc(body)}cd ..\n{RUN}--deepspeed_config ds_config.json\n"):
        imported = import_source(script, "train.sh")
        (line,) = [n for n in imported.lost if n.startswith("--deepspeed_config")]
        assert "the script writes" not in line and "train_micro_batch_size_per_gpu 4" not in line, line


@pytest.mark.parametrize("mbs", ["0", "-2"])
def test_batch_counts_that_are_no_positive_numbers_are_said_to_differ_not_divided(mbs):
    written = heredoc('{"gradient_accumulation_steps": 2, "train_micro_batch_size_per_gpu": 1}')
    script = (written.replace("MBS=2", f"MBS={mbs}") + RUN + "--deepspeed_config ds_config.json\n")
    (line,) = [n for n in import_source(script, "train.sh").lost if n.startswith("--deepspeed_config")]
    assert "against the Megatron flags" in line and "gradient_accumulation_steps 2 (Megatron computes it" in line


@pytest.mark.parametrize(("body", "said"), [('{"train_batch_size": NaN}', "NaN"),
                                            ('{"train_batch_size": 1e400}', "1e400"),
                                            ('{"x": ' + "[" * 2000 + "]" * 2000 + "}", "nesting deeper than 64"),
                                            ('{"train_batch_size": ' + "9" * 5000 + "}", "digits")])
def test_a_written_json_no_json_reader_here_takes_whole_is_said_unreadable(body, said):
    script = heredoc(body) + RUN + "--deepspeed_config ds_config.json\n"
    (line,) = [n for n in import_source(script, "train.sh").lost if n.startswith("--deepspeed_config")]
    assert "it is not JSON that can be read here" in line and said in line
