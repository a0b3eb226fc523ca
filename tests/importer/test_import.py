"""`launch import`: scripts the tests write in the shapes of upstream's examples (flag arrays, arithmetic,
exports, line continuations, conditionals), plain flag lists and MODEL_ARGS mappings become presets whose
dry-run argv equals the script's, flag by flag; nothing of a script is ever run; upstream's own GPT training
scripts are walked when a Megatron-LM checkout is present."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli.job import job_as_declared
from launcher.errors import UserError
from launcher.importer.bash_subset import ShellSyntaxError, read_script, show
from launcher.importer.build import import_source
from launcher.importer.flags import read_flags
from launcher.importer.report import check_import

REPO = Path(__file__).resolve().parents[2]
MOCK = "--mock-data --tokenizer-type NullTokenizer --vocab-size 50257"

SCRIPT_175B_SHAPE = r"""#!/bin/bash
# Runs the "175B" parameter model
export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8
MASTER_ADDR=localhost
MASTER_PORT=6000
NUM_NODES=1
WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))
CHECKPOINT_PATH=$1 #<Specify path>
DATA_PATH=$5 #<Specify path and file prefix>_text_document
DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT
)
GPT_MODEL_ARGS=(
    --num-layers 96
    --hidden-size 12288
    --num-attention-heads 96
    --seq-length 2048
    --max-position-embeddings 2048
    --attention-backend auto # Can use (flash/fused/unfused/local)
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1536
    --train-iters 500000
    --lr 6.0e-5
    --lr-warmup-fraction .001
    --lr-decay-iters 430000
    --fp16
)
MODEL_PARALLEL_ARGS=(
	--tensor-model-parallel-size 8
	--pipeline-model-parallel-size 16
)
DATA_ARGS=(
    --data-path $DATA_PATH
    --split 949,50,1
)
EVAL_AND_LOGGING_ARGS=(
    --log-interval 100
    --eval-interval 1000
    --save $CHECKPOINT_PATH
    --eval-iters 10
)
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${GPT_MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${MODEL_PARALLEL_ARGS[@]} \
    ${DATA_ARGS[@]} \
    ${EVAL_AND_LOGGING_ARGS[@]}
"""

SCRIPT_LLAMA_SHAPE = r"""#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}
export NCCL_ALGO=Tree
TOKENIZER_ARG=${3:-"MOCK"}
GPUS_PER_NODE=4
NUM_NODES=2
TP_SIZE=2
LAYERS_PER_STAGE=4
NUM_LAYERS=$(( LAYERS_PER_STAGE * 2 ))
DTYPE="bf16"
mkdir -p "$(dirname "$CHECKPOINT_PATH")"
DISTRIBUTED_ARGS=(--nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES --node_rank ${NODE_RANK:-0}
    --master_addr ${MASTER_ADDR:-node-0} --master_port 6000)
MODEL_ARGS=(
    --num-layers $NUM_LAYERS
    --hidden-size 1024
    --num-attention-heads 16
    --group-query-attention
    --num-query-groups 4
    --seq-length 1024 --max-position-embeddings 1024
    --position-embedding-type rope
    --swiglu
    --untie-embeddings-and-output-weights
    --disable-bias-linear
)
TRAINING_ARGS=(
    --micro-batch-size 2
    --global-batch-size 64
    --train-samples 100000
    --lr 0.00015
    --min-lr 0.00001
    --lr-decay-style cosine
    --eval-interval 100 --eval-iters 2
)
DTYPE_ARGS=()
if [[ "$DTYPE" == "fp8" ]]; then
    DTYPE_ARGS+=("--fp8-format hybrid")
elif [[ "$DTYPE" == "bf16" ]]; then
    DTYPE_ARGS+=(
        "--bf16"
        "--grad-reduce-in-bf16"
    )
else
    DTYPE_ARGS+=("--fp16")
fi
DATA_ARGS_LIST=()
if [[ "$TOKENIZER_ARG" == "MOCK" ]]; then
    DATA_ARGS_LIST+=("--mock-data" "--tokenizer-type NullTokenizer" "--vocab-size 32000")
else
    DATA_ARGS_LIST+=("--data-path $DATA_ARG")
fi
TRAINING_ARGS+=("--use-distributed-optimizer" "--overlap-grad-reduce")
python -m torch.distributed.run ${DISTRIBUTED_ARGS[@]} \
    "pretrain_gpt.py" \
    ${MODEL_ARGS[@]} \
    ${TRAINING_ARGS[@]} \
    ${DTYPE_ARGS[@]} \
    --tensor-model-parallel-size $TP_SIZE \
    --sequence-parallel \
    ${DATA_ARGS_LIST[@]}
set +x
"""

SCRIPT_MIXTRAL_SHAPE = r"""#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
GPUS_PER_NODE=8
NNODES=${SLURM_NNODES:-"4"}
NODE_RANK=${RANK:-"0"}
MOE_ARGS=(
    --num-experts 8
    --moe-router-topk 2
    --moe-aux-loss-coeff 1e-2
    --moe-grouped-gemm
    --moe-token-dispatcher-type alltoall
)
MODEL_ARGS=(
    --disable-bias-linear
    --seq-length 4096 --max-position-embeddings 4096
    --num-layers 8 --hidden-size 1024 --ffn-hidden-size 3584 --num-attention-heads 16
    --normalization RMSNorm --position-embedding-type rope --swiglu --untie-embeddings-and-output-weights
)
LOGGING_ARGS=(
    --log-interval 1 \
    --eval-interval 1000 \
    --eval-iters 10
)
if [ -n "${WANDB_API_KEY}" ]; then
    LOGGING_ARGS+=(--wandb-project ${WANDB_PROJECT:-"Mixtral"})
fi
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --node_rank $NODE_RANK pretrain_gpt.py \
    ${MODEL_ARGS[@]} ${MOE_ARGS[@]} ${LOGGING_ARGS[@]} \
    --micro-batch-size 1 --global-batch-size 256 --lr 1e-4 --train-iters 500 --bf16 \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 --expert-model-parallel-size 8 \
    --use-distributed-optimizer --sequence-parallel """ + MOCK + "\n"


def imported(tmp_path: Path, text: str, name: str = "train.sh"):
    result = import_source(text, name)
    path = tmp_path / "imported.yaml"
    path.write_text(result.text)
    return result, path, check_import(result, path, job_as_declared)


def dry_run_json(path: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "launcher", str(path), "--dry-run", "--format", "json",
                           "--megatron-path", "/opt/megatron-lm"], capture_output=True, text=True, env=env,
                          cwd=path.parent, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_round_trip(result, path: Path) -> dict:
    """The dry-run argv against the script's, setting by setting, apart from what the dry-run says it added."""
    report = dry_run_json(path)
    ours, theirs = read_flags(report["script_args"]), read_flags(result.script_args)
    ignore = set(report["added"]) | set(result.replaced)
    mine = {k: v for k, v in ours.settings.items() if k not in ignore}
    source = {k: v for k, v in theirs.settings.items() if k not in ignore}
    assert mine == source
    return report


# -- the shell reader -------------------------------------------------------------------------------------------

def test_arrays_arithmetic_defaults_and_continuations():
    reading = read_script('N=2\nG=${GPUS:-4}\nW=$(( N * G ))\nA=(--a "x y" \\\n  --b $W)  # comment\n'
                          'A+=("--c 3")\nexport E=$W\ntorchrun ${A[@]} "${A[@]}" pretrain_gpt.py\n')
    (command,) = reading.commands
    assert command.argv == ["torchrun", "--a", "x", "y", "--b", "8", "--c", "3", "--a", "x y", "--b", "8",
                            "--c 3", "pretrain_gpt.py"]
    assert reading.shell.exports == {"E": "8"}


def test_quotes_inside_an_array_element_reach_the_program_as_bash_passes_them():
    reading = read_script("""A=("--split '99,1,0'")\ncmd ${A[@]}\n""")
    assert reading.commands[0].argv == ["cmd", "--split", "'99,1,0'"]


def test_positional_and_unset_values_stay_unresolved_and_named():
    reading = read_script("CKPT=$1\nDATA=${DATA_DIR}/x\ncmd --save $CKPT --data $DATA\n")
    assert [show(w) for w in reading.commands[0].argv] == ["cmd", "--save", "${CKPT}", "--data", "${DATA_DIR}/x"]


def test_conditions_on_known_strings_are_decided_the_rest_is_reported():
    reading = read_script('X=a\nif [[ "$X" == "b" ]]; then\n  F=1\nelif [ "$X" = a ]; then\n  F=2\nelse\n  F=3\nfi\n'
                          'if [ -f /etc/passwd ]; then\n  G=1\nfi\nfor i in 1 2; do\n  H=$i\ndone\n')
    assert reading.shell.scalars["F"] == "2"
    # a file test needs the world: G is unknown (never one branch's value), and the construct is named
    assert show(reading.shell.scalars["G"]) == "${G}" and reading.shell.scalars["H"] == "2"
    (undecided,) = reading.undecided
    assert undecided.line == 9 and undecided.names == ("G",)
    assert "cannot be decided" in " ".join(why for _, why in reading.skipped)


def test_nothing_is_executed(tmp_path):
    marker = tmp_path / "ran"
    script = (f"touch {marker}\nX=$(touch {marker})\nY=`touch {marker}`\n"
              f"torchrun pretrain_gpt.py --num-layers $(touch {marker}; echo 2) $((1+1))\n")
    read_script(script)
    import_source(script, "evil.sh")
    assert not marker.exists()


def test_work_is_bounded():
    with pytest.raises(ShellSyntaxError, match="at most"):
        read_script("#" * 2_000_000)
    with pytest.raises(ShellSyntaxError, match="grows beyond"):
        read_script('A=xxxxxxxxxxxxxxxx\n' + 'A="$A$A"\n' * 40)
    # a power past 64 bits is bash's, modulo 2**64, in a few steps (bash prints 0 and 1826112817018578603)
    reading = read_script("X=$(( 2 ** 99999999 ))\ncmd $X $(( 3 ** 99999999 ))\n")
    assert [show(word) for word in reading.commands[0].argv[1:]] == ["0", "1826112817018578603"]


# -- scripts in upstream's shapes -------------------------------------------------------------------------------

def test_175b_shape_reports_its_world_of_8_against_tp8_pp16(tmp_path):
    result, path, outcome = imported(tmp_path, SCRIPT_175B_SHAPE)
    assert result.launcher == {"gpus_per_node": 8, "nodes": 1, "master_addr": "localhost", "master_port": 6000}
    assert result.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    assert any("not divisible by TP·PP·CP = 8·16·1 = 128" in p.message for p in outcome.problems)
    # the unknown data path becomes a setting to fill in, over mock data
    assert "# data_path: [\"${DATA_PATH}\"]" in result.text and result.settings["mock_data"] is True
    assert "data_path" in result.replaced and "save" in result.replaced
    assert not outcome.differences
    # with a world that fits, the same preset passes and round-trips through a real dry-run
    path.write_text(result.text.replace("  nodes: 1\n", "  nodes: 16\n"))
    assert_round_trip(result, path)


def test_llama_shape_conditionals_defaults_and_arithmetic(tmp_path):
    result, path, outcome = imported(tmp_path, SCRIPT_LLAMA_SHAPE)
    assert not outcome.problems, outcome.problems
    assert result.launcher == {"gpus_per_node": 4, "nodes": 2, "master_addr": "node-0", "master_port": 6000}
    assert result.settings["num_layers"] == 8 and result.settings["bf16"] is True
    assert "fp8" not in result.settings and result.settings["vocab_size"] == 32000
    assert result.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_ALGO": "Tree"}
    assert any("--node_rank" in n for n in result.not_carried)
    assert any("mkdir" in n for n in result.not_carried)
    report = assert_round_trip(result, path)
    assert report["nodes"] == 2 and report["gpus_per_node"] == 4


def test_mixtral_shape_moe(tmp_path):
    result, path, outcome = imported(tmp_path, SCRIPT_MIXTRAL_SHAPE)
    assert not outcome.problems, outcome.problems
    assert result.launcher["nodes"] == 4 and result.settings["expert_model_parallel_size"] == 8
    assert any("WANDB_API_KEY" in n for n in result.not_carried)
    assert_round_trip(result, path)


def test_a_plain_command_line_and_a_flag_list(tmp_path):
    line = ("torchrun --nproc-per-node=2 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
            "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --lr 1e-4 --train-iters 10 "
            f"--eval-interval 10 --eval-iters 1 {MOCK} --num-layerz 3")
    result, path, outcome = imported(tmp_path, line, "the command line given")
    assert result.launcher == {"gpus_per_node": 2}
    assert any("--num-layerz 3: not an argument" in n and "num_layers" in n for n in result.lost)
    assert_round_trip(result, path)
    flags_only = line.split("pretrain_gpt.py ", 1)[1].replace(" --num-layerz 3", "")
    result, path, outcome = imported(tmp_path, flags_only, "flags")
    assert not result.not_carried and not outcome.problems
    assert_round_trip(result, path)


def test_a_model_args_mapping(tmp_path):
    text = ("ENV_VARS:\n  CUDA_DEVICE_MAX_CONNECTIONS: 1\n  NCCL_ALGO: Tree\nTEST_TYPE: regular\nMODEL_ARGS:\n"
            "  --num-layers: 4\n  --hidden-size: 256\n  --num-attention-heads: 8\n  --seq-length: 512\n"
            "  --max-position-embeddings: 512\n  --micro-batch-size: 2\n  --global-batch-size: 16\n"
            "  --lr: 3.0e-4\n  --train-iters: 20\n  --eval-interval: 10\n  --eval-iters: 1\n  --bf16: true\n"
            "  --deterministic-mode: true\n  --use-flash-attn: false\n  --mock-data: true\n"
            "  --tokenizer-type: NullTokenizer\n  --vocab-size: 1000\n  --data-cache-path: ${DATA_CACHE_PATH}\n")
    result, path, outcome = imported(tmp_path, text, "model_config.yaml")
    assert not outcome.problems, outcome.problems
    assert result.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_ALGO": "Tree"}
    assert result.settings["deterministic_mode"] is True and "data_cache_path" in result.replaced
    assert any("TEST_TYPE" in n for n in result.not_carried)
    assert_round_trip(result, path)


def test_a_model_args_mapping_that_repeats_a_flag_carries_the_later_value_and_says_so(tmp_path):
    """Megatron's own functional-test configs repeat flags (--ffn-hidden-size in the gpt3_mcore_reruns_* ones); its
    test runner reads them with yaml.safe_load, which keeps the later value. The import does the same, aloud,
    instead of reading the YAML as a bash script."""
    text = ("MODEL_ARGS:\n  --num-layers: 4\n  --hidden-size: 256\n  --ffn-hidden-size: 512\n"
            "  --num-attention-heads: 8\n  --seq-length: 512\n  --max-position-embeddings: 512\n"
            "  --micro-batch-size: 2\n  --global-batch-size: 16\n  --lr: 3.0e-4\n  --train-iters: 20\n"
            "  --eval-interval: 10\n  --eval-iters: 1\n  --mock-data: true\n  --tokenizer-type: NullTokenizer\n"
            "  --vocab-size: 1000\n  --ffn-hidden-size: 1024\n")
    result, path, outcome = imported(tmp_path, text, "model_config.yaml")
    assert not outcome.problems, outcome.problems
    assert result.settings["ffn_hidden_size"] == 1024 and result.settings["num_layers"] == 4
    assert any("'--ffn-hidden-size' appears twice (lines 4 and 17)" in n for n in result.not_carried)
    assert_round_trip(result, path)


def test_another_yaml_document_with_a_repeated_key_is_refused_not_read_as_bash():
    manifest = "apiVersion: batch/v1\nkind: Job\nkind: Job\nspec: {}\n"
    with pytest.raises(UserError, match="key 'kind' appears twice in one mapping, at line 2 and line 3"):
        import_source(manifest, "job.yaml")


def test_cli_writes_the_preset_and_reports(tmp_path, launch):
    script = tmp_path / "train.sh"
    script.write_text(SCRIPT_175B_SHAPE)
    out = tmp_path / "p.yaml"
    code, stdout, stderr = launch("import", str(script), "-o", str(out))
    assert code == 2, stderr  # written, but the launcher's checks refuse world 8 for TP 8 · PP 16
    assert out.is_file() and "launcher checks: 1 problem(s)" in stdout
    assert "world size 8 = 1 node(s) × 8 GPUs is not divisible by TP·PP·CP = 8·16·1 = 128" in stdout
    assert "round trip: the preset's argv equals the script's" in stdout
    code, stdout, stderr = launch("import", "--", "--num-layers", "2", "--hidden-size", "64")
    assert code == 2 and stdout.startswith("# Imported by `launch import`") and "num_attention_heads" in stderr
    code, _, stderr = launch("import", str(tmp_path / "missing.sh"))
    assert code == 2 and "is not a file" in stderr and "Traceback" not in stderr
    code, _, stderr = launch("import", "--", "echo", "hello")
    assert code == 2 and "no training command found" in stderr


# -- upstream's own scripts -------------------------------------------------------------------------------------

def upstream_examples() -> list[Path]:
    root = os.environ.get("MEGATRON_LM_PATH") or str(REPO / "third_party" / "megatron-lm")
    examples = Path(root) / "examples"
    if not examples.is_dir():
        return []
    return sorted(p for p in examples.rglob("*.sh") if "pretrain_gpt.py" in p.read_text(errors="replace"))


@pytest.mark.skipif(not upstream_examples(), reason="no Megatron-LM checkout with examples/ (MEGATRON_LM_PATH)")
@pytest.mark.parametrize("script", upstream_examples(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_upstream_gpt_training_script_imports(script, tmp_path):
    """Each imports without error; its preset's argv equals the script's apart from what had to be replaced
    (unknown paths); what the launcher's checks say is recorded in docs/import.md."""
    try:
        result, path, outcome = imported(tmp_path, script.read_text(), str(script))
    except Exception as exc:  # a UserError is a fine answer for a script with no training command
        assert type(exc).__name__ == "UserError", exc
        pytest.skip(str(exc))
    assert not outcome.differences, outcome.differences


def test_a_relative_output_path_goes_to_the_run_directory(tmp_path):
    # seen on one H200: Llama 3's example (CHECKPOINT_PATH=${1:-"checkpoints/llama3_8b_fp8"}) wrote its checkpoint
    # under the launch's working directory, outside the run
    script = ('CKPT=${1:-"checkpoints/x"}\ntorchrun pretrain_gpt.py --num-layers 2 --hidden-size 64 '
              '--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 '
              '--global-batch-size 8 --train-iters 4 --save $CKPT --load $CKPT --tensorboard-dir tb/x '
              '--save-interval 2 --mock-data --tokenizer-type NullTokenizer --vocab-size 128\n')
    result = import_source(script, "train.sh")
    assert not {"save", "load", "tensorboard_dir"} & set(result.settings)
    assert "# save: checkpoints/x # relative to where the script ran; a launch writes into its run directory" in (
        result.text)
    assert import_source(script.replace("checkpoints/x", "/ckpt/x"), "train.sh").settings["save"] == "/ckpt/x"


def test_a_bracketed_list_in_a_test_config_is_its_words_as_nvidias_runner_passes_them():
    # `--recompute-modules: "[moe_act]"` reached Megatron as "[moe_act]", which its choices refuse at model build
    from launcher.importer.build import import_source

    imported = import_source('MODEL_ARGS:\n  --num-layers: 2\n  --recompute-granularity: selective\n'
                             '  --recompute-modules: "[layernorm moe_act]"\n', "model_config.yaml")
    assert imported.settings["recompute_modules"] == ["layernorm", "moe_act"]
