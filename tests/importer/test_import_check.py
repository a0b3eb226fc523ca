"""`launch import`'s check of the preset it writes is the dry-run's: every problem `launch PRESET --dry-run` lists,
the memory estimate's included, is listed by the import at once."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.cli import main

# Two problems of the preset's own and one of its memory: a virtual pipeline at PP 1, no evaluation interval, and a
# 175B-shaped model on one GPU's share
SCRIPT = """#!/bin/bash
torchrun --nproc_per_node 8 pretrain_gpt.py \\
  --num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048 \\
  --micro-batch-size 1 --global-batch-size 8 --train-iters 10 --lr 1e-4 --bf16 \\
  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \\
  --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 \\
  --num-layers-per-virtual-pipeline-stage 2
"""


def messages(capsys, argv: list[str]) -> tuple[int, list[str], str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, [line for line in (out.out + out.err).splitlines() if line.lstrip().startswith("error:")], out.out


def test_the_import_lists_every_problem_the_dry_run_lists_memory_included(tmp_path: Path, capsys) -> None:
    script, preset = tmp_path / "train.sh", tmp_path / "imported.yaml"
    script.write_text(SCRIPT)
    code, imported, _ = messages(capsys, ["import", str(script), "-o", str(preset)])
    assert code == 2 and preset.is_file()
    dry_code, dry_run, _ = messages(capsys, [str(preset), "--dry-run"])
    assert dry_code == 2
    assert sorted(m.strip() for m in imported) == sorted(m.strip() for m in dry_run)
    assert any("memory estimate" in m for m in imported)
    assert any("virtual pipeline" in m or "interleaved" in m for m in imported)
    assert len(imported) >= 3


def test_the_import_json_report_lists_the_memory_problem_too(tmp_path: Path, capsys) -> None:
    script = tmp_path / "train.sh"
    script.write_text(SCRIPT)
    code = main(["import", str(script), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    problems = [p["message"] for p in report["launcher"]["problems"]]
    assert code == 2 and not report["launcher"]["ok"]
    assert any("memory estimate" in m for m in problems) and len(problems) >= 3
