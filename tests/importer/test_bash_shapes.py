"""The shapes real training scripts are written in: `launch import` finds the command bash would run, carries what
is knowable and names, with its line, what is not; hostile variations of each shape end in bounded time with an
answer or an `error:`, never a traceback."""

from __future__ import annotations

import time

import pytest

from launcher.errors import UserError
from launcher.importer.bash_subset import MARK, ShellSyntaxError, read_script, show
from launcher.importer.build import import_source

MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
         "--micro-batch-size 1 --global-batch-size 8 --train-iters 4 --mock-data --tokenizer-type NullTokenizer "
         "--vocab-size 128")


def carried(script: str, *args: str):
    imported = import_source(script, "train.sh", args)
    assert MARK not in imported.text
    return imported


# -- where the training command sits ----------------------------------------------------------------------------

@pytest.mark.parametrize("after", ["|& tee log.txt", "2>&1 | tee log.txt", "> log 2>&1", "&> log", "&>> log &",
                                   "2>&1 | tee -a $LOG | grep -v warn", "< /dev/null"])
def test_pipes_and_redirections_after_the_training_command(after):
    imported = carried(f"LOG=x.log\ntorchrun --nproc_per_node 2 pretrain_gpt.py {MODEL} --tensor-model-parallel-size 2 "
                       f"{after}\n")
    assert imported.settings["tensor_model_parallel_size"] == 2 and imported.launcher["gpus_per_node"] == 2


@pytest.mark.parametrize("redirect", ["> log.txt", "2>err.txt", ">> log", "2>&1 >log", "< /dev/null"])
@pytest.mark.parametrize("wrapped", [False, True])
def test_words_after_a_redirection_are_the_commands_arguments(redirect, wrapped):
    # bash passes every word that is not a redirection to the command, wherever the redirection stands: the words
    # after `> log` are flags pretrain_gpt.py reads (the grammar files them under the redirection)
    command = f"python pretrain_gpt.py --tensor-model-parallel-size 2 {redirect} {MODEL} --fp16"
    script = f'CMD="{command}"\nsrun sh -c "$CMD"\n' if wrapped else command + "\n"
    imported = carried(script)
    assert imported.settings["tensor_model_parallel_size"] == 2 and imported.settings["num_layers"] == 2
    assert imported.settings["fp16"] is True and imported.settings["mock_data"] is True


def test_stray_words_after_a_placeholder_redirection_are_lost_not_dropped():
    # `--save <PATH TO CHECKPOINTS> log --fp16`: `<PATH` reads a file, `> log` writes one; TO is --save's value and
    # CHECKPOINTS a word Megatron refuses
    script = f"python pretrain_gpt.py {MODEL} --save <PATH TO CHECKPOINTS> log --fp16\n"
    imported = import_source(script, "train.sh", [])
    assert imported.settings.get("fp16") is True, imported.settings
    assert any(line.startswith("CHECKPOINTS: word(s) without a flag") for line in imported.lost), imported.lost


def test_what_names_the_source_machine_is_not_carried_into_the_environment():
    # a 2026 two-node launch exported NCCL/GLOO_SOCKET_IFNAME=tailscale0 and its own PATH: carried, one H200 failed at
    # init ("Unable to find address for: tailscale0")
    imported = carried("export PATH=/home/sd/.local/bin:/usr/bin\nexport NCCL_SOCKET_IFNAME=tailscale0\n"
                       "export GLOO_SOCKET_IFNAME=tailscale0 NCCL_IB_HCA=mlx5 CUDA_VISIBLE_DEVICES=0,1,2,3\n"
                       f"export NCCL_DEBUG=WARN\nNCCL_IB_DISABLE=1 torchrun pretrain_gpt.py {MODEL}\n")
    assert imported.env == {"NCCL_DEBUG": "WARN", "NCCL_IB_DISABLE": "1"}
    said = " ".join(imported.not_carried)
    assert "NCCL_SOCKET_IFNAME=tailscale0: a network interface of the machine the script ran on" in said
    assert all(name in said for name in ("PATH=", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "CUDA_VISIBLE_DEVICES"))


def test_the_source_machines_compilers_are_not_carried():
    # LUMI's `export CC=gcc-10 CXX=g++-10`: Triton builds its launchers with $CC whenever it is set, Megatron's dataset
    # helpers and torch.compile's CPU code with $CXX; rehearsed where g++-10 is absent, the first step stopped
    imported = carried("export CC=gcc-10\nexport CXX=g++-10\nexport OMP_NUM_THREADS=2\n"
                       f"CC=clang torchrun pretrain_gpt.py {MODEL}\n")
    assert imported.env == {"OMP_NUM_THREADS": "2"}
    said = " ".join(imported.not_carried)
    assert "CXX=g++-10: the C++ compiler" in said and "of the machine the script ran on" in said
    assert "CC=clang: the C compiler" in said


def test_assignment_prefixes_and_env_become_the_environment():
    imported = carried(f"OMP_NUM_THREADS=4 NCCL_DEBUG=WARN python -m torch.distributed.run --nproc_per_node 8 "
                       f"pretrain_gpt.py {MODEL}\n")
    assert imported.env == {"OMP_NUM_THREADS": "4", "NCCL_DEBUG": "WARN"}
    imported = carried(f"env -u X CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun pretrain_gpt.py {MODEL}\n")
    assert imported.env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


@pytest.mark.parametrize("wrapper", ["numactl --cpunodebind=0 --membind=0", "nsys profile -o prof -t cuda,nvtx",
                                     "taskset -c 0-15", "stdbuf -oL -eL"])
def test_wrappers_are_named_and_the_runner_read(wrapper):
    imported = carried(f"{wrapper} python -m torch.distributed.launch --nproc_per_node 4 pretrain_gpt.py {MODEL}\n")
    assert imported.launcher["gpus_per_node"] == 4 and imported.settings["num_layers"] == 2
    assert any(f"runs under `{wrapper}`" in n for n in imported.not_carried)


@pytest.mark.parametrize("prefix", ["exec", "nohup", "command", "time -p"])
def test_commands_that_run_the_command_after_them(prefix):
    imported = carried(f"{prefix} torchrun --nproc_per_node 2 pretrain_gpt.py {MODEL} > log 2>&1 &\nwait\n")
    assert imported.launcher == {"gpus_per_node": 2}
    assert not any("runs under" in n for n in imported.not_carried)


def test_bash_c_with_assignments_and_a_wrapper_inside():
    imported = carried(f"TP=2\nsrun -l bash -c 'RANK=$SLURM_PROCID numactl -N 0 python3 pretrain_gpt.py {MODEL} "
                       f"--tensor-model-parallel-size '$TP\n")
    assert imported.settings["tensor_model_parallel_size"] == 2


def test_eval_of_a_command_the_script_built():
    imported = carried(f'TP=4\ncmd="torchrun --nproc_per_node 8 pretrain_gpt.py {MODEL}"\n'
                       'cmd="$cmd --tensor-model-parallel-size $TP --data-cache-path $(pwd)/cache"\n'
                       'echo "$cmd"\neval "$cmd" 2>&1 | tee log\n')
    assert imported.settings["tensor_model_parallel_size"] == 4
    assert "data_cache_path" not in imported.settings  # $(pwd) is not known: a comment, never a NUL byte


@pytest.mark.parametrize(("outer", "expected"), [
    ("srun -N 2 --ntasks-per-node 4 bash -c", {"nodes": 2, "gpus_per_node": 4}),
    ("deepspeed --num_nodes 1 --num_gpus 8 --no_local_rank --no_python /usr/bin/bash -c", {"nodes": 1,
                                                                                          "gpus_per_node": 8}),
    ("srun --nodes=2 --ntasks-per-node=8 --mpi=pmix bash -lc", {"nodes": 2, "gpus_per_node": 8}),
])
def test_the_launcher_around_bash_c_gives_the_process_counts(outer, expected):
    # HabanaAI's Megatron-DeepSpeed run_bloom13b.sh: `deepspeed --num_gpus … --no_python bash -c "$CMD"`
    imported = carried(f'CMD="cd /work && python -u ./pretrain_gpt.py {MODEL}"\n{outer} "$CMD"\n')
    assert imported.launcher == expected and imported.settings["num_layers"] == 2


@pytest.mark.parametrize("wrapper", ["numactl -N 0", "srun -l numactl -N 1 --membind=1", "numactl --cpunodebind 0"])
def test_a_wrappers_options_are_no_process_counts(wrapper):
    # numactl -N 0 is a NUMA node: it read as `--nodes 0`
    assert "nodes" not in carried(f"{wrapper} python3 pretrain_gpt.py {MODEL}\n").launcher


def test_launchers_with_their_own_options_give_the_process_counts():
    imported = carried(f"mpirun -np 16 -npernode 8 -x NCCL_DEBUG --bind-to none python pretrain_gpt.py {MODEL}\n")
    assert imported.launcher == {"gpus_per_node": 8, "nodes": 2}
    imported = carried(f"srun -N 4 --ntasks-per-node=8 --mpi=pmix python -u pretrain_gpt.py {MODEL}\n")
    assert imported.launcher == {"gpus_per_node": 8, "nodes": 4}


def test_a_command_that_only_prints_the_training_line_is_not_it():
    imported = carried(f'echo "torchrun pretrain_gpt.py --num-layers 99"\ntorchrun pretrain_gpt.py {MODEL}\n'
                       'echo torchrun pretrain_gpt.py --num-layers 98\n')
    assert imported.settings["num_layers"] == 2


def test_a_line_continuation_at_the_end_of_the_file_is_not_a_syntax_error():
    imported = carried(f"torchrun pretrain_gpt.py {MODEL} \\\n")  # bash accepts it; the grammar calls it an error
    assert imported.settings["num_layers"] == 2 and not any("cannot parse" in n for n in imported.not_carried)
    try:  # bash stops at the placeholder: either the import says so, or it reads on and names the line
        template = carried(f"CKPT=<Specify path>\ntorchrun pretrain_gpt.py {MODEL} --save $CKPT\n")
    except UserError as refused:
        assert "bash stops at line 1 (a syntax error)" in refused.problems[0].message
    else:
        assert any(n.startswith("line 1: bash cannot parse this") for n in template.not_carried)
        assert "save" not in template.settings


def test_a_here_document_given_to_sbatch_is_the_script_that_runs():
    model = MODEL.replace("2 ", "$LAYERS ", 1)
    imported = carried(f"LAYERS=2\nsbatch <<EOF\n#!/bin/bash\nsrun python pretrain_gpt.py {model} 2>&1 | "
                       "tee \\$LOG\nEOF\n")
    assert imported.settings["num_layers"] == 2


# -- values -----------------------------------------------------------------------------------------------------

def test_export_keeps_every_name():
    reading = read_script('export NCCL_IB_HCA=mlx5 NCCL_SOCKET_IFNAME="eth0 eth1" UCX_TLS=rc,sm GLOO=1\n'
                          "declare -x A=1 B=2\n")
    assert reading.shell.exports == {"NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "eth0 eth1", "UCX_TLS": "rc,sm",
                                     "GLOO": "1", "A": "1", "B": "2"}


@pytest.mark.parametrize("test,expected", [
    ('[ "$N" -eq 2 ]', "yes"), ("[ $N -gt 1 ]", "yes"), ("[ $N -le 1 ]", "no"), ("[ $N -lt 3 ]", "yes"),
    ("[ $N -ne 2 ]", "no"), ("[ $N -ge 2 ]", "yes"), ("[[ $N -eq 2 && $M == b* ]]", "yes"),
    ("(( N * 2 > 3 ))", "yes"), ("(( N == 3 ))", "no"), ("test $N -eq 2 -a $M = bc", "yes"),
    ("[ ! $N -eq 2 ]", "no"), ("[[ $M =~ ^b ]]", "yes"), ("[ -z \"$EMPTY\" ]", "yes"), ("[[ -n $M ]]", "yes")])
def test_arithmetic_and_string_tests_on_known_values_are_decided(test, expected):
    reading = read_script(f"N=2\nM=bc\nEMPTY=\nif {test}; then R=yes; else R=no; fi\n")
    assert reading.shell.scalars["R"] == expected and not reading.undecided


def test_arithmetic_expansions():
    reading = read_script("A=6\nB=$((A / 4 * 2 + A % 4))\nC=$[A*2]\nD=$(( (A > 5) ? 1 : 0 ))\nE=$((2**10))\n"
                          "((A++))\nF=$((0x10 + 010))\nG=$((B<<2))\n")
    values = reading.shell.scalars
    assert (values["B"], values["C"], values["D"], values["E"], values["A"], values["F"], values["G"]) == (
        "4", "12", "1", "1024", "7", "24", "16")


def test_case_on_a_known_value_and_on_an_unknown_one():
    script = ('SIZE=${SIZE:-13b}\ncase "$SIZE" in\n  7b|7B) L=32 ;;\n  13b) L=40 ;;\n  *) L=2 ;;\nesac\n'
              'case $MODEL in\n  a) H=1 ;;\n  *) H=2 ;;\nesac\n')
    reading = read_script(script)
    assert reading.shell.scalars["L"] == "40"
    assert show(reading.shell.scalars["H"]) == "${H}" and [u.line for u in reading.undecided] == [7]


def test_functions_that_echo_flags_and_backticks():
    reading = read_script('model_args() {\n  local n=$1\n  echo "--num-layers $n --hidden-size $((n * 32))"\n}\n'
                          'parallel() { printf -- "--tensor-model-parallel-size %s" "$1"; }\n'
                          'cmd pretrain_gpt.py $(model_args 4) `parallel 2` $(hostname)\n')
    assert [show(w) for w in reading.commands[0].argv] == [
        "cmd", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "128", "--tensor-model-parallel-size", "2",
        "${$(hostname)}"]
    assert "n" not in reading.shell.scalars  # local to the function


def test_a_function_that_runs_the_training():
    imported = carried(f"train() {{\n  torchrun pretrain_gpt.py {MODEL} --tensor-model-parallel-size $1\n}}\n"
                       "train 2 |& tee log\n")
    assert imported.settings["tensor_model_parallel_size"] == 2


@pytest.mark.parametrize("expansion,value", [
    ("${NAME//_/-}", "my-model-v1"), ("${NAME/_/-}", "my-model_v1"), ("${NAME#*_}", "model_v1"),
    ("${NAME##*_}", "v1"), ("${NAME%_*}", "my_model"), ("${NAME%%_*}", "my"), ("${#NAME}", "11"),
    ("${NAME^^}", "MY_MODEL_V1"), ("${NAME:3:5}", "model"), ("${NAME: -2}", "v1"), ("${UNSET:-dflt}", "dflt"),
    ("${EMPTY:-dflt}", "dflt"), ("${EMPTY-dflt}", ""), ("${NAME:+set}", "set"), ("${UNSET:=x}${UNSET}", "xx"),
    ("${ARR[1]}", "b"), ("${#ARR[@]}", "3"), ("${ARR[@]:-}", "a b c"), ("${!REF}", "my_model_v1"),
    ("${PAIR#*=}", "8"), ("${NAME/#my/our}", "our_model_v1")])
def test_parameter_expansions(expansion, value):
    reading = read_script(f'NAME=my_model_v1\nEMPTY=\nARR=(a b c)\nREF=NAME\nPAIR=--tp=8\nUNSET2=1\nX="{expansion}"\n')
    assert reading.shell.scalars["X"] == value


def test_a_command_substitution_with_spaces_never_leaves_the_marker_in_a_preset():
    imported = carried(f"NODES=$(scontrol show hostnames $SLURM_JOB_NODELIST | wc -l)\n"
                       f'HOSTS="$(cat /etc/hosts | head -n 1) x"\n'
                       f"torchrun --nnodes $NODES pretrain_gpt.py {MODEL} --data-cache-path $(mktemp -d /tmp/a b) "
                       "--wandb-exp-name $HOSTS\n")
    assert "nodes" not in imported.launcher
    assert any("scontrol show hostnames" in n for n in imported.not_carried)


# -- what cannot be decided -------------------------------------------------------------------------------------

def test_an_undecidable_branch_with_the_layout_is_named_with_its_line_and_not_chosen():
    script = (f"TP=1\nPP=1\nARGS=(--use-distributed-optimizer)\nif [ \"$SLURM_NNODES\" -gt 1 ]; then\n  TP=4\n"
              "  PP=2\nelse\n  ARGS+=(--use-torch-fsdp2)\nfi\n"
              f"torchrun pretrain_gpt.py {MODEL} --tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP "
              '"${ARGS[@]}"\n')
    imported = carried(script)
    assert "tensor_model_parallel_size" not in imported.settings
    assert "pipeline_model_parallel_size" not in imported.settings
    (item,) = imported.undecided
    assert item.line == 4 and {"--tensor-model-parallel-size", "--pipeline-model-parallel-size"} <= set(item.flags)
    assert "--use-torch-fsdp2" in item.flags
    assert any(n.startswith("line 4: if") for n in imported.not_carried)


def test_a_branch_that_only_adds_flags_keeps_the_rest_and_names_what_it_adds():
    imported = carried(f'ARGS="{MODEL}"\nif [ -n "$WANDB_API_KEY" ]; then\n  ARGS="$ARGS --wandb-project p"\nfi\n'
                       "torchrun pretrain_gpt.py $ARGS\n")
    assert imported.settings["num_layers"] == 2
    (item,) = imported.undecided
    assert item.line == 2 and "--wandb-project" in item.flags


def test_training_commands_in_undecidable_branches_are_named():
    imported = carried(f"if [ -f /tmp/resume ]; then\n  torchrun pretrain_gpt.py {MODEL} --load /ckpt\nelse\n"
                       f"  torchrun pretrain_gpt.py {MODEL}\nfi\n")
    assert [item.line for item in imported.undecided] == [1]
    assert any("2 times" in n for n in imported.not_carried)


def test_the_scripts_arguments_decide_when_given():
    script = (f'while [[ $# -gt 0 ]]; do\n  case $1 in\n    --tp) TP=$2; shift 2 ;;\n    *) shift ;;\n  esac\n'
              f'done\ntorchrun pretrain_gpt.py {MODEL} --lr 1e-4 --eval-interval 4 --eval-iters 1 '
                                        f'--tensor-model-parallel-size ${{TP:-1}}\n')
    assert carried(script).settings["tensor_model_parallel_size"] == 1  # bash SCRIPT: no arguments, no loop
    assert carried(script, "--tp", "4").settings["tensor_model_parallel_size"] == 4


@pytest.mark.parametrize("test", ['[ -n "${2}" ]', '[ ! -z "$2" ]', '[[ -n $3 ]]', '[ "${2:-}" != "" ]'])
def test_arguments_past_the_given_ones_are_empty(test):
    # `bash dmoe.sh /exp` (databricks/megablocks exp/ shape): $2 is empty, the default stays
    script = (f'EXP_DIR=$1\nTP=2\nif {test}; then\n    TP=$2;\nfi\nf() {{ echo "${{1:-8}}"; }}\n'
              f'torchrun pretrain_gpt.py {MODEL} --tensor-model-parallel-size $TP --save $EXP_DIR '
              f'--num-layers $(f)\n')
    imported = carried(script, "/exp")
    assert imported.settings["tensor_model_parallel_size"] == 2 and not imported.undecided
    assert imported.settings["num_layers"] == 8  # a function called without arguments: its $1 is empty too
    assert carried(script, "/exp", "4", "4").settings["tensor_model_parallel_size"] == 4


# -- entry scripts ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("entry", ["pretrain_llm360.py", "/opt/patch/pretrain_deepseek.py", "pretrain_mcore_qwen.py"])
def test_a_renamed_entry_is_named_with_what_to_do(entry):
    with pytest.raises(UserError) as caught:
        import_source(f"torchrun --nproc_per_node 8 {entry} {MODEL} 2>&1 | tee log\n", "train.sh")
    problem = caught.value.problems[0]
    assert f"line 1 runs {entry.rsplit('/', 1)[-1]}, not pretrain_gpt.py" in problem.message
    assert "pretrain_gpt.py in its place" in (problem.hint or "")


def test_another_family_s_entry_is_named():
    with pytest.raises(UserError, match="pretrain_bert.py .*BERT"):
        import_source(f"torchrun pretrain_bert.py {MODEL}\n", "train.sh")


# -- hostile variations: an answer or an error, in bounded time -------------------------------------------------

HOSTILE = {
    "long assignments": "A=1\n" * 120_000,
    "deep command substitution": "X=" + "$(" * 3000 + "echo" + ")" * 3000 + "\n",
    "deep arithmetic": "X=$((" + "(" * 5000 + "1" + ")" * 5000 + "))\n",
    "long arithmetic": "X=$((" + "1+" * 50_000 + "1))\n",
    "deep ifs": "if [ -f a ]; then\n" * 400 + "X=1\n" + "fi\n" * 400,
    "deep known ifs": "if true; then\n" * 400 + "X=1\n" + "fi\n" * 400,
    "endless while": "while true; do X=1; done\ntorchrun pretrain_gpt.py\n",
    "manifest of many documents": "---\n".join(f"a{k}: [{k}]\n" for k in range(2000)) + "---\ncommand: [pretrain_x]\n",
    "manifest nested deep": "a:\n" + "".join("  " * k + f"b{k}:\n" for k in range(1, 300)) + "  " * 300 + "args: [x]\n",
    "manifest of a thousand containers": "containers:\n" + "- command: [bash, -c, 'echo pretrain_']\n" * 3000,
    "endless c for": "for ((;;)); do X=1; done\n",
    "recursion": "f() { f; }\nf\n",
    "mutual recursion": "f() { g; }\ng() { f; }\nf\n",
    "eval bomb": "a='eval \"$a\"'\neval \"$a\"\n",
    "eval doubling": "a='x'\n" + "a=\"$a $a\"\n" * 40 + "eval \"$a\"\n",
    "doubling": "A=xxxxxxxx\n" + 'A="$A$A"\n' * 40,
    "array doubling": "A=(x)\n" + 'A=("${A[@]}" "${A[@]}")\n' * 40,
    "unterminated quote": 'torchrun pretrain_gpt.py --num-layers "2\n',
    "unterminated if": "if [ 1 -eq 1 ]; then\ntorchrun pretrain_gpt.py --num-layers 2\n",
    "stray fi and esac": "fi\nesac\ndone\n}\ntorchrun pretrain_gpt.py --num-layers 2\n",
    "binary": "\x7fELF\x02\x01\x01" + "\xff\xfe" * 1000,
    "nul byte": "X=1\x00\ntorchrun pretrain_gpt.py\n",
    "huge exponent": "X=$(( 2 ** 2 ** 2 ** 2 ** 2 ))\nY=$(( 7 ** 99999 ))\nZ=$((1/0))\n",
    "huge loop list": "for i in $(seq 1 100000) " + "a " * 5000 + "; do X=$i; done\n",
    "glob pattern bomb": 'X=' + "a" * 5000 + '\nY="${X//*a*a*a*a*a*a*a*b/z}"\nZ="${X##*a*a*a*a*a*b}"\n',
    "many undecided": "".join(f"if [ -f f{k} ]; then A{k}=1; fi\n" for k in range(3000)),
    "nested heredocs": "bash <<A\nbash <<B\nbash <<C\ntorchrun pretrain_gpt.py\nC\nB\nA\n",
    "regex bomb": 'X=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!\nif [[ $X =~ ^(a+)+$ ]]; then Y=1; fi\n',
    "deep subshells": "(" * 3000 + "X=1" + ")" * 3000 + "\n",
    "deep braces": "{ " * 3000 + "X=1; " + "} " * 3000 + "\n",
    "function chain": "".join(f"f{k}() {{ f{k + 1} \"$@\"; }}\n" for k in range(500)) + "f0 x\n",
    "substitution recursion": "f() { echo $(f); }\nX=$(f)\ntorchrun pretrain_gpt.py $X\n",
    "eval of unknown and quotes": 'cmd="torchrun pretrain_gpt.py $(hostname) \'unclosed"\neval "$cmd" |& tee log\n',
    "bash -c unclosed": "bash -c 'torchrun pretrain_gpt.py \"--num-layers' |& tee log\n",
    "unterminated heredoc": "sbatch <<EOF\ntorchrun pretrain_gpt.py --num-layers 2\n",
    "case without esac": "case $X in\n a) torchrun pretrain_gpt.py ;;\n",
    "long pipeline": "torchrun pretrain_gpt.py " + "| tee x " * 5000 + "\n",
    "many words": "torchrun pretrain_gpt.py " + "--num-layers 2 " * 20000 + "\n",
    "many functions": "".join(f"f{k}() {{ echo --x{k}; }}\n" for k in range(5000)) + "torchrun pretrain_gpt.py $(f1)\n",
    "env loop": "env A=1 env B=2 env C=3 " * 300 + "torchrun pretrain_gpt.py\n",
    "nested eval": "X='torchrun pretrain_gpt.py'\n" + "X=\"eval \\\"$X\\\"\"\n" * 30 + "eval \"$X\"\n",
    # written job files (cat > F <<EOF; sbatch F), words the grammar cuts, launchers around bash -c
    "job file that submits itself": "cat > job.sh <<EOF\nbash job.sh\nEOF\nbash job.sh\n",
    "job file that grows": "cat > j.sh <<'E'\necho\nE\n"
                           + "cat j.sh j.sh >> j.sh\ncat >> j.sh <<E\n$(cat j.sh)x\nE\n" * 50
                           + "sbatch j.sh\n",
    "job file appended in a loop": "for i in $(seq 1 1000); do cat >> j.sh <<EOF\n"
                                   + "torchrun pretrain_gpt.py --num-layers $i " + "x" * 2000
                                   + "\nEOF\ndone\nbash j.sh\n",
    "unterminated written heredoc": "cat > j.sh <<- EOM\n\ttorchrun pretrain_gpt.py --num-layers 2\nsbatch j.sh\n",
    "written file with unknown path": "cat > $(mktemp) <<EOF\ntorchrun pretrain_gpt.py\nEOF\nsbatch $(mktemp)\n",
    "sbatch options only": "cat > j <<EOF\ntorchrun pretrain_gpt.py\nEOF\nsbatch -p -A -J -t\nsbatch --wrap\n",
    "long cut word": "A=x\nB=y\nZ=" + "$A/$B/" * 5000 + "\ntorchrun pretrain_gpt.py --save $Z\n",
    "cut word with quotes": "A=x\nX=$A/$B'/$C'\"$D/$E\"/é\\$F/$G\ncase $A/$B/'x in\n"
                            "torchrun pretrain_gpt.py --save $X\n",
    "unicode and odd blanks": "A=ü\u00a0\nB=\u2003\nX=$A/$B/ç\t\r\ntorchrun\u00a0pretrain_gpt.py --save $X/$A/z\r\n",
    "bash -c in bash -c": "srun -N 2 bash -c \"deepspeed --num_gpus 8 bash -c 'srun -N 3 bash -c "
                          "\\\"python pretrain_gpt.py\\\"'\"\n",
    "numactl everywhere": "numactl -N 0 " * 2000 + "python pretrain_gpt.py\n",
    "rank loop over many ips": "IPs=(" + " ".join(f"ip{k}" for k in range(2000)) + ")\nfor i in \"${!IPs[@]}\"; do\n"
                               "if [ \"$H\" == \"${IPs[$i]}\" ]; then R=$i; break; fi\ndone\n"
                               "python -m torch.distributed.launch --node_rank $R pretrain_gpt.py\n",
    # indirect names, arithmetic in defaults, files written and run behind wrappers, scheduler directives
    "indirect on itself": 'A=A\nX=${!A+x}${!A:-$((1/0))}${!A//a/b}${!A#?}\ntorchrun pretrain_gpt.py $X\n',
    "indirect cycle": 'a=b\nb=c\nc=a\nX=${!a}${!b+${!c}}${!X+${!X}}\nY=${!NCCL_*}${!@}${!#}\n',
    "arithmetic default nested deep": "X=${A:-" + "$((" * 300 + "1" + "))" * 300 + "}\n",
    "arithmetic default of text": "X=${A:-$((echo hi; ls))}${B:-$(( ))}${C:-$((\"))}\ntorchrun pretrain_gpt.py $X\n",
    "written runner that runs itself behind srun": "cat <<E > r.sh\nsrun singularity exec i bash r.sh\nE\n"
                                                    "srun singularity exec i bash r.sh\n",
    "written runners in a loop": "for i in $(seq 1 300); do cat <<E > r$i.sh\nsrun ./r$((i+1)).sh\nE\ndone\n"
                                 "srun ./r1.sh\n",
    "scheduler directives overflowing": "#SBATCH --gres=gpu:x:99999999999999999999999,gpu:1\n"
                                        "#SBATCH --gpus-per-node=a:b:c:8 --gpus=:9 -G x:\n"
                                        "#$ -l node_f=99999999999999999999,rt_F=-1\n#$ -l\n"
                                        "torchrun --nnodes=5:3 --nnodes=: pretrain_gpt.py\n",
    "launch script with odd names": "srun $'\\x01'.sh pretrain_gpt.py --num-layers 2\n"
                                    "srun -- ./-.sh pretrain_gpt.py\nsrun apptainer exec x.sif /.sh pretrain_gpt.py\n",
    "underscored flags": "torchrun pretrain_gpt.py " + "".join(f"--num_layers_{k} 2 --_ x --__ --num__layers 3 "
                                                               for k in range(2000)) + "\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_variations_end_with_an_answer_or_an_error(name):
    started = time.monotonic()
    try:
        read_script(HOSTILE[name])
    except ShellSyntaxError:
        pass
    try:
        import_source(HOSTILE[name], "hostile.sh")
    except UserError:
        pass
    assert time.monotonic() - started < 30, name


def test_undecided_constructs_that_decide_the_layout_are_losses_and_logging_is_not():
    from launcher.importer.build import section_of
    from launcher.importer.training_command import losses

    imported = carried(f'if [ "$NODES" -gt 1 ]; then TP=4; else TP=1; fi\n'
                       f'if [ -n "$WANDB_API_KEY" ]; then W="--wandb-project p"; fi\n'
                       f"torchrun pretrain_gpt.py {MODEL} --tensor-model-parallel-size $TP $W\n")
    assert [item.line for item in imported.undecided] == [1, 2]
    assert {flag for item in imported.undecided for flag in item.flags} == {
        "--tensor-model-parallel-size", "${W}", "--wandb-project"}
    (loss,) = losses(imported.undecided, section_of)
    assert loss.startswith("line 1: if [ \"$NODES\" -gt 1 ]") and "--tensor-model-parallel-size" in loss


# -- one word the grammar cuts in two ----------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [
    "--save $ROOT/$NAME/checkpoints",  # an argument
    "--save $SAVE",  # SAVE=$ROOT/$NAME/checkpoints: an assignment (the grammar made `$NAME/…` a command)
    '"${ARGS[@]}"',  # ARGS=(--save $ROOT/$NAME/checkpoints): an array element
    "--save $EXPORTED",  # export EXPORTED=$ROOT/$NAME/checkpoints OTHER=$ROOT/$NAME/x
    "--save $CASED",  # case $ROOT/$NAME/checkpoints in …: a syntax error to the grammar
    "--save $SAVE --wandb-exp-name x$ROOT.$NAME/c --wandb-project \\$ROOT/$NAME/x",
])
def test_a_word_of_several_expansions_is_one_word(shape):
    # tree-sitter-bash reads `$ROOT/$NAME/checkpoints` as `$ROOT/$` and `NAME/checkpoints`; seen in a Swiss AI
    # submit script whose checkpoint path became `/checkpoints` and a command `SCRIPT_VERSION/110M1`
    script = ("ROOT=/scratch\nNAME=run1\nSAVE=$ROOT/$NAME/checkpoints\nARGS=(--save $ROOT/$NAME/checkpoints)\n"
              "export EXPORTED=$ROOT/$NAME/checkpoints OTHER=$ROOT/$NAME/x\n"
              "case $ROOT/$NAME/checkpoints in /scratch/run1/*) CASED=$ROOT/$NAME/checkpoints ;; esac\n"
              f"torchrun pretrain_gpt.py {MODEL} {shape}\n")
    imported = carried(script)
    assert imported.settings["save"] == "/scratch/run1/checkpoints"
    assert imported.lost == [] and not any("not the training command" in n for n in imported.not_carried)
    if "wandb_project" in imported.settings:
        assert imported.settings["wandb_project"] == "$ROOT/run1/x"
        assert imported.settings["wandb_exp_name"] == "x/scratch.run1/c"


# -- a script that writes the job script and submits it ----------------------------------------------------------

@pytest.mark.parametrize("submit", ["sbatch $OUT/job.sbatch", "sbatch -p normal --time 1:00:00 $OUT/job.sbatch",
                                    "bash $OUT/job.sbatch", "chmod +x $OUT/job.sbatch\n$OUT/job.sbatch"])
def test_a_job_script_written_from_here_documents_is_read_where_it_is_submitted(submit):
    # Swiss AI's submissions/submit.sh, CSCS's launch scripts: `cat > $F <<- EOM … EOM`, `cat >> $F << 'X' …`,
    # then `sbatch $F`; bash runs pretrain_gpt.py through the file it wrote
    script = (f"OUT=/scratch/run\nTP=2\nCMD=\"numactl --membind=0-3 env python3 pretrain_gpt.py {MODEL}\"\n"
              "cat > $OUT/job.sbatch <<- EOM\n#!/bin/bash\n#SBATCH --nodes=2\n\texport TP=$TP\nEOM\n"
              "cat >> $OUT/job.sbatch << 'BODY'\nsrun -N 2 --ntasks-per-node 4 bash -c \"$CMD "
              "--tensor-model-parallel-size $TP\"\nBODY\n"
              f"sed -i 's/x/y/' $OUT/job.sbatch\n{submit}\n")
    imported = carried(script)
    assert imported.settings["tensor_model_parallel_size"] == 2 and imported.settings["num_layers"] == 2
    assert imported.launcher == {"nodes": 2, "gpus_per_node": 4}


def test_a_written_file_that_is_never_run_is_no_training_command():
    with pytest.raises(UserError, match="no training command"):
        import_source(f"cat > job.sh <<EOF\npython pretrain_gpt.py {MODEL}\nEOF\necho job.sh\n", "train.sh")


@pytest.mark.parametrize(("line", "script", "args"), [
    ("bash submissions/submit.sh 110 $*", "submissions/submit.sh", "110"),
    ("sbatch --nodes 2 run_llama.sbatch 8b", "run_llama.sbatch", "8b"),
    ("./train_gpt.sh --tp 2", "-- ./train_gpt.sh", "--tp 2"),  # `--tp` is the script's: after `--`
])
def test_a_script_that_runs_another_script_names_it(line, script, args):
    # Swiss AI's submissions/110m/110m.sh is `source .env; bash submissions/submit.sh 110 $*`
    with pytest.raises(UserError) as caught:
        import_source(f"source .env\n{line}\n", "train.sh")
    problem = caught.value.problems[0]
    assert f"line 2 runs another script, {script.removeprefix('-- ')}" in problem.message
    assert f"launch import {script} {args}" in (problem.hint or "")


def test_the_hint_for_another_script_is_a_command_that_reads_it(tmp_path, launch):
    (tmp_path / "submit.sh").write_text(f'while [[ $# -gt 0 ]]; do case $1 in --tp) TP=$2; shift 2;; *) shift;; esac; '
                                        f'done\ntorchrun pretrain_gpt.py {MODEL} --lr 1e-4 --eval-interval 4 '
                                        f'--eval-iters 1 --tensor-model-parallel-size ${{TP:-1}}\n')
    (tmp_path / "run.sh").write_text("bash other/submit.sh --tp 2\n")  # not next to run.sh: named, with the hint
    code, _, stderr = launch("import", str(tmp_path / "run.sh"))
    assert code == 2 and "launch import -- other/submit.sh --tp 2" in stderr
    code, stdout, stderr = launch("import", "--", str(tmp_path / "submit.sh"), "--tp", "2")
    assert code == 0 and "tensor_model_parallel_size: 2" in stdout, stderr
    (tmp_path / "run.sh").write_text("bash submit.sh --tp 2\n")  # next to it: read as bash runs it
    code, stdout, stderr = launch("import", str(tmp_path / "run.sh"))
    assert code == 0 and "tensor_model_parallel_size: 2" in stdout, stderr


def test_a_rank_found_at_run_time_is_no_loss_of_the_layout():
    # Ascend ModelLink's multi-node scripts: NODE_RANK is found by comparing `hostname -I` with a list of IPs;
    # only --node_rank depends on that loop, not the GPUs, nodes and address in the same string
    script = ("IPs=('IP1' 'IP2')\nLOCAL_HOST=`hostname -I|awk -F \" \" '{print$1}'`\nNODE_RANK=\"\"\n"
              'for i in "${!IPs[@]}";\ndo\n    if [ "$LOCAL_HOST" == "${IPs[$i]}" ];\n    then\n'
              "        NODE_RANK=$i\n        break\n    fi\ndone\n"
              'DISTRIBUTED_ARGS="--nproc_per_node 8 --nnodes ${#IPs[@]} --node_rank $NODE_RANK '
              '--master_addr ${IPs[0]} --master_port 6010"\n'
              f"python -m torch.distributed.launch $DISTRIBUTED_ARGS pretrain_gpt.py {MODEL} 2>&1 | tee log\n")
    imported = carried(script)
    assert imported.launcher == {"gpus_per_node": 8, "nodes": 2, "master_addr": "IP1", "master_port": 6010}
    assert imported.lost == [] and [u.line for u in imported.undecided] == [6]
    assert {f for u in imported.undecided for f in u.flags} <= {"--node_rank"}


def test_words_a_branch_adds_to_a_string_still_depend_on_it():
    # EXTRA="" … EXTRA="--tensor-model-parallel-size 4" under an undecided test: the flags are the branch's
    script = (f'EXTRA=""\nif [ -f /tmp/big ]; then\n  EXTRA="--tensor-model-parallel-size 4"\nfi\n'
              f"torchrun pretrain_gpt.py {MODEL} $EXTRA\n")
    assert any(n.startswith("line 2:") for n in import_source(script, "train.sh").lost)


# -- a Kubernetes manifest ----------------------------------------------------------------------------------------

POD_SPEC = ("spec:\n  pytorchReplicaSpecs:\n    Worker:\n      replicas: 2\n      template:\n        spec:\n"
            "          containers:\n          - name: pytorch\n            image: nvcr.io/nvidia/pytorch:24.01-py3\n")


@pytest.mark.parametrize("container", [
    '            command: ["/bin/bash", "-c"]\n            args:\n            - |\n'
    "              TP=4\n              torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \\\n"
    f"                {MODEL} --tensor-model-parallel-size $TP\n",
    '            command: ["torchrun", "--nproc_per_node", "8", "--nnodes", "2", "/w/Megatron-LM/pretrain_gpt.py"]\n'
    f'            args: [{", ".join(repr(w).replace(chr(39), chr(34)) for w in MODEL.split())}, '
    '"--tensor-model-parallel-size", "4", "--data-cache-path", "$(CACHE)"]\n',
])
def test_the_container_command_of_a_manifest_is_the_script(container):
    # a Kubeflow PyTorchJob (after a Service, `---` between them): the command and args of its container
    manifest = ("apiVersion: v1\nkind: Service\nmetadata:\n  name: master\n---\n"
                "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata:\n  name: gpt\n" + POD_SPEC + container)
    for text in (manifest, manifest.split("---\n", 1)[1]):
        imported = carried(text)
        assert imported.settings["tensor_model_parallel_size"] == 4 and imported.settings["num_layers"] == 2
        assert imported.launcher == {"gpus_per_node": 8, "nodes": 2}
        assert not any("apiVersion" in n for n in imported.not_carried)


WORDS_PRELUDE = ("A=x\nB=y\nC='z z'\nD=1\nE=\nARR=(p.bin 'q r.bin' s t)\nP=/opt/x/y.tar.gz\nR=opt\nS='o*'\n")


@pytest.mark.parametrize("word", [
    "$A/$B/c", "$A$B/c", "${X:-$A/$B/c}", '"${A}"/$B/x', "$A/$((D+1))/x", "${A}_$B/x", "$A/${B}x/$C", "\\$A/$B/x",
    "'$A'/$B/x", "$A/$B.$D/x", "x$A/$B/y", '"$A/$B/$C"', "$C/$A/$B", "${ARR[@]}/$A/$B", "$E/$A/$B", "--x=$A/$B/c",
    '$A/"$B"/c', "$A/`echo $B`/c", "$A/$(echo $B)/c", "${A:+$A/$B/c}", "${A/x/$B/$A}", "$A//$B//c",
    # patterns: an escaped slash, a bracket, a variable in the pattern; operations on each element of an array
    "${P//\\//_}", "${P/#\\/opt/Z}", "${P//[\\/]/-}", "${P/${R}/y}", "${P//$R/$R$R}", "${P/$S/k}", '${P/"$S"/k}',
    "${P#/$R}", '"${ARR[@]/#/--}"', '"${ARR[@]/%/.x}"', "${ARR[@]%.bin}", '"${ARR[*]^^}"', "${ARR[@]:1}",
    '"${ARR[@]:1:2}"', '"${ARR[@]: -2}"', '"${ARR[@]:$D:1}"', '"${ARR[*]:2}"',
    # brace expansion comes first
    "a{1..3}", "{x,y}z", "{a,b}{1,2}", "x{a,{b,c}}y", "{0..7..2}", "{07..10}", "{a..e}", "{5..1}", '"{a,b}"',
    "${A}{1,2}", "{$A,$B}/c", "{a}", "{,x}", "a{b", "--{a,b}=1", "\\\\{a,b}", "{-1..1}",
    # a quoted default is one word even where the expansion is not quoted
    '${U:-"d e"}', "${U:-'d e'}", '${A:+"x y"}', "${U:-d e}", '${U:-"$C"}',
])
def test_words_are_the_words_bash_passes(word):
    import shutil
    import subprocess

    if shutil.which("bash") is None:
        pytest.skip("no bash here to compare with")
    expected = subprocess.run(["bash", "-c", WORDS_PRELUDE + f"printf '%s\\n' {word}"], capture_output=True,
                              text=True, check=True).stdout.split("\n")[:-1]
    reading = read_script(WORDS_PRELUDE + f"torchrun pretrain_gpt.py {word}\n")
    assert [show(a) for a in reading.commands[-1].argv[2:]] == expected


GETOPTS = ('TP=1\nPP=1\nV=0\nwhile getopts "t:p:vh" opt; do\n  case $opt in\n    t) TP=$OPTARG ;;\n'
           '    p) PP=$OPTARG ;;\n    v) V=1 ;;\n    h) echo usage; exit 0 ;;\n    *) echo bad ;;\n  esac\n'
           'done\nshift $((OPTIND-1))\nX "$TP" "$PP" "$V" "$@"\n')


@pytest.mark.parametrize("args", [[], ["-t", "4"], ["-t4", "-p", "2", "rest"], ["-vt", "8", "--", "-p", "3"],
                                  ["-x", "-t", "2"], ["rest", "-t", "2"], ["-t"], ["-vp2"]])
def test_getopts_reads_the_arguments_as_bash_does(args):
    # `while getopts "t:p:" opt; do case $opt in t) TP=$OPTARG …`: common in training scripts; without it read,
    # TP was unknown and the layout lost even for `launch import train.sh` with no arguments
    import shutil
    import subprocess

    if shutil.which("bash") is None:
        pytest.skip("no bash here to compare with")
    expected = subprocess.run(["bash", "-c", "X() { printf '%s\\n' \"$@\"; }\n" + GETOPTS, "s.sh", *args],
                              capture_output=True, text=True).stdout.split("\n")[:-1]
    expected = [line for line in expected if line != "bad"]
    reading = read_script(GETOPTS.replace("X ", "torchrun pretrain_gpt.py "), args)
    assert [show(a) for a in reading.commands[-1].argv[2:]] == expected and not reading.undecided



@pytest.mark.parametrize(("prelude", "word"), [
    ('S="a,b,c"\nIFS=","\n', "$S"), ('S="a b,c"\nIFS=","\n', "x$S"), ('S="a,,b,"\nIFS=","\n', "$S"),
    ('S="a b"\nIFS=\n', "$S"), ('S=" a , b "\nIFS=" ,"\n', "$S"), ('A=("a,b" c)\nIFS=,\n', "${A[@]}"),
    ('S="a:b"\nIFS=:\n', '"$S" $S'), ('S="x,y"\nIFS=,\n', "p${S}q"), ('S=",x"\nIFS=,\n', "p${S}q"),
    ('HOSTS="n1,n2"\nIFS=, read -ra H <<< "$HOSTS"\nS="a b"\n', "$S"),  # IFS= only for read: the default stays
])
def test_the_scripts_ifs_splits_words_as_bash_does(prelude, word):
    # IFS="," then `set -- $LIST`: the default split gave one word and $2 came back empty, silently
    import shutil
    import subprocess

    if shutil.which("bash") is None:
        pytest.skip("no bash here to compare with")
    expected = subprocess.run(["bash", "-c", prelude + f"printf '%s\\n' {word}"], capture_output=True, text=True,
                              check=True).stdout.split("\n")[:-1]
    reading = read_script(prelude + f"torchrun pretrain_gpt.py {word}\n")
    assert [show(a) for a in reading.commands[-1].argv[2:]] == expected



@pytest.mark.parametrize("loop", ["for ((i=0;i<${#NODES[@]};i++)); do", "for (( i=0; i < 3; i++ )); do",
                                  "for ((i=0, j=1; i<3; i+=1, j*=2)); do"])
def test_a_c_style_loop_with_an_initializer_runs(loop):
    # the initializer `i=0` is an assignment node to the grammar; it was not read, and every such loop undecided
    script = (f"NODES=(a b c)\nHOSTS=\"\"\n{loop}\n  HOSTS+=\"${{NODES[$i]}},\"\ndone\n"
              f"torchrun pretrain_gpt.py {MODEL} --wandb-exp-name $HOSTS\n")
    imported = carried(script)
    assert imported.settings["wandb_exp_name"] == "a,b,c," and not imported.undecided



@pytest.mark.parametrize(("line", "expected"), [
    ("false && TP=4 || TP=2", 2), ("true && TP=4 || TP=2", 4), ('[[ abc == "a*" ]] && TP=4 || TP=2', 2),
    ("[ 1 -eq 1 ] && [ 2 -lt 1 ] && TP=4 || TP=2", 2), ("[ 1 -eq 1 ] || TP=8 && TP=4", 4),
])
def test_the_status_of_a_list_decides_what_follows_it(line, expected):
    # `a && b || c`: when `a && b` fails, c runs; the list was taken to succeed and TP stayed unset, silently
    assert carried(f"TP=1\n{line}\ntorchrun pretrain_gpt.py {MODEL} --tensor-model-parallel-size $TP\n"
                   ).settings["tensor_model_parallel_size"] == expected



def test_a_loop_over_a_brace_sequence_runs_for_each():
    # `for i in {0..7}` ran once with i="{0..7}": a count built in it was 1, silently
    imported = carried("N=0\nfor i in {0..7}; do N=$((N+1)); done\n"
                       f"torchrun pretrain_gpt.py {MODEL} --num-layers $((N*2))\n")
    assert imported.settings["num_layers"] == 16


HOSTILE_BRACES = ["{1..100000}", "{a,b}" * 30, "{" * 5000 + "a,b" + "}" * 5000, "{1..3}{" * 2000]


@pytest.mark.parametrize("word", HOSTILE_BRACES)
def test_brace_bombs_end_in_bounded_time(word):
    started = time.monotonic()
    try:
        import_source(f"torchrun pretrain_gpt.py {MODEL} {word}\n", "train.sh")
    except UserError:
        pass
    assert time.monotonic() - started < 20



@pytest.mark.parametrize(("prelude", "expected"), [
    ("for i in 0 1 2; do H[$i]=h$i; done\n", ["h0", "h1", "h2"]),  # A[$i]=x was dropped: the subscript is arithmetic
    ("A=(x y)\nA[1]=z\n", ["x", "z"]), ("A=s\nA[1]=t\n", ["s", "t"]),
    ("A=(x y)\nA[5]=z\n", ["${A}"]),  # sparse: filled with empty words before; now not known
    ("A[1]=q\nA[0]=p\n", ["${A}"]),
])
def test_an_element_assignment_is_bashs(prelude, expected):
    # H and A are the script's (declared empty first): never assigned, they would be the caller's and unknown
    reading = read_script("H=()\nA=()\n" + prelude + 'torchrun pretrain_gpt.py "${H[@]}" "${A[@]}"\n')
    assert [show(a) for a in reading.commands[-1].argv[2:]] == expected



@pytest.mark.parametrize(("script", "expected"), [
    ("for a in 1 2; do for b in x y; do [ $b = y ] && break 2; S=\"$S$a$b\"; done; done\n", "1x"),
    ("for a in 1 2; do for b in x y; do [ $b = x ] && continue 2; S=\"$S$a$b\"; done; done\nS=${S:-none}\n", "none"),
    ("declare -i S=2+3\n", "5"), ("local_f() { local -i S=4*2; echo $S; }\nS=$(local_f)\n", "8"),
])
def test_break_levels_and_integer_declarations(script, expected):
    assert carried(script + f"torchrun pretrain_gpt.py {MODEL} --wandb-exp-name $S\n").settings["wandb_exp_name"] \
        == expected



def test_sbatch_directives_give_the_slurm_variables_the_job_reads():
    # AWS's and Swiss AI's sbatch scripts: `torchrun --nnodes $SLURM_JOB_NUM_NODES`, TP=$SLURM_GPUS_PER_NODE
    script = ("#!/bin/bash\n#SBATCH --nodes=2   # two nodes\n#SBATCH -c 16\n#SBATCH --gres=gpu:h100:8\n"
              "#SBATCH --job-name=x\nexport OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK\n"
              "#SBATCH --nodes=64\n"  # after the first command: sbatch does not read it
              f"torchrun --nnodes $SLURM_JOB_NUM_NODES --nproc_per_node $SLURM_GPUS_ON_NODE pretrain_gpt.py {MODEL} "
              "--tensor-model-parallel-size $SLURM_GPUS_ON_NODE\n")  # --gres sets no SLURM_GPUS_PER_NODE
    imported = carried(script)
    assert imported.launcher == {"nodes": 2, "gpus_per_node": 8}
    assert imported.settings["tensor_model_parallel_size"] == 8 and imported.env == {"OMP_NUM_THREADS": "16"}
    assert any("line 2: read as sbatch runs it: SLURM_NNODES=2" in n for n in imported.not_carried)
    assert "nodes" not in carried(script.replace("#SBATCH --nodes=2", "#SBATCH --exclusive")).launcher



def test_srun_without_counts_starts_the_tasks_the_sbatch_lines_ask_for():
    # Swiss AI's submit-llama3-8b.sh: #SBATCH --nodes=16 --ntasks-per-node=4, then `srun … bash -c "python3 …"`
    script = ("#!/bin/bash\n#SBATCH --nodes=16\n#SBATCH --ntasks-per-node=4\n#SBATCH --gpus-per-node=4\n"
              f'CMD="python3 pretrain_gpt.py {MODEL}"\nsrun -lu bash -c "RANK=\\$SLURM_PROCID $CMD"\n')
    assert carried(script).launcher == {"nodes": 16, "gpus_per_node": 4}
    explicit = script.replace("srun -lu", "srun -N 2 --ntasks-per-node 8")
    assert carried(explicit).launcher == {"nodes": 2, "gpus_per_node": 8}  # srun's own counts come first



def test_a_here_document_captured_by_cat_is_its_text():
    # MODEL_ARGS=$(cat <<EOF … EOF): the flags are the document's lines
    imported = carried(f"L=4\nMODEL_ARGS=$(cat <<EOF\n--num-layers $L\n--hidden-size 64\nEOF\n)\n"
                       f"f() {{ cat <<EOF\n--lr 2e-4\nEOF\n}}\ntorchrun pretrain_gpt.py {MODEL} $MODEL_ARGS $(f)\n")
    assert imported.settings["num_layers"] == 4 and imported.settings["lr"] == 2e-4
    # the grammar reads a quoted document inside $(…) as words: not known, never empty
    quoted = carried(f"A=$(cat <<'EOF'\n--num-layers 6\nEOF\n)\ntorchrun pretrain_gpt.py {MODEL} $A\n")
    assert quoted.settings.get("num_layers") in (2, 6)


@pytest.mark.parametrize("script", [
    'source "$X/params.sh"\nARGS+=(--log-interval 1)\ntorchrun pretrain_gpt.py {MODEL} "${ARGS[@]}"\n',
    'source "$X/params.sh"\nARGS+=" --log-interval 1"\ntorchrun pretrain_gpt.py {MODEL} $ARGS\n',
    'source "$X/params.sh"\ntorchrun pretrain_gpt.py {MODEL} "${ARGS[@]}" --log-interval 1\n',
    'torchrun pretrain_gpt.py {MODEL} ${CALLER_ARGS[@]} --log-interval 1\n',  # never assigned: the caller's
    'torchrun pretrain_gpt.py {MODEL} ${CALLER_ARGS[*]} --log-interval 1\n',
])
def test_an_array_the_script_does_not_know_is_lost_not_empty(script):
    # the flags a sourced params file (not read) or the caller puts in ARGS are the model's: never dropped quietly
    imported = import_source(script.replace("{MODEL}", MODEL), "train.sh")
    assert any("${ARGS}" in item or "${CALLER_ARGS}" in item for item in imported.lost), imported.lost


def test_an_array_the_script_declares_and_appends_to_is_known():
    imported = import_source(f'ARGS+=(--log-interval 7)\ntorchrun pretrain_gpt.py {MODEL} "${{ARGS[@]}}"\n', "t.sh")
    assert imported.lost == [] and imported.settings["log_interval"] == 7
    count = read_script('source "$X/p.sh"\nN=${#ARGS[@]}\ntorchrun pretrain_gpt.py --x $N\n')
    assert show(count.commands[-1].argv[-1]) == "${N}"


@pytest.mark.parametrize("line", [
    'sbatch -N 2 --wrap "srun python pretrain_gpt.py {MODEL}"',
    "sbatch --wrap='srun python pretrain_gpt.py {MODEL}'",
    'ssh node1 "cd /work && torchrun --nproc_per_node 8 pretrain_gpt.py {MODEL}"',
    "bcprun -p 8 --env 'CUDA_DEVICE_MAX_CONNECTIONS=1' -c 'python pretrain_gpt.py {MODEL}'",
    "pdsh -w node[1-2] 'python -m torch.distributed.run pretrain_gpt.py {MODEL}'",
])
def test_a_training_command_given_as_a_launchers_string_is_read(line):
    # the launcher (sbatch --wrap, ssh, NVIDIA's bcprun, pdsh) runs the string as a command line of its own
    imported = import_source(line.replace("{MODEL}", MODEL) + "\n", "train.sh")
    assert imported.settings["num_layers"] == 2 and imported.lost == []


@pytest.mark.parametrize(("line", "lost"), [
    ('ssh node1 "cd $WORKDIR && torchrun --nproc_per_node 8 pretrain_gpt.py {MODEL}"', []),
    ('sbatch -N 2 --wrap "srun python pretrain_gpt.py {MODEL} $EXTRA"', ["${EXTRA}"]),
])
def test_a_launchers_string_with_a_part_not_known_is_still_the_training_command(line, lost):
    # it was "no training command found": the part not known is one word, named where it holds flags
    imported = import_source(line.replace("{MODEL}", MODEL) + "\n", "train.sh")
    assert imported.settings["num_layers"] == 2
    assert [item.split(":")[0] for item in imported.lost] == lost


def test_a_printed_command_string_is_not_the_training_command():
    imported = import_source(f'echo "python pretrain_gpt.py {MODEL}"\ntorchrun pretrain_gpt.py --num-layers 3\n', "t")
    assert imported.settings == {"num_layers": 3}


def test_a_forks_entry_of_any_name_with_megatrons_flags_is_named():
    # LLM360's K2: `bcprun -c 'python /mount/training/k2_training/main.py --num-layers 80 …'`
    with pytest.raises(UserError) as caught:
        import_source(f"bcprun -p 8 -c 'python /mount/k2/main.py {MODEL}'\n", "pretrain_65b.sh")
    assert "runs main.py, not pretrain_gpt.py" in caught.value.problems[0].message
    with pytest.raises(UserError) as caught:  # another program with other flags: no training command at all
        import_source("python tools/plot.py --out x.png\n", "plot.sh")
    assert "no training command found" in caught.value.problems[0].message


@pytest.mark.parametrize(("code", "expected"), [  # each expected value is bash 5's
    ('read -r A B <<< "  4   2  3  "', ["4", "2  3"]),
    ('read A B <<< "x\\\\ y z"', ["x y", "z"]),
    ('read -r A B <<< "x\\\\ y z"', ["x\\", "y z"]),
    ('IFS=, read -r A B <<< "1,2,3,4"', ["1", "2,3,4"]),
    ('IFS=, read -r A B <<< "1,2,"', ["1", "2"]),
    ('read -r A B <<< "x"', ["x", ""]),
    ("read -r -d '' A <<'E'\n--a 1\n--b 2\nE\nB=b", ["--a 1\n--b 2", "b"]),
    ('printf -v A "%d-%s" 4 x; printf -v B "%s," p q', ["4-x", "p,q,"]),
])
def test_read_and_printf_v_from_known_text_are_bashs(code, expected):
    reading = read_script(code + '\ntorchrun pretrain_gpt.py "$A" "$B"\n')
    assert [show(a) for a in reading.commands[-1].argv[2:]] == expected


@pytest.mark.parametrize(("code", "expected"), [
    ('read -ra L <<< "  a b   c "', ["a", "b", "c"]),
    ('IFS=, read -ra L <<< "a,b,,c,"', ["a", "b", "", "c"]),
    ('mapfile -t L <<< "a\nb c"', ["a", "b c"]),
    ("mapfile -t -d , L <<< 'a,b'", ["a", "b\n"]),
    ('mapfile -t L < args.txt', ["${L}"]),  # a file: not known
    ('read -ra L < "$F"', ["${L}"]),
])
def test_read_into_an_array_is_bashs(code, expected):
    reading = read_script(code + '\ntorchrun pretrain_gpt.py "${L[@]}"\n')
    assert [show(a) for a in reading.commands[-1].argv[2:]] == expected


def test_a_layout_read_from_a_here_string_is_carried():
    script = f'read -r TP PP <<< "4 2"\ntorchrun pretrain_gpt.py {MODEL} --tensor-model-parallel-size $TP ' \
             '--pipeline-model-parallel-size $PP\n'
    imported = import_source(script, "train.sh")
    assert imported.lost == [] and imported.settings["tensor_model_parallel_size"] == 4
    assert imported.settings["pipeline_model_parallel_size"] == 2


@pytest.mark.parametrize(("code", "words", "expected"), [  # each expected value is bash 5's
    ("declare -A P=([tp]=2 [pp]=4)", '"${P[tp]}" "${P[pp]}" "${#P[@]}"', ["2", "4", "2"]),
    ('declare -A L=(["7B"]=32 [13B]=40); S=13B', '"${L[$S]}" "${L[7B]}" "${L[none]}"', ["40", "32", ""]),
    ('declare -A P; P["c"]=x$((1+1)); P[c]+=y', '"${P[c]}"', ["x2y"]),
    ('declare -A P=([a]=1 [b]=2); unset "P[a]"', '"${#P[@]}" "${P[b]}"', ["1", "2"]),
    ("declare -A P=([a]=1); P[$UNKNOWN_KEY]=2", '"${P[a]}"', ["${P[a]}"]),  # which key was set: not known
    ('declare -A P=([a]=1); K="$(hostname)"', '"${P[$K]}"', ["${P[$K]}"]),
])
def test_an_associative_array_is_bashs(code, words, expected):
    reading = read_script(f"{code}\ntorchrun pretrain_gpt.py {words}\n")
    assert [show(a) for a in reading.commands[-1].argv[2:]] == expected


def test_flags_built_from_an_associative_array_are_carried():
    # seen: `${!P[@]}` of `declare -A P` read as the indices 0, 1 of a plain array (`--0 …`)
    script = ("declare -A P\nP[tensor-model-parallel-size]=2\nP[pipeline-model-parallel-size]=4\nARGS=()\n"
              'for k in "${!P[@]}"; do ARGS+=(--$k ${P[$k]}); done\n'
              f'torchrun pretrain_gpt.py {MODEL} "${{ARGS[@]}}"\n')
    imported = import_source(script, "train.sh")
    assert imported.lost == [] and imported.settings["tensor_model_parallel_size"] == 2
    assert imported.settings["pipeline_model_parallel_size"] == 4


@pytest.mark.parametrize("loop", [
    "while read -r k v; do\n  ARGS+=(--$k $v)\ndone < model.cfg\n",  # a file: what it adds is not known
    'for f in $(ls conf); do\n  ARGS+=(--$f 1)\ndone\n',
    'if [ -f x ]; then\n  ARGS+=($EXTRA_MODEL)\nfi\n',  # adds words its text does not name
    'E="--num-layers 4"\nif [ -f x ]; then\n  ARGS+=($E)\nfi\n',
])
def test_a_branch_that_adds_what_its_text_does_not_name_is_lost_not_dropped(loop):
    # seen: `while read -r k v; do ARGS+=(--$k $v); done < file` left ARGS empty, the round trip "equal"
    imported = import_source(f"ARGS=(--log-interval 1)\n{loop}torchrun pretrain_gpt.py {MODEL} \"${{ARGS[@]}}\"\n",
                             "train.sh")
    assert any("${ARGS}" in n for n in imported.lost), imported.lost
    assert imported.settings["log_interval"] == 1


def test_a_branch_that_adds_named_flags_keeps_the_rest():
    imported = import_source('ARGS=(--log-interval 1)\nif [ -n "$WANDB_API_KEY" ]; then\n  ARGS+=(--wandb-project x)\n'
                             f'fi\ntorchrun pretrain_gpt.py {MODEL} "${{ARGS[@]}}"\n', "train.sh")
    assert imported.lost == [] and imported.settings["log_interval"] == 1


@pytest.mark.parametrize(("code", "expected"), [  # each expected value is bash 5's
    ("while read -r k v; do A+=(--$k \"$v\"); done <<E\nnum-layers 24\nhidden-size  1024 x\nE",
     ["--num-layers", "24", "--hidden-size", "1024 x"]),
    ('while IFS== read -r k v; do A+=(--$k $v); done <<< "tp=2\npp=4"', ["--tp", "2", "--pp", "4"]),
    ("while read -r a; do A+=(\"$a\"); read -r b; A+=(\"[$b]\"); done <<E\n1\n2\n3\nE", ["1", "[2]", "3", "[]"]),
])
def test_a_while_read_loop_over_a_known_document_is_bashs(code, expected):
    reading = read_script(f'A=()\n{code}\ntorchrun pretrain_gpt.py "${{A[@]}}"\n')
    assert [show(a) for a in reading.commands[-1].argv[2:]] == expected


def test_a_here_document_expands_the_special_parameters_as_bash_does():
    # the grammar finds $N in a here-document, not $1/$#: `cat <<EOF` in a function gave the flag "$1" itself
    script = ('model_args() {\n  cat <<EOF\n--num-layers $1\n--hidden-size $2\nEOF\n}\n'
              'torchrun pretrain_gpt.py $(model_args 4 256) --num-attention-heads 4\n')
    imported = import_source(script, "train.sh")
    assert imported.lost == [] and imported.settings["num_layers"] == 4 and imported.settings["hidden_size"] == 256
    reading = read_script('L=$(cat <<E\n--x $1 \\$2 $#\nE\n)\ntorchrun pretrain_gpt.py $L\n', ["9", "8"])
    assert [show(a) for a in reading.commands[-1].argv[2:]] == ["--x", "9", "$2", "2"]  # bash's


@pytest.mark.parametrize(("runner", "expected"), [
    ("accelerate launch --num_processes 16 --num_machines 2", {"gpus_per_node": 8, "nodes": 2}),
    ("accelerate launch --multi_gpu --num_processes=4", {"gpus_per_node": 4, "nodes": 1}),
    ("deepspeed --include localhost:0,1,2,3", {"gpus_per_node": 4}),
    ("deepspeed --include h1:0,1@h2:2,3", {"gpus_per_node": 2, "nodes": 2}),
])
def test_other_runners_give_their_process_counts(runner, expected):
    imported = import_source(f"{runner} pretrain_gpt.py {MODEL}\n", "train.sh")
    assert {k: imported.launcher.get(k) for k in expected} == expected and imported.settings["num_layers"] == 2


def test_a_per_node_count_of_every_gpu_is_named():
    imported = import_source(f"torchrun --standalone --nproc-per-node=gpu pretrain_gpt.py {MODEL}\n", "train.sh")
    assert "gpus_per_node" not in imported.launcher
    assert any("--nproc-per-node=gpu: one process per GPU" in n for n in imported.not_carried)


def test_an_entry_chosen_by_an_undecided_branch_is_named_with_it():
    # Megatron-LM's functional tests: CALLING_SCRIPT=pretrain_gpt.py, or pretrain_gpt_core.py when $9 is 1
    script = ("USE_CORE=$1\nCALLING_SCRIPT=pretrain_gpt.py\nif [[ $USE_CORE -eq 1 ]]; then\n"
              f"  CALLING_SCRIPT=pretrain_gpt_core.py\nfi\ntorchrun $CALLING_SCRIPT {MODEL}\n")
    with pytest.raises(UserError) as caught:
        import_source(script, "train.sh")
    message = caught.value.problems[0].message
    assert "line 6 runs ${CALLING_SCRIPT}" in message and "line 3" in message and "pretrain_gpt.py" in message
    assert import_source(script, "train.sh", ["0"]).settings["num_layers"] == 2
    with pytest.raises(UserError) as caught:  # a tool whose directory only is unknown keeps its own message
        import_source(f"python $TOOLS/convert.py {MODEL}\n", "convert.sh")
    assert "runs convert.py, not pretrain_gpt.py" in caught.value.problems[0].message


@pytest.mark.parametrize("prelude", [
    'for k in $(ls conf); do A+=($k); done\n',  # a loop over words not known
    'A=(x)\nif [ -f y ]; then A+=($EXTRA); fi\n',  # a branch adds what is not known
])
def test_the_count_of_an_array_holding_an_unknown_part_is_unknown(prelude):
    reading = read_script(prelude + 'torchrun pretrain_gpt.py ${#A[@]} ${!A[@]}\n')
    assert [show(a) for a in reading.commands[-1].argv[2:]] == ["${#A}", "${!A}"]


@pytest.mark.parametrize(("word", "expected"), [  # each expected value is bash 5's (set -- 'a b' c d)
    ('"${@}"', ["a b", "c", "d"]), ('"${@:2}"', ["c", "d"]), ("${@:2}", ["c", "d"]), ('"${@:1:2}"', ["a b", "c"]),
    ('"${*}"', ["a b c d"]), ("${#@}", ["3"]), ('"${@/#/--}"', ["--a b", "--c", "--d"]),
])
def test_the_braced_forms_of_the_scripts_arguments_are_bashs(word, expected):
    reading = read_script(f"torchrun pretrain_gpt.py {word}\n", ["a b", "c", "d"])
    assert [show(a) for a in reading.commands[-1].argv[2:]] == expected
    assert read_script('torchrun pretrain_gpt.py "${@}" "${@:2}"\n').commands[-1].argv[2:] == []  # no args


def test_a_wrapper_passing_its_other_arguments_through_is_read_with_them():
    script = f'SIZE=$1\ntorchrun pretrain_gpt.py {MODEL} "${{@:2}}"\n'
    imported = import_source(script, "train.sh", ["small", "--tensor-model-parallel-size", "2"])
    assert imported.lost == [] and imported.settings["tensor_model_parallel_size"] == 2


def test_a_string_continued_on_the_next_line_is_one_word():
    # OPTS="--num-layers 2"\<newline>" --hidden-size 64": the grammar read the second part as a command of its own
    script = 'OPTS="--num-layers 2"\\\n" --hidden-size 64"\ntorchrun pretrain_gpt.py $OPTS --num-attention-heads 4\n'
    imported = import_source(script, "train.sh")
    assert imported.settings == {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4}


def test_a_backtick_note_on_a_continued_line_expands_to_nothing():
    script = ("torchrun pretrain_gpt.py \\\n  --num-layers 2 \\\n  `# the hidden size` --hidden-size 64 \\\n"
              "  --num-attention-heads 4 `#heads`\n")
    imported = import_source(script, "train.sh")
    assert imported.settings == {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4}
    reading = read_script("torchrun pretrain_gpt.py \"a`# x`b\" '`# kept`'\n")  # bash: ab, `# kept`
    assert [show(a) for a in reading.commands[-1].argv[2:]] == ["ab", "`# kept`"]


def test_a_branch_adding_a_named_flag_with_a_value_not_known_keeps_the_command():
    # Swiss AI's submit scripts: TRAINING_CMD="$TRAINING_CMD --wandb-exp-name $EXP_NAME-$SLURM_JOB_ID" under an `if`
    script = (f'CMD="torchrun pretrain_gpt.py {MODEL}"\nif [ -n "$WANDB_API_KEY" ]; then\n'
              '  CMD="$CMD --wandb-project p --wandb-exp-name run-$SLURM_JOB_ID"\nfi\n$CMD\n')
    imported = import_source(script, "submit.sh")
    assert imported.lost == [] and imported.settings["num_layers"] == 2


def test_a_branch_adding_a_model_flag_decides_that_flag_only():
    script = (f'CMD="torchrun pretrain_gpt.py {MODEL}"\nif [ "$SIZE" = big ]; then\n'
              '  CMD="$CMD --ffn-hidden-size 512"\nfi\n$CMD\n')
    imported = import_source(script, "submit.sh")
    assert len(imported.lost) == 1 and "decides --ffn-hidden-size" in imported.lost[0]
    assert imported.settings["num_layers"] == 2


@pytest.mark.parametrize(("code", "expected"), [  # each expected value is bash 5's
    ("X=true\nif $X; then A=1; else A=2; fi", "1"),
    ("X=${1:-false}\nif $X; then A=1; else A=2; fi", "2"),
    ("X=false\n$X && A=1 || A=2", "2"),  # was 1: a command named by a variable was taken to succeed
    ("X=false\nif ! $X; then A=1; else A=2; fi", "1"),
    ('X="test -n x"\nif $X; then A=1; else A=2; fi', "1"),
    ("if $NOT_KNOWN; then A=1; else A=2; fi", "${A}"),
])
def test_a_boolean_variable_run_as_a_command_is_decided(code, expected):
    reading = read_script(code + "\ntorchrun pretrain_gpt.py $A\n", [])
    assert [show(a) for a in reading.commands[-1].argv[2:]] == [expected]


@pytest.mark.parametrize(("code", "expected"), [  # each expected value is bash 5's
    ('X=bf16_run; [[ $X == *"bf16"* ]] && P=--bf16 || P=--fp16', "--bf16"),
    ("X=abcdef; Y=abc; [[ $X == \"$Y\"* ]] && P=y || P=n", "y"),  # was n: "$Y"* compared as a string
    ('X=abc; Y="a*"; [[ $X == "$Y" ]] && P=y || P=n', "n"),
    ('X="a*c"; [[ $X == a"*"c ]] && P=y || P=n', "y"),
    ("X=1; [[ -v X ]] && P=set || P=unset", "set"),
    ("unset Q; [[ -v Q ]] && P=y || P=n; Q=", "n"),
    ("X=5; let X=X+1 'Y = X * 2'; P=$X$Y", "612"),  # was 5: let was not read
    ('L=(a b c); unset "L[2]"; P="${L[*]}"', "a b"),
    ('L=(a b c); unset "L[1]"; P="${L[*]}"', "${P}"),  # a hole: not held, so not known (was "a b c")
])
def test_tests_let_and_unset_elements_are_bashs(code, expected):
    reading = read_script(code + '\ntorchrun pretrain_gpt.py "$P"\n', [])
    assert [show(a) for a in reading.commands[-1].argv[2:]] == [expected]


@pytest.mark.parametrize(("code", "expected"), [
    ("command -v nvcc && P=cuda || P=cpu", "${P}"),  # was cuda: a program's status taken for success
    ("f() { return 1; }\nf && P=y || P=n", "${P}"),
    ("P=a; cd /work && P=b", "b"),  # the normal path of `cd … &&` is read as run
    ("P=a; sync && cd /work && P=b", "b"),  # so is that of a chain of them, ((sync && cd) && …) in the grammar
    ("P=a; X=1 && cd /work && P=b", "b"),
    ("P=a; cd /work && [ -f x ] && P=b", "${P}"),  # a test not decided is no normal path
    ("P=a; cd /work && which nvcc || exit 1 && P=b", "${P}"),  # nor a choice between alternatives
    ("sync && cd /work && P=y || P=n", "${P}"),  # the chain's status stays unknown for an alternative
    ("echo hi && P=y || P=n", "y"),  # echo succeeds whatever the machine holds
    ("X=ab; case $X in a*) P=1;& b*) P=2;; esac", "2"),  # bash 5: `;&` runs the next body too
    ("X=ab; case $X in a*) P=1;;& *b) P=${P}2;; c) P=3;; esac", "12"),  # `;;&` tests the next patterns
])
def test_statuses_and_case_terminators_are_bashs(code, expected):
    reading = read_script(code + '\ntorchrun pretrain_gpt.py "$P"\n', [])
    assert [show(a) for a in reading.commands[-1].argv[2:]] == [expected]


def test_a_training_command_after_cd_and_is_read_as_run():
    imported = import_source(f"cd /work/Megatron-LM && torchrun pretrain_gpt.py {MODEL}\n", "train.sh")
    assert imported.lost == [] and imported.settings["num_layers"] == 2


def test_a_training_command_at_the_end_of_a_chain_of_commands_is_read_as_run():
    # MLPerf's Habana GPT-3 job: `sync && if [ "$LOCAL_RANK" -eq 0 ]; then echo 3 > …; fi && cd DIR && python …`
    script = ('sync && if [ "$LOCAL_RANK" -eq "0" ]; then echo 3 > /proc/sys/vm/drop_caches ; fi && cd /work && '
              f"torchrun pretrain_gpt.py {MODEL}\n")
    imported = import_source(script, "train.sh")
    assert imported.lost == [] and imported.settings["num_layers"] == 2


@pytest.mark.parametrize(("code", "args", "expected"), [  # each expected value is bash 5's
    ("M=$1; [[ $M =~ ^([0-9]+)B$ ]]; N=${BASH_REMATCH[1]}", ["70B"], "70"),
    ('M=13B; [[ $M =~ ^([0-9]+)B$ ]] && N="${BASH_REMATCH[1]}:${BASH_REMATCH[0]}"', [], "13:13B"),
    ('M=7B; [[ $M =~ ^([0-9]+)X$ ]]; N="${BASH_REMATCH[1]}"', [], ""),  # no match: empty
    ('[[ $NOT_KNOWN =~ ([0-9]+) ]]; N="${BASH_REMATCH[1]}"', [], "${N}"),
])
def test_bash_rematch_holds_the_groups_of_a_known_match(code, args, expected):
    reading = read_script(code + '\ntorchrun pretrain_gpt.py "$N"\n', args)
    assert [show(a) for a in reading.commands[-1].argv[2:]] == [expected]


@pytest.mark.parametrize(("code", "expected"), [
    # a value not known, unquoted in the array, splits into as many words as it holds: how many is not known
    ("nodes=( $(scontrol show hostnames $SLURM_JOB_NODELIST) )\nP=${#nodes[@]}", "${P}"),
    ("nodes=( $(scontrol show hostnames) )\nP=${nodes[0]}", "${P}"),
    ("GPUS=(${CUDA_VISIBLE_DEVICES//,/ })\nP=${#GPUS[@]}", "${P}"),
    ("A=(x $NOT_SET y)\nP=${A[2]}", "${P}"),
    ("A=(x $NOT_SET y)\nP=${!A[@]}", "${P}"),
    ("A=(x $NOT_SET y)\nP=${A[0]}", "x"),  # before it, each element is one
    ("set -- $(scontrol show hostnames)\nP=$#", "${P}"),  # so are the positional parameters it sets
    ('set -- a $(scontrol show hostnames) b\nP="$1:$3"', "a:${3}"),
    ("export CUDA_VISIBLE_DEVICES=0,1,2,3\nGPUS=(${CUDA_VISIBLE_DEVICES//,/ })\nP=${#GPUS[@]}", "4"),
])
def test_the_length_of_an_array_of_words_not_known_is_not_known(code, expected):
    # `nodes=( $(scontrol …) ); torchrun --nnodes ${#nodes[@]}` was read as one node
    reading = read_script(code + '\ntorchrun pretrain_gpt.py "$P"\n', [])
    assert [show(a) for a in reading.commands[-1].argv[2:]] == [expected]


def test_an_element_of_an_array_not_known_is_not_known():
    # an array a branch left unknown: ${A[1]} was "" (out of its one stand-in element), a wrong value
    reading = read_script('A=(x y)\nif [ -f f ]; then A=(p q r); fi\ntorchrun pretrain_gpt.py "${A[1]}"\n')
    assert [show(a) for a in reading.commands[-1].argv[2:]] == ["${A}"]


@pytest.mark.parametrize("test", ['if [ "$1" == "--save-to-pvc" ]; then\n  CKPT=/mnt/pvc\nelse\n  CKPT=/tmp/w\nfi\n',
                                  'case "$MODE" in\n  --to-pvc|--pvc) CKPT=/mnt/pvc ;;\n  *) CKPT=/tmp/w ;;\nesac\n',
                                  'while [ "$1" != "--end" ] && [ -n "$1" ]; do CKPT=/mnt/pvc; shift; done\n'])
def test_the_words_a_test_compares_with_are_not_flags_its_branches_give(test):
    # a branch that only picks the checkpoint directory decides no model flag, whatever flag-like word its test
    # compares with (`--save-to-pvc` is the script's own option, not pretrain_gpt.py's)
    imported = import_source(f"CKPT=/tmp/ckpt\n{test}torchrun pretrain_gpt.py {MODEL} --save $CKPT --load $CKPT\n",
                             "train.sh", [])
    assert imported.lost == [], imported.lost
    assert not any("--save-to-pvc" in flag or "--pvc" in flag for item in imported.undecided for flag in item.flags)


def test_flags_a_branch_gives_are_still_its_own():
    imported = import_source(f'ARGS=""\nif [ "$MODE" == "--fast" ]; then\n  ARGS="--fp16"\nfi\n'
                             f"torchrun pretrain_gpt.py {MODEL} $ARGS\n", "train.sh", [])
    assert any("and it decides --fp16" in line for line in imported.lost), imported.lost
    assert not any("--fast" in line.split("and it decides")[1] for line in imported.lost), imported.lost


@pytest.mark.parametrize("script", [
    f'ENV_ARGS="WANDB_DISABLED=true NCCL_DEBUG=INFO"\n$ENV_ARGS torchrun --nproc_per_node 2 pretrain_gpt.py {MODEL}\n',
    f'PRE=(NCCL_DEBUG=INFO)\n"${{PRE[@]}}" python pretrain_gpt.py {MODEL}\n',
    f'"TP=2" torchrun pretrain_gpt.py {MODEL}\n',
])
def test_an_assignment_an_expansion_gives_is_the_command_bash_does_not_find(script):
    # bash takes only the words written before a command for assignments: `$ENV_ARGS torchrun …` runs a program
    # named WANDB_DISABLED=true (command not found, status 127), and the training command never runs
    imported = import_source(script, "train.sh")
    (loss,) = imported.lost
    assert "bash runs the first of these words as the command" in loss and "=" in loss.split(":")[0]
    assert not any(name in imported.env for name in ("WANDB_DISABLED", "NCCL_DEBUG", "TP"))


def test_written_assignments_before_the_command_are_still_its_environment():
    imported = import_source(f"NCCL_DEBUG=INFO torchrun --nproc_per_node 2 pretrain_gpt.py {MODEL}\n", "train.sh")
    assert imported.lost == [] and imported.env.get("NCCL_DEBUG") == "INFO"
