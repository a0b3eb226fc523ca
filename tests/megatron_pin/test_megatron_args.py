import os
import subprocess
import sys

import pytest

from launcher.megatron import args as megatron_args
from launcher.megatron.pin import megatron_path
from launcher.pipeline.preset import LAUNCHER_FIELDS
from tests.conftest import REPO


def test_catalog_knows_the_flags_presets_use():
    catalog = megatron_args.catalog()
    assert catalog["num_layers"].flags == ("--num-layers",) and catalog["num_layers"].type == "int"
    assert catalog["lr"].type == "float"
    assert catalog["gradient_accumulation_fusion"].kind == "false"
    assert len(catalog) > 500


def test_launcher_settings_never_shadow_megatron_names():
    assert not set(LAUNCHER_FIELDS) & set(megatron_args.catalog())


def test_flags_round_trip():
    catalog = megatron_args.catalog()
    assert megatron_args.to_flags(catalog["bf16"], True) == ["--bf16"]
    assert megatron_args.to_flags(catalog["bf16"], False) == []
    assert megatron_args.to_flags(catalog["gradient_accumulation_fusion"], False) == [
        "--no-gradient-accumulation-fusion"]
    assert megatron_args.to_flags(catalog["data_path"], ["1", "/a"]) == ["--data-path", "1", "/a"]


@pytest.mark.megatron
def test_catalog_is_the_parser_of_the_pinned_checkout():
    """The launcher runs the checkout's pretrain_gpt.py, so a flag only the megatron-core wheel's parser has (the
    0.18.0 wheel's --fp8-output-proj) would pass the dry-run and stop the run at argument parsing."""
    pytest.importorskip("torch")
    checkout = megatron_path(None, None)
    if not (checkout / "megatron" / "training" / "arguments.py").is_file():
        pytest.skip("no Megatron-LM checkout at the pin (set MEGATRON_LM_PATH)")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "dump_megatron_args.py"), "--check"],
                          capture_output=True, text=True, env={**os.environ, "MEGATRON_LM_PATH": str(checkout)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "fp8_output_proj" not in megatron_args.catalog()


def test_dump_refuses_without_a_checkout(tmp_path):
    """The catalog is never regenerated from an installed megatron-core: only the pinned checkout's parser counts."""
    env = {**os.environ, "MEGATRON_LM_PATH": str(tmp_path)}
    script = tmp_path / "scripts" / "dump_megatron_args.py"  # a copy, so third_party/megatron-lm is not found
    script.parent.mkdir()
    script.write_text((REPO / "scripts" / "dump_megatron_args.py").read_text())
    proc = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert "error: no Megatron-LM checkout" in proc.stderr and "hint:" in proc.stderr
