"""`source FILE` / `. FILE` in a script: the file next to the script (relative to its directory, or absolute) is read
with the same bounded reader, never run, so its variables and functions count; one that cannot be read is named with
its line and path, and the values it may set stay unknown (never a default)."""

from __future__ import annotations

import time
from pathlib import Path

from launcher.errors import UserError
from launcher.importer.bash_subset import MAX_SCRIPT_CHARS, read_script, show
from launcher.importer.build import import_source

RUN = "torchrun --nproc_per_node 1 pretrain_gpt.py --num-layers ${NL:-2} $(model_args) --hidden-size $HIDDEN\n"


def imported(script: Path):
    return import_source(script.read_text(), str(script), path=script)


def test_a_config_sourced_next_to_the_script_is_read(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "model.sh").write_text('NL=24\nHIDDEN=1024\nmodel_args() { echo "--num-attention-heads 16"; '
                                                '}\nreturn\nNL=99\n')  # `return` ends the sourced file only
    (tmp_path / "train.sh").write_text("source conf/model.sh\n" + RUN)
    found = imported(tmp_path / "train.sh")
    assert (found.settings["num_layers"], found.settings["hidden_size"], found.settings["num_attention_heads"]) == (
        24, 1024, 16)
    assert found.lost == [] and not any("model.sh" in n for n in found.not_carried)


def test_dot_with_an_absolute_path_and_arguments(tmp_path):
    (tmp_path / "env.sh").write_text('HIDDEN=$1\nNL=$2\nmodel_args() { :; }\n')
    (tmp_path / "train.sh").write_text(f". {tmp_path / 'env.sh'} 512 6\necho $1\n" + RUN)
    found = imported(tmp_path / "train.sh")
    assert (found.settings["num_layers"], found.settings["hidden_size"]) == (6, 512)


def test_a_missing_file_is_named_and_what_it_may_set_is_unknown_not_the_default(tmp_path):
    (tmp_path / "train.sh").write_text("HIDDEN=64\nsource ./missing.sh\n" + RUN)
    found = imported(tmp_path / "train.sh")
    assert any(n.startswith("line 2: source ./missing.sh: not read") and "missing.sh" in n for n in found.not_carried)
    assert "num_layers" not in found.settings  # ${NL:-2}: the file may set NL, so 2 is not what bash passes
    assert any(n.startswith("--num-layers") and "$NL is not known" in n for n in found.lost)


def test_without_the_script_file_nothing_is_read_and_the_line_is_named():
    found = import_source("source model.sh\n" + RUN, "the command line given")
    assert any(n.startswith("line 1: source model.sh: not read") for n in found.not_carried)
    assert "num_layers" not in found.settings


def test_a_file_sourcing_itself_or_a_cycle_stays_bounded(tmp_path):
    (tmp_path / "a.sh").write_text("NL=4\nsource b.sh\n")
    (tmp_path / "b.sh").write_text("HIDDEN=128\nsource a.sh\nsource ./train.sh\n")
    (tmp_path / "train.sh").write_text("source train.sh\nsource a.sh\nmodel_args() { :; }\n" + RUN)
    started = time.monotonic()
    found = imported(tmp_path / "train.sh")
    assert time.monotonic() - started < 5
    assert (found.settings["num_layers"], found.settings["hidden_size"]) == (4, 128)
    cycles = [n for n in found.not_carried if "sources itself" in n]
    assert len(cycles) == 3 and all(n.startswith(("line 1:", "line 2:")) for n in cycles)


def test_hostile_files_are_named_not_read(tmp_path):
    (tmp_path / "huge.sh").write_text("#" * (MAX_SCRIPT_CHARS + 10))
    (tmp_path / "binary.sh").write_bytes(b"NL=1\x00\n")
    (tmp_path / "dir.sh").mkdir()
    script = "source huge.sh\nsource binary.sh\nsource dir.sh\nsource /dev/zero\n"
    started = time.monotonic()
    reading = read_script(script, (), tmp_path / "train.sh")
    assert time.monotonic() - started < 5
    skipped = dict(reading.skipped)
    assert set(skipped) == {1, 2, 3, 4} and all("not read" in why for why in skipped.values())
    assert "1,000,010 bytes" in skipped[1]


def test_many_sourced_files_together_stay_within_the_bound(tmp_path):
    (tmp_path / "big.sh").write_text("#" * (MAX_SCRIPT_CHARS // 3) + "\nX=1\n")
    reading = read_script("for i in 1 2 3 4 5; do source big.sh; done\n", (), tmp_path / "train.sh")
    assert reading.shell.scalars["X"] == "1"
    assert any("together" in why for _, why in reading.skipped)


def test_launch_import_reads_the_file_the_script_sources(tmp_path, launch):
    (tmp_path / "model.sh").write_text("NL=3\nHIDDEN=96\nmodel_args() { echo --num-attention-heads 4; }\n")
    (tmp_path / "train.sh").write_text("source model.sh\n" + RUN.replace("--hidden-size", "--seq-length 64 "
                                       "--max-position-embeddings 64 --micro-batch-size 1 --global-batch-size 8 "
                                       "--lr 1e-4 --train-iters 4 --mock-data --tokenizer-type NullTokenizer "
                                       "--vocab-size 128 --hidden-size"))
    code, stdout, stderr = launch("import", str(tmp_path / "train.sh"), "--format", "json")
    assert "Traceback" not in stderr and "num_layers: 3" in stdout and "hidden_size: 96" in stdout, stderr


def test_after_a_file_not_read_a_variable_the_script_tests_is_not_taken_as_unset(tmp_path):
    # `if [ -z "$TP" ]; then TP=1; fi` after a config that was not read: TP may be the config's 8
    run = RUN.replace("\n", " --tensor-model-parallel-size $TP\n")
    (tmp_path / "train.sh").write_text('source ./cluster.sh\nif [ -z "$TP" ]; then TP=1; fi\nHIDDEN=64\n'
                                       "model_args() { :; }\n" + run)
    found = imported(tmp_path / "train.sh")
    assert "tensor_model_parallel_size" not in found.settings
    assert any("--tensor-model-parallel-size" in n for n in found.lost)


def test_an_environment_setup_file_is_named_and_leaves_the_defaults(tmp_path):
    script = ("source /opt/conda/etc/profile.d/conda.sh\nsource $VENV/bin/activate\n. ~/.bashrc\n"
              "source /usr/local/Ascend/ascend-toolkit/set_env.sh\nHIDDEN=64\nmodel_args() { :; }\n" + RUN)
    (tmp_path / "train.sh").write_text(script)
    found = imported(tmp_path / "train.sh")
    assert found.settings["num_layers"] == 2 and found.lost == []
    assert sum("sets up the software environment" in n for n in found.not_carried) == 4


def test_a_file_found_through_the_scripts_own_path_is_read(tmp_path):
    # the common ways a script names its own directory: $0 and ${BASH_SOURCE[0]} are the file given to the import
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "model.sh").write_text('NL=24\nHIDDEN=1024\n'
                                                'model_args() { echo "--num-attention-heads 16"; }\n'
                                                'HERE=$(basename "${BASH_SOURCE[0]}" .sh)\n')
    for line in ('source "$(dirname "$0")/conf/model.sh"',
                 'SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)\nsource ${SCRIPT_DIR}/conf/model.sh',
                 'DIR=$(dirname $(realpath $0))\n. $DIR/conf/model.sh',
                 'source "${0%/*}/conf/model.sh"',
                 'cd "$(dirname "$0")"\nsource "$(pwd)/conf/model.sh"'):
        (tmp_path / "train.sh").write_text(line + "\n" + RUN + 'echo "$HERE"\n')
        found = imported(tmp_path / "train.sh")
        if "cd " in line.split("\n")[0][:3]:  # a `cd` of the script itself is not followed: $(pwd) stays unknown
            assert found.lost, line
            continue
        assert (found.settings["num_layers"], found.settings["num_attention_heads"]) == (24, 16), line
        assert found.lost == [], line
    reading = read_script('source "$(dirname "$0")/conf/model.sh"\ntorchrun pretrain_gpt.py "$HERE" "$0"\n',
                          path=tmp_path / "train.sh")
    assert reading.commands[-1].argv[2:] == ["model", str(tmp_path / "train.sh")]  # BASH_SOURCE: the file read


def test_a_system_file_reached_through_the_scripts_directory_is_not_read(tmp_path):
    (tmp_path / "train.sh").write_text('source "$(dirname "$0")/../../../../../../../../etc/profile"\n' + RUN)
    found = imported(tmp_path / "train.sh")
    assert any("etc/profile: not read: it sets up the software environment" in n for n in found.not_carried)


def test_no_training_command_names_the_files_not_read_that_may_hold_it(tmp_path):
    # ALCF's train-gpt3.sh: the training command is a function of launch.sh, sourced through a path found at run time
    (tmp_path / "train.sh").write_text('HERE=$(python3 -c "import os; print(os.getcwd())")\n'
                                       'source "${HERE}/ALCF/launch.sh"\nelasticDistributed "$@"\n')
    try:
        imported(tmp_path / "train.sh")
    except UserError as exc:
        assert "sourced on line(s) 2 were not read" in exc.problems[0].message
    else:
        raise AssertionError("imported without a training command")


def test_a_value_the_script_set_before_a_file_not_read_is_not_carried_as_certain(tmp_path):
    # TP=1; source cluster_env.sh; … $TP: bash passes the file's TP where it sets one
    run = ("torchrun --nproc_per_node 1 pretrain_gpt.py --num-layers 2 --hidden-size $HIDDEN "
           "--tensor-model-parallel-size $TP\n")
    (tmp_path / "train.sh").write_text("TP=1\nHIDDEN=64\nsource ./cluster_env.sh\nHIDDEN=128\n" + run)
    found = imported(tmp_path / "train.sh")
    (loss,) = found.lost
    assert loss.startswith("line 3: source ./cluster_env.sh") and "--tensor-model-parallel-size" in loss
    assert "--hidden-size" not in loss  # set again after it
    assert str(tmp_path / "cluster_env.sh") in loss  # how to decide it: the file
    (tmp_path / "cluster_env.sh").write_text("TP=4\n")
    found = imported(tmp_path / "train.sh")
    assert found.settings["tensor_model_parallel_size"] == 4 and found.lost == []


def test_after_a_file_not_read_a_test_of_a_value_set_before_is_not_decided():
    script = ("NODES=1\nMODE=small\nsource conf.sh\nif [ $NODES -gt 1 ]; then TP=8; else TP=1; fi\n"
              "case $MODE in small) PP=1;; *) PP=4;; esac\n"
              "torchrun pretrain_gpt.py --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP\n")
    reading = read_script(script)
    assert [show(word) for word in reading.commands[-1].argv[2:]] == [
        "--tensor-model-parallel-size", "${TP}", "--pipeline-model-parallel-size", "${PP}"]


def test_after_a_file_not_read_values_set_before_depend_on_it_the_callers_values_do_not():
    script = ("ARGS=(--num-layers 2)\ndeclare -A P=([tp]=2)\nsource conf.sh\n"
              "torchrun pretrain_gpt.py ${ARGS[@]} --tensor-model-parallel-size ${P[tp]} --seq-length $SEQ "
              "--nnodes $SLURM_NNODES\n")
    reading = read_script("#!/bin/bash\n#SBATCH --nodes=2\n" + script, environment={"SEQ": "512"})
    command = reading.commands[-1]
    assert command.argv[2:] == ["--num-layers", "2", "--tensor-model-parallel-size", "2", "--seq-length", "512",
                                "--nnodes", "2"]
    needs = {k: [item.what for item in items] for k, items in command.depends.items()}
    assert needs == {k: ["source conf.sh, not read, may change what the script set before it"] for k in (2, 3, 5)}


def test_only_the_words_made_from_values_set_before_a_file_not_read_depend_on_it(tmp_path):
    # ARGS is built after the file from one value set before it: that word depends on the file, the others do not;
    # a process count made from such a value is not read as the script's
    (tmp_path / "train.sh").write_text(
        "SAVE=/ckpt\nGPUS=4\nsource ./env.sh\nNL=2\nARGS=(--save $SAVE --num-layers $NL --seq-length $((NL * 64)))\n"
        "torchrun --nproc_per_node $GPUS pretrain_gpt.py ${ARGS[@]}\n")
    reading = read_script((tmp_path / "train.sh").read_text(), (), tmp_path / "train.sh")
    command = reading.commands[-1]
    assert sorted(command.depends) == [2, 5]  # $GPUS and $SAVE
    found = imported(tmp_path / "train.sh")
    assert found.settings["num_layers"] == 2 and found.settings["seq_length"] == 128
    assert "gpus_per_node" not in found.launcher
    assert any("--nproc_per_node ${4, unless the file sourced on line 3 changes it}" in n for n in found.not_carried)


def test_many_files_not_read_over_many_values_stay_within_bounded_time():
    # each file not read marks what the script set before it: the work must not grow with passes × values × words
    values = "".join(f'V{i}="{" ".join(["w"] * 2000)}"\n' for i in range(200))
    script = values + 'for i in $(seq 1 1000); do source $X/$i.sh; V1="$V1 x"; done\ntorchrun pretrain_gpt.py $V1\n'
    started = time.monotonic()
    reading = read_script(script)
    assert time.monotonic() - started < 30
    assert len(reading.commands[-1].argv) == 2 + 3000


def test_a_value_set_before_a_file_not_read_stays_uncertain_in_a_string_another_shell_runs(tmp_path):
    # srun … bash -c "…$TP…", ssh host "…": the string is read as the script it is, and the words made from such a
    # value still depend on the file, as they do in the script itself and in `eval`
    run = "torchrun --nproc_per_node 4 pretrain_gpt.py --num-layers 3 --tensor-model-parallel-size $TP"
    for shape in (f'srun --mpi=pmi2 bash -c "{run}"', f'ssh node1 "{run}"', f'eval "{run}"', run):
        (tmp_path / "train.sh").write_text(f"TP=2\nsource ./cluster_env.sh\n{shape}\n")
        found = imported(tmp_path / "train.sh")
        (loss,) = found.lost
        assert loss.startswith("line 2: source ./cluster_env.sh")
        assert "it decides --tensor-model-parallel-size (" in loss
        (tmp_path / "cluster_env.sh").write_text("TP=4\n")
        assert imported(tmp_path / "train.sh").settings["tensor_model_parallel_size"] == 4
        (tmp_path / "cluster_env.sh").unlink()


def test_conda_leaving_an_environment_is_environment_setup_not_the_runs_settings(tmp_path):
    # `source deactivate` (conda before 4.4, found on PATH) then `conda activate`: no run setting comes from it
    run = RUN.replace("--hidden-size", "--tensor-model-parallel-size $TP --hidden-size")
    (tmp_path / "train.sh").write_text("TP=2\nsource deactivate\nsource activate llm\nHIDDEN=64\n"
                                       "model_args() { :; }\n" + run)
    found = imported(tmp_path / "train.sh")
    assert found.lost == [] and found.settings["tensor_model_parallel_size"] == 2
    assert sum("sets up the software environment" in n for n in found.not_carried) == 2
