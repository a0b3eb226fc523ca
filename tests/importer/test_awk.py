"""awk programs of one BEGIN block of arithmetic (launcher/importer/awk.py): random programs, each compared with the
awk installed where there is one; what is not computed (where awks differ, or past the subset) is None."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from launcher.importer import awk

needs_awk = pytest.mark.skipif(shutil.which("awk") is None, reason="compares with awk")


def _program(rng: random.Random) -> str:
    def number() -> str:
        pick = rng.random()
        if pick < 0.4:
            return str(rng.randint(0, 100))
        if pick < 0.6:
            return f"{rng.randint(0, 99)}.{rng.randint(0, 999)}"
        if pick < 0.7:
            return f"{rng.randint(1, 9)}e{rng.randint(-3, 9)}"
        if pick < 0.85:
            return rng.choice(["x", "y", "z"])
        return str(rng.randint(0, 10**7))

    def expression(depth: int = 0) -> str:
        if depth > 3 or rng.random() < 0.3:
            return number()
        pick = rng.random()
        if pick < 0.1:
            return "-" + expression(depth + 1)
        if pick < 0.2:
            return "(" + expression(depth + 1) + ")"
        if pick < 0.3:
            return rng.choice(["sqrt", "int", "exp", "log"]) + "(" + expression(depth + 1) + ")"
        if pick < 0.4:
            return expression(depth + 1) + "^" + rng.choice(["0", "1", "2", "3", "-1", "0.5"])
        if pick < 0.45:
            return expression(depth + 1) + " " + expression(depth + 1)
        return expression(depth + 1) + rng.choice(["+", "-", "*", "/", "%"]) + expression(depth + 1)

    statements = [f"z = {expression(2)}"] if rng.random() < 0.3 else []
    if rng.random() < 0.5:
        statements.append("print " + ", ".join(expression() for _ in range(rng.randint(1, 2))))
    else:
        form = rng.choice(["%d", "%.0f", "%.2f", "%e", "%g", "%s", "%5.1f", "%-4d|", "%i", "%.3g"])
        statements.append(f'printf "{form}\\n", {expression()}')
    return "BEGIN { " + "; ".join(statements) + " }"


@needs_awk
def test_random_programs_print_what_awk_prints():
    rng = random.Random(11)
    computed = 0
    for _ in range(300):
        args = ["-v", f"x={rng.randint(0, 50)}", "-v", f"y={rng.randint(1, 9)}.{rng.randint(0, 9)}", _program(rng)]
        mine = awk.run(args)
        if mine is None:
            continue
        real = subprocess.run(["awk", *args], capture_output=True, text=True, timeout=10)
        assert (mine, "") == (real.stdout, real.stderr), args
        computed += 1
    assert computed > 200


@pytest.mark.parametrize(("args", "printed"), [
    (['BEGIN { printf "%.0f", sqrt(16) }'], "4"),
    (["-v", "bs=4", "-v", "ws=16", 'BEGIN {printf "%.6f", bs * 2048 * 1000 / (1.5 * ws)}'], "341333.333333"),
    (['BEGIN{x=3; print x^2, "n=" x; print 10/4, -2^2, 2^3^2, 1e6, 7%-3}'], "9 n=3\n2.5 -4 512 1000000 1\n"),
])
def test_what_awk_prints(args, printed):
    assert awk.run(args) == printed


@pytest.mark.parametrize("program", [
    "BEGIN{print 2^31}", "BEGIN{print -2^31}", 'BEGIN{printf "%d", 2^31}', "BEGIN{print 1/0}", "BEGIN{print 2**3}",
    "BEGIN{print log(-1)}", "BEGIN{print -0}", "{print $1}", "BEGIN{print 1} END{print 2}", "BEGIN{print 1 > 0}",
    "BEGIN{print length(12)}", 'BEGIN{printf "%c", 65}', "BEGIN{print 10^400}", "BEGIN{print " + "(" * 500 + "1"
    + ")" * 500 + "}", "BEGIN{print " + "- " * 500 + "1}", "BEGIN{x++}", "BEGIN{print ENVIRON[\"HOME\"]}",
])
def test_what_is_not_computed_is_none(program):
    assert awk.run([program]) is None


def test_files_and_unknown_options_are_not_computed():
    assert awk.run(["BEGIN{print 1}", "file.txt"]) is None and awk.run(["-f", "prog.awk"]) is None
    assert awk.run(["-F", ":", "BEGIN{print 1}"]) == "1\n"
