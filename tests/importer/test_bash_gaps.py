"""Shapes of real scripts the grammar alone misreads (a subscript with a blank, a glob after `=` inside [[ ]] with
more after it, a word of escaped blanks), `case` fall-through on a value not known, and jsrun's process counts;
each expected value is what bash 5 gives."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from launcher.errors import UserError
from launcher.importer.bash_subset import read_script, show
from launcher.importer.build import import_source

MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
         "--micro-batch-size 1 --global-batch-size 8 --train-iters 4 --mock-data --tokenizer-type NullTokenizer "
         "--vocab-size 128")


def words(code: str, *args: str) -> list[str]:
    reading = read_script(code + "\ntorchrun pretrain_gpt.py $W\n", list(args))
    assert reading.skipped == [] or all("not read" not in why for _, why in reading.skipped), reading.skipped
    return [show(a) for a in reading.commands[-1].argv[2:]]


def bash_words(code: str) -> list[str]:
    out = subprocess.run(["bash", "-c", code + "\nprintf '%s\\n' $W"], capture_output=True, text=True, timeout=10)
    return out.stdout.splitlines()


SHAPES = [
    'declare -A P\nP[a b]=1\nk=a\nW="${P[a b]}:${P[$k b]}"',
    'declare -A P=([x]=1)\nP[big model]+=2\nW=${P[big model]}',
    'X=abc\nif [[ $X = a?c && -n $X ]]; then W=glob; else W=no; fi',
    'X=abd\n[[ $X = a?c || $X = *d ]] && W=either || W=neither',
    'X="a = b"\n[[ $X = "a = b" && $X != a*c ]] && W=y || W=n',
    'X=ab\ncase $X in\n  a*)\n    ;&\n  zz) W=fell ;;\nesac',
    # inside a here-document a `\\ ` is the document's text, not a word
    "A=$(cat <<EOF\nx \\\\ y \\ \nEOF\n)\nB=$(cat <<-'E'\n\tp \\ \n\tE\n)\nW=\"$A|$B\"",
]


@pytest.mark.parametrize("code", SHAPES)
def test_shapes_the_grammar_misreads_are_read_as_bash_does(code):
    got = words(code)
    if shutil.which("bash"):
        assert got == bash_words(code)


def test_a_word_of_escaped_blanks_is_a_word():
    # bash passes " " to the program (a blank after the `\` that was meant to continue the line); dropping it
    # would hide the error Megatron gives
    reading = read_script("ARGS=( --foo \\  # note\n  --bar 1 )\ntorchrun pretrain_gpt.py \"${ARGS[@]}\" a\\ \\ b "
                          "\\ \\  --lr 1 \\ \n  --next 2\n")
    assert [show(a) for a in reading.commands[0].argv[2:]] == ["--foo", " ", "--bar", "1", "a  b", "  ", "--lr", "1",
                                                                " "]
    assert [show(a) for a in reading.commands[1].argv] == ["--next", "2"]  # bash runs it as a command of its own


def test_a_blank_word_in_the_training_command_is_not_silently_dropped():
    script = f"torchrun pretrain_gpt.py {MODEL} \\ \n  --ffn-hidden-size 256\n"
    imported = import_source(script, "train.sh")
    assert imported.lost or any("' '" in note or '" "' in note for note in imported.not_carried), \
        (imported.lost, imported.not_carried)


@pytest.mark.parametrize(("code", "expected"), [
    # a value not known: `;&` runs the next body too, so every branch sets PP=4
    ("case $SIZE in big) TP=8 ;& mid) PP=4 ;; *) PP=4 ;; esac\nW=$PP", ["4"]),
    # `;;&` then a catch-all: the catch-all's body runs whatever the value
    ("case $MODE in a) X=1 ;;& *) Y=2 ;; esac\nW=$Y", ["2"]),
    ("case $MODE in a) X=1 ;;& b) Y=2 ;; esac\nW=$Y", ["${W}"]),
    ("case $SIZE in big) TP=8 ;& *) PP=4 ;; esac\nW=$TP", ["${W}"]),
])
def test_case_fall_through_on_a_value_not_known(code, expected):
    assert words(code) == expected


@pytest.mark.parametrize(("runner", "expected"), [
    ("jsrun -n 8 -a 1 -g 1", {"gpus_per_node": 8}),
    ("jsrun -n16 -r4 -a1 -g1 -c7", {"gpus_per_node": 4, "nodes": 4}),
    ("jsrun --nrs 2 --rs_per_host 1 --tasks_per_rs 6 --gpu_per_rs 6 -c 42 --bind rs", {"gpus_per_node": 6, "nodes": 2}),
    ("jsrun --nrs=4 --rs_per_host=1 --tasks_per_rs=4 --gpu_per_rs=4", {"gpus_per_node": 4, "nodes": 4}),
    ("jsrun -p 12 -r 6 -g 1", {"gpus_per_node": 6, "nodes": 2}),
])
def test_jsrun_gives_the_process_counts(runner, expected):
    imported = import_source(f"{runner} python pretrain_gpt.py {MODEL}\n", "train.sh")
    assert {k: imported.launcher.get(k) for k in expected} == expected and imported.settings["num_layers"] == 2


@pytest.mark.parametrize(("header", "runner", "expected", "named"), [
    ("", "mpirun --npernode 8", {"gpus_per_node": 8, "nodes": None}, "--npernode 8"),
    ("", "mpiexec --ppn 4 --depth 8 --cpu-bind depth", {"gpus_per_node": 4, "nodes": None}, "--ppn 4"),
    ("", "srun --ntasks-per-node=8", {"gpus_per_node": 8, "nodes": None}, "--ntasks-per-node=8"),
    ("", "jsrun -r6 -a1 -g1 -c7", {"gpus_per_node": 6, "nodes": None}, "-r6"),
    ("#BSUB -nnodes 4\n#BSUB -W 60\n", "jsrun -r6 -a1 -g1 -c7", {"gpus_per_node": 6, "nodes": 4}, ""),
    ("#SBATCH --nodes=3\n", "srun --ntasks-per-node=8", {"gpus_per_node": 8, "nodes": 3}, ""),
    ("", "mpirun -np 16 --npernode 8", {"gpus_per_node": 8, "nodes": 2}, ""),
])
def test_a_count_per_node_without_nodes_is_the_jobs_and_named(header, runner, expected, named):
    # the job launcher starts that many on each node of the job: without the job's node count the world was read as
    # one node's, silently
    imported = import_source(f"#!/bin/bash\n{header}{runner} python pretrain_gpt.py {MODEL}\n", "train.sh")
    assert {k: imported.launcher.get(k) for k in expected} == expected
    said = [n for n in imported.not_carried if "processes on each node of the job" in n]
    assert bool(said) == bool(named) and all(n.startswith(named) for n in said), said


@pytest.mark.parametrize(("runner", "expected", "named"), [
    ("mpirun -np 16 -N 8", {"nodes": 2, "gpus_per_node": 8}, ""),  # Open MPI's -N is per node (was 8 nodes)
    ("srun -N 2 -n 8", {"nodes": 2, "gpus_per_node": 4}, ""),  # was 2 nodes of the preset's 8
    ("mpirun -np 16", {"nodes": None, "gpus_per_node": None}, "processes in all"),  # was one node of 8, unsaid
    ("mpirun -np 16 --map-by ppr:4:socket", {"nodes": None, "gpus_per_node": None}, "processes in all"),
    ("srun -N 4", {"nodes": 4, "gpus_per_node": None}, "srun without a count of tasks on each node"),
    ("mpirun -np 4", {"nodes": None, "gpus_per_node": 4}, ""),
    ("#SBATCH --nodes=4\nsrun -n 32", {"nodes": 4, "gpus_per_node": 8}, ""),  # the job's nodes share the tasks
    ("#SBATCH --nodes=3\nsrun -n 32", {"nodes": 3, "gpus_per_node": None}, "not a whole number on each"),
    ("mpirun -np 16 -H node1:8,node2:8", {"nodes": 2, "gpus_per_node": 8}, ""),  # the hosts it names
    ("mpiexec -n 16 -hosts n1,n2", {"nodes": 2, "gpus_per_node": 8}, ""),
    ("mpirun -np 16 -H $HOSTS", {"nodes": None, "gpus_per_node": None}, "a list of hosts not known"),
    # a one-letter count with its value attached, as getopt reads it (was one node of the preset's 8, unsaid)
    ("srun -N2 -n16", {"nodes": 2, "gpus_per_node": 8}, ""),
    ("srun -u -n192 -c2 --ntasks-per-node=8", {"nodes": 24, "gpus_per_node": 8}, ""),
    ("srun -N$NODES --ntasks-per-node=4", {"nodes": None, "gpus_per_node": 4}, ""),
    ("mpiexec_mpt -np 16", {"nodes": None, "gpus_per_node": None}, "processes in all"),  # -np is no -n p
    # job launchers of other schedulers and MPI packages (their counts were not read, and nothing said so)
    ("flux run -N 2 --tasks-per-node=4 -g 1", {"nodes": 2, "gpus_per_node": 4}, ""),
    ("flux run -N2 -n8 -x -o cpu-affinity=per-task", {"nodes": 2, "gpus_per_node": 4}, ""),
    ("aprun -n 16 -N 8 -d 8", {"nodes": 2, "gpus_per_node": 8}, ""),  # ALPS's -N is per node
    ("mpiexec.hydra -n 16 -ppn 8", {"nodes": 2, "gpus_per_node": 8}, ""),
    ("mpirun.openmpi -np 16 --npernode 4", {"nodes": 4, "gpus_per_node": 4}, ""),
    ("ibrun -n 32", {"nodes": None, "gpus_per_node": None}, "processes in all"),
    ("horovodrun -np 16 -H h1:8,h2:8", {"nodes": 2, "gpus_per_node": 8}, ""),
])
def test_a_job_launchers_counts_are_read_as_it_reads_them(runner, expected, named):
    imported = import_source(f"#!/bin/bash\n{runner} python pretrain_gpt.py {MODEL}\n", "train.sh")
    assert {k: imported.launcher.get(k) for k in expected} == expected
    assert any(named in n for n in imported.not_carried) if named else not any(
        "processes in all" in n or "srun without" in n for n in imported.not_carried)


@pytest.mark.parametrize(("runner", "named"), [
    ("pbsdsh --", True), ("charmrun +p16 ++nodelist hosts", True), ("poe", True),
    ("nsys profile -o prof", False), ("conda run -n env", False), ("numactl --interleave=all", False), ("", False),
])
def test_a_program_that_may_start_python_once_per_gpu_is_named_with_its_counts_unknown(runner, named):
    # `pbsdsh python pretrain_gpt.py` was read as one node of the preset's 8 GPUs, with nothing said about the counts
    imported = import_source(f"#!/bin/bash\n{runner} python pretrain_gpt.py {MODEL}\n", "train.sh")
    said = [n for n in imported.not_carried if "a program whose process counts the import does not read" in n]
    assert bool(said) == named and not {"nodes", "gpus_per_node"} & set(imported.launcher), said


@pytest.mark.parametrize(("runner", "expected", "named"), [
    # MindSpore's msrun: --worker_num in all, --local_worker_num on each node (was one node of the preset's 8, with
    # both options named as "not carried" and the world left to the default)
    ("msrun --worker_num 16 --local_worker_num 8 --node_rank 0 --log_dir=log", {"nodes": 2, "gpus_per_node": 8}, ""),
    ("msrun --worker_num=32 --local_worker_num=8 --join=False", {"nodes": 4, "gpus_per_node": 8}, ""),
    ("msrun --worker_num 4 --local_worker_num 4", {"nodes": 1, "gpus_per_node": 4}, ""),
    ("msrun --log_dir=log", {"nodes": 1, "gpus_per_node": 8}, "msrun's default"),  # 8 and 8 unless given
    ("msrun --worker_num 12 --local_worker_num 8", {"nodes": None, "gpus_per_node": None}, "not a whole number"),
    ("msrun --worker_num $WORLD --local_worker_num 8", {"nodes": None, "gpus_per_node": None},
     "not known without running the script"),
    ("nohup msrun --worker_num 16 --local_worker_num 8", {"nodes": 2, "gpus_per_node": 8}, ""),
    # a program at the runner's place whose counts are not read: named, never left to the preset's default unsaid
    ("mylaunch --procs 16", {"nodes": None, "gpus_per_node": None}, "a program whose process counts"),
    ("mylaunch --nnodes 2 --nproc_per_node 4", {"nodes": 2, "gpus_per_node": 4}, ""),
])
def test_a_runners_process_counts_are_read_or_named(runner, expected, named):
    imported = import_source(f"#!/bin/bash\n{runner} pretrain_gpt.py {MODEL}\n", "train.sh")
    assert {k: imported.launcher.get(k) for k in expected} == expected
    notes = " ".join(imported.not_carried)
    assert (named in notes) if named else "a program whose process counts" not in notes
    assert not any(n.startswith(("msrun --worker_num", "msrun --local_worker_num")) and "does not carry" in n
                   for n in imported.not_carried)


@pytest.mark.parametrize(("script", "gpus", "named"), [
    # torchrun without --nproc_per_node starts $PET_NPROC_PER_NODE processes a node, else 1: the preset ran its own
    # 8 with nothing said
    ("torchrun", None, "torchrun without --nproc_per_node"),
    ("python -m torch.distributed.launch --nnodes 1", None, "torchrun without --nproc_per_node"),
    ("export PET_NPROC_PER_NODE=4\ntorchrun", 4, ""),  # the script gives torchrun its default
    ("torchrun --nproc-per-node=2", 2, ""),
    ("torchrun $DIST_ARGS", None, ""),  # the options are not known: said as such elsewhere, not as the default
    # accelerate without --num_processes: its configuration file's count
    ("accelerate launch", None, "accelerate (no --num_processes)"),
])
def test_a_torch_launchers_default_process_count_is_read_or_named(script, gpus, named):
    imported = import_source(f"#!/bin/bash\n{script} pretrain_gpt.py {MODEL}\n", "train.sh")
    assert imported.launcher.get("gpus_per_node") == gpus
    notes = " ".join(imported.not_carried)
    assert (named in notes) if named else "without --nproc_per_node" not in notes


@pytest.mark.parametrize(("decides", "expected"), [
    ('if [ "$NODE_RANK" -eq 0 ]; then ((GPUS++)); fi', None),  # MegatronApp: node 0 runs one process more
    ('case $NODE_RANK in 0) GPUS=8 ;; *) GPUS=4 ;; esac', None),
    ('[ "$NODE_RANK" -ge 0 ] && GPUS=4', 4),  # the same on every node: carried
    ("", 3),
])
def test_a_process_count_the_node_rank_decides_is_not_carried_as_every_nodes(decides, expected):
    script = (f"NODE_RANK=$1\nGPUS=3\n{decides}\ntorchrun --nproc_per_node $GPUS --nnodes 2 --node_rank $NODE_RANK "
              f"pretrain_gpt.py {MODEL}\n")
    for rank in ("0", "1"):
        imported = import_source(script, "train.sh", [rank])
        assert imported.launcher.get("gpus_per_node") == expected and imported.launcher.get("nodes") == 2
        said = [n for n in imported.not_carried if n.startswith("gpus_per_node: this node's")]
        assert bool(said) == (expected is None), said


@pytest.mark.parametrize(("header", "expected", "named"), [
    ("#SBATCH -N2\n#SBATCH --ntasks-per-node=8", {"nodes": 2, "gpus_per_node": 8}, False),  # -N2 was not read
    ("#SBATCH -N 2 -n 16", {"nodes": 2, "gpus_per_node": 8}, False),  # srun spreads the 16 tasks over 2 nodes
    ("#SBATCH -N4 -n8 -c16", {"nodes": 4, "gpus_per_node": 2}, False),
    ("#SBATCH --nodes=2-4\n#SBATCH --ntasks-per-node=8", {"nodes": None, "gpus_per_node": 8}, True),
    ("#SBATCH -N 1-2 --ntasks-per-node 4", {"nodes": None, "gpus_per_node": 4}, True),
])
def test_sbatch_counts_as_sbatch_reads_them(header, expected, named):
    imported = import_source(f"#!/bin/bash\n{header}\nsrun python pretrain_gpt.py {MODEL}\n", "job.sbatch")
    assert {k: imported.launcher.get(k) for k in expected} == expected
    assert any("as many as it finds free" in n for n in imported.not_carried) == named


MORE_SHAPES = [
    # printf's numeric conversions (printf -v and $(printf …)): were unknown
    "printf -v PADDED '%03d' 7\nprintf -v LR '%.1e' 0.00015\nW=\"$PADDED $LR $(printf '%x-%s' 255 a)\"",
    "W=$(printf -- '--%s %d ' tp 0x2 pp 010)",
    # name references (declare -n, local -n): REF+=(…) went to REF, not to the array it names
    "A=(--num-layers 2)\ndeclare -n REF=A\nREF+=(--hidden-size 64)\nW=\"${A[*]} ${!REF}\"",
    'add() { local -n arr=$1; shift; arr+=("$@"); }\nA=(--x 1)\nadd A --y 2\narr=kept\nW="${A[*]} $arr"',
    "set_tp() { declare -n out=$1; out=$2; }\nset_tp TP 4\nW=$TP",
    # a C-style loop whose parts are comma lists: j=10 was not set (W was "0: 1: 2:")
    'for ((i=0, j=10; i<3; i++, j-=2)); do W+="$i:$j "; done',
    # $IFS before the script sets it is bash's default: OLD=$IFS; …; IFS=$OLD stopped all splitting
    'OLD=$IFS; IFS=,; read -r A B <<< "x,y"; IFS=$OLD; S="$A $B"; W=$S',
    'OLD=$IFS; IFS=:; set -- $(echo 1:2); IFS=$OLD; W="$1 $2"',
    # attributes: declare -i makes += arithmetic (was "34"), -l / -u change the case of every assignment
    'declare -i N=3\nN+=4\ndeclare -l LOW=MiXeD\ndeclare -u UP=mixed\nW="$N $LOW $UP"',
    'f() { local -i n=$1; n+=1; local -u p=$2; echo "$n$p"; }\ndeclare -i X=0x10; X=X*2\n'
    'declare -l M=ABC; declare +l M; M=DEF\nW="$(f 4 bf) $X $M"',
    # case with a pattern (was every character) and bash 5's @ transformations (were unknown)
    'X="ab-cab"\nW="${X^^[ab]} ${X^a} ${X,,[A-Z]} ${X@U} ${X@u} ${X@Q}"',
    # expr and seq of known words (were unknown: GBS=$(expr $MBS \* $GPUS) in older scripts)
    'MBS=2; GPUS=8\nGBS=$(expr $MBS \\* $GPUS)\nH=`expr 4096 / 32`\nW="$GBS $H $(expr 7 % 3) $(expr -7 / 2)"',
    'for i in $(seq 1 3); do W+="$i "; done\nW+="$(seq -s, 2 2 6)"',
    # `[ "$A" \> "$B" ]`: the grammar lost the whole script around it (no training command was found)
    'M=7\nif [ $M == 7 ]; then W=a; fi\n[ "$M" \\> 10 ] && W+=gt || W+=le\n[ abc \\< abd -a -n x ] && W+=" lt"',
    'A=x; B=; C=y\nif [ "$A" -a \\( "$B" -o "$C" \\) ]; then W=1; else W=0; fi\n[ $A \\!= x ] && W+=ne || W+=eq\n'
    '[ \\( -n "$B" \\) ] && W+=" b" || W+=" nob"',
    # arithmetic with a parenthesised group inside a default (`${HL_X:-$((( GBS / DP + 15 ) / 16 ))}`): the grammar
    # lost every line from there to the end of the script, the training command included
    'GBS=64; DP=2\nif [ "$GBS" -gt 1 ]; then\n  H=${HL_H:-$((( GBS / DP + 15 ) / 16 ))}\nfi\nW="$H"',
    'A=4\nW="${U:-$(( ($A + 1) * 2 ))} ${U:-"$(( (A + 1) * 2 ))"}x ${U:+$(( (A) ))}${V-$(( (A) % 3 ))}"',
    'A=3\nB=${A:+$(( (A + 1) ))}${Q:=$(( ((A)) * (2) ))}\nW="$B $Q $(( (A) ))"',
    # test(1)'s integers are decimal, anything else its error (status 2, false): `[ false -ne 'false' ]` was
    # undecided and HabanaAI's Mixtral script was refused; `[ 010 -eq 8 ]` was read as octal
    "P=false\nif [ $P -ne 'false' ]; then W=t; else W=f; fi\n[ 010 -eq 8 ] && W+=oct || W+=dec\n"
    "[ 0x10 -eq 16 ] && W+=hex || W+=nohex\n[[ 010 -eq 8 ]] && W+=' arith' || W+=' noarith'\n"
    '[ " 3 " -eq 3 ] && W+=" blank"\n[ ! x -eq 1 ] && W+=" bang" || W+=" nobang"',
    # tr of known input (Habana's `$(echo "$USE_TORCH_COMPILE" | tr '[:upper:]' '[:lower:]')` left its exit branch
    # undecided)
    "C=True\nL=$(echo \"$C\" | tr '[:upper:]' '[:lower:]')\nW=\"$L $(echo 'a, b,,c' | tr -d ' ' | tr -s ',' ':')\"\n"
    "W+=\" $(printf 'x-y' | tr 'a-z-' 'A-Z_') $(echo 8x | tr -d '[:alpha:]\\n')\"",
    # one side settles -a/-o, &&/||: the file test on the other side (not known here) does not matter
    'N=1\nif [ "$N" -ne "1" -a -f "$HOSTS" ]; then W=multi; else W=single; fi\n'
    '[ -d /nonexistent/x -o "$N" = 1 ] && W+=" or"\n[[ -f /nonexistent/y && $N -eq 2 ]] || W+=" and"\n'
    '[ \\( -f /nonexistent/z -a "$N" = 2 \\) -o "$N" = 1 ] && W+=" group"',
]


@pytest.mark.parametrize("code", MORE_SHAPES)
def test_more_shapes_are_read_as_bash_does(code):
    got = words(code)
    if shutil.which("bash"):
        assert got == bash_words(code)


@pytest.mark.parametrize(("code", "expected"), [
    ("printf -v N '%d' abc\nW=$N", ["${W}"]),  # bash: an error and 0, not a value the script means
    ("printf -v N '%q' 'a b'\nW=$N", ["${W}"]),  # a conversion not read
    ("declare -n R=$NOT_KNOWN\nR=4\nW=$R", ["${W}"]),
])
def test_what_printf_and_references_cannot_know_is_unknown(code, expected):
    assert words(code) == expected


def test_a_backtick_after_a_continued_line_is_named_as_written():
    # the grammar starts the substitution at the line's `\`: the unknown was shown as ${$(`pwd)}
    reading = read_script('CMD=" \\\n    `pwd`/pretrain_gpt.py \\\n    --x `hostname`"\ntorchrun $CMD\n')
    assert [show(a) for a in reading.commands[-1].argv[1:]] == ["${$(pwd)}/pretrain_gpt.py", "--x", "${$(hostname)}"]


def test_select_reads_the_terminal_so_its_choice_is_not_known():
    reading = read_script("select M in 7b 70b; do break; done\ntorchrun pretrain_gpt.py --size $M\n")
    assert [show(a) for a in reading.commands[-1].argv[2:]] == ["--size", "${M}"]  # was 7b, chosen silently
    assert any(item.line == 1 for item in reading.undecided)


def test_words_xargs_reads_from_its_input_are_not_known():
    # bash: the flags come from the pipe; the import carried the command without them, and said nothing
    imported = import_source(f"echo {MODEL} | xargs -r torchrun pretrain_gpt.py\n", "train.sh")
    assert any("xargs reads from its input" in loss for loss in imported.lost)


@pytest.mark.parametrize("substitution", ["$(< model.args)", "$(<model.args)", '$(< "$DIR/model.args")',
                                          "`< model.args`"])
def test_a_command_substitution_that_reads_a_file_is_not_known(substitution):
    # bash reads the file in place of a command (as `$(cat FILE)`); read as no command, its flags were empty and the
    # round trip said equal
    imported = import_source(f"DIR=/cfg\ntorchrun pretrain_gpt.py {substitution} {MODEL}\n", "train.sh")
    assert any("model.args" in loss and "not known" in loss for loss in imported.lost), imported.lost


@pytest.mark.parametrize("loop", ["( while true; do nvidia-smi --query-gpu=memory.used; sleep 0.2; done ) > mem.log &",
                                  "for i in $(seq 1 300); do nvidia-smi -i $((i % 8)); sleep 1; done"])
def test_a_command_a_loop_runs_many_times_is_named_once_per_line(loop):
    # a GPU-memory sampler in the background: 2,000 identical lines in the report and the preset's header
    imported = import_source(f"{loop}\ntorchrun --nproc_per_node 8 pretrain_gpt.py {MODEL}\n", "train.sh")
    assert len(imported.not_carried) == len(set(imported.not_carried)) < 10, len(imported.not_carried)
    assert any("sleep" in note for note in imported.not_carried)


def test_a_process_substitution_sourced_is_named_as_such():
    imported = import_source(f"source <(grep = conf.ini)\ntorchrun pretrain_gpt.py {MODEL} "
                             "--tensor-model-parallel-size $TP\n", "train.sh")
    assert any("a command prints" in note for note in imported.not_carried)
    assert any("--tensor-model-parallel-size" in loss for loss in imported.lost)


@pytest.mark.parametrize("code", [
    "shopt -s extglob\nX=70b\ncase $X in +([0-9])b) W=num ;; *) W=other ;; esac",  # was other, silently
    "shopt -s extglob\nX=bf16\n[[ $X == @(bf16|fp16) ]] && W=half || W=full",
])
def test_an_extglob_pattern_is_not_matched_as_text(code):
    assert words(code) == ["${W}"]


@pytest.mark.skipif(shutil.which("expr") is None or shutil.which("seq") is None, reason="needs coreutils")
def test_expr_and_seq_are_coreutils():
    import random

    from launcher.importer.coreutils import expr, seq

    rng = random.Random(7)
    ops = ["+", "-", "*", "/", "%", "<", "<=", "=", "!=", ">", ">=", "|", "&"]
    atoms = ["0", "1", "7", "-3", "12", "100", "abc", "", "-0"]
    cases = [["(", "2", "+", "3", ")", "*", "4"], ["length", "abc"], ["1", "/", "0"]]
    for _ in range(60):
        args = [rng.choice(atoms)]
        for _ in range(rng.randint(0, 3)):
            args += [rng.choice(ops), rng.choice(atoms)]
        cases.append(args)
    for args in cases:
        ours = expr(args)
        real = subprocess.run(["expr", *args], capture_output=True, text=True, timeout=10)
        assert ours is None or (real.returncode < 2 and ours == real.stdout), args
    for args in (["3"], ["1", "3"], ["5", "-2", "1"], ["-s,", "1", "4"], ["-s", " ", "2", "2", "9"], ["4", "1"]):
        real = subprocess.run(["seq", *args], capture_output=True, text=True, timeout=10)
        assert seq(args) == real.stdout, args


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash judges what the grammar cannot read")
def test_a_training_command_the_grammar_cannot_read_is_named_not_missing():
    # `for …; { …; }` is bash, not the grammar's: it lost lines 1-3 and the import said "no line runs pretrain_gpt.py";
    # a command inside the part the grammar cannot read is named with its lines
    from launcher.errors import UserError

    script = f"A=1\nfor i in {{1..3}}; {{ torchrun pretrain_gpt.py {MODEL}; }}\n"
    with pytest.raises(UserError) as caught:
        import_source(script, "train.sh")
    message = caught.value.problems[0].message
    assert "no line runs" not in message and "line 2" in message and "near line 2" in message


@pytest.mark.parametrize("text", [
    "[ " * 200_000 + "\\> x\n", "[[ " * 200_000 + "\n", "a[" + " " * 200_000 + "\n", "\\ " * 200_000 + "\n",
    "[ '" * 100_000 + "\\>\n",
    "X=${A:-$(( " + "(" * 100_000 + "\n", "X=${A:-$((" * 100_000 + "\n",
    "W=$(printf '%0999999999d' 1)\n", "W=$(seq 1 999999999)\nW=$(expr 1 + + 2)\n",
])
def test_hostile_variations_of_these_shapes_end_in_bounded_time(text):
    import time

    from launcher.importer.bash_subset import ShellSyntaxError

    began = time.monotonic()
    try:
        read_script(text + "torchrun pretrain_gpt.py $W\n")
    except ShellSyntaxError:
        pass
    assert time.monotonic() - began < 5


def test_the_rewrites_for_the_grammar_stay_linear_around_here_documents():
    import time

    from launcher.importer.bash_subset import _brace_inner_names

    began = time.monotonic()
    _brace_inner_names(b"x <<A\nA\n \\ \n" * 50_000)
    assert time.monotonic() - began < 3


@pytest.mark.parametrize("opening, closing", [("<< TRAINING", "TRAINING"), ("<<'E'", "E"), ("<<-EOF", "\tEOF")])
def test_a_here_document_line_that_begins_with_its_word_does_not_end_it(opening, closing):
    # the grammar ended `<< TRAINING` at the body line `TRAINING_ARGS=(` and read the rest as commands; bash ends it
    # only at a line that is the word (seen in a script that writes its sbatch job from here-documents)
    word = closing.strip()
    code = (f"cat > /dev/null {opening}\n{word}_ARGS=(--num-layers 4)\n{word}X=1\n{closing}\nW=after\n")
    reading = read_script(code + "torchrun pretrain_gpt.py $W\n")
    assert [show(a) for a in reading.commands[-1].argv[2:]] == bash_words(code) == ["after"]
    assert all("not read" not in why for _, why in reading.skipped)


def test_the_sbatch_lines_of_a_job_file_the_script_writes_and_submits_are_the_jobs():
    script = ("cat > job.sbatch <<EOF\n#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --gpus-per-node=4\n"
              "srun torchrun --nnodes \\$SLURM_NNODES --nproc-per-node \\$SLURM_GPUS_PER_NODE pretrain_gpt.py "
              f"{MODEL}\nEOF\nsbatch job.sbatch\n")
    imported = import_source(script, "submit.sh")
    assert imported.launcher["nodes"] == 4 and imported.launcher["gpus_per_node"] == 4


@pytest.mark.parametrize("quote", ["", "'"])
def test_the_sbatch_lines_of_a_here_document_given_to_sbatch_are_the_jobs(quote):
    # srun without counts of its own starts the tasks the #SBATCH lines ask for: 2 nodes of 8
    script = (f"sbatch <<{quote}EOT{quote}\n#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=8\n"
              f"srun --container-image=img.sqsh python pretrain_gpt.py {MODEL}\nEOT\n")
    imported = import_source(script, "submit.sh")
    assert imported.launcher["nodes"] == 2 and imported.launcher["gpus_per_node"] == 8
    assert any("line 1: read as sbatch runs it: SLURM_NNODES=2" in n for n in imported.not_carried)


@pytest.mark.parametrize(("submit", "expected"), [
    ("sbatch -N 4 --ntasks-per-node=4 <<EOT\n#!/bin/bash\n{body}EOT\n", (4, 4)),
    ("cat > job.sh <<EOT\n#!/bin/bash\n{body}EOT\nsbatch -p gpu -N 4 job.sh\n", (4, 8)),
    ("cat > job.sh <<EOT\n#!/bin/bash\n{body}EOT\nsbatch -N $NODES job.sh\n", (None, 8)),  # not known here
])
def test_the_options_sbatch_is_given_win_over_the_jobs_sbatch_lines(submit, expected):
    body = f"#SBATCH -N 2\n#SBATCH --ntasks-per-node=8\nsrun python pretrain_gpt.py {MODEL}\n"
    imported = import_source(submit.format(body=body), "submit.sh")
    assert (imported.launcher.get("nodes"), imported.launcher.get("gpus_per_node")) == expected


def test_a_runner_option_written_with_equals_is_named_as_written():
    # `--launcher=MPICH` was named "--launcher=MPICH MPICH", `--nnodes=${N}` "--nnodes=${N} ${N}"
    imported = import_source(f"deepspeed --launcher=MPICH --num_nodes=$N pretrain_gpt.py {MODEL}\n", "train.sh")
    said = " | ".join(imported.not_carried)
    assert "--launcher=MPICH: a deepspeed option" in said and "MPICH MPICH" not in said
    assert "--num_nodes=${N}: not known without running the script; the preset's nodes is not set" in said


@pytest.mark.parametrize(("command", "expected", "named"), [
    ("salloc -N 2 --ntasks-per-node=8 srun python pretrain_gpt.py", {"nodes": 2, "gpus_per_node": 8}, ""),
    ('sbatch -N 2 --ntasks-per-node=8 --wrap "srun python pretrain_gpt.py', {"nodes": 2, "gpus_per_node": 8}, ""),
    ("salloc -N 2 --ntasks-per-node=8 srun -N 1 -n 4 python pretrain_gpt.py", {"nodes": 1, "gpus_per_node": 4}, ""),
    ("#SBATCH --ntasks=16\nsrun python pretrain_gpt.py", {"nodes": None, "gpus_per_node": None}, "SLURM_NTASKS=16"),
    ('sbatch -N 2 --ntasks-per-node=8 --wrap "python pretrain_gpt.py', {"nodes": None, "gpus_per_node": None},
     "bash starts one process"),
])
def test_srun_runs_in_the_allocation_its_salloc_or_sbatch_makes(command, expected, named):
    # the allocation's counts were not read (one node of 8, round trip equal), nor its absence said
    text = f"#!/bin/bash\n{command} {MODEL}" + ('"' if command.count('"') % 2 else "") + "\n"
    imported = import_source(text, "train.sh")
    assert {k: imported.launcher.get(k) for k in expected} == expected
    assert not named or any(named in n for n in imported.not_carried), imported.not_carried


@pytest.mark.parametrize(("header", "runner", "expected", "named"), [
    ("#SBATCH -N 2\n#SBATCH --ntasks-per-node=8\n", "mpirun", {"nodes": 2, "gpus_per_node": 8}, False),
    ("#SBATCH --nodes=2 --ntasks-per-node=4\n", "mpiexec --bind-to none", {"nodes": 2, "gpus_per_node": 4}, False),
    ('#BSUB -n 8\n#BSUB -R "span[ptile=4]"\n', "mpirun", {"nodes": None, "gpus_per_node": None}, True),
    ("#PBS -l select=2:ncpus=32:ngpus=4:mpiprocs=4\n", "mpiexec", {"nodes": None, "gpus_per_node": None}, True),
    ("", "mpirun --hostfile hosts", {"nodes": None, "gpus_per_node": None}, True),
    ("#SBATCH -N 2\n#SBATCH --ntasks-per-node=8\n", "mpirun -np 4", {"nodes": None, "gpus_per_node": 4}, False),
])
def test_mpirun_without_counts_runs_the_jobs_slots(header, runner, expected, named):
    # Open MPI and MPICH start one process per slot of the allocation: a job of 2 nodes × 8 tasks was one node of 8
    imported = import_source(f"#!/bin/bash\n{header}{runner} python pretrain_gpt.py {MODEL}\n", "train.sh")
    assert {k: imported.launcher.get(k) for k in expected} == expected
    assert named == any("starts one process per slot of the job's allocation" in n for n in imported.not_carried)


@pytest.mark.parametrize(("runner", "said"), [("", True), ("numactl --interleave=all nsys profile -o p", True),
                                              ("LOCAL_RANK=0", True), ("srun -N 2", False), ("mpirun -np 8", False)])
def test_python_under_no_job_launcher_is_said_to_be_one_process_whose_count_is_not_carried(runner, said):
    # the preset ran 8 ranks on one node where bash starts one (or an outer srun one per GPU): nothing said so
    imported = import_source(f"{runner} python pretrain_gpt.py {MODEL}\n", "train.sh")
    named = [n for n in imported.not_carried if "bash starts one process (a world of 1)" in n]
    assert bool(named) == said, imported.not_carried
    assert not said or not {"nodes", "gpus_per_node"} & set(imported.launcher)


def test_a_runner_option_under_a_job_launcher_is_said_of_the_runner_with_what_is_unknown():
    # was "srun --master-port=${P}: not a number" (srun has no such option; the port is only not known here), and
    # "--nnodes ${N}: not a number" left unsaid that the preset's nodes is not the script's
    imported = import_source(f"srun --ntasks-per-node=1 python -m torch.distributed.run --nnodes $N --nproc-per-node 8 "
                             f"--master-port=$P pretrain_gpt.py {MODEL}\n", "train.sh")
    said = " | ".join(imported.not_carried)
    assert "torch.distributed.run --master-port=${P}: not known without running the script" in said, said
    assert "torch.distributed.run --nnodes ${N}: not known without running the script; the preset's nodes" in said
    assert "not a number" not in said and "srun --master-port" not in said


def test_a_here_document_marker_inside_a_quoted_string_is_no_here_document():
    # a sweep script gives ssh "sudo python3 - $c <<'PY' … PY" (a string): taken for a here-document by a scan of the
    # text, it paired with a later PY line, and the whole script was called a syntax error
    code = ("f() {\n  ssh host \"python3 - $1 <<'PY'\nimport sys\nPY\"\n}\ng() {\n  python3 <<'PY'\nprint(1)\nPY\n}\n"
            "W=after\n")
    reading = read_script(code + "torchrun pretrain_gpt.py $W\n")
    assert [show(a) for a in reading.commands[-1].argv[2:]] == bash_words(code) == ["after"]
    assert reading.stopped is None and reading.unended_heredocs == []


def test_a_manifest_containers_env_and_its_dollar_paren_references_are_read():
    # Kubernetes expands `$(NAME)` in command/args from the container's env before any shell (`$$(` is a literal
    # `$(`), and a `bash -c` script reads the env: both were unknown
    manifest = ("kind: Job\nspec:\n  template:\n    spec:\n      containers:\n        - name: t\n          env:\n"
                "            - {name: TP, value: \"4\"}\n            - {name: LAYERS, value: 6}\n"
                "            - name: IP\n              valueFrom: {fieldRef: {fieldPath: status.podIP}}\n"
                "          command: [torchrun, pretrain_gpt.py]\n"
                f"          args: [--tensor-model-parallel-size, $(TP), --num-layers=$(LAYERS), {MODEL.split()[2]}, "
                f"'{MODEL.split()[3]}', --wandb-exp-name, '$$(TP)']\n")
    imported = import_source(manifest, "job.yaml")
    assert imported.settings["tensor_model_parallel_size"] == 4 and imported.settings["num_layers"] == 6
    shell = manifest.split("          command:")[0] + (
        "          command: [bash, -c]\n          args: ['torchrun pretrain_gpt.py --tensor-model-parallel-size $TP "
        f"--num-layers $LAYERS {MODEL.replace('--num-layers 2 ', '')}']\n")
    imported = import_source(shell, "job.yaml")
    assert imported.settings["tensor_model_parallel_size"] == 4 and imported.settings["num_layers"] == 6


def test_an_unknown_prefix_before_a_renamed_entry_names_the_entry():
    # `${CMD_PREFIX} python3 …/pretrain_gpt_native.py` (CMD_PREFIX from a sourced config) was "runs ${CMD_PREFIX}
    # with Megatron's flags"; the entry it runs is known and is what to name
    from launcher.errors import UserError

    with pytest.raises(UserError) as caught:
        import_source(f"$CMD_PREFIX python3 tests/pretrain_gpt_native.py {MODEL}\n", "train.sh")
    assert "pretrain_gpt_native.py, not pretrain_gpt.py" in caught.value.problems[0].message


@pytest.mark.parametrize("tokenizer", ["$TOKENIZER_ARGS", "--tokenizer-type JapaneseSentencePiece"])
def test_gpt2s_vocabulary_is_not_said_to_be_the_scripts_when_its_tokenizer_was_lost(tokenizer):
    # `$TOKENIZER_ARGS` from a config not read: the note said "vocab_size 50257: the vocabulary of the script's
    # tokenizer (GPT2BPETokenizer)", Megatron's default, which the script does not use
    model = MODEL.replace("--mock-data --tokenizer-type NullTokenizer --vocab-size 128", "--data-path $DATA")
    imported = import_source(f"torchrun pretrain_gpt.py {tokenizer} {model}\n", "train.sh")
    assert not any("the vocabulary of the script's tokenizer" in note for note in imported.not_carried)
    assert any("stands in for the vocabulary of the script's tokenizer" in w for w in imported.warnings)


INDIRECT = [
    # a function that checks a variable by the name it is given (LUMI's confirm_unset): set, unset, empty
    'check() { local v="$1"; if [ -n "${!v+x}" ]; then W="$W set:$v"; else W="$W unset:$v"; fi; }\n'
    'A=1\nB=\ncheck A\ncheck B\ncheck C\nC=later',
    'N=TP\nTP=4\nW="${!N:-1} ${!N:+on} ${!N#4}x"',
    'N=PP\nW="${!N:-2} ${!N-dash} [${!N+x}]"\nPP=7',
    'N=SIZE\nSIZE=abc\nW="${!N/b/B} ${!N^^} ${#N}"',
]


@pytest.mark.parametrize("code", INDIRECT)
def test_indirect_expansion_with_an_operation_reads_the_variable_named(code):
    got = words(code)
    assert "\x00" not in " ".join(got)
    if shutil.which("bash"):
        assert got == bash_words(code)


@pytest.mark.parametrize("code", [
    'W="${!REF+x}"',  # REF names a variable the caller gives
    'NCCL_A=1\nW="${!NCCL_*}"',  # the environment may hold more NCCL_ variables than the script sets
    'R="not a name"\nW="${!R:-d}"',
])
def test_indirect_expansion_of_a_name_not_known_or_of_a_prefix_is_not_known(code):
    assert words(code) == ["${W}"]


@pytest.mark.parametrize(("directives", "expected", "per_node_variable"), [
    ("#SBATCH --nodes=2\n#SBATCH --gpus-per-node=mi250:8", 8, "mi250:8"),  # sbatch keeps the type in the variable
    ("#SBATCH -N 2 --gpus-per-node amd:4", 4, "amd:4"),
    ("#SBATCH --nodes=2\n#SBATCH --gres=gpu:a100:4,nvme:1", 4, None),  # --gres sets no SLURM_GPUS_PER_NODE
    ("#SBATCH --nodes=2\n#SBATCH --gpus-per-node=8", 8, "8"),
])
def test_typed_gpu_counts_of_the_sbatch_lines_are_the_count_on_each_node(directives, expected, per_node_variable):
    script = (f"#!/bin/bash\n{directives}\ntorchrun --nnodes $SLURM_NNODES --nproc-per-node $SLURM_GPUS_ON_NODE "
              f"pretrain_gpt.py {MODEL}\necho \"[$SLURM_GPUS_PER_NODE]\"\n")
    imported = import_source(script, "job.sh")
    assert imported.launcher["nodes"] == 2 and imported.launcher["gpus_per_node"] == expected
    reading = read_script(script)
    assert reading.shell.scalars.get("SLURM_GPUS_PER_NODE") == per_node_variable


@pytest.mark.parametrize("container", [
    "singularity exec -B \"$BASE\" -B /pfs,/scratch \"$CONTAINER\"",
    "apptainer exec --nv --no-home -B /p \"$CONTAINER\"",
    "env -u CUDA_VISIBLE_DEVICES apptainer exec --rocm img.sif",
    "",
])
def test_a_launch_script_given_the_entry_under_srun_runs_it_once_per_task(container):
    # LUMI/JUWELS jobs: `srun … apptainer exec IMG $BASE/launch.sh pretrain_gpt.py ARGS`, where launch.sh sets
    # RANK from SLURM_PROCID and runs `python3 -u "$@"`; the container's options are no srun options
    script = (f"#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=8\n#SBATCH --gpus-per-node=mi250:8\n"
              f"LAUNCH_SCRIPT=\"$BASE/launch.sh\"\nsrun --label --cpu-bind=mask_cpu:0xfe {container} "
              f"\"$LAUNCH_SCRIPT\" Megatron-LM/pretrain_gpt.py {MODEL} --tensor-model-parallel-size 2\n")
    imported = import_source(script, "train.sh")
    assert imported.launcher["nodes"] == 4 and imported.launcher["gpus_per_node"] == 8
    assert imported.settings["tensor_model_parallel_size"] == 2 and not imported.lost
    said = " | ".join(imported.not_carried)
    assert "launch.sh is given Megatron-LM/pretrain_gpt.py" in said
    assert "a srun option the launcher does not carry" not in said


def test_a_program_that_is_not_a_script_of_the_users_is_not_taken_for_a_launch_script():
    imported = import_source(f"#!/bin/bash\nsrun -N 2 --ntasks-per-node 8 apptainer exec img.sif pretrain_gpt.py "
                             f"{MODEL}\n", "train.sh")
    assert "nodes" not in imported.launcher  # pretrain_gpt.py run as a program: not a per-task python


ARITHMETIC_DEFAULTS = [
    'N=2\nTP=${TP:-$((N*2))}\nPP=${PP:-$(( $((N+1)) - 1 ))}\nW="$TP $PP"\nTP=; PP=',
    'N=3\nS=${S:-"$((N*5))"}\nG=${G:=$(( N * 8 / 2 ))}\nW="$S $G ${Z:-$((N-2))}"\nS=; Z=',
    'N=2\nW=${W:-$((N )) }x\nA=${A:+$((N+1))}\nW+="[$A]"\nA=',
]


@pytest.mark.parametrize("code", ARITHMETIC_DEFAULTS)
def test_arithmetic_inside_a_default_is_arithmetic(code):
    # the grammar reads `${TP:-$((N*2))}` as a subshell running the command `N*2`: the default was lost
    got = words(code)
    assert "\x00" not in " ".join(got) and "${" not in " ".join(got)
    if shutil.which("bash"):
        assert got == bash_words(code)


def test_arithmetic_inside_a_default_on_a_value_not_known_is_not_known():
    assert words("TP=${TP:-$((GPUS/2))}\nW=$TP\nTP=") == ["${W}"]


@pytest.mark.parametrize(("options", "launcher", "named"), [
    ("--nnodes=1:4 --nproc-per-node=8 --max-restarts=3 --rdzv-backend=c10d", {"gpus_per_node": 8},
     ["--nnodes=1:4: an elastic job of 1 to 4 nodes", "--max-restarts=3: a torchrun option"]),
    ("--nnodes 2:2 --nproc_per_node 4 --rdzv_id 7 --rdzv_endpoint h:29500", {"nodes": 2, "gpus_per_node": 4},
     ["--rdzv_id 7: the launcher names", "--rdzv_endpoint h:29500: the launcher sets"]),
    ("--standalone --nproc-per-node=2", {"gpus_per_node": 2}, []),
    ("--nnodes=4 --node-rank=$RANK --nproc_per_node=8 --master-addr=$MASTER --master-port=29500",
     {"nodes": 4, "gpus_per_node": 8, "master_port": 29500}, ["--node-rank=${RANK}: the launcher gives each node"]),
])
def test_torchruns_own_options_give_the_layout_or_are_named(options, launcher, named):
    imported = import_source(f"torchrun {options} pretrain_gpt.py {MODEL}\n", "train.sh")
    assert {k: v for k, v in imported.launcher.items() if k != "master_addr"} == launcher
    said = " | ".join(imported.not_carried)
    assert all(n in said for n in named), said
    assert "not a number" not in said


def test_a_flag_naming_where_the_processes_meet_is_harmless_and_said_without_the_readers_marker(tmp_path):
    # ORNL's Frontier fork passes `--master-addr=$MASTER_ADDR` (read from ssh at run time) to pretrain_gpt.py
    from launcher.cli.job import job_as_declared
    from launcher.importer.report import check_import

    imported = import_source(f"torchrun pretrain_gpt.py {MODEL} --master-addr=$MASTER_ADDR --master-port 29500\n",
                             "train.sh")
    assert not imported.lost
    preset = tmp_path / "p.yaml"
    preset.write_text(imported.text)
    outcome = check_import(imported, preset, job_as_declared)
    said = repr(outcome)
    assert "--master-addr" in said and "\\x00" not in said and "\x00" not in said


@pytest.mark.parametrize(("directive", "nodes"), [
    ("#$ -l node_f=16", 16),  # TSUBAME 4.0's full node
    ("#$-l rt_AF=2,h_rt=1:00:00", 2),  # ABCI's, with other resources in the same list
    ("#$ -l rt_F=8\n#$ -l h_rt=24:00:00", 8),
])
def test_grid_engine_whole_node_requests_give_nhosts(directive, nodes):
    script = (f"#!/bin/sh\n#$ -cwd\n{directive}\nGPUS=4\nNUM_GPUS=$((NHOSTS * GPUS))\n"
              f"mpirun -np $NUM_GPUS --npernode $GPUS -hostfile $PE_HOSTFILE python pretrain_gpt.py {MODEL}\n")
    imported = import_source(script, "job.sh")
    assert imported.launcher["nodes"] == nodes and imported.launcher["gpus_per_node"] == 4
    assert any(f"NHOSTS={nodes}" in n and "from the #$ lines" in n for n in imported.not_carried)


@pytest.mark.parametrize(("directive", "per_node"), [("#$ -l rt_AF=16", 8), ("#$ -l rt_F=16", 4),
                                                    ("#$ -l node_f=16", None)])
def test_abci_names_the_resource_type_a_script_chooses_its_gpus_by(directive, per_node):
    # ABCI's jobs see SGE_RESOURCE_TYPE (rt_F: 4 V100s, rt_AF: 8 A100s); TSUBAME's node_f is no ABCI type
    script = (f"#!/bin/bash\n{directive}\n#$ -cwd\n"
              'if [[ "$SGE_RESOURCE_TYPE" == "rt_F" ]]; then\n  GPUS=4\nelif [[ "$SGE_RESOURCE_TYPE" == "rt_AF" ]]; '
              "then\n  GPUS=8\nfi\nmpirun -np $((NHOSTS*GPUS)) --npernode $GPUS python pretrain_gpt.py "
              f"{MODEL}\n")
    imported = import_source(script, "job.sh")
    assert imported.launcher.get("gpus_per_node") == per_node
    assert (imported.launcher.get("nodes") == 16) == (per_node is not None)


def test_a_grid_engine_request_after_the_first_command_or_of_part_of_a_node_gives_no_nhosts():
    for script in ("#!/bin/sh\nX=1\n#$ -l node_f=16\n", "#!/bin/sh\n#$ -l node_h=2\n"):
        imported = import_source(script + f"mpirun -np $((NHOSTS*4)) --npernode 4 python pretrain_gpt.py {MODEL}\n",
                                 "job.sh")
        assert "nodes" not in imported.launcher


RUNNER_FILE = ("DISTRIBUTED_ARGS=\"--nproc_per_node \\$GPUS --nnodes \\$SLURM_JOB_NUM_NODES\"\n"
               f"cat <<EOT > runner.sh\n#!/bin/bash\npython -m torch.distributed.launch $DISTRIBUTED_ARGS "
               f"./pretrain_gpt.py {MODEL}\nexit 0\nEOT\n")


@pytest.mark.parametrize("run", [
    "srun --mpi=pmix -l -o log singularity exec --nv -B $(pwd) img.sif bash runner.sh",
    "srun apptainer exec img.sif bash -x runner.sh",
    "bash runner.sh",
    "srun ./runner.sh",
])
def test_a_file_written_from_a_here_document_after_cat_is_read_where_a_wrapper_runs_it(run):
    # a Slovenian cluster's job: `cat <<EOT > distributed_runner.sh` (the redirection after the here-document), then
    # `srun … singularity exec … bash distributed_runner.sh`; the runner's \$GPUS is expanded when it runs
    script = f"#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:4\nexport GPUS=4\n{RUNNER_FILE}{run}\nexit 0\n"
    imported = import_source(script, "job.sh")
    assert imported.launcher["nodes"] == 2 and imported.launcher["gpus_per_node"] == 4
    assert imported.settings["num_layers"] == 2


@pytest.mark.parametrize("other", ["cat runner.sh", "chmod +x runner.sh", "echo runner.sh", "srun cat runner.sh"])
def test_a_written_file_that_is_only_read_or_named_is_not_run(other):
    reading = read_script(RUNNER_FILE + other + "\n")
    assert not any("pretrain_gpt.py" in " ".join(show(a) for a in c.argv) for c in reading.commands)


def test_a_written_file_given_to_the_training_command_is_its_argument_not_a_script():
    # CSC's job writes its DeepSpeed JSON with `cat <<EOF > "$config_json"` and passes it to pretrain_gpt.py
    script = ("config_json=ds_config.$SLURM_JOBID.json\ncat <<EOF > \"$config_json\"\n{\"a\": 1}\nEOF\n"
              f"srun -l python3 pretrain_gpt.py {MODEL} --deepspeed_config $config_json\n")
    reading = read_script(script)
    assert reading.stopped is None
    assert show(reading.commands[-1].argv[-1]) == "ds_config.${SLURM_JOBID}.json"


@pytest.mark.parametrize(("runner", "named"), [
    ("deepspeed --num_nodes=20 --hostfile hosts --no_ssh_check", True),
    ("deepspeed --num_nodes 2 --num_gpus 4", False),
    ("deepspeed --include localhost:0,1", False),
])
def test_deepspeed_without_a_gpu_count_says_the_count_is_the_hosts(runner, named):
    imported = import_source(f"{runner} pretrain_gpt.py {MODEL}\n", "train.sh")
    said = " | ".join(imported.not_carried)
    assert ("one process per GPU of each host" in said) == named
    assert named == ("gpus_per_node" not in imported.launcher)


@pytest.mark.parametrize("launcher", ["mpirun -np $NUM_GPUS --npernode 8", "srun -N $NODES --ntasks-per-node=8",
                                      "mpiexec -n ${TOTAL} -ppn 8"])
def test_a_process_count_the_script_cannot_know_is_named_not_left_to_the_default(launcher):
    # ABCI 3.0's PBS job computes NUM_GPUS from NHOSTS, which PBS does not set
    imported = import_source(f"{launcher} python pretrain_gpt.py {MODEL}\n", "job.sh")
    assert "nodes" not in imported.launcher and imported.launcher["gpus_per_node"] == 8
    assert any("a process count not known without running the script" in n for n in imported.not_carried)


def test_deepspeed_on_a_hostfile_without_a_node_count_says_the_hosts_are_the_files():
    imported = import_source(f"deepspeed --hostfile hosts.txt pretrain_gpt.py {MODEL}\n", "train.sh")
    assert "nodes" not in imported.launcher
    assert any("every host the file lists" in n for n in imported.not_carried)
    counted = import_source(f"deepspeed --hostfile hosts.txt --num_nodes 2 pretrain_gpt.py {MODEL}\n", "train.sh")
    assert counted.launcher["nodes"] == 2 and not any("every host" in n for n in counted.not_carried)


@pytest.mark.parametrize("found", ["$(which mpiexec)", "`which mpiexec`", "$(command -v mpiexec)"])
def test_a_job_launcher_found_with_which_is_that_launcher(found):
    # ALCF Polaris: `$(which mpiexec) -n ${NGPUS} --ppn $(nvidia-smi -L | wc -l) --hostfile $PBS_NODEFILE python …`
    imported = import_source(f"{found} -n 16 --ppn 4 --envall python pretrain_gpt.py {MODEL} --deepspeed_mpi\n",
                             "job.sh")
    assert imported.launcher == {"nodes": 4, "gpus_per_node": 4} and not imported.lost
    unknown = import_source(f"{found} -n $N --ppn $(nvidia-smi -L | wc -l) python pretrain_gpt.py {MODEL}\n", "job.sh")
    said = " | ".join(unknown.not_carried)
    assert "\x00" not in said and "\\x00" not in said
    assert "-n ${N}: a process count not known" in said and "--ppn" in said and "gpus_per_node is not set" in said


@pytest.mark.parametrize("container", ["enroot start -e N=3 img", "podman exec -n ctr", "docker exec -e NP=4 -it ctr",
                                       "shifter --image=x -N 5", "apptainer exec -n img.sif"])
def test_a_containers_options_under_srun_are_no_process_counts(container):
    imported = import_source(f"srun -N 2 --ntasks-per-node 4 {container} python pretrain_gpt.py {MODEL}\n", "job.sh")
    assert imported.launcher == {"nodes": 2, "gpus_per_node": 4}


def test_a_tokenizer_model_whose_type_was_lost_has_no_vocabulary_said_for_it():
    # Swallow's --tokenizer-type Llama3Tokenizer (the fork's) --tokenizer-model …/tokenizer.json: the type is lost,
    # and Megatron's default GPT-2 vocabulary is not that tokenizer's
    from launcher.importer.build import tokenizer_vocab

    assert tokenizer_vocab({"tokenizer_model": "/ckpt/Meta-Llama-3-70B/tokenizer.json"})[0] is None
    assert tokenizer_vocab({})[0] == 50257  # Megatron's default GPT-2 BPE
    assert tokenizer_vocab({"tokenizer_type": "GPT2BPETokenizer", "tokenizer_model": "x"})[0] == 50257


@pytest.mark.parametrize("loop", ["for tp in $TPS; do", "for tp in ${SIZES[@]}; do", "for tp in $(cat sizes.txt); do",
                                  "for tp in 1 $MORE; do"])
def test_a_loop_over_items_not_known_decides_nothing_silently(loop):
    # a sweep over sizes the caller gives: the body runs for each, how often and with what is not known
    imported = import_source(f"{loop}\ntorchrun pretrain_gpt.py {MODEL} --tensor-model-parallel-size $tp\ndone\n",
                             "sweep.sh")
    assert "tensor_model_parallel_size" not in imported.settings
    assert any("--tensor-model-parallel-size" in line for line in imported.lost)


@pytest.mark.parametrize(("line", "program"), [
    ("srun -o /dev/null pretrain_gpt.py", False),  # srun's output file, then the entry run as a program
    ("srun -N 2 /opt/images/launch_wrapper pretrain_gpt.py", True),
    ("srun --label /opt/images/launch_wrapper pretrain_gpt.py", False),  # could be --label's value: not guessed
    ("srun -l $BASE/launch.sh pretrain_gpt.py", True),
    ("srun -o /logs/x.log pretrain_gpt.py", False),
])
def test_a_launch_script_is_a_program_of_the_users_not_an_options_value(line, program):
    imported = import_source(f"{line} {MODEL}\n", "job.sh")
    assert any("a program the import does not read" in n for n in imported.not_carried) == program


def test_a_positional_argument_after_other_text_is_the_argument_given():
    code = 'W="--save=/ckpt/run$2 --tp=x$1 a${2}b ${3:-d}$1"'
    got = words(code, "4", "8")
    assert got == ["--save=/ckpt/run8", "--tp=x4", "a8b", "d4"]
    if shutil.which("bash"):
        out = subprocess.run(["bash", "-c", code + "\nprintf '%s\\n' $W", "_", "4", "8"], capture_output=True,
                             text=True, timeout=10)
        assert got == out.stdout.splitlines()


KEY_VALUE_ARGUMENTS = ('for ARGUMENT in "$@"; do\n  KEY=$(echo $ARGUMENT | cut -f1 -d=)\n'
                       '  VALUE="${ARGUMENT:${#KEY}+1}"\n  export "$KEY"="$VALUE"\ndone\n')


@pytest.mark.parametrize("code", [
    'W=$(echo "a:b:c" | cut -d: -f2-)',
    'W=$(printf "x=1\\ny=2\\n" | cut -f1 -d=)',
    'W=$(echo "abcdef" | cut -c2,4-5)',
    'W=$(echo "a,b" | cut -d, -f1,2 --output-delimiter=+)',
    'W=$(echo "nodelim" | cut -d: -f2)$(echo "nodelim" | cut -s -d: -f2)',
])
def test_cut_of_known_input_is_computed(code):
    assert words(code) == bash_words(code)


@pytest.mark.parametrize("args", [["TP_SIZE=2", "PP_SIZE=4"], ["TP_SIZE=2=3"], ["TP_SIZE"], []])
def test_key_value_arguments_exported_by_a_computed_name(args):
    # `bash script.sh TP_SIZE=2 …`: each argument becomes the variable it names
    code = KEY_VALUE_ARGUMENTS + 'W="${TP_SIZE-unset} ${PP_SIZE-unset}"'
    out = subprocess.run(["bash", "-c", code + "\nprintf '%s\\n' $W", "bash", *args], capture_output=True, text=True)
    assert words(code, *args) == out.stdout.splitlines()


def test_an_export_whose_name_is_not_known_is_named():
    reading = read_script('export "$1"=4\ntorchrun pretrain_gpt.py --num-layers $N\n', [])
    assert any("which variable it sets is not known" in why for _, why in reading.skipped), reading.skipped


@pytest.mark.parametrize("runner", ["python3 run.py --include localhost:0,1,2,3", "python -u my_launcher.py --np 4",
                                    "srun -N 2 --ntasks-per-node 1 python launch.py --gpus 8"])
def test_a_launcher_script_python_runs_before_the_entry_is_no_single_process(runner):
    # `python3 run.py … pretrain_gpt.py`: run.py starts the processes, as many as it decides, not python once
    imported = import_source(f"{runner} pretrain_gpt.py {MODEL}\n", "train.sh")
    assert imported.settings["num_layers"] == 2
    assert "gpus_per_node" not in imported.launcher
    notes = " ".join(imported.not_carried)
    assert "a launcher program the import does not read" in notes and "with python directly" not in notes


REGEX_SIDES = [
    # an expansion on the right of =~ is a regular expression (the grammar keeps `${P}` as regex text)
    "n=12\npattern='^[0-9]+$'\nif [[ ${n} =~ ${pattern} ]]; then W=num; else W=not; fi",
    "n=12\npattern='^[0-9]+$'\nif ! [[ ${n} =~ ${pattern} ]]; then W=not; else W=num; fi",
    "n=x1\npattern='^[0-9]+$'\n[[ ! $n =~ $pattern ]] && W=not || W=num",
    "M=70B\nRE='^([0-9]+)B$'\n[[ $M =~ ${RE} ]] && W=${BASH_REMATCH[1]} || W=none",
    # a quoted part matches literally: `.` is no wildcard there
    'X=axb\n[[ $X =~ "a.b" ]] && W=dot || W=literal',
    'X=a.b\nS=a\n[[ $X =~ ^$S"."b$ ]] && W=literal || W=no',
]


@pytest.mark.parametrize("code", REGEX_SIDES)
def test_the_right_side_of_a_regex_match_is_read_as_bash_does(code):
    got = words(code)
    assert got and got != [""]
    if shutil.which("bash"):
        assert got == bash_words(code)


def test_a_regex_from_a_variable_decides_whether_the_script_exits_before_training():
    script = ("nodes=${1:-1}\npattern='^[0-9]+$'\nif ! [[ ${nodes} =~ ${pattern} ]]; then\n  exit\nfi\n"
              f"torchrun --nproc_per_node 8 pretrain_gpt.py {MODEL}\n")
    assert import_source(script, "t.sh", []).settings["num_layers"] == 2
    with pytest.raises(UserError, match="exit"):
        import_source(script, "t.sh", ["four"])


@pytest.mark.parametrize("wrapper", [
    'deepspeed --num_nodes 2 --num_gpus 8 --no_local_rank --no_python $OPTS /usr/bin/bash -c "python pretrain_gpt.py '
    '{model} --seed $SEED"',
    'srun -N 2 --ntasks-per-node 1 $OPTS bash -c "torchrun --nproc_per_node 8 pretrain_gpt.py {model} --seed $SEED"',
])
def test_a_branch_that_gives_only_the_wrappers_options_is_no_loss_of_the_model(wrapper):
    # MLPerf's Habana GPT-3 job: MULTINODE_CMD (--force_multi --hostfile …) is set where a host file exists
    script = ('if [ -f "$HOSTSFILE" ]; then\n  OPTS="--force_multi --hostfile=$HOSTSFILE"\nfi\nSEED=1\n'
              + wrapper.format(model=MODEL) + "\n")
    imported = import_source(script, "run.sh")
    assert imported.lost == [] and imported.settings["seed"] == 1
    assert any(n.startswith("line 1: ") and "--force_multi" in n for n in imported.not_carried)
    inside = import_source(script.replace("--seed $SEED", "$OPTS --seed $SEED"), "run.sh")
    assert any(line.startswith("line 1: ") for line in inside.lost)  # in the string itself: among the flags


POSIX_CLASS_SHAPES = [
    # POSIX character classes, which Python's re and fnmatch do not know: `[[:digit:]]` was a set of `[:dgit` and `]`
    "X=7B; [[ $X =~ ^([[:digit:]]+)B$ ]] && W=${BASH_REMATCH[1]} || W=no",
    "X=a; [[ $X =~ ^[[:alpha:]]$ ]] && W=alpha || W=no",
    'X="a b"; [[ $X =~ [[:space:]] ]] && W=space || W=no',
    "X=ab; [[ $X =~ ^[^[:digit:]]+$ ]] && W=nodigit || W=no",
    "X=a-b; [[ $X =~ ^[a-z[:punct:]]+$ ]] && W=punct || W=no",
    "X=a[b; [[ $X =~ ^a[[]b$ ]] && W=bracket || W=no",
    "X=7; [[ $X == [[:digit:]] ]] && W=glob || W=no",
    "X=7x; case $X in [[:digit:]]*) W=case;; *) W=no;; esac",
    "X=13B; W=${X%%[[:alpha:]]*}",
]


@pytest.mark.parametrize("code", POSIX_CLASS_SHAPES)
def test_posix_character_classes_are_matched_as_bash_matches_them(code):
    got = words(code)
    assert got and got != ["no"]
    if shutil.which("bash"):
        assert got == bash_words(code)


@pytest.mark.parametrize(("code", "runs"), [
    ("set -e\nX=0\n[ $X -eq 1 ]\n", False),  # a test found false on its own line ends the script
    ("set -e\ni=0\n((i++))\n", False),  # ((0)) fails
    ("set -euo pipefail\nfalse\n", False),
    ("set -o errexit\nfalse\n", False),
    ("set -e\ni=1\n((i++))\n", True),
    ("set -e\n[ 1 -eq 2 ] && echo x\n", True),  # in a list, only its last command's failure counts
    ("set -e\nif [ 1 -eq 2 ]; then :; fi\n", True),  # a condition does not
    ("set -e\nset +e\nfalse\n", True),
    ("set -e\nbash -c 'false; echo inner'\n", True),  # another bash starts without -e
    ("X=0\n[ $X -eq 1 ]\n", True),
    ("set -e\nf() { [ 1 -eq 2 ]; echo in; }\nf || true\n", True),  # nor in a function a list or a test calls
    ("set -e\nf() { [ 1 -eq 2 ]; echo in; }\nif f; then :; fi\n", True),
    ("set -e\nf() { [ 1 -eq 2 ]; echo in; }\nf\n", False),
])
def test_set_e_ends_the_script_where_bash_ends_it(code, runs):
    reading = read_script(code + "torchrun pretrain_gpt.py --num-layers 2\n")
    assert any("pretrain_gpt.py" in c.argv for c in reading.commands) == runs
    if shutil.which("bash"):
        out = subprocess.run(["bash", "-c", code + "echo reached"], capture_output=True, text=True, timeout=10)
        assert ("reached" in out.stdout) == runs


@pytest.mark.parametrize("code", [
    # the grammar closes these tests at the `]` the last word ends with; bash gives `[` the word `1]` (or `"1"]`,
    # `${Y}]`) and no closing `]`: "missing `]'", status 2, the test false whatever the values
    'X=1\nif [ $X -eq 1]; then W=four; else W=two; fi',
    'X=1\n[ "$X" = "1"] && W=tp2 || W=tp1',
    'Y=a\nif [ -n $Y]; then W=set; elif [ a = a ]; then W=spaced; fi',
    'X=1\nY=1\n[ $X = ${Y}] || W=neither',
    'if [ $NOT_SET_HERE -eq 1]; then W=512; else W=256; fi',  # false however the caller sets it
    'X=1\nif [ $X -eq 1 ]; then W=closed; fi',  # a `]` of its own closes it
])
def test_a_bracket_test_whose_last_word_holds_the_bracket_fails_as_in_bash(code):
    got = words(code)
    if shutil.which("bash"):
        assert got == bash_words(code)
    assert "${W}" not in got


def test_a_bracket_test_without_its_own_bracket_ends_a_set_e_script():
    reading = read_script("set -e\nX=1\n[ $X = 1]\ntorchrun pretrain_gpt.py --num-layers 2\n")
    assert reading.commands == []
    assert any("no closing ]" in why for _, why in reading.skipped)


@pytest.mark.parametrize("code", [
    # `[` is a command: its operands are split like any command's words before test(1) counts them; an empty one
    # is gone (`[ != x ]`, `[ = x ]`: errors, status 2, false), a spaced one is two (`[ -n a b ]`: an error)
    'X=\nif [ $X != x ]; then W=differs; else W=error; fi',
    'X=\nif [ $X = x ]; then W=same; else W=error; fi',
    'X="a b"\nif [ -n $X ]; then W=set; else W=error; fi',
    'X="a b"\nif [ $X = "a b" ]; then W=same; else W=error; fi',
    'X=\nif [ -z $X ]; then W=empty; else W=no; fi',  # `[ -z ]`: one argument, non-empty: true
    'X=\nif [ -n $X ]; then W=set; else W=no; fi',  # `[ -n ]`: true as well
    'X=\nY=\nif [ $X == $Y ]; then W=same; else W=no; fi',  # `[ == ]`: one argument
    'X="a b"\nif [[ $X = "a b" ]]; then W=same; else W=no; fi',  # [[ ]] does not split
    'X="1 -o 1 = 2"\nif [ $X ]; then W=true; else W=false; fi',  # five arguments: the expression
    'X=ab\nif [ $X = a* ]; then W=matched; else W=literal; fi',  # `[` compares strings, no pattern
    'X=ab\nif [[ $X = a* ]]; then W=matched; else W=literal; fi',
    'X="a b c d e"\nif [ $X ]; then W=true; else W=error; fi',
    'X="( x )"\nif [ $X ]; then W=true; else W=false; fi',
    'if [ ! -a ]; then W=true; else W=false; fi',
])
def test_a_bracket_tests_operands_are_split_and_counted_as_test_counts_them(code):
    got = words(code)
    if shutil.which("bash"):
        assert got == bash_words(code)
    assert "${W}" not in got


@pytest.mark.parametrize("python", ["python", "python3 -u", "python -O"])
def test_the_options_after_a_python_module_are_the_modules(python):
    # `python -m torch.distributed.launch --use_env`: the module's option (each rank's LOCAL_RANK in its environment,
    # as torchrun always gives it), not python's; an option of the module's the launcher lacks is said as the module's
    script = (f"{python} -m torch.distributed.launch --use_env --nproc_per_node 4 --nnodes=1 --max_restarts 3 "
              f"pretrain_gpt.py {MODEL}\n")
    imported = import_source(script, "train.sh")
    assert imported.launcher["gpus_per_node"] == 4 and not imported.lost
    said = " | ".join(imported.not_carried)
    assert "torch.distributed.launch --use_env: each rank's local rank in its environment (LOCAL_RANK)" in said, said
    assert "torch.distributed.launch --max_restarts 3: a torch.distributed.launch option" in said, said
    assert "python option" not in said and "python --use_env" not in said, said
