"""A preset whose Megatron settings would come from a file instead of its command line is refused: at the pin
--yaml-cfg makes Megatron build every setting from that YAML file and ignore the command line, so nothing the
preset sets, and nothing the checks proved, would apply to the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def dry_run(*sets: str) -> subprocess.CompletedProcess:
    args = [a for s in sets for a in ("--set", s)]
    return subprocess.run([sys.executable, "-m", "launcher", "345m", "--dry-run", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)


def test_yaml_cfg_is_refused_with_the_way_out(tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text("language_model:\n  num_layers: 2\n")
    result = dry_run(f"yaml_cfg={config}")
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"error: yaml_cfg {config}: at the pin Megatron then builds every setting from that YAML file" \
        in result.stderr
    assert "hint: write the file's settings into the preset" in result.stderr and "--set yaml_cfg=null" \
        in result.stderr
    assert "Traceback" not in result.stderr


def test_without_it_the_same_preset_is_accepted():
    assert dry_run("yaml_cfg=null").returncode == 0
