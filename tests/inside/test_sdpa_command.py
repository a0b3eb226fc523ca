"""Where Transformer Engine is missing, the command uses the shipped SDPA layer spec and can import it."""

from __future__ import annotations

import json

from launcher.pipeline.command import LAUNCHER_ROOT
from tests.conftest import MEGATRON


def dry_run_json(launch, *args):
    code, out, err = launch(*args, "--dry-run", "--format", "json", "--megatron-path", MEGATRON)
    assert code == 0, err
    return json.loads(out)


def test_without_te_the_sdpa_spec_is_added_and_importable(launch):
    plan = dry_run_json(launch, "345m", "--set", "transformer_engine=false", "--set", "apex=false")
    argv = plan["argv"]
    at = argv.index("--spec")
    assert argv[at + 1:at + 3] == ["launcher.inside.megatron_ext.sdpa_spec_fast", "layer_spec"]
    assert "--no-create-attention-mask-in-dataloader" in argv
    paths = plan["env"]["PYTHONPATH"].split(":")
    assert paths[0] == MEGATRON
    assert str(LAUNCHER_ROOT) in paths
    assert (LAUNCHER_ROOT / "launcher" / "inside" / "megatron_ext" / "sdpa_spec_fast.py").is_file()


def test_with_te_no_spec_is_added(launch):
    plan = dry_run_json(launch, "345m", "--set", "transformer_engine=true", "--set", "apex=true")
    assert "--spec" not in plan["argv"]
    assert plan["env"]["PYTHONPATH"] == MEGATRON


def test_a_preset_spec_wins(launch):
    plan = dry_run_json(launch, "345m", "--set", "transformer_engine=false", "--set", "apex=false",
                        "--set", "spec=my.module my_spec", "--set", "packages=my",  # the target has `my`
                        "--set", "gpu=h200-141gb")  # unfused: ~112 GiB
    argv = plan["argv"]
    at = argv.index("--spec")
    assert argv[at + 1:at + 3] == ["my.module", "my_spec"]
    assert argv.count("--spec") == 1
