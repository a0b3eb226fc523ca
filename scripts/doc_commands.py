"""The commands README.md and docs/*.md show, and whether each still holds against the code.

    python scripts/doc_commands.py            # every problem found (exit 1 if any)
    python scripts/doc_commands.py --list     # every command found, with where it is shown

A command is a line of a shell code block, or an inline code span, whose program is the launcher (`launch …`,
`.venv/bin/launch …`, `python -m launcher …`) or one of this repository's scripts (`python scripts/X.py …`,
`scripts/X.sh`). Each `launch` command is checked against the real CLI parser of its subcommand: every option it
names exists, every `--set NAME` names a setting (a concrete `--set NAME=VALUE` is typed as the launcher would),
a named preset exists, and a command without placeholders (PRESET, RUN_DIR, …, [optional parts]) parses as typed.
Each script command names a script that exists and options that script defines. `pip install` / `uv sync` name
extras pyproject.toml declares; `pytest FILES -k WORD` names test files that exist and a word that selects tests.
Every repository path a command or a Markdown link names exists, and no command names a path of this project's
own workspace.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHELL_LANGUAGES = ("", "bash", "sh", "shell", "console")
LAUNCHER_HEADS = (("launch",), (".venv/bin/launch",), ("uv", "run", "launch"), ("python", "-m", "launcher"),
                  ("python3", "-m", "launcher"), (".venv/bin/python", "-m", "launcher"))
PYTHONS = ("python", "python3", ".venv/bin/python")
INSTALL_HEADS = (("pip", "install"), ("pip3", "install"), (".venv/bin/pip", "install"), ("uv", "pip", "install"),
                 *((python, "-m", "pip", "install") for python in PYTHONS), ("uv", "sync"))
PYTEST_HEADS = (("pytest",), *((python, "-m", "pytest") for python in PYTHONS))
MACHINE_PATHS = ("/work/", "/root/")  # this project's own workspace: a command naming one runs only there
REPO_TOP = ("scripts", "docs", "tests", "launcher", "configs", ".ci", "third_party")


@dataclass
class Command:
    """One command as a doc shows it: where, its text, and its shell words (placeholders kept)."""

    where: str
    text: str
    words: list[str]
    cwd: str = ""  # a `cd DIR &&` before it, relative to the repository root
    inline: bool = False  # shown in a sentence (`launch plan` names the command), not in a code block

    @property
    def is_mention(self) -> bool:
        """An inline `launch plan`, `launch --resume`, `launch plan --measure`: a command or option named in a
        sentence, not a command line to type; its names are checked, not its completeness."""
        args = self.launcher_args
        return self.inline and args is not None and len(args) <= 2 and not any("=" in word for word in args)

    @property
    def launcher_args(self) -> list[str] | None:
        for head in LAUNCHER_HEADS:
            if tuple(self.words[:len(head)]) == head:
                return self.words[len(head):]
        return None

    @property
    def install_args(self) -> list[str] | None:
        """The arguments of a `pip install …` or `uv sync …`."""
        for head in INSTALL_HEADS:
            if tuple(self.words[:len(head)]) == head:
                return self.words[len(head):]
        return None

    @property
    def is_pytest(self) -> bool:
        return any(tuple(self.words[:len(head)]) == head for head in PYTEST_HEADS)

    @property
    def script(self) -> str | None:
        """The repository script it runs (relative to the root), if any."""
        words = self.words
        if words and words[0] in PYTHONS + ("bash",) and len(words) > 1 and words[1].endswith((".py", ".sh")):
            path = str(Path(self.cwd, words[1]))
        elif words:
            path = words[0]
        else:
            return None
        path = path.removeprefix("./")
        return path if re.fullmatch(r"scripts/[^/\s]+\.(sh|py)", path) else None


@dataclass
class Findings:
    commands: list[Command] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def doc_files(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


# ---- extraction -------------------------------------------------------------------------------------------------

def _strip_comment(line: str) -> str:
    """The line up to an unquoted `#` that begins a word (bash's comment rule)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _logical_lines(block: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Continuation lines joined: a trailing backslash, or (in a synopsis) an indented line beginning with `[`."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in block:
        line = _strip_comment(raw)
        if pending is not None:
            line = pending[1] + " " + line.strip()
            number = pending[0]
            pending = None
        elif out and re.match(r"\s+\[", raw) and not raw.lstrip().startswith("[["):
            number, previous = out.pop()
            line = previous + " " + line.strip()
        if line.endswith("\\"):
            pending = (number, line[:-1].rstrip())
            continue
        out.append((number, line))
    if pending is not None:
        out.append(pending)
    return out


def _split_commands(line: str) -> list[str]:
    """`a; b`, `a && b`, `for …; do a; done` → the simple commands, `$ ` prompts dropped."""
    line = line.strip().removeprefix("$ ")
    parts, quote, start, i = [], "", 0, 0
    while i < len(line):
        ch = line[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif line.startswith("&&", i) or line.startswith("||", i):
            parts.append(line[start:i])
            start = i = i + 2
            continue
        elif ch == ";":
            parts.append(line[start:i])
            start = i + 1
        i += 1
    parts.append(line[start:])
    keywords = re.compile(r"^\s*(do|then|else|done|fi)\b\s*")
    return [keywords.sub("", part).strip() for part in parts if keywords.sub("", part).strip()]


def _words(text: str, variables: dict[str, str]) -> list[str] | None:
    """Shell words, with the block's own `NAME="…"` variables expanded; None where shlex cannot split it."""
    def expand(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        return variables.get(name, match.group(0))

    text = re.sub(r"\$\{(\w+)\}|\$(\w+)", expand, text)
    try:
        return shlex.split(text)
    except ValueError:
        return None


def _assignment(command: str) -> tuple[str, str] | None:
    match = re.fullmatch(r"(\w+)=(\"[^\"]*\"|'[^']*')", command.strip())
    if not match:
        return None
    return match.group(1), match.group(2)[1:-1]


def _leading_environment(words: list[str]) -> list[str]:
    """`A=1 B=2 env X=3 cmd …` → `cmd …` (timing wrappers too)."""
    while words and (re.fullmatch(r"\w+=.*", words[0]) or words[0] == "env"):
        words = words[1:]
    if words[:1] == ["/usr/bin/time"]:
        words = words[1:]
        while words and words[0].startswith("-"):
            words = words[2:] if words[0] in ("-f", "-o") else words[1:]
    return words


def _startup_timing_target(words: list[str]) -> list[str] | None:
    """`python scripts/startup_timing.py … -- CMD …` also runs CMD: that is a command too."""
    if "--" in words and any(word.endswith("startup_timing.py") for word in words):
        return words[words.index("--") + 1:]
    return None


def _commands_of_line(where: str, text: str, variables: dict[str, str], cwd: str,
                      inline: bool = False) -> tuple[list[Command], str]:
    found = []
    for part in _split_commands(text):
        assignment = _assignment(part)
        if assignment:
            variables[assignment[0]] = assignment[1]
            continue
        words = _words(part, variables)
        if not words:
            continue
        if words[0] == "cd" and len(words) == 2:
            cwd = words[1]
            continue
        words = _leading_environment(words)
        for candidate in (words, _startup_timing_target(words)):
            if candidate:
                command = Command(where, part, candidate, cwd, inline)
                if command.is_pytest or any(x is not None for x in (command.launcher_args, command.script,
                                                                    command.install_args)):
                    found.append(command)
    return found, cwd


def extract(name: str, markdown: str) -> list[Command]:
    """Every launcher and script command the Markdown text shows, fenced or inline; `name` says where."""
    lines = markdown.splitlines()
    commands: list[Command] = []
    fence, block, prose = None, [], []
    for number, line in enumerate(lines, 1):
        opened = re.match(r"^\s*```(\w*)", line)
        if opened and fence is None:
            fence, block = opened.group(1), []
        elif line.strip().startswith("```") and fence is not None:
            if fence in SHELL_LANGUAGES:
                variables: dict[str, str] = {}
                cwd = ""
                for start, text in _logical_lines(block):
                    found, cwd = _commands_of_line(f"{name}:{start}", text, variables, cwd)
                    commands += found
            fence = None
        elif fence is not None:
            block.append((number, line))
        else:
            prose.append((number, line))
    commands += _inline_commands(name, prose)
    return commands


def _inline_commands(name: str, prose: list[tuple[int, str]]) -> list[Command]:
    """Inline code spans (which may run over a line break) that begin with a command."""
    text = "\n".join(line for _, line in prose)
    starts = [0]
    for _, line in prose:
        starts.append(starts[-1] + len(line) + 1)
    commands = []
    for match in re.finditer(r"(?<!`)`([^`]+)`(?!`)", text):
        span = " ".join(match.group(1).split())
        line_index = next(i for i, start in enumerate(starts) if start > match.start()) - 1
        where = f"{name}:{prose[line_index][0]}"
        found, _ = _commands_of_line(where, span, {}, "", inline=True)
        commands += found
    return commands


# ---- checks -----------------------------------------------------------------------------------------------------

PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(\.\.\.|…)?$|.*…|.*\$|.*[<>]|^\.\.\.$")


def is_placeholder(word: str) -> bool:
    """PRESET, RUN_DIR, DIR/corpus's DIR, `…`, `$VAR` left unexpanded, `<the base --sets>`. An environment
    variable's value is free text (env.NCCL_DEBUG=INFO is a value, not a placeholder)."""
    if re.match(r"env\.\w+=", word):
        word = word.split("=", 1)[0]
    return bool(PLACEHOLDER.match(word)) or any(PLACEHOLDER.match(part) for part in re.split(r"[/=,|]", word) if part)


def _optional_parts(words: list[str]) -> tuple[list[str], list[str], bool]:
    """Words outside `[…]` (the command as typed without its optional parts), the words inside, and whether
    the command has alternatives (`a|b`) outside brackets."""
    outside, inside, depth = [], [], 0
    for word in words:
        closes = word.count("]") - word.count("]]")
        if word.startswith("[") and not word.startswith("[["):
            depth += 1
        (inside if depth else outside).append(word.strip("[]") if depth else word)
        if closes > 0 and depth and word.endswith("]"):
            depth = max(0, depth - closes)
    choice = any(word == "|" or (re.fullmatch(r"[\w-]+(\|[\w-]+)+", word) is not None) for word in outside)
    inside = [word for word in inside if word and word != "|"]
    return outside, inside, choice


def _settings_problem(name: str) -> str | None:
    from launcher.megatron import args as megatron_args
    from launcher.pipeline.preset import LAUNCHER_FIELDS, SECTIONS, _slurm_fields

    bare = name.removeprefix("launcher.").removeprefix("megatron.")
    head, _, rest = bare.partition(".")
    if head == "env" and rest:
        return None
    if head in SECTIONS and rest:
        return None if rest in _slurm_fields(head)[0] else f"--set {name}: no {head} setting {rest!r}"
    if bare in LAUNCHER_FIELDS or bare in megatron_args.catalog() or bare in megatron_args.flag_aliases():
        return None
    return f"--set {name}: no such setting"


def _set_values(words: list[str]) -> list[str]:
    values = []
    for i, word in enumerate(words):
        if word == "--set" and i + 1 < len(words):
            values.append(words[i + 1])
        elif word.startswith("--set="):
            values.append(word.removeprefix("--set="))
    return values


def check_launch(command: Command) -> list[str]:
    from launcher.cli import SUBCOMMANDS
    from launcher.cli.completion import parser_of
    from launcher.errors import UserError
    from launcher.pipeline.preset import available_presets, load_preset

    args = command.launcher_args or []
    here = f"{command.where}: `{command.text}`"
    subcommand = args[0] if args and args[0] in SUBCOMMANDS else None
    try:
        parser = parser_of(subcommand)
    except UserError:  # a command that parses by hand (import): its parser is not handed over
        parser = None
    problems = []
    typed, optional, choice = _optional_parts(args)
    rest = typed[1:] if subcommand else typed
    if parser is not None:
        known = {o for action in parser._actions for o in action.option_strings}
        cut = rest.index("--") if "--" in rest else len(rest)
        for word in [*rest[:cut], *optional]:
            option = word.split("=", 1)[0]
            if option.startswith("-") and not is_placeholder(option) and option not in known and option != "--":
                problems.append(f"{here}: launch {subcommand or 'PRESET'} has no option {option}")
    presets = set(available_presets())
    for value in _set_values([*rest, *optional]):
        name, _, setting = value.partition("=")
        if is_placeholder(name) or not name:
            continue
        problem = _settings_problem(name)
        if problem:
            problems.append(f"{here}: {problem}")
        elif setting and not is_placeholder(setting):
            try:
                load_preset("toy", [value])
            except UserError as exc:
                problems.append(f"{here}: --set {value}: {exc.problems[0].message}")
    positional = _preset_word(subcommand, rest)
    if positional and not is_placeholder(positional) and positional not in presets:
        path = REPO / command.cwd / positional
        if positional.endswith((".yaml", ".yml")) or "/" in positional:
            if "/" in positional and not positional.startswith(("/", "runs/")) and not path.exists():
                problems.append(f"{here}: {positional} does not exist")
        else:
            problems.append(f"{here}: no preset named {positional!r} (presets: {', '.join(sorted(presets))})")
    if parser is not None and not choice and not command.is_mention and not any(map(is_placeholder, typed)):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                parser.parse_args(rest)
        except UserError as exc:
            problems.append(f"{here}: does not parse: {exc.problems[0].message}")
        except SystemExit:  # --help, --version (printed to the null stream)
            pass
    return problems


def _preset_word(subcommand: str | None, rest: list[str]) -> str | None:
    """The word that names a preset: the first positional of a run, `show` and `plan` (diff's A and B may be run
    directories, prepare-data's after --build-index)."""
    if subcommand not in (None, "show", "plan"):
        if subcommand == "prepare-data" and "--build-index" in rest:
            index = rest.index("--build-index") + 1
            return rest[index] if index < len(rest) else None
        return None
    takes_value = {"--set", "--nodes", "--gpus-per-node", "--format", "--megatron-path", "--resume", "--chain",
                   "--gpus", "--gpu", "--tokens", "--tflops", "--top", "--measure-layouts", "--measure-iters",
                   "--ckpt-write-gbps"}
    skip = False
    for word in rest:
        if skip:
            skip = False
        elif word in takes_value:
            skip = True
        elif word == "--resume" or word.startswith("-"):
            continue
        else:
            return word
    return None


def check_script(command: Command) -> list[str]:
    script = command.script
    assert script is not None
    here = f"{command.where}: `{command.text}`"
    path = REPO / script
    if is_placeholder(script):
        return []
    if not path.is_file():
        return [f"{here}: {script} does not exist"]
    source = _script_sources(path)
    problems = []
    words = command.words[2:] if command.words[0] in PYTHONS or command.words[0] == "bash" else command.words[1:]
    cut = next((i for i, word in enumerate(words) if word == "--" or word.startswith("$(")), len(words))
    for word in words[:cut]:
        option = word.split("=", 1)[0].strip("[]")
        if re.fullmatch(r"--[\w-]+", option) and not re.search(rf"[\"']{re.escape(option)}[\"'=]", source):
            problems.append(f"{here}: {script} has no option {option}")
    return problems


def _script_sources(path: Path) -> str:
    """The script's text and that of the sibling scripts it imports (where its options may be defined)."""
    text = path.read_text(encoding="utf-8")
    siblings = set(re.findall(r"^\s*(?:from|import)\s+(\w+)", text, re.M))
    return text + "".join((path.parent / f"{name}.py").read_text(encoding="utf-8") for name in sorted(siblings)
                          if (path.parent / f"{name}.py").is_file())


def check_install(command: Command) -> list[str]:
    """`pip install -e '.[EXTRA]'` and `uv sync --extra EXTRA` name extras pyproject.toml declares; the launcher is
    installed from the clone, never by a project name from an index (megatron-launch is not published)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = set(project.get("optional-dependencies", {}))
    here = f"{command.where}: `{command.text}`"
    args = command.install_args or []
    problems = []
    named = [args[i + 1] for i, word in enumerate(args[:-1]) if word == "--extra"]
    for word in args:
        local = re.fullmatch(r"\.(?:\[([\w,\s-]*)\])?", word)
        if local and local.group(1):
            named += [extra.strip() for extra in local.group(1).split(",")]
        elif re.match(rf"{re.escape(project['name'])}\b", word, re.I):
            problems.append(f"{here}: {project['name']} is not on a package index; install the clone: "
                            f"pip install -e '.[…]'")
    problems += [f"{here}: pyproject.toml has no extra {extra!r} ({', '.join(sorted(extras))})"
                 for extra in named if extra not in extras and not is_placeholder(extra)]
    return problems


def check_pytest(command: Command) -> list[str]:
    """`pytest FILES -k WORD`: a plain -k word names tests of those files (a renamed test would select none)."""
    words = command.words
    files = [REPO / word for word in words if word.startswith("tests/") and (REPO / word).is_file()]
    selected = [words[i + 1] for i, word in enumerate(words[:-1]) if word == "-k"]
    problems = []
    for word in selected:
        if files and re.fullmatch(r"\w+", word):
            tests = " ".join(re.findall(r"def (test\w*)", "".join(f.read_text(encoding="utf-8") for f in files)))
            if word not in tests:
                problems.append(f"{command.where}: `{command.text}`: -k {word} selects no test of those files")
    return problems


def check_paths(command: Command) -> list[str]:
    """Repository paths among the words (scripts/…, docs/…, tests/…) exist; no path of one machine is named."""
    problems = [f"{command.where}: `{command.text}`: {prefix}… is a path of one machine; write /path/to/… or a "
                "variable" for prefix in MACHINE_PATHS if prefix in command.text]
    for word in command.words:
        for candidate in word.split("::")[0].split("="):
            candidate = candidate.strip("[](),;:")
            top = candidate.split("/", 1)[0]
            if top in REPO_TOP and "/" in candidate and not is_placeholder(candidate) and "*" not in candidate:
                if top == "third_party" or (REPO / command.cwd / candidate).exists() or (REPO / candidate).exists():
                    continue
                problems.append(f"{command.where}: `{command.text}`: {candidate} does not exist")
    return problems


def check_links(name: str, markdown: str) -> list[str]:
    """Markdown links to files of this repository resolve (relative to the document at REPO/name)."""
    problems = []
    for number, line in enumerate(markdown.splitlines(), 1):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (REPO / name).parent.joinpath(target.split("#")[0]).exists():
                problems.append(f"{name}:{number}: link to {target}, which does not exist")
    return problems


def check_document(name: str, markdown: str) -> Findings:
    """Every command of one Markdown document (REPO/name), and every problem with one."""
    findings = Findings()
    findings.problems += check_links(name, markdown)
    for command in extract(name, markdown):
        findings.commands.append(command)
        if command.launcher_args is not None:
            findings.problems += check_launch(command)
        elif command.install_args is not None:
            findings.problems += check_install(command)
        elif command.script is not None:
            findings.problems += check_script(command)
        else:
            findings.problems += check_pytest(command)
        findings.problems += check_paths(command)
    findings.problems = list(dict.fromkeys(findings.problems))  # a missing script is also a missing path
    return findings


def check(root: Path = REPO) -> Findings:
    findings = Findings()
    for path in doc_files(root):
        one = check_document(str(path.relative_to(root)), path.read_text(encoding="utf-8"))
        findings.commands += one.commands
        findings.problems += one.problems
    return findings


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(REPO))
    findings = check()
    if "--list" in argv:
        for command in findings.commands:
            print(f"{command.where}\t{shlex.join(command.words)}")
        return 0
    print("\n".join(findings.problems) or f"{len(findings.commands)} commands, all valid")
    return 1 if findings.problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
