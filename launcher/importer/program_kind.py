"""Files that name pretrain_gpt.py but are no shell script: a Python program that builds the training command (a
list handed to subprocess, an f-string given to os.system) and a Jupyter notebook (JSON of cells). Read as bash,
a Python list of flags became flags with commas (`--num-layers, 24,`) and a notebook "ran no pretrain_gpt.py"; the
import now says what the file is and how to import the command it runs."""

from __future__ import annotations

import ast
import json
import re

from launcher.errors import UserError

PYTHON_SHEBANG = re.compile(r"#![^\n]*\bpython[0-9.]*\b")
# what a Python program holds and a shell script does not: bash has no `import`, `def` or `class` statements
PYTHON_STATEMENTS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def refuse_other_programs(text: str) -> None:
    """Raise a UserError for a Python program or a Jupyter notebook, saying which and what to import instead."""
    kind = _kind(text)
    if kind == "notebook":
        raise UserError("cannot read the script: it is a Jupyter notebook (JSON of cells), not a shell script",
                        "put the training command of its cell in a file (a `!torchrun …` line without the `!`, or "
                        "the body of a %%bash cell) and import that file")
    if kind == "python":
        raise UserError("cannot read the script: it is a Python program, not a shell script; the command it "
                        "builds (the words it hands to subprocess or os.system) is known only when it runs",
                        "print the command it would run (shlex.join of its words) and import that line: "
                        "`launch import - <<< 'torchrun … pretrain_gpt.py …'`")


def _kind(text: str) -> str | None:
    head = text.lstrip()
    if head.startswith("{") and '"cells"' in text and '"nbformat"' in text:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return None
        return "notebook" if isinstance(data, dict) and isinstance(data.get("cells"), list) else None
    if PYTHON_SHEBANG.match(head.split("\n", 1)[0]):
        return "python"
    if not re.search(r"^\s*(?:import|from|def|class|async\s+def)\s", text, re.M):
        return None  # a cheap look first: parsing every script as Python would cost the bash reader's time
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return "python" if any(isinstance(node, PYTHON_STATEMENTS) for node in ast.walk(tree)) else None
