import pytest

from launcher.errors import UserError
from launcher.pipeline.preset import available_presets, load_preset


def write(tmp_path, text, name="mine.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_shipped_presets_load():
    assert {"toy", "345m", "175b"} <= set(available_presets())
    for name in available_presets():
        preset = load_preset(name)
        assert preset.megatron["num_layers"] >= 1


def test_345m_is_gpt2_medium():
    p = load_preset("345m")
    assert (p.arg("num_layers"), p.arg("hidden_size"), p.arg("num_attention_heads")) == (24, 1024, 16)
    assert (p.arg("seq_length"), p.arg("max_position_embeddings"), p.arg("vocab_size")) == (1024, 1024, 50257)
    assert (p.arg("micro_batch_size"), p.arg("global_batch_size")) == (4, 32) or p.arg("global_batch_size") == 32
    assert p.arg("bf16") and p.arg("mock_data")


def test_toy_matches_upstream_simple_loop():
    p = load_preset("toy")
    assert p.launcher.entry == "simple_loop"
    assert [p.arg(k) for k in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size", "seq_length",
                               "micro_batch_size", "train_iters", "tensor_model_parallel_size")] == [2, 12, 4, 100, 64,
                                                                                                      8, 5, 2]
    assert not p.arg("bf16") and not p.arg("fp16")


def test_yaml_1_1_float_strings_are_typed_by_megatron():
    # plain YAML 1.1 reads 6.0e-5 without a dot in the mantissa (3e-4) as a string
    p = load_preset("345m", ["lr=3e-4", "bf16=false", "num_layers=48", "min_lr=1e-6"])
    assert p.megatron["lr"] == pytest.approx(3e-4) and isinstance(p.megatron["lr"], float)
    assert p.megatron["bf16"] is False
    assert p.megatron["num_layers"] == 48


def test_base_layering_and_file_overrides(tmp_path):
    path = write(tmp_path, "base: 345m\nmegatron:\n  model:\n    num_layers: 12\nlauncher:\n  gpus_per_node: 4\n"
                           "  env:\n    NCCL_DEBUG: WARN\n")
    p = load_preset(path, ["env.NCCL_DEBUG=INFO", "hidden_size=768", "num_attention_heads=12"])
    assert p.arg("num_layers") == 12 and p.arg("hidden_size") == 768 and p.arg("seq_length") == 1024
    assert p.launcher.gpus_per_node == 4
    assert p.launcher.env == {"NCCL_DEBUG": "INFO"}
    assert len(p.sources) == 2


def test_null_removes_a_base_setting(tmp_path):
    path = write(tmp_path, "base: 345m\nmegatron:\n  global_batch_size: null\n")
    assert load_preset(path).megatron["global_batch_size"] is None


def test_flag_spelling_is_accepted():
    p = load_preset("345m", ["no_gradient_accumulation_fusion=true"])
    assert p.megatron["gradient_accumulation_fusion"] is False


def test_list_values_follow_megatron_nargs():
    p = load_preset("345m", ["data_path=0.3 /d/a 0.7 /d/b", "mock_data=false"])
    assert p.megatron["data_path"] == ["0.3", "/d/a", "0.7", "/d/b"]


@pytest.mark.parametrize("text, message", [
    ("megatron: [1, 2\n", "not valid YAML"),
    ("- a\n- b\n", "must be a YAML mapping"),
    ("megatron:\n  num_layerz: 2\n", "did you mean num_layers"),
    ("megatron:\n  model:\n    hidden_size: big\n", "must be an integer"),
    ("megatron:\n  num_layers: 2.5\n", "must be an integer"),
    ("launcher:\n  nodez: 2\n", "did you mean nodes"),
    ("launcher:\n  nodes: -1\n", "at least 1"),
    ("launcher:\n  entry: train\n", "must be one of"),
    ("launcher:\n  env:\n    'A B': 1\n", "not a valid environment variable"),
    ("launcher:\n  slurm:\n    partitoin: gpu\n", "did you mean partition"),
    ("num_layers: 2\n", "put it under megatron"),
    ("megatron:\n  bf16: 3\n", "is a flag"),
    ("megatron:\n  transformer_impl: fast\n", "must be one of"),
    ("base: nonexistent\n", "no preset named"),
])
def test_bad_preset_files(tmp_path, text, message):
    with pytest.raises(UserError) as err:
        load_preset(write(tmp_path, text))
    assert message in err.value.render()


def test_all_problems_are_reported_together(tmp_path):
    with pytest.raises(UserError) as err:
        load_preset(write(tmp_path, "megatron:\n  num_layerz: 2\n  hidden_sise: 3\n"))
    assert len(err.value.problems) == 2


def test_base_loop_is_caught(tmp_path):
    write(tmp_path, "base: b.yaml\n", "a.yaml")
    write(tmp_path, "base: a.yaml\n", "b.yaml")
    with pytest.raises(UserError, match="loop"):
        load_preset(str(tmp_path / "a.yaml"))


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_preset(str(tmp_path / "absent.yaml"))
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(UserError, match="cannot read"):
        load_preset(str(tmp_path / "dir.yaml"))


@pytest.mark.parametrize("override, message", [
    ("lr", "not NAME=VALUE"),
    ("=3", "not NAME=VALUE"),
    ("lr=fast", "must be a number"),
    ("nodes=two", "must be an integer"),
    ("tensor_model_parallel_size=1.5", "must be an integer"),
    ("rampup_batch_size=16 16", "exactly 3 values"),
    ("attention_backend=quick", "must be one of"),
    ("layers=4", "unknown setting"),
])
def test_bad_overrides(override, message):
    with pytest.raises(UserError) as err:
        load_preset("345m", [override])
    assert message in err.value.render()


def test_relative_base_is_found_next_to_the_file_naming_it(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "base: 345m\nmegatron:\n  num_layers: 6\n", "common.yaml")
    child = write(tmp_path / "sub", "base: common.yaml\n", "child.yaml")
    write(tmp_path, "megatron:\n  num_layers: 1\n", "common.yaml")  # a decoy in the working directory
    monkeypatch.chdir(tmp_path)
    assert load_preset(child).arg("num_layers") == 6


def test_setting_types_come_from_the_dataclass_annotations():
    from launcher.pipeline import preset as p
    from launcher.pipeline.field_types import fields_allowing
    from launcher.pipeline.slurm_settings import SlurmSettings

    assert p.INT_FIELDS == {"nodes", "gpus_per_node", "master_port", "max_micro_batch_size"}
    assert p.OPTIONAL_FIELDS == {"megatron_path", "max_micro_batch_size"}
    assert p.TRISTATE_FIELDS == {"transformer_engine", "apex"}
    assert fields_allowing(SlurmSettings, str) >= {"partition", "time", "container_image", "signal"}
    assert fields_allowing(SlurmSettings, tuple) == {"extra_sbatch", "container_mounts"}
    # text settings stay as written: a torchrun path that YAML would read as a number, a Slurm time as text
    preset = p.load_preset("toy", ["torchrun=1e3", "slurm.time=1:00:00"])
    assert preset.launcher.torchrun == "1e3" and preset.launcher.slurm["time"] == "1:00:00"
