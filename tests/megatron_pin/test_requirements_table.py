"""The requirements table (launcher/data/megatron_requirements.json) is what the pinned Megatron source says:
regenerated here from the installed megatron-core (CI has the wheel, not the checkout), so a new pin cannot
silently drift. Its anchors must also hold in the pinned checkout where there is one."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from launcher.megatron import args as megatron_args
from launcher.megatron import requirements
from launcher.megatron.pin import megatron_path
from launcher.megatron.target import DECLARED_TE_VERSION

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "launcher" / "data" / "megatron_requirements.json"
pytestmark = [pytest.mark.megatron, pytest.mark.skipif(importlib.util.find_spec("megatron") is None,
                                                      reason="megatron-core is not installed")]


def _deriver():
    spec = importlib.util.spec_from_file_location("derive_requirements", REPO / "scripts" / "derive_requirements.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_is_what_the_installed_megatron_source_says():
    derive = _deriver()
    fresh = derive.derive(derive.default_source())
    committed = json.loads(COMMITTED.read_text())
    rows = {r["id"]: r for r in committed["requirements"]}
    changed = [r["id"] for r in fresh["requirements"] if rows.get(r["id"]) != r]
    gone = sorted(set(rows) - {r["id"] for r in fresh["requirements"]})
    new_packages = sorted(set(fresh["guards"]["packages"]) - set(committed["guards"]["packages"]))
    assert (changed, gone, new_packages) == ([], [], []), (
        "the pinned Megatron source moved: run python scripts/derive_requirements.py and review the diff")
    assert fresh == committed, "run python scripts/derive_requirements.py (guards or versions changed)"


def test_every_package_behind_an_import_guard_is_classified():
    guards = json.loads(COMMITTED.read_text())["guards"]["packages"]
    unclassified = {name: entry["files"][:3] for name, entry in guards.items() if not entry["classified"]}
    assert unclassified == {}, "classify each in scripts/derive_requirements.py (PACKAGES or NOT_A_SETTING)"


def test_a_declared_transformer_engine_meets_every_te_version_check_of_the_pin():
    # `transformer_engine: true` means the NGC container's TE: it must answer every is_te_min_version of the pin
    assert requirements.highest_te_version() == DECLARED_TE_VERSION == "2.14.0"


def test_every_row_speaks_of_real_megatron_settings():
    catalog = megatron_args.catalog()
    for row in requirements.table():
        named = [*row.when, *row.needs.get("setting", {})]
        assert [name for name in named if name not in catalog] == [], row.id


def test_the_table_finds_the_requirements_the_issue_names():
    by_id = {row.id: row for row in requirements.table()}
    assert by_id["async-save-nvrx"].needs == {"package": "nvidia-resiliency-ext", "module": "nvidia_resiliency_ext",
                                             "min_version": "0.6.0"}
    assert by_id["emerging-optimizer"].needs["min_version"] == "0.2"
    assert by_id["moe-permute-fusion-te"].needs["min_version"] == "2.1.0"
    assert by_id["delay-wgrad-te"].needs["min_version"] == "2.3.0"
    assert by_id["torch-fsdp2-finish-grad-sync"].cite.startswith("megatron/core/distributed/finalize_model_grads.py:")


def test_the_anchors_hold_in_the_pinned_checkout():
    checkout = megatron_path(None, None)
    if not (checkout / "megatron" / "core").is_dir():
        pytest.skip("no Megatron-LM checkout (set MEGATRON_LM_PATH)")
    derive = _deriver()
    from_checkout = {r["id"]: r for r in derive.derive(checkout)["requirements"]}
    for row in requirements.table():
        assert row.id in from_checkout, f"{row.id}: not found in the checkout at {checkout}"
        assert from_checkout[row.id]["needs"] == dict(row.needs), row.id  # the same versions at the pin


def test_the_rl_packages_are_what_megatron_rl_imports_in_the_checkout():
    checkout = megatron_path(None, None)
    if not (checkout / "megatron" / "rl").is_dir():
        pytest.skip("no Megatron-LM checkout with megatron/rl (set MEGATRON_LM_PATH)")
    derive = _deriver()
    assert derive.rl_imports(checkout / "megatron") == {module for module, _ in derive.RL_PACKAGES}
