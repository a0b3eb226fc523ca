"""`launch import` writes its preset through the YAML serializer: what the source holds can only become the value
it is, never a launcher key; the preset reads back as the settings imported; exported secrets are not copied."""

from __future__ import annotations

import yaml

from launcher.importer.build import import_source
from launcher.pipeline.preset import load_preset


def _write(tmp_path, text: str):
    path = tmp_path / "imported.yaml"
    path.write_text(text)
    return path


def test_an_env_vars_key_with_a_newline_and_colon_cannot_become_a_launcher_key(tmp_path):
    source = yaml.safe_dump({"MODEL_ARGS": {"--num-layers": 2},
                             "ENV_VARS": {"A: '1'\n  torchrun: /x/evil #": "1"}})
    imported = import_source(source, "evil.yaml")
    data = yaml.safe_load(imported.text)
    assert "torchrun" not in data["launcher"]
    assert list(data["launcher"]["env"]) == ["A: '1'\n  torchrun: /x/evil #"]  # the key, as the source had it


def test_list_items_with_quotes_and_spaces_read_back_as_imported(tmp_path):
    script = "torchrun pretrain_gpt.py --num-layers 2 --tokenizer-special-tokens \"it's\" 'say \"hi\"' '#x' 'a: b'\n"
    imported = import_source(script, "train.sh")
    preset = load_preset(str(_write(tmp_path, imported.text)))
    assert preset.megatron["special_tokens"] == ["it's", 'say "hi"', "#x", "a: b"]
    assert {k: preset.megatron[k] for k in imported.settings} == imported.settings


def test_an_exported_token_is_not_copied_into_the_preset():
    script = "export HF_TOKEN=hf_abcdefgh123\nexport NCCL_DEBUG=INFO\ntorchrun pretrain_gpt.py --num-layers 2\n"
    imported = import_source(script, "train.sh")
    assert "hf_abcdefgh123" not in imported.text
    assert yaml.safe_load(imported.text)["launcher"]["env"] == {"NCCL_DEBUG": "INFO"}
    assert "#   export HF_TOKEN: a secret, not copied into the preset (export it before launch)" in imported.text


def test_comments_hold_no_internal_marker_or_control_character():
    script = "torchrun pretrain_gpt.py --num-layers 2 --data-path ${DATA}/x\x1b[2J\n"
    imported = import_source(script, "train\nsh")
    assert "\x00" not in imported.text and "\x1b" not in imported.text
    assert yaml.safe_load(imported.text)["description"] == "imported from train\nsh"
