"""Derive, from Megatron-LM's own git history, every flag that a tagged release's arguments.py parsed and the pinned
commit no longer parses, with the releases that had it and Megatron's own words about it.

    python scripts/derive_legacy_flags.py --repo MEGATRON_GIT          # writes launcher/data/megatron_legacy_flags.json
    python scripts/derive_legacy_flags.py --repo MEGATRON_GIT --check  # exit 1 when the file is out of date

The repository is read with `git show TAG:megatron/[training/]arguments.py` (a bare clone is enough); each file is
parsed with Python's ast, never imported. Releases: the final tags (no rc/alpha) dated up to the pin's commit, in
date order, and the pin itself. For each flag gone at the pin: its dest, how it was parsed (store_true/false, a
value and its type), the first and last release that had it, the pin's flags of the same dest where one exists (a
rename), and Megatron's message about it: a string of any release's arguments.py (the pin's first) that names the
flag and says it is deprecated, no longer valid, removed, or to be replaced ("use --x instead"). Which flags the
launcher translates, and how, is curated apart (launcher/data/flag_translations.json); this table is only what the
history says.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "launcher" / "data" / "megatron_legacy_flags.json"
PIN = "432d76b2b8bf"
PATHS = ("megatron/training/arguments.py", "megatron/arguments.py")
FINAL_TAG = re.compile(r"v\d+\.\d+|core_v\d+\.\d+\.\d+|\d\d\.\d\d")
MESSAGE_WORDS = re.compile(r"deprecat|no longer|removed|instead|not supported anymore", re.I)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def releases(repo: Path) -> list[tuple[str, str]]:
    """(tag, date) of the final releases up to the pin's date, oldest first."""
    pin_date = git(repo, "log", "-1", "--format=%cI", PIN).strip()
    out = []
    for tag in git(repo, "tag").split():
        if not FINAL_TAG.fullmatch(tag):
            continue
        date = git(repo, "log", "-1", "--format=%cI", tag).strip()
        if date <= pin_date:
            out.append((date, tag))
    return [(tag, date[:10]) for date, tag in sorted(out)]


def arguments_source(repo: Path, ref: str) -> tuple[str, str] | None:
    for path in PATHS:
        try:
            return path, git(repo, "show", f"{ref}:{path}")
        except subprocess.CalledProcessError:
            continue
    return None


def _constant(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def _parse(source: str) -> ast.Module:
    with warnings.catch_warnings():  # old releases have invalid escapes in their help texts
        warnings.simplefilter("ignore")
        return ast.parse(source)


def parsed_flags(source: str) -> dict[str, dict[str, Any]]:
    """flag → {dest, kind, type, help} of every add_argument call with literal '--' names."""
    out: dict[str, dict[str, Any]] = {}
    for node in ast.walk(_parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        flags = [n for n in names if n.startswith("--")]
        if not flags:
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        dest = _constant(keywords["dest"]) if "dest" in keywords else None
        dest = dest or flags[0].removeprefix("--").replace("-", "_")
        action = _constant(keywords["action"]) if "action" in keywords else None
        kind = {"store_true": "true", "store_false": "false"}.get(str(action), "value")
        if "action" in keywords and action is None:  # argparse.BooleanOptionalAction and the like
            kind = "bool"
        value_type = "str"
        if "type" in keywords and isinstance(keywords["type"], ast.Name):
            value_type = {"int": "int", "float": "float"}.get(keywords["type"].id, "str")
        help_text = _constant(keywords["help"]) if "help" in keywords else None
        for flag in flags:
            out[flag] = {"dest": dest, "kind": kind, "type": value_type,
                         "help": " ".join(help_text.split()) if isinstance(help_text, str) else ""}
    return out


def messages(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string in the file (adjacent literals and f-strings joined) that speaks of an old flag."""
    found = []
    for node in ast.walk(_parse(source)):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            parts = [_constant(node.left), _constant(node.right)]
            text = "".join(p for p in parts if isinstance(p, str)) or None
        if text and "--" in text and MESSAGE_WORDS.search(text):
            found.append((node.lineno, " ".join(text.split())))
    return found


def pin_arguments() -> dict[str, Any]:
    arguments: dict[str, Any] = json.loads((REPO / "launcher" / "data" / "megatron_args.json").read_text())["arguments"]
    return arguments


def pin_flags() -> set[str]:
    return {flag for entry in pin_arguments().values() for flag in entry["flags"]}


def derive(repo: Path) -> dict[str, Any]:
    tags = releases(repo)
    at_pin = pin_flags()
    history: dict[str, dict[str, Any]] = {}
    said: list[tuple[str, str, int, str]] = []  # (ref, path, line, message), the pin's first
    for ref, _date in [(PIN, ""), *reversed(tags)]:
        found = arguments_source(repo, ref)
        if found is None:
            continue
        path, source = found
        said += [(ref, path, line, text) for line, text in messages(source)]
        if ref == PIN:
            continue
        for flag, entry in parsed_flags(source).items():
            if flag in at_pin:
                continue
            row = history.setdefault(flag, {"dest": entry["dest"], "kind": entry["kind"], "type": entry["type"],
                                            "help": entry["help"], "last": ref})
            row["first"] = ref  # walked newest first: the last write is the oldest release
    arguments = pin_arguments()
    for flag, row in history.items():
        if row["dest"] in arguments:  # renamed: the pin sets the same attribute under another spelling
            row["pin_flags"] = arguments[row["dest"]]["flags"]
        pattern = re.compile(re.escape(flag) + r"(?![\w-])")
        for ref, path, line, text in said:
            at = pattern.search(text)
            # a message about this flag names it before any replacement ("--x is deprecated, use --y instead")
            if at and not re.search(r"\buse\b|instead", text[:at.start()], re.I):
                row["message"] = text
                row["message_at"] = f"{ref}:{path}:{line}"
                break
    return {
        "source": "Megatron-LM git history: arguments.py of each final release tag up to the pin, parsed with ast "
                  "(scripts/derive_legacy_flags.py)",
        "pin": PIN,
        "releases": [tag for tag, _ in tags],
        "flags": {flag: history[flag] for flag in sorted(history)},
    }


def render(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1, sort_keys=False) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, required=True, help="a Megatron-LM git repository (bare is enough)")
    parser.add_argument("--check", action="store_true", help="compare with the committed file, write nothing")
    args = parser.parse_args(argv)
    text = render(derive(args.repo))
    if args.check:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT} is out of date: run python scripts/derive_legacy_flags.py --repo {args.repo}")
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT} ({len(json.loads(text)['flags'])} flags)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
