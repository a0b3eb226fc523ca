import subprocess
import sys

import pytest

from launcher.megatron import args as megatron_args
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
def test_catalog_matches_installed_megatron_core():
    pytest.importorskip("megatron.training.arguments")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "dump_megatron_args.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
