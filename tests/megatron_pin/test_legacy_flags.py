"""The table of Megatron's removed flags (launcher/data/megatron_legacy_flags.json) is what Megatron-LM's git history
says: regenerated from a Megatron-LM git repository with its release tags when one is given ($MEGATRON_LM_GIT, a bare
clone is enough), and always consistent with the pin's own argument catalog."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest

from launcher.megatron import args as megatron_args

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "launcher" / "data" / "megatron_legacy_flags.json"


def _deriver():
    spec = importlib.util.spec_from_file_location("derive_legacy_flags", REPO / "scripts" / "derive_legacy_flags.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _history_repo() -> Path | None:
    for candidate in (os.environ.get("MEGATRON_LM_GIT"), str(REPO / "third_party" / "megatron-lm")):
        if not candidate or not Path(candidate).exists():
            continue
        found = subprocess.run(["git", "-C", candidate, "rev-parse", "--verify", "-q", "v2.6^{commit}"],
                               capture_output=True, text=True, check=False)
        if found.returncode == 0:
            return Path(candidate)
    return None


def test_the_committed_table_is_consistent_with_the_pin():
    table = json.loads(COMMITTED.read_text())
    releases = table["releases"]
    assert releases[0] == "v1.0" and len(set(releases)) == len(releases)
    at_pin = {flag for arg in megatron_args.catalog().values() for flag in arg.flags}
    assert table["flags"], "no removed flag: the table was not derived"
    for flag, row in table["flags"].items():
        assert flag.startswith("--") and flag not in at_pin, flag
        assert releases.index(row["first"]) <= releases.index(row["last"]), flag
        assert row["kind"] in ("true", "false", "value", "bool") and row["dest"], flag
        assert ("message" in row) == ("message_at" in row), flag
        if "message" in row:
            assert flag in row["message"], flag


def test_the_derivation_reads_an_old_release_as_megatron_wrote_it():
    derive = _deriver()
    old = ("def _add(parser):\n    group = parser.add_argument_group(title='x')\n"
           "    group.add_argument('--checkpoint-num-layers', type=int, default=1, help='chunk size')\n"
           "    group.add_argument('--no-query-key-layer-scaling', action='store_false', "
           "dest='apply_query_key_layer_scaling')\n"
           "    assert args.x is None, '--old-x argument is no longer valid, use --new-x instead'\n")
    flags = derive.parsed_flags(old)
    assert flags["--checkpoint-num-layers"] == {"dest": "checkpoint_num_layers", "kind": "value", "type": "int",
                                                "help": "chunk size"}
    assert flags["--no-query-key-layer-scaling"]["dest"] == "apply_query_key_layer_scaling"
    assert flags["--no-query-key-layer-scaling"]["kind"] == "false"
    assert derive.messages(old) == [(5, "--old-x argument is no longer valid, use --new-x instead")]


@pytest.mark.skipif(_history_repo() is None, reason="no Megatron-LM git repository with its release tags "
                    "($MEGATRON_LM_GIT)")
def test_the_table_is_what_megatrons_history_says():
    derive = _deriver()
    fresh = derive.render(derive.derive(_history_repo()))
    assert fresh == COMMITTED.read_text(), "run python scripts/derive_legacy_flags.py --repo $MEGATRON_LM_GIT"
