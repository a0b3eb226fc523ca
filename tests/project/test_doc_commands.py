"""The commands README.md and docs/*.md show stay true to the code: each `launch …` parses with the CLI's own parser
and names options, settings and presets that exist; each script, extra and repository path it names exists; each
command that needs no GPU runs with the exit code the doc shows, and a shown example prints what the README shows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import doc_commands  # noqa: E402


def problems_of(markdown: str) -> list[str]:
    return doc_commands.check_document("README.md", markdown).problems


def test_every_command_the_docs_show_is_valid():
    findings = doc_commands.check()
    assert findings.problems == []
    shown = {(c.where.split(":")[0], " ".join(c.words)) for c in findings.commands}
    # the extraction reaches fenced blocks, inline spans, continued lines and a block's own variables
    assert ("README.md", ".venv/bin/launch 175b --dry-run") in shown
    assert ("docs/plan.md", "launch plan 345m --gpu h200-141gb --format json") in shown
    assert any(doc == "docs/benchmarks.md" and "--set num_layers=2" in words and "launcher 175b" in words
               for doc, words in shown)  # `python3 -m launcher 175b $L175`, L175 set earlier in its block
    assert len(findings.commands) > 300


@pytest.mark.parametrize("markdown, expected", [
    ("`launch 345m --dry-runn`", "launch PRESET has no option --dry-runn"),
    ("`launch plan 175b --gpus 1024 --tokenz 300B`", "launch plan has no option --tokenz"),
    ("```\nlaunch show PRESET [--sett NAME=VALUE]\n```", "launch show has no option --sett"),
    ("```bash\nlaunch 345m --set num_layer=4 --dry-run\n```", "--set num_layer: no such setting"),
    ("```bash\nlaunch 345m --set slurm.partitionn=gpu --slurm --dry-run\n```", "no slurm setting 'partitionn'"),
    ("```bash\nlaunch 345m --set lr=fast --dry-run\n```", "--set lr=fast: lr (--set lr) must be a number"),
    ("```bash\nL=\"--set num_layerz=2\"\nlaunch toy $L\n```", "--set num_layerz: no such setting"),
    ("`launch 7b --dry-run`", "no preset named '7b'"),
    ("`launch plan 345m --gpus`", "does not parse: launch plan: argument --gpus: expected one argument"),
    ("`python scripts/bench_345m.py --partz x`", "scripts/bench_345m.py has no option --partz"),
    ("```bash\ncd scripts && python no_such_bench.py\n```", "scripts/no_such_bench.py does not exist"),
    ("`launch report tests/fixtures/no-such-log`", "tests/fixtures/no-such-log does not exist"),
    ("see [the plan](docs/no-such-page.md)", "link to docs/no-such-page.md, which does not exist"),
    ("`pip install -e '.[repor]'`", "pyproject.toml has no extra 'repor'"),
    ("`uv sync --extra megatronn`", "pyproject.toml has no extra 'megatronn'"),
    ("`pip install 'megatron-launch[fp8]'`", "megatron-launch is not on a package index"),
    ("`MEGATRON_LM_PATH=/work/mlm python scripts/memory_probe.py`", "/work/… is a path of one machine"),
    ("`python -m pytest -q tests/importer/test_import.py -k upstreamm`", "-k upstreamm selects no test"),
    ("`pytest -q tests/estimate/test_no_such_file.py`", "tests/estimate/test_no_such_file.py does not exist"),
])
def test_a_command_that_drifted_from_the_code_is_named(markdown, expected):
    found = problems_of(markdown)
    assert any(expected in problem for problem in found), found


@pytest.mark.parametrize("markdown", [
    "`launch plan` ranks layouts; `launch --resume` continues",  # commands named in a sentence
    "```\nlaunch PRESET [--nodes N|MIN-MAX] [--set NAME=VALUE ...] [--format text|json]\n```",  # a synopsis
    "`launch 345m --set data_path=DIR/corpus --set env.NCCL_DEBUG=INFO`",  # placeholders and free env names
    "`launch import train.sh -- --tp 2`",  # the script's own options after --
])
def test_placeholders_synopses_and_mentions_are_not_problems(markdown):
    assert problems_of(markdown) == []


def launch(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    env.pop("MEGATRON_LM_PATH", None)
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def test_a_shown_example_prints_what_the_readme_shows():
    """A block that begins `$ launch …` shows the command's whole output (the README's layout error)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    examples = re.findall(r"^```\n\$ (launch [^\n]*)\n(.*?)^```", readme, re.M | re.S)
    assert examples
    for command, shown in examples:
        done = launch(*command.split()[1:])
        assert done.returncode == (2 if shown.startswith("error:") else 0)
        assert (done.stdout + done.stderr).strip() == shown.strip()


def test_the_readme_preset_table_is_what_launch_list_says():
    import json

    listed = {row["preset"]: row for row in json.loads(launch("list", "--format", "json").stdout)}
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    row_pattern = r"^\| `([^`]+)` \| [^|]+ \| (\d+)·(\d+)·(\d+) \| (\d+)[^|]* \| (\d+) × (\d+)[^|]* \|$"
    table = re.findall(row_pattern, readme, re.M)
    assert sorted(row[0] for row in table) == sorted(listed)
    for name, tp, pp, cp, min_gpus, nodes, gpus in table:
        row = listed[name]
        assert (row["tp"], row["pp"], row["cp"], row["min_gpus"], row["nodes"], row["gpus_per_node"]) == tuple(
            map(int, (tp, pp, cp, min_gpus, nodes, gpus))), name


def test_the_readme_names_every_command_and_every_known_gpu():
    from launcher.cli.completion import names

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    usage = re.search(r"^## Usage\n\n```\n(.*?)```", readme, re.M | re.S).group(1)
    synopsis = set(re.findall(r"^launch ([a-z][\w-]*)", usage, re.M)) | set(re.findall(r"`launch (ls)`", readme))
    assert set(names("commands")) <= synopsis
    known = re.search(r"Known GPUs: ([^.]*)\.", readme).group(1)
    assert sorted(re.findall(r"[\w-]+", known)) == names("gpus")


def cheap_commands() -> list[tuple[doc_commands.Command, list[str]]]:
    """Every complete `launch` command the docs show that needs no GPU, cluster or checkout: dry-runs (not
    --submit), list, show, diff, plan (not --measure), runs, completion, --version."""
    found, seen = [], set()
    for command in doc_commands.check().commands:
        args = command.launcher_args
        if args is None or command.is_mention:
            continue
        typed, _, choice = doc_commands._optional_parts(args)
        if choice or not typed or any(map(doc_commands.is_placeholder, typed)):
            continue
        cheap = ("--dry-run" in typed and "--submit" not in typed and "--check" not in typed) or typed[0] in (
            "list", "show", "diff", "runs", "ls", "completion", "--version") or (
            typed[0] == "plan" and "--measure" not in typed)
        if cheap and tuple(typed) not in seen:
            seen.add(tuple(typed))
            found.append((command, typed))
    return found


def shown_exit(command: doc_commands.Command) -> int:
    """2 where the doc says so: `exit 2` on the command's line, or an `error:` line right after it."""
    name, line = command.where.rsplit(":", 1)
    lines = (REPO / name).read_text(encoding="utf-8").splitlines()
    at = int(line) - 1
    following = lines[at + 1] if at + 1 < len(lines) else ""
    return 2 if "exit 2" in lines[at] or following.startswith("error:") else 0


def test_every_command_the_docs_show_that_needs_no_gpu_runs_with_the_exit_code_they_show():
    commands = cheap_commands()
    assert len(commands) >= 15
    for command, args in commands:
        done = launch(*args)
        assert done.returncode == shown_exit(command), (command.where, args, done.stderr[-1500:])
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr
