"""What bash runs, compared with what the import reads: each script below is run by real bash in a scratch
directory, with `torchrun` a function that prints its words (nothing else of a training run happens), and read by
the import; the training commands must agree, word for word and in order. The classes: redirections that bash refuses
(a target that expands to no word, to several, or to an empty one), sourced files (read, missing, ending in `return`
or `exit`), `set -e`, `set -u`, `exit`, and `return` outside a function."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from launcher.importer.bash_subset import read_script, show


def bash_runs(script: str, directory: Path, args: tuple[str, ...] = ()) -> list[list[str]]:
    """The training commands bash runs (`torchrun` a function that writes its words to a file of its own, whatever
    the script redirects)."""
    runs = directory / "runs.txt"
    runs.write_text("")
    (directory / "train.sh").write_text(f"torchrun() {{ printf '%s\\x1f' \"$@\" >> {runs}; echo >> {runs}; }}\n"
                                        + script)
    subprocess.run(["bash", str(directory / "train.sh"), *args], capture_output=True, timeout=10, cwd=directory)
    return [line.split("\x1f")[:-1] for line in runs.read_text().splitlines()]


def read_runs(script: str, directory: Path, args: tuple[str, ...] = ()) -> list[list[str]]:
    (directory / "train.sh").write_text(script)
    reading = read_script(script, list(args), directory / "train.sh")
    return [[show(word) for word in command.argv[1:]] for command in reading.commands if command.argv[0] == "torchrun"]


def agree(script: str, tmp_path: Path, files: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> None:
    for name, text in (files or {}).items():
        (tmp_path / name).write_text(text)
    expected = bash_runs(script, tmp_path, args)
    got = read_runs(script, tmp_path, args)
    assert got == expected, (got, expected)


needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="compares with bash")

REDIRECTIONS = [
    # bash: "ambiguous redirect" (no word, several words) or "No such file" (an empty word): the command is not run
    'LOG=""\ntorchrun pretrain_gpt.py --num-layers 2 > $LOG\ntorchrun pretrain_gpt.py --num-layers 3\n',
    'if false; then LOG=x; fi\ntorchrun pretrain_gpt.py --num-layers 2 >> $LOG 2>&1\n',
    'LOG=""\ntorchrun pretrain_gpt.py --num-layers 2 > "$LOG"\n',
    'LOG="a b.log"\ntorchrun pretrain_gpt.py --n 2 &> $LOG\ntorchrun pretrain_gpt.py --n 3 &> "$LOG"\n',
    'LOG=""\n{ TP=2; torchrun pretrain_gpt.py --tp $TP; } > $LOG\ntorchrun pretrain_gpt.py --tp ${TP:-1}\n',
    'LOG=""\nrun() { torchrun pretrain_gpt.py "$@"; }\nrun --a 1 > $LOG\nrun --a 2\n',
    'LOG=""\nfor L in 2 4; do torchrun pretrain_gpt.py --num-layers $L; done > $LOG\ntorchrun pretrain_gpt.py\n',
    'LOG=""\nX=4 > $LOG\ntorchrun pretrain_gpt.py --num-layers $X\n',
    'LOG=""\n> $LOG torchrun pretrain_gpt.py --num-layers 2\n',
    'LOG=""\ntorchrun pretrain_gpt.py --n 2 > $LOG && T=ok || T=failed\ntorchrun pretrain_gpt.py --t $T\n',
    'LOG=""\nif torchrun pretrain_gpt.py --n 1 2> $LOG; then T=ok; else T=no; fi\ntorchrun pretrain_gpt.py --t $T\n',
    'LOG=""\nset -e\ntorchrun pretrain_gpt.py --n 1 > $LOG\ntorchrun pretrain_gpt.py --n 2\n',
    'LOG=""\nset -e\ntorchrun pretrain_gpt.py --n 1 > $LOG || true\ntorchrun pretrain_gpt.py --n 2\n',
    'OUT=out.log\ntorchrun pretrain_gpt.py --n 1 2>&1 > $OUT\ntorchrun pretrain_gpt.py --n 2 >&2\n',
    'LOG=""\necho x | torchrun pretrain_gpt.py --n 1 > $LOG\ntorchrun pretrain_gpt.py --n 2 | cat > $LOG\n',
    'LOG=""\nf() { TP=4; } > $LOG\nf\ng() { PP=2; } > /dev/null\ng\ntorchrun pretrain_gpt.py --tp ${TP:-1} --pp $PP\n',
    'LOG=""\ncat > $LOG <<EOF\nx\nEOF\nwhile read x; do A=$x; done < $LOG\ntorchrun pretrain_gpt.py --a ${A:-none}\n',
]


@needs_bash
@pytest.mark.parametrize("script", REDIRECTIONS)
def test_a_command_whose_redirection_bash_refuses_is_not_run(script, tmp_path):
    agree(script, tmp_path)


T = "torchrun pretrain_gpt.py"
SHELL_CONTROL = [
    # (script, the files next to it, the script's arguments)
    (f"source conf.sh\n{T} --tp $TP\n", {"conf.sh": "TP=2\n"}, ()),
    (f"{T} --a 1\nsource conf.sh\n{T} --a 2\n", {"conf.sh": "TP=2\nexit 0\n"}, ()),  # exit in it ends the script
    (f"source conf.sh\n{T} --tp $TP\n", {"conf.sh": "TP=2\nreturn\nTP=3\n"}, ()),  # return ends the file only
    (f"f() {{ source conf.sh; TP=$((TP+1)); }}\nf\n{T} --tp $TP\n", {"conf.sh": "TP=2\nreturn\n"}, ()),
    (f"f() {{ source conf.sh; }}\nf\n{T} --a 2\n", {"conf.sh": "exit 0\n"}, ()),
    (f"source conf.sh 7\n{T} --a $TP $1\n", {"conf.sh": "TP=$1\n"}, ("z",)),
    # return outside a function or a sourced file: bash refuses it and goes on (the `|| exit` idiom)
    (f"{T} --a 1\nreturn\n{T} --a 2\n", {}, ()),
    (f"return 0 2>/dev/null || exit 0\n{T} --a 2\n", {}, ()),
    (f"set -e\nreturn\n{T} --a 2\n", {}, ()),
    (f"break\ncontinue\n{T} --a 1\nfor i in 1 2; do f() {{ break; }}; f; {T} --i $i; done\n", {}, ()),
    (f"for i in 1 2; do for j in 3 4; do {T} --ij $i$j; break 5; done; done\n", {}, ()),
    # set -u: a variable known to be unset ends the script where it is expanded, not with a default
    (f"set -u\nif false; then X=1; fi\necho $X\n{T} --a 1\n", {}, ()),
    (f"set -u\nif false; then X=1; fi\n{T} --a ${{X:-2}} ${{X:+y}} ${{X-3}}\n", {}, ()),
    (f"set -u\nA=$2\n{T} --a $A\n", {}, ("x",)),
    (f"set -o nounset\nif false; then X=1; fi\nif [ -n \"$X\" ]; then Y=1; fi\n{T} --a 1\n", {}, ()),
    (f"set -u\nif false; then X=1; fi\n{T} --a ${{#X}}\n", {}, ()),
    (f"set -u\nif false; then X=1; fi\n{T} --a ${{X%a}}\n", {}, ()),
    (f"set -u\nif false; then N=1; fi\nM=$((N+1))\n{T} --a $M\n", {}, ()),
    (f"set -u\nset +u\nif false; then X=1; fi\n{T} --a $X 1\n", {}, ()),
    (f"set -u\nif false; then X=1; fi\nY=$(echo $X)\n{T} --a 1 $#\n", {}, ()),
    (f"set -eu\nexport PATH=/opt/bin:$PATH\n{T} --a 1\n", {}, ()),
    # an unset variable in arithmetic is 0
    (f"if false; then N=1; fi\nif (( N > 0 )); then A=1; else A=$((N + 1)); fi\n{T} --a $A\n", {}, ()),
    # set -e
    (f"set -e\ni=0\n((i++))\n{T} --a $i\n", {}, ()),
    (f"set -e\nf() {{ false; }}\nf || true\n{T} --a 1\n", {}, ()),
    (f"source conf.sh\n[ 1 -eq 2 ]\n{T} --a 1\n", {"conf.sh": "set -e\n"}, ()),
    (f"( exit 1 )\nX=$(exit 3; echo no)\n{T} --a \"$X\" 1\n", {}, ()),
    (f"set -e\nfalse && true\n{T} --a 1\ntrue && false\n{T} --a 2\n", {}, ()),  # only a list's last command
    (f"set -e\ntrue || false\n[ 1 = 2 ] || [ 2 = 2 ]\n{T} --a 1\n[ 1 = 2 ] || false\n{T} --a 2\n", {}, ()),
    (f"set -e\n( exit 0 )\n{T} --a 1\n( exit 3 )\n{T} --a 2\n", {}, ()),
    (f"if false; then U=1; fi\n( set -eu; false )\n{T} --a $U 1\n( exit 3 ) || T=failed\n{T} --t $T\n", {}, ()),
]


@needs_bash
@pytest.mark.parametrize(("script", "files", "args"), SHELL_CONTROL)
def test_sourcing_exit_return_and_the_shells_options_as_bash_runs_them(script, files, args, tmp_path):
    agree(script, tmp_path, files, args)


WRITTEN_THEN_READ = [
    f"echo 4 > tp.txt\nTP=$(cat tp.txt)\nPP=$(< tp.txt)\n{T} --tp $TP --pp $PP\n",
    f"echo '4 2' > tp.txt\nread TP PP < tp.txt\n{T} --tp $TP --pp $PP\n",
    f"printf 'a\\nb\\n' > l.txt\nwhile read x; do A+=($x); done < l.txt\nmapfile -t B < l.txt\n"
    f"{T} ${{A[@]}} ${{B[@]}}\n",
    f"cat > args.txt <<EOF\n--tp 4\nEOF\n{T} $(cat args.txt)\n",
    f"echo --a > a.txt\necho 1 >> a.txt b\n{T} $(cat a.txt)\n",
    f"printf 'h1\\nh2\\n' > hosts\n{T} --m $(head -n 1 hosts) --n $(wc -l < hosts)\n",
    f"echo 'TP=4' > env.sh\nsource env.sh\n{T} --tp $TP\n",
    f"cat > ./env.sh <<'EOF'\nTP=4\nreturn\nTP=5\nEOF\n. env.sh\n{T} --tp $TP\n",
]


@needs_bash
@pytest.mark.parametrize("script", WRITTEN_THEN_READ)
def test_a_file_the_script_writes_is_read_back_with_its_text(script, tmp_path):
    expected = bash_runs(script, tmp_path)
    for name in ("tp.txt", "l.txt", "args.txt", "a.txt", "hosts", "env.sh"):  # what bash wrote is not read here
        (tmp_path / name).unlink(missing_ok=True)
    assert read_runs(script, tmp_path) == expected


def test_a_file_written_again_by_a_program_or_removed_is_no_longer_known(tmp_path):
    for script in (f"echo 4 > tp.txt\npython gen.py > tp.txt\n{T} --tp $(cat tp.txt)\n",
                   f"echo 4 > tp.txt\nrm -f tp.txt\n{T} --tp $(cat tp.txt)\n"):
        assert read_runs(script, tmp_path) == [["pretrain_gpt.py", "--tp", "${$(cat tp.txt)}"]]


# a here-document given to no command, the way scripts comment a block out: bash runs nothing and never reads its
# text as commands (a launcher and a layout set inside it are not the script's)
HEREDOC_COMMENTS = [
    f"TP=2\n<<!\nTP=8\nexport RUN='torchrun pretrain_gpt.py --tp 8'\n!\n{T} --tp $TP\n",
    f"TP=2\n<<COMMENT\nTP=8\nCOMMENT\n{T} --tp $TP\n",
    f"TP=2\n  <<'END!'  # old runs\nTP=$((TP*4))\n{T} --tp 16\nEND!\n{T} --tp $TP\n",
    f"TP=2\nif true; then\n\t<<-\"X\"\n\tTP=8\n\tX\n\t{T} --tp $TP\nfi\n",
    f"cat > notes.txt <<EOF\n<<X\nEOF\nTP=$(wc -l < notes.txt)\n{T} --tp $TP\n",
]


ARITHMETIC = [
    # bash's precedence: unary minus, `!` and `~` bind tighter than any binary operator, `**` groups rightwards
    f"N=9\n{T} $((-3-1)) $((-N-1)) $((-(3)-1)) $((!0+1)) $((~1+1)) $((-2**2)) $((2**3**2)) $((- -3)) $((10-+3))\n",
    f"{T} $((1?2:3?4:5)) $((0?1:0?4:5)) $((2>1?10:20)) $((a=b=3)) $a $b $((x=1, y=x+1, x+y))\n",
    # `$A` is replaced by its text before the expression is read; a bare name is evaluated as an expression of its own
    f"A='2+3'\n{T} $(($A*2)) $((A*2)) $((${{A}}*2)) $(( \"$A\" * 2 ))\n",
    f"S=' 3 '\nE='-2'\n{T} $((S*2)) $(($E**2)) $((E**2)) $((1-$E))\n",
    # 64-bit two's complement: overflow wraps, as bash's does
    f"N=9223372036854775807\n{T} $((N+1)) $((N*2)) $((-N-1)) $(((-N-1)/-1)) $(((-N-1)%-1)) $((2**63)) $((2**64))\n",
    f"{T} $((9223372036854775808)) $((18446744073709551617)) $((1<<64)) $((1<<65)) $((-8>>65)) $((3**40))\n",
    # constants: octal, hex, BASE#DIGITS
    f"N=010\nM=0x1f\n{T} $((N+1)) $((M)) $((2#101)) $((36#z)) $((37#A)) $((64#_)) $((64#@)) $((0x)) $((0))\n",
    # `&&`, `||` and `?:` do not evaluate the side they skip (a division by zero there is no error)
    f"i=0\n{T} $((0&&(i=5))) $((1||(i=6))) $((0?1/0:2)) $i $((i++ + i)) $i $((i+=3)) $((i--)) $i\n",
    # a variable's value is itself an expression, read where it is used (`b -= …` reads b before the right side runs)
    f"a=0\nb='3*a'\n{T} $((b -= --a**3)) $a $b\n",
    f"A=B+1\nB=C*2\nC=3\n{T} $((A)) $((A+B+C))\narr=(5 6 7)\nj=1\n{T} $((arr[j]+arr[-1])) $((arr)) $((arr[j++])) $j\n",
    # the same rules for (( )), let, declare -i, C-style for, [[ -eq ]], ${X:o:l} and $[ ]
    f"x=1\n(( y = -x-1 ))\nlet 'z = 2**3**2' 'w = !0+1'\ndeclare -i d='-2-1'\n{T} $y $z $w $d $[-4-4]\n",
    f"s=''\nfor (( i = -3-1; i < -1; i++ )); do s=$s$i,; done\n{T} $s\n",
    f"N=-3-1\nif [[ $N -eq -4 ]]; then A=y; else A=n; fi\nX=abcdef\n{T} $A ${{X:N+5:-1-1}}\n",
    # a sign next to its number is one word of the test (the grammar cut `-4` into an operator and 4)
    f"N=-4\n[[ $N -eq -4 ]] && A=y || A=n\n[ -4 -lt $N ] && B=y || B=n\n[ !x = !x ] && C=y || C=n\n{T} $A $B $C\n",
]


@needs_bash
@pytest.mark.parametrize("script", HEREDOC_COMMENTS)
def test_a_here_document_given_to_no_command_is_not_run(script, tmp_path):
    expected = bash_runs(script, tmp_path)
    (tmp_path / "notes.txt").unlink(missing_ok=True)
    assert read_runs(script, tmp_path) == expected
    reading = read_script(script, [], tmp_path / "train.sh")
    assert not [why for _, why in reading.skipped if "not read" in why], reading.skipped


# a test of a value whose known text already decides it, whatever its unknown part (here `$(pwd)`) holds
PARTLY_KNOWN_TESTS = [
    f'D="$(pwd)/save"\nif [ -n "$D" ]; then L=2; else L=4; fi\n{T} --num-layers $L\n',
    f'D=$(pwd)/save\nif [[ -z $D ]]; then L=2; else L=4; fi\n{T} --num-layers $L\n',
    f'D="$(pwd)/save"\nif [ "$D" != "" ]; then L=2; else L=4; fi\n[[ "" == "$D" ]] && P=8 || P=1\n'
    f'{T} --num-layers $L --pp $P\n',
    f'D="$(hostname)-x"\n[ "$D" ] && L=2\n{T} --num-layers ${{L:-4}}\n',
]


@needs_bash
@pytest.mark.parametrize("script", PARTLY_KNOWN_TESTS)
def test_a_test_that_the_known_part_of_its_operand_decides_is_decided(script, tmp_path):
    agree(script, tmp_path)


def test_an_unquoted_operand_with_an_unknown_part_is_not_decided(tmp_path):
    # `[ -n $D ]`: test(1) gets as many operands as the unknown part splits into (two are an error, status 2)
    script = f'D=$(pwd)/save\nif [ -n $D ]; then L=2; else L=4; fi\n{T} --num-layers $L\n'
    assert read_runs(script, tmp_path) == [["pretrain_gpt.py", "--num-layers", "${L}"]]


@needs_bash
@pytest.mark.parametrize("script", ARITHMETIC)
def test_arithmetic_is_bashs(script, tmp_path):
    agree(script, tmp_path)


REFUSED_ARITHMETIC = [
    # bash refuses the expression and does not run the command: no value of it may reach the preset
    f"N=08\n{T} --a $((N+1))\n",
    f"{T} --a $((1/0))\n",
    f"{T} --a $((2**-1))\n",
    f"B=10#\n{T} --a $((B))\n",
    f"{T} --a $((0x1G))\n",
    f"A='1 2'\n{T} --a $((A))\n",
    f"A=A\n{T} --a $((A+1))\n",
    f"declare -i N=08\n{T} --a $N\n",
    f"let A=08\n{T} --a ${{A:-1}}\n",
]


@needs_bash
@pytest.mark.parametrize("script", REFUSED_ARITHMETIC)
def test_arithmetic_bash_refuses_gives_no_value(script, tmp_path):
    assert bash_runs(script, tmp_path) in ([], [["pretrain_gpt.py", "--a"]], [["pretrain_gpt.py", "--a", "1"]])
    assert [command[:2] for command in read_runs(script, tmp_path)] == [["pretrain_gpt.py", "--a"]]
    assert all("${" in word for command in read_runs(script, tmp_path) for word in command[2:]), \
        read_runs(script, tmp_path)


WRITTEN_ELSEWHERE = [
    # a file written after a `cd` is the one in that directory, found again by any path that names it
    f"mkdir -p sub\ncd sub\necho 4 > tp.txt\ncd ..\n{T} --tp $(cat sub/tp.txt) --pp $(cat ./sub/../sub/tp.txt)\n",
    f"mkdir -p sub\npushd sub\nprintf '2' > pp.txt\npopd\n{T} --pp $(cat sub/pp.txt)\n",
    f"mkdir -p sub\necho 'TP=8' > sub/env.sh\ncd sub\nsource env.sh\n{T} --tp $TP $(cat ./env.sh)\n",
    f"mkdir -p sub\ncd sub\ncat > job.sh <<'EOF'\n{T} --a 1\nEOF\ncd ..\nsource sub/job.sh\n",
    f"mkdir -p sub\n(cd sub; echo 3 > n.txt)\n{T} --n $(cat sub/n.txt)\n",
]


@needs_bash
@pytest.mark.parametrize("script", WRITTEN_ELSEWHERE)
def test_a_file_written_after_cd_is_found_where_it_was_written(script, tmp_path):
    expected = bash_runs(script, tmp_path)
    shutil.rmtree(tmp_path / "sub")
    assert read_runs(script, tmp_path) == expected


NOT_THE_FILE_WRITTEN = [
    # the same name in another directory is another file (tp.txt and sub/tp.txt hold 8 here): never the text
    # written elsewhere
    f"echo 4 > tp.txt\ncd sub\n{T} --tp $(cat tp.txt)\n",
    f"cd sub\necho 5 > tp.txt\ncd ..\n{T} --tp $(cat tp.txt)\n",
    f"echo 'TP=4' > tp.txt\ncd sub\nsource ./tp.txt\n{T} --tp $TP\n",
    # written in a directory not known here: it may be any file of that name, so none is known any more
    f"echo 4 > tp.txt\ncd $SOMEWHERE\necho 5 > tp.txt\ncd {{}}\n{T} --tp $(cat tp.txt)\n",
]


@needs_bash
@pytest.mark.parametrize("script", NOT_THE_FILE_WRITTEN)
def test_a_file_of_the_same_name_elsewhere_is_not_the_one_written(script, tmp_path):
    script = script.replace("{}", str(tmp_path))
    (tmp_path / "sub").mkdir()
    for name in ("tp.txt", "sub/tp.txt"):
        (tmp_path / name).write_text("TP=8\n" if "source" in script else "8\n")
    expected = bash_runs(script.replace("$SOMEWHERE", "sub"), tmp_path)
    for name in ("tp.txt", "sub/tp.txt"):
        (tmp_path / name).write_text("TP=8\n" if "source" in script else "8\n")
    got = read_runs(script, tmp_path)
    # each word is bash's, or not known (a file the script did not write is not read here)
    assert len(got) == len(expected) == 1 and len(got[0]) == len(expected[0]), (got, expected)
    assert all(a == b or "${" in a for a, b in zip(got[0], expected[0])), (got, expected)


CALCULATORS = [
    # bc of known input (a pipe, a here-string, a here-document), as the corpus' token counts use it
    f"B=1.5\nT=$(echo \"${{B}}*1000000000/1\" | bc)\nW=$(echo \"$B * 1000 * 1000\" | bc)\nW2=$(echo \"$W/1\" | bc)\n"
    f"{T} --train-tokens $T --w $W --w2 $W2\n",
    f"{T} --min-lr `bc <<< \"scale=3; 3/10\"` --x $(bc -l <<< \"1/3\") --y $(bc<<<\"2^62\") --z $(echo 10/4 | bc -l)\n",
    f"X=$(bc <<EOF\nscale=4\na=10\na/3\nEOF\n)\nLR=$(printf '%s\\n' 'scale=6' '6 / 10' | bc)\n{T} --x $X --lr $LR\n",
    f"N=$(echo '3*4' | bc | tr -d '\\n')\nM=$(echo 'x=5; x+1' | bc -q)\n{T} --n $N $M $(echo '-7%2; -2^2' | bc)\n",
    # awk's BEGIN arithmetic (ALCF's `sqrt($WORLD_SIZE)`, ROCm's tokens per GPU and second)
    f"W=16\nTP=$(awk \"BEGIN {{ printf \\\"%.0f\\\", sqrt($W) }}\")\n"
    f"TGS=$(awk -v bs=4 -v sl=2048 -v tpi=1.5 -v ws=$W 'BEGIN {{printf \"%.6f\", bs * sl * 1000/ (tpi * ws)}}')\n"
    f"{T} --tp $TP --tgs $TGS $(awk 'BEGIN{{x=3; print x^2, \"n=\" x; print 10/4, -2^2, 1e6}}')\n",
]


@needs_bash
@pytest.mark.skipif(shutil.which("bc") is None or shutil.which("awk") is None, reason="compares with bc and awk")
@pytest.mark.parametrize("script", CALCULATORS)
def test_calculators_print_what_they_print(script, tmp_path):
    agree(script, tmp_path)


def test_a_calculation_not_computed_is_not_known(tmp_path):
    # a division by zero, the math library, bc's own bases, a value not known: each is lost, never a guess
    script = (f"{T} --a $(echo 3/0 | bc) --b $(echo 's(1)' | bc -l) --c $(echo 'obase=2; 5' | bc) "
              f"--d $(echo \"$NOT_SET * 2\" | bc)\n")
    words = read_runs(script, tmp_path)[0]
    assert words[1::2] == ["--a", "--b", "--c", "--d"] and all("${" in word for word in words[2::2]), words


IN_A_DIRECTORY_NOT_KNOWN = [
    # `cd $REPO` (the caller's): the files written there are found there again, and nowhere else
    f"cd $REPO\necho 'TP=4' > env.sh\nsource env.sh\necho 2 > pp.txt\n{T} --tp $TP --pp $(cat pp.txt)\n",
    f"cd $REPO\ncat > job.sh <<'EOF'\n{T} --a 1\nEOF\nsource ./job.sh\nmkdir -p x\ncd x\necho 3 > n\ncd ..\n"
    f"{T} --n $(cat x/n)\n",
]


@needs_bash
@pytest.mark.parametrize("script", IN_A_DIRECTORY_NOT_KNOWN)
def test_a_file_written_in_a_directory_not_known_is_found_there(script, tmp_path):
    (tmp_path / "sub").mkdir()
    assert read_runs(script, tmp_path) == bash_runs("REPO=sub\n" + script, tmp_path)


def test_a_file_written_in_a_directory_not_known_is_not_found_elsewhere(tmp_path):
    for script in (f"cd $REPO\necho 4 > tp.txt\ncd ..\n{T} --tp $(cat tp.txt)\n",
                   f"echo 4 > tp.txt\ncd $REPO\n{T} --tp $(cat tp.txt)\n",
                   f"cd $REPO\necho 4 > tp.txt\ncd $REPO\n{T} --tp $(cat tp.txt)\n"):
        (words,) = read_runs(script, tmp_path)
        assert words[:2] == ["pretrain_gpt.py", "--tp"] and "${" in words[2], (script, words)


JOINED_AND_SPLIT = [
    # "$*" and "${A[*]}" join by IFS's first character (none where IFS is empty); unquoted $@, $*, ${A[@]} are joined
    # so and split by the script's IFS
    f"A=(x y z)\nIFS=-\n{T} \"${{A[*]}}\" ${{A[*]}} \"${{!A[*]}}\" \"${{A[*]:1}}\" \"${{A[*]/#/+}}\" \"${{A[*]^^}}\"\n",
    f"set -- p q r\nIFS=+\nX=$*\nY=${{*:2}}\n{T} \"$*\" \"$@\" \"$X\" \"$Y\" \"${{*:2}}\"\n",
    f"A=(x '' z)\nIFS=\n{T} ${{A[*]}} \"${{A[*]}}\" ${{A[@]}}\nIFS=-\n{T} ${{A[*]}} ${{A[@]}} \"${{A[*]}}\"\n",
    f"A=(x y)\nIFS=.\ncase ${{A[*]}} in x.y) R=joined ;; *) R=other ;; esac\n[[ ${{A[*]}} == x.y ]] && S=y || S=n\n"
    f"for w in \"${{A[*]}}\" ${{A[*]}}; do {T} $R $S $w; done\n",
    # a here-document joins $* by blanks, an array's [*] by IFS
    f"set -- a b\nA=(x y)\nIFS=_\ncat > f.txt <<EOF\n$* ${{*}} ${{A[*]}} \"$*\" $@\nEOF\n{T} \"$(cat f.txt)\"\n",
    # an associative array's keys come in bash's hash-table order, not the order they were set
    f"declare -A P=([a]=1 [b]=2 [tp]=4 [pp]=2 [num_layers]=32)\nP[zz]=9\nunset 'P[a]'\nP[a]=0\nIFS=/\n"
    f"{T} \"${{P[*]}}\" \"${{!P[*]}}\" ${{!P[@]}}\nfor k in \"${{!P[@]}}\"; do {T} --$k ${{P[$k]}}; done\n",
    # `[^a]` negates as `[!a]` does (it was read as the set of ^ and a)
    f"X='ab12cd34^'\n{T} \"${{X//[^a]/_}}\" \"${{X//[!a]/_}}\" \"${{X//[a^]/_}}\" \"${{X//[^[:digit:]]/.}}\" "
    f"\"${{X//[\\^]/_}}\"\n",
    f"X='a^b'\ncase $X in a[^x]b) R=neg ;; *) R=other ;; esac\n[[ $X == a[^^]b ]] && S=y || S=n\n{T} $R $S\n",
]


@needs_bash
@pytest.mark.parametrize("script", JOINED_AND_SPLIT)
def test_words_joined_and_split_as_bash_does(script, tmp_path):
    agree(script, tmp_path)


ESCAPES = [
    # $'…', `echo -e` and printf's format, each with bash's escapes (\x41, octal, \u, \c, \? …): they were left as
    # written but for \n \t \r \a \e \\ \' \"
    f"{T} $'a\\tb' $'\\x41\\101\\u0042\\U00000043' $'\\cA' $'q\\?\\\"\\'z' $'\\q\\x\\u' $'\\0101'\n",
    f"{T} \"$(echo -e 'x\\101\\0101\\x41\\q\\\"')\" \"$(printf 'p\\101\\0101\\x41\\q\\\"\\?%s' .)\"\n",
    f"{T} \"$(echo -e 'a\\cb')\" \"$(echo -e 'a\\nb' | tail -1)\" \"$(printf '\\045d')\" \"${{X:-$'\\x2d'}}\"\n",
]


@needs_bash
@pytest.mark.parametrize("script", ESCAPES)
def test_backslash_escapes_as_bash_reads_them(script, tmp_path):
    agree(script, tmp_path)


def test_an_escape_written_by_the_locale_is_not_known(tmp_path):
    script = f"X=$'\\xff'\nY=$'\\u00e9'\n{T} --x \"$X\" --y \"$Y\" $(echo -e '\\xff') \"$(printf '\\0')\"\n"
    (words,) = read_runs(script, tmp_path)
    assert words[1] == "--x" and words[3] == "--y" and len(words) == 7, words
    assert all("${" in w for w in (words[2], words[4], *words[5:])), words


def test_a_case_change_outside_ascii_is_not_known(tmp_path):
    # bash changes a letter outside ASCII by the locale (`declare -u U=ßa` is ßA in bash; Python's upper() made SSA);
    # ASCII letters change alike everywhere
    script = (f"declare -u U=ßa\ndeclare -l L=ÀB\nX=straße\nA=abc\nQ=$'a\\tb'\n"
              f"{T} \"$U\" \"$L\" \"${{X^^}}\" \"${{X@U}}\" \"${{A^^}}\" \"${{A@u}}\" \"${{Q@Q}}\" \"${{A@Q}}\"\n")
    (words,) = read_runs(script, tmp_path)
    assert all("${" in w for w in words[1:5]) and words[5:7] == ["ABC", "Abc"], words
    assert "${" in words[7] and words[8] == "'abc'", words


def test_printf_where_the_machine_decides_is_not_known(tmp_path):
    # bash prints %f of a long double (80 bits on x86, 128 on ARM): 1.115 is 1.12 here, Python's double gave 1.11;
    # %s pads by bytes, %#o is C's 010 (Python's 0o10)
    script = (f"{T} \"$(printf '%.2f' 1.115)\" \"$(printf '%.20f' 0.1)\" \"$(printf '%5s' é)\" \"$(printf '%#o' 8)\" "
              f"\"$(printf '%.2f %e %.1f' 2.5 0 0.25)\" \"$(printf '%.3e' 12345.6789)\"\n")
    (words,) = read_runs(script, tmp_path)
    assert all("${" in w for w in words[1:5]) and words[5:] == ["2.50 0.000000e+00 0.2", "1.235e+04"], words


def test_brace_sequences_as_bash_expands_them(tmp_path):
    # the width of `{-01..2}` counts the sign (bash's -01, it was -001); a sequence not expanded here (`{Z..b}` passes
    # through [ \ ] ^ _ `, `{1..5000}` past the bound) is not known, where it was kept as written
    script = f"{T} {{-01..2}} {{-003..1}} {{0001..3}} {{05..1..2}} {{a..e..2}}\n"
    agree(script, tmp_path)
    (words,) = read_runs(f"{T} {{Z..b}} {{1..5000}} x{{1..2}}\n", tmp_path)
    assert "${" in words[1] and "${" in words[2] and words[3:] == ["x1", "x2"], words


PARAMETER_OPERATIONS = [
    # "${X:+'q r'}": inside double quotes the single quotes of the word are text (they were removed)
    f"X=ab\nY=\n{T} \"${{X:+'q r'}}\" \"${{Y:-'d'}}\" ${{Y:-'e f'}} \"${{Y-'g'}}\" \"${{Y:-$(echo 'i j')}}\" "
    f"${{X:+'l'}}\n",
    # a quoted pattern is the quoted text (`${X/'b'/-}` kept the quotes and matched nothing); `${X:='q r'}` is X's new
    # value, split; `${X:+'q r'}` of an empty X is no word
    f"X=abc\n{T} ${{X#''}} ${{X/'b'/-}} ${{X/#'a'/-}} ${{X/''/-}} ${{X/#''a/-}} ${{X/'*'/-}} \"${{X/'b'/-}}\" "
    f"${{X/b/'-'}}\n",
    f"X=\nY=\n{T} ${{X:='q r'}} ${{Y:+'q r'}} \"$X\"\n",
    # `*` replaces the whole value once (it was replaced, then the empty end again: ZZ)
    f"X=abc\nY=\n{T} ${{X//*/Z}} \"${{X//*/Z}}\" \"[${{Y//*/Z}}]\" \"${{X/%*/Z}}\" \"${{X//b*/Z}}\" \"${{X//x*/Z}}\"\n",
]


@needs_bash
@pytest.mark.parametrize("script", PARAMETER_OPERATIONS)
def test_parameter_operations_as_bash_does(script, tmp_path):
    agree(script, tmp_path)


def test_a_replacement_with_an_ampersand_or_a_class_of_a_letter_outside_ascii_is_not_known(tmp_path):
    # bash 5.2 puts the match where the replacement has `&` (5.1 an `&`); `[[:alpha:]]` of Ä is the locale's
    script = f"X='x*y'\nA=ÄbC\n{T} \"${{X/*//&}}\" \"${{A/[[:alpha:]]//}}\" \"${{A#[[:alpha:]]}}\" \"${{X/x/-}}\"\n"
    (words,) = read_runs(script, tmp_path)
    assert all("${" in w for w in words[1:4]) and words[4] == "-*y", words
