"""Megatron's per-layer patterns (--moe-layer-freq, --no-rope-freq, --linear-attention-freq,
--window-attn-skip-freq): an integer N, or a Python list expression such as ``([0]*1+[1]*23)``.

Megatron ``eval``s the expression after a character filter (arguments.py:_eval_pattern), so ``[0]*10**12``
passes its filter and exhausts memory. Here the expression is read from its syntax tree instead: integers, lists
of them, ``+`` and ``*``, with every list's length known before it is built and bounded, so a hostile value costs
nothing and nothing is evaluated. The launcher reads a pattern only through this module; the argument catalog
gives these arguments the type "layer_pattern" (scripts/dump_megatron_args.py, by Megatron's parser function).
"""

from __future__ import annotations

import ast

MAX_LAYERS = 1 << 16  # longer than any model's layer count; a pattern beyond it is refused, not built


def parse(value: int | str) -> int | list[int]:
    """The pattern as Megatron reads it: an int, or the list of per-layer values. ValueError says why not."""
    if isinstance(value, bool):
        raise ValueError(f"expected an integer or a list expression such as ([0]*1+[1]*3), got {value}")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if "[" not in text:  # Megatron: "a single int but in str"
        try:
            return int(text, 10)
        except ValueError:
            raise ValueError(f"expected an integer or a list expression such as ([0]*1+[1]*3), got "
                             f"{text[:60]!r}") from None
    if len(text) > 10_000:
        raise ValueError(f"a pattern of {len(text):,} characters is too long to be a layer pattern")
    try:
        result = _value(ast.parse(text, mode="eval").body)
    except (SyntaxError, RecursionError, MemoryError):  # e.g. thousands of nested parentheses or of `+`
        raise ValueError(f"{text[:60]!r} is not a list expression such as ([0]*1+[1]*3)") from None
    if not isinstance(result, list):
        raise ValueError(f"{text[:60]!r} is not a list of per-layer values")
    return result


def _value(node: ast.expr) -> int | list[int]:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        if node.value > MAX_LAYERS:
            raise ValueError(f"{node.value} is larger than any layer count (at most {MAX_LAYERS:,})")
        return node.value
    if isinstance(node, ast.List):
        values: list[int] = []
        for item in node.elts:
            value = _value(item)
            if isinstance(value, list):
                raise ValueError("a layer pattern is a flat list of integers")
            values.append(value)
        return values if len(values) <= MAX_LAYERS else _too_long()
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Add):
            if isinstance(left, list) and isinstance(right, list):
                return left + right if len(left) + len(right) <= MAX_LAYERS else _too_long()
            if isinstance(left, int) and isinstance(right, int):
                return left + right
            raise ValueError("+ joins two lists (or adds two integers)")
        if isinstance(left, int) and isinstance(right, int):
            return left * right if left * right <= MAX_LAYERS else _too_long()
        if isinstance(left, list) and isinstance(right, int):
            repeated, times = left, right
        elif isinstance(right, list) and isinstance(left, int):
            repeated, times = right, left
        else:
            raise ValueError("* repeats a list an integer number of times")
        return repeated * times if len(repeated) * times <= MAX_LAYERS else _too_long()
    raise ValueError("a layer pattern has only integers, [lists], + and * (and parentheses)")


def _too_long() -> list[int]:
    raise ValueError(f"the pattern is longer than {MAX_LAYERS:,} layers")
