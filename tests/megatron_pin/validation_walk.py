"""Every check in Megatron's argument validation at the pin, found by walking its source with `ast` (never imported):
each `assert`, `raise` and `exit()` of validate_args (megatron/training/arguments.py) and of the config dataclasses'
__post_init__ (ModelParallelConfig, TransformerConfig, MLATransformerConfig), with the `if` conditions around it.

A check's key is what it tests, not where it sits, so a pin that only moves lines keeps every key:
    "validate_args: assert not args.check_for_nan_in_loss_and_grad if args.cuda_graph_impl == 'full_iteration'"
    "validate_args: exit() if args.checkpoint_activations"
    "ModelParallelConfig: raise ValueError if self.pipeline_model_parallel_size > 1 and self.pipeline_dtype is None"
A key that occurs twice in one function gets " [2]", " [3]" in source order.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# (file under the checkout, class or None, function, short name used in keys)
WALKED = (
    ("megatron/training/arguments.py", None, "validate_args", "validate_args"),
    ("megatron/core/model_parallel_config.py", "ModelParallelConfig", "__post_init__", "ModelParallelConfig"),
    ("megatron/core/transformer/transformer_config.py", "TransformerConfig", "__post_init__", "TransformerConfig"),
    ("megatron/core/transformer/transformer_config.py", "MLATransformerConfig", "__post_init__",
     "MLATransformerConfig"),
)


@dataclass(frozen=True)
class Check:
    key: str
    file: str
    line: int
    end_line: int
    conditions: tuple[str, ...]  # the enclosing `if` tests, outermost first ("not (…)" for an else branch)
    message: str

    def covers(self, file: str, line: int) -> bool:
        return file == self.file and self.line <= line <= self.end_line


def _function(tree: ast.Module, cls: str | None, name: str) -> ast.FunctionDef:
    body = tree.body
    if cls is not None:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    return next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)


def _is_exit(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) in ("exit", "quit", "sys.exit"))


def _text(node: ast.expr | None) -> str:
    return " ".join(ast.unparse(node).split()) if node is not None else ""


def _raised(node: ast.Raise) -> tuple[str, str]:
    """('ValueError', its message) of `raise ValueError('…')`."""
    exc = node.exc
    if isinstance(exc, ast.Call):
        message = _text(exc.args[0]) if exc.args else ""
        return _text(exc.func), message
    return _text(exc), ""


def _statements(body: list[ast.stmt], conditions: tuple[str, ...]) -> Iterator[tuple[ast.stmt, tuple[str, ...]]]:
    """Every statement with the `if` tests it sits under (loops, with and try are walked through; nested
    functions are not part of the check)."""
    for node in body:
        yield node, conditions
        if isinstance(node, ast.If):
            yield from _statements(node.body, (*conditions, _text(node.test)))
            yield from _statements(node.orelse, (*conditions, f"not ({_text(node.test)})"))
        elif isinstance(node, (ast.For, ast.While, ast.With, ast.Try)):
            for field in ("body", "orelse", "finalbody"):
                yield from _statements(getattr(node, field, []), conditions)
            for handler in getattr(node, "handlers", []):
                yield from _statements(handler.body, (*conditions, f"except {_text(handler.type)}"))


def walk(checkout: Path) -> list[Check]:
    checks: list[Check] = []
    for file, cls, name, short in WALKED:
        function = _function(ast.parse((checkout / file).read_text()), cls, name)
        found: list[tuple[str, ast.stmt, tuple[str, ...], str]] = []
        for node, conditions in _statements(function.body, ()):
            where = conditions[-1] if conditions else "always"
            if isinstance(node, ast.Assert):
                text = f"assert {_text(node.test)}" + (f" if {where}" if conditions else "")
                found.append((text, node, conditions, _text(node.msg)))
            elif isinstance(node, ast.Raise):
                kind, message = _raised(node)
                found.append((f"raise {kind} if {where}", node, conditions, message))
            elif _is_exit(node):
                found.append((f"exit() if {where}", node, conditions, ""))
        seen: Counter[str] = Counter()
        for text, node, conditions, message in found:
            seen[text] += 1
            key = f"{short}: {text}" + (f" [{seen[text]}]" if seen[text] > 1 else "")
            checks.append(Check(key, file, node.lineno, node.end_lineno or node.lineno, conditions, message))
    return checks
