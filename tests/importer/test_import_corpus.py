"""`launch import` on real training scripts from public repositories other than Megatron-LM's own (cloud samples,
forks for DeepSpeed, Slurm clusters, DCU/ROCm recipes, MoE research code), kept byte for byte under
tests/fixtures/import_corpus/ with their source in INDEX.json. Each runs pretrain_gpt.py when bash runs it, so each
must import; the settings the script gives (layout, layers, width, heads, experts) must be carried, and what it
decides at run time (a branch on the caller's environment) must be named as undecided, never resolved."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launcher.cli.job import job_as_declared
from launcher.errors import UserError
from launcher.importer.bash_subset import MARK
from launcher.importer.build import import_source
from launcher.importer.report import check_import

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "import_corpus"
INDEX = json.loads((CORPUS / "INDEX.json").read_text())


def test_the_corpus_is_every_file_with_its_source():
    files = {p.name for p in CORPUS.iterdir() if p.name != "INDEX.json"}
    assert files == set(INDEX) and len(files) >= 25
    for name, entry in INDEX.items():
        assert entry["repository"] != "NVIDIA/Megatron-LM" and entry["path"] and len(entry["commit"]) == 40, name
        assert "pretrain_gpt.py" in (CORPUS / name).read_text()


@pytest.mark.parametrize("name", sorted(INDEX))
def test_each_script_imports_with_its_settings(name, tmp_path):
    entry = INDEX[name]
    started = time.monotonic()
    imported = import_source((CORPUS / name).read_text(), name, entry.get("args", []), environment=entry.get("env"))
    assert time.monotonic() - started < 10
    assert MARK not in imported.text
    for setting, value in entry["expect"].items():
        assert imported.settings.get(setting) == value, (setting, imported.settings.get(setting))
    for setting, value in entry.get("launcher", {}).items():
        assert imported.launcher.get(setting) == value, setting
    for setting in entry.get("unknown_launcher", []):  # e.g. GPUs counted by a command at run time
        # not resolved; a node count the layout needs is the preset's own choice, and says so
        chosen = f"{setting} {imported.launcher.get(setting)}: the script's node count is decided where it runs"
        assert setting not in imported.launcher or any(line.startswith(chosen) for line in imported.not_carried), \
            setting
    said = " ".join([*imported.not_carried, *getattr(imported, "lost", [])])
    for setting in entry.get("unknown", []):  # decided at run time: not carried, and said so
        flag = "--" + setting.replace("_", "-")
        assert setting not in imported.settings and (setting in imported.replaced or flag in said), setting
    for flag in entry.get("carried", []):  # a fork's flag the table translates: carried, not lost
        assert not any(line.startswith(flag) for line in imported.lost), (flag, imported.lost)
        assert any(line.startswith(flag) for line in imported.translated), flag
    for flag in entry.get("launcher_given", []):  # the launcher's per-process value (--local-rank $LOCAL_RANK)
        assert not any(line.startswith(flag) for line in imported.lost), (flag, imported.lost)
        assert any(line.startswith(flag) and "given by the launcher per process" in line
                   for line in imported.not_carried), flag
    named = {flag for item in imported.undecided for flag in item.flags}
    assert set(entry.get("undecided", [])) <= named, named
    assert all(f"line {item.line}" in " ".join(imported.not_carried) for item in imported.undecided)
    preset = tmp_path / "imported.yaml"
    preset.write_text(imported.text)
    check_import(imported, preset, job_as_declared)  # the launcher's checks answer without an internal error


@pytest.mark.parametrize("name", sorted(INDEX))
def test_each_script_cut_or_edited_ends_with_an_answer_or_an_error(name):
    # a few of the variations scripts/fuzz_import_corpus.py makes (it makes many more: run it for the figure)
    import sys

    sys.path.insert(0, str(CORPUS.parents[2] / "scripts"))
    from fuzz_import_corpus import variations

    for variant in variations((CORPUS / name).read_text(), lines=3, inserts=2, seed=len(name)):
        try:
            import_source(variant, name, INDEX[name].get("args", []), environment=INDEX[name].get("env"))
        except UserError:
            pass
