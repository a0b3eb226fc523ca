"""bc's decimal arithmetic as GNU bc computes it (launcher/importer/bc.py): random programs of the subset it reads,
each compared with the real bc where one is installed; what it does not compute is None, never another number."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from launcher.importer import bc

needs_bc = pytest.mark.skipif(shutil.which("bc") is None, reason="compares with GNU bc")


def _program(rng: random.Random) -> str:
    def number() -> str:
        pick = rng.random()
        if pick < 0.3:
            return str(rng.randint(0, 30))
        if pick < 0.6:
            return f"{rng.randint(0, 999)}.{rng.randint(0, 999):0{rng.randint(1, 3)}d}"
        if pick < 0.7:
            return "." + str(rng.randint(0, 99))
        if pick < 0.8:
            return str(rng.randint(0, 10**12))
        return rng.choice(["x", "y", "scale"])

    def expression(depth: int = 0) -> str:
        if depth > 3 or rng.random() < 0.3:
            return number()
        pick = rng.random()
        if pick < 0.1:
            return "-" + expression(depth + 1)
        if pick < 0.2:
            return "(" + expression(depth + 1) + ")"
        if pick < 0.25:
            return "sqrt(" + expression(depth + 1) + ")"
        if pick < 0.35:
            return expression(depth + 1) + "^" + rng.choice(["0", "1", "2", "3", "-1", "-2", "5"])
        return expression(depth + 1) + rng.choice(["+", "-", "*", "/", "%"]) + " " + expression(depth + 1)

    text = f"scale={rng.randint(0, 8)}; " if rng.random() < 0.5 else ""
    text += f"x={expression(2)}; " if rng.random() < 0.3 else ""
    text += f"y={expression(2)}\n" if rng.random() < 0.3 else ""
    return text + expression() + ("; " + expression() if rng.random() < 0.2 else "") + "\n"


@needs_bc
def test_random_programs_print_what_gnu_bc_prints():
    rng = random.Random(7)
    computed = 0
    for _ in range(300):
        program, args = _program(rng), (["-l"] if rng.random() < 0.2 else [])
        mine = bc.run(args, program)
        if mine is None:
            continue
        real = subprocess.run(["bc", *args], input=program, capture_output=True, text=True, timeout=10)
        assert (mine, "") == (real.stdout, real.stderr), (args, program)
        computed += 1
    assert computed > 200  # most of them are computed


@pytest.mark.parametrize(("args", "program", "printed"), [
    ([], "0.3*1000*1000*1000\n300000000.0/1\n", "300000000.0\n300000000\n"),
    ([], "scale=3; -1/1000*1\n", "-.001\n"),
    (["-l"], "10/4\n", "2.50000000000000000000\n"),
    ([], "scale=2; 0/3\n.5+.5\n-2^2\n2^3^2\n", "0\n1.0\n4\n512\n"),
    ([], "scale=1; 7%3\nscale=0; 7.5%2\n", ".1\n1.5\n"),
    ([], "scale=4; sqrt(2)\nsqrt(1.00)\n", "1.4142\n1\n"),
])
def test_bcs_scale_and_printing(args, program, printed):
    assert bc.run(args, program) == printed


@pytest.mark.parametrize("program", [
    "1/0", "2^0.5", "obase=16; 255", "ibase=16; FF", "1 < 2", "s(1)", "length(12)", "quit", "5--3", "x++",
    "2^300", "2^99999999", "0.1^-999999", "scale=1000000; 1/3", "(" * 3000 + "1" + ")" * 3000, "- " * 3000 + "1",
    "2^" * 3000 + "1", "print 5", "/* c */ 1", "A", "1e3", "3 4", "x=", "scale=-1; 1",
])
def test_what_is_not_computed_is_none(program):
    assert bc.run([], program + "\n") is None


def test_options_other_than_the_math_library_are_not_computed():
    assert bc.run(["-l"], "1/4\n") == ".25000000000000000000\n"
    assert bc.run(["file.bc"], "1\n") is None and bc.run(["-s"], "1\n") is None
