"""`launch import` of a script that exports Transformer Engine's attention variables (NVTE_FLASH_ATTN,
NVTE_FUSED_ATTN, NVTE_UNFUSED_ATTN): older Megatron chose the attention kernel by them, the pin by --attention-backend
and it stops at model build when they disagree. Where they name one backend the preset gets it (and keeps them);
otherwise they are not carried, said in a warning. Either way the imported job passes the dry-run's rule."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from launcher.cli.job import job_as_declared
from launcher.importer.build import import_source
from launcher.importer.report import check_import
from launcher.pipeline import attention_env

BASE = ("torchrun --nproc_per_node 1 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
        "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --lr 1e-4 "
        "--train-iters 10 --eval-interval 10 --eval-iters 1 --mock-data --tokenizer-type NullTokenizer "
        "--vocab-size 1024 --bf16 ")
CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "import_corpus"
COMBINATIONS = [c for c in itertools.product((None, "0", "1"), repeat=3) if c != (None, None, None)]


def script(values: tuple[str | None, ...], flag: str = "") -> str:
    exports = "".join(f"export {name}={v}\n" for name, v in zip(attention_env.VARIABLES, values, strict=True)
                      if v is not None)
    return exports + BASE + flag + "\n"


@pytest.mark.parametrize("flag", ["", "--attention-backend flash", "--attention-backend auto"])
@pytest.mark.parametrize("values", COMBINATIONS)
def test_each_combination_imports_to_a_job_megatron_builds(values, flag):
    imported = import_source(script(values, flag), "train.sh")
    exported = {n: v for n, v in zip(attention_env.VARIABLES, values, strict=True) if v is not None}
    backend = imported.settings.get("attention_backend", "auto")
    assert attention_env.mismatches(backend, imported.env.get) == []
    fits = attention_env.allowed(exported.get)
    given = flag.rsplit(" ", 1)[-1] if flag else None
    if not attention_env.mismatches(given or "auto", exported.get):  # they agree: carried as they are
        assert all(imported.env.get(n) == v for n, v in exported.items()) and not imported.warnings
        assert imported.settings.get("attention_backend") == given
    elif given is None and len(fits) == 1:  # they name one backend: the pin's words for it
        assert backend == fits[0] and all(imported.env.get(n) == v for n, v in exported.items())
        assert any(f"attention_backend {fits[0]}" in line for line in imported.translated)
        assert not imported.warnings
    else:  # loud: not carried, with what the script chose
        assert not any(n in imported.env for n in attention_env.VARIABLES)
        assert len(imported.warnings) == 1 and all(f"{n}={v}" in imported.warnings[0] for n, v in exported.items())
        assert "not carried" in imported.warnings[0] and "language_module.py:107" in imported.warnings[0]
        assert imported.settings.get("attention_backend") == given
    assert "NVTE_" not in " ".join(imported.lost)


def test_the_one_backend_is_written_into_the_preset_and_the_round_trip_names_it(tmp_path):
    imported = import_source(script((None, "0", "0")), "train.sh")
    assert "attention_backend: flash" in imported.text and "NVTE_FUSED_ATTN: '0'" in imported.text
    preset = tmp_path / "p.yaml"
    preset.write_text(imported.text)
    outcome = check_import(imported, preset, job_as_declared)
    assert not [p for p in outcome.problems if "NVTE_" in p.message]
    assert not outcome.differences  # attention_backend is named as replaced on purpose, not a difference


@pytest.mark.parametrize("name", ["llmjp_installer_example.sh", "llmjp_v3_8x1.8b.sh"])
def test_the_corpus_scripts_that_turn_fused_attention_off_import_to_a_job_the_rule_accepts(name, tmp_path):
    # seen on an H200: `export NVTE_FUSED_ATTN=0` carried as it was, accepted, then Megatron's assert at model build
    entry = json.loads((CORPUS / "INDEX.json").read_text())[name]
    imported = import_source((CORPUS / name).read_text(), name, entry.get("args", []), environment=entry.get("env"))
    assert "NVTE_FUSED_ATTN" not in imported.env
    assert any("NVTE_FUSED_ATTN=0: not carried" in w and "flash, unfused" in w for w in imported.warnings)
    preset = tmp_path / "p.yaml"
    preset.write_text(imported.text)
    outcome = check_import(imported, preset, job_as_declared)
    assert not [p for p in outcome.problems if "NVTE_" in p.message]
