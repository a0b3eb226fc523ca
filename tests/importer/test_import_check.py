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


# TensorBoard, W&B and checkpoint settings without their paths: a launch points them at its run directory
ACCEPTED = """#!/bin/bash
torchrun --nproc_per_node 8 pretrain_gpt.py \\
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 \\
  --micro-batch-size 1 --global-batch-size 8 --train-iters 10 --lr 1e-4 --bf16 --eval-interval 5 --eval-iters 1 \\
  --mock-data --tokenizer-type NullTokenizer --vocab-size 128 \\
  --log-timers-to-tensorboard --tensorboard-queue-size 5 --log-memory-to-tensorboard --save-interval 5
"""


def test_the_import_says_no_warning_the_dry_run_does_not_say(tmp_path: Path, capsys) -> None:
    script, preset = tmp_path / "train.sh", tmp_path / "imported.yaml"
    script.write_text(ACCEPTED)
    code = main(["import", str(script), "-o", str(preset)])
    out = capsys.readouterr()
    imported = [line.strip() for line in (out.out + out.err).splitlines() if line.strip().startswith("warning:")]
    assert code == 0, out.err
    assert "round trip: equal" in out.out + out.err  # the run directory's paths are the launcher's, not a difference
    main([str(preset), "--dry-run"])
    dry = capsys.readouterr()
    dry_run = [line.lstrip("# ").strip() for line in (dry.out + dry.err).splitlines() if "warning:" in line]
    said = [w for w in imported if "pretrain_gpt.py does not exist here" not in w]
    assert not any("tensorboard_dir" in w for w in said), said
    assert all(w in dry_run for w in said), (said, dry_run)
