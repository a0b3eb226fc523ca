"""Bash's arithmetic (launcher/importer/arithmetic.py) on random expressions, each compared with bash's own result:
a value the import gives is bash's; where bash refuses the expression, the import gives none. Work stays bounded."""

from __future__ import annotations

import random
import shutil
import subprocess
import time

import pytest

from launcher.importer.bash_subset import read_script, show

OPERATORS = ["+", "-", "*", "/", "%", "&", "|", "^", "&&", "||", "==", "!=", "<", ">", "<=", ">=", ","]


def _expression(rng: random.Random, depth: int = 0) -> str:
    if depth > 3 or rng.random() < 0.25:
        pick = rng.random()
        if pick < 0.35:
            return str(rng.randint(0, 20))
        if pick < 0.5:
            return rng.choice(["a", "b", "c", "e"])
        if pick < 0.65:
            return "$" + rng.choice(["a", "b", "c", "e"])
        if pick < 0.72:
            return rng.choice(["0x1f", "010", "2#11", "9223372036854775807", "08"])
        return rng.choice(["a++", "++b", "c--", "--a", "7"])
    pick = rng.random()
    inner = _expression(rng, depth + 1)
    if pick < 0.1:
        return rng.choice(["-", "!", "~", "+", "- "]) + inner
    if pick < 0.2:
        return "(" + inner + ")"
    if pick < 0.27:
        return f"{inner} ? {_expression(rng, depth + 1)} : {_expression(rng, depth + 1)}"
    if pick < 0.32:
        return rng.choice(["a", "b"]) + rng.choice([" = ", " += ", " *= ", " -= "]) + inner
    if pick < 0.37:
        return f"{inner}**{rng.randint(0, 4)}"
    if pick < 0.42:
        return f"{inner}{rng.choice(['<<', '>>'])}{rng.randint(0, 70)}"
    return inner + rng.choice(["", " "]) + rng.choice(OPERATORS) + rng.choice(["", " "]) + _expression(rng, depth + 1)


@pytest.mark.skipif(shutil.which("bash") is None, reason="compares with bash")
def test_random_expressions_give_bashs_value_or_none():
    rng = random.Random(5)
    known = 0
    for _ in range(250):
        setup = (f"a={rng.randint(-5, 9)}\nb='{rng.choice(['2+3', '-4', '3*a', ' 7 ', '0', '08'])}'\n"
                 f"c={rng.randint(1, 9)}\ne='a'\n")
        code = setup + f"W=$(( {_expression(rng)} ))\nV=\"$a,$b,$c\"\n"
        ran = subprocess.run(["bash", "-c", code + 'echo "$W|$V"'], capture_output=True, text=True, timeout=10)
        expected = ran.stdout.strip() if ran.returncode == 0 and not ran.stderr else None
        reading = read_script(code + 'cmd "$W|$V"\n')
        if not reading.commands:  # lines the grammar cannot read, named as such (and the command in them)
            assert any("not read" in why for _, why in reading.skipped)
            continue
        (word,) = [show(w) for w in reading.commands[-1].argv[1:]]
        if "${" in word:
            continue  # not known: never another value
        assert word == expected, code
        known += 1
    assert known > 150


@pytest.mark.parametrize("expression", [
    "(" * 5000 + "1" + ")" * 5000, "a=" * 5000 + "1", "- " * 5000 + "1", "1?" * 3000 + "1" + ":0" * 3000,
    "7**9223372036854775807", "9" * 90000, "64#" + "_" * 90000,
])
def test_hostile_arithmetic_is_bounded(expression):
    started = time.monotonic()
    try:
        reading = read_script(f"X=$(({expression}))\ncmd $X\n")
        assert reading.commands or reading.skipped
    except Exception as exc:  # a bound the reading states (ShellSyntaxError), never a crash of Python's own
        assert type(exc).__name__ == "ShellSyntaxError", exc
    assert time.monotonic() - started < 5


def test_a_variable_that_refers_to_itself_is_not_known():
    for setup in ("A=A", "A=B\nB=A", "A0=1\n" + "".join(f"A{i}=A{i - 1}+1\n" for i in range(1, 200)) + "A=A199"):
        (word,) = [show(w) for w in read_script(f"{setup}\ncmd $((A+1))\n").commands[-1].argv[1:]]
        assert "${" in word
