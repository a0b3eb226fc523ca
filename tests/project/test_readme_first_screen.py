"""The README's first screen is what a new user needs first: the two set-up commands (with what the test command
needs), a quick start of about ten lines in the order a job is prepared (dry-run → --check → plan → Slurm /
Kubernetes), and how to get a torch for CUDA 12 drivers; the reference follows."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.M | re.S)
    assert match, f"no section {title!r}"
    return match.group(1)


def test_the_first_sections_are_set_up_then_quick_start_then_the_reference():
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings[:2] == ["Set-up: two commands", "Quick start"]


def test_the_set_up_says_what_the_test_command_needs():
    setup = section("Set-up: two commands")
    commands = re.search(r"```bash\n(.*?)```", setup, re.S).group(1).splitlines()
    assert [line.split("#")[0].strip() for line in commands] == [
        "scripts/bootstrap.sh && .venv/bin/launch 175b --dry-run", "scripts/test.sh"]
    assert "root" in setup and "Slurm" in setup


def test_the_quick_start_prepares_a_job_in_order_in_about_ten_lines():
    block = re.search(r"```bash\n(.*?)```", section("Quick start"), re.S).group(1).splitlines()
    assert len(block) <= 10
    steps = ["--dry-run", "--check", "launch plan", "--slurm", "--k8s"]
    positions = [next(i for i, line in enumerate(block) if step in line.split("#")[0]) for step in steps]
    assert positions == sorted(positions)


def test_the_readme_says_how_to_get_torch_for_cuda_12_drivers():
    start = section("Quick start")
    assert "https://download.pytorch.org/whl/cu12" in start and "driver" in start
