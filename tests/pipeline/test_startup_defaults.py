"""What the ranks' start-up hook is told to do (pipeline/startup.py): only on the fast path, only what the job's
settings cannot reach, each said in a header note, and never over the preset's own environment."""

import sys
from dataclasses import replace

from launcher.megatron.pin import Kernels
from launcher.pipeline import startup
from launcher.pipeline.preset import load_preset
from launcher.pipeline.resolve import resolve

WITH_TE = Kernels(True, True, "preset", "2.14.0")
SKIP, WARMUP = "MEGATRON_LAUNCH_SKIP_IMPORTS", "MEGATRON_LAUNCH_JIT_WARMUP"


def job_for(name: str = "345m", *overrides: str, env: dict | None = None, kernels: Kernels | None = None):
    preset = load_preset(name, overrides=list(overrides))
    if env is not None:
        preset = replace(preset, launcher=replace(preset.launcher, env={**preset.launcher.env, **env}))
    return resolve(preset, 1, 1, **({"kernels": kernels} if kernels else {}))


def test_mock_data_with_compiled_layers_skips_the_tokenizer_libraries_and_the_jit_warmup():
    job = job_for()
    assert job.environment.get(SKIP) == "cupy,transformers,sentencepiece,tiktoken"
    assert job.environment.get(WARMUP) == "draws"
    assert job.environment.get("PYTHONPATH").endswith("/launcher/inside/site")
    assert any(n.startswith("the ranks skip importing cupy, transformers") for n in job.notes)
    assert any(n.startswith("Megatron's JIT warm-up compiles nothing") for n in job.notes)


def test_without_compiled_layers_megatrons_warmup_stays_where_its_fusions_run():
    job = job_for("345m", "env.MEGATRON_LAUNCH_FAST_OPS=norm,scale,adam,nosync")  # pretrain_gpt.py's fusions on
    assert job.entry == "pretrain_gpt" and job.environment.get(WARMUP) is None
    assert not any("JIT warm-up" in n for n in job.notes)
    for unfused in (["bias_gelu_fusion=false"], ["bias_dropout_fusion=false"],
                    ["swiglu=true", "bias_gelu_fusion=false"]):
        job = job_for("345m", "env.MEGATRON_LAUNCH_FAST_OPS=norm,scale,adam,nosync", *unfused)
        assert job.environment.get(WARMUP) is None, unfused  # a fusion it warms still runs


def test_the_one_gpu_toy_is_unfused_as_upstreams_model_and_skips_the_warmup():
    job = job_for("toy")  # one GPU: pretrain_gpt.py with the fast ops that compile nothing
    assert job.entry == "pretrain_gpt"
    assert job.megatron["bias_gelu_fusion"] is False and job.megatron["bias_dropout_fusion"] is False
    assert job.environment.get(WARMUP) == "draws"
    assert any("or the job turns off the fusions it compiles" in n for n in job.notes)
    job = job_for("345m", "env.MEGATRON_LAUNCH_FAST_OPS=norm,scale,adam,nosync", "bias_gelu_fusion=false",
                  "bias_dropout_fusion=false")
    assert job.environment.get(WARMUP) == "draws"


def test_a_real_tokenizer_keeps_its_libraries():
    job = job_for("345m", "tokenizer_type=GPT2BPETokenizer", "vocab_file=/v.json", "merge_file=/m.txt")
    assert job.environment.get(SKIP) == "cupy"


def test_no_hook_off_the_fast_path():
    job = job_for(kernels=WITH_TE)
    assert job.environment.get(SKIP) is None and job.environment.get(WARMUP) is None
    assert "inside/site" not in job.environment.get("PYTHONPATH")


def test_the_presets_own_value_wins_and_is_not_explained_as_the_launchers():
    job = job_for(env={WARMUP: "megatron"})
    assert job.environment.get(WARMUP) == "megatron"
    assert not any("JIT warm-up" in n for n in job.notes)


def test_where_python_may_not_write_bytecode_the_job_keeps_it_in_the_launchers_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGATRON_LAUNCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(startup, "installation_has_bytecode", lambda: False)
    preset = load_preset("345m")
    job = resolve(preset, 1, 1, inherited_env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert job.environment.get("PYTHONPYCACHEPREFIX") == str(tmp_path / "pycache")
    assert job.environment.get("MEGATRON_LAUNCH_WRITE_BYTECODE") == "1"
    assert any(n.startswith(f"bytecode kept in {tmp_path / 'pycache'}") for n in job.notes)
    mine = resolve(preset, 1, 1, inherited_env={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/mine"})
    assert mine.environment.get("PYTHONPYCACHEPREFIX") == "/mine"
    assert "PYTHONPYCACHEPREFIX" not in mine.environment.chosen
    assert resolve(preset, 1, 1, inherited_env={}).environment.get("PYTHONPYCACHEPREFIX") is None


def test_where_torch_was_installed_with_its_bytecode_no_cache_of_the_launchers_hides_it(tmp_path, monkeypatch):
    """Python reads bytecode only from PYTHONPYCACHEPREFIX once it is set: the first launch would compile torch."""
    monkeypatch.setenv("MEGATRON_LAUNCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(startup, "installation_has_bytecode", lambda: True)
    job = resolve(load_preset("345m"), 1, 1, inherited_env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert job.environment.get("PYTHONPYCACHEPREFIX") is None
    assert job.environment.get("MEGATRON_LAUNCH_WRITE_BYTECODE") is None
    assert not any(n.startswith("bytecode kept in") for n in job.notes)


def test_torchs_installed_bytecode_is_found_where_python_would_read_it(tmp_path, monkeypatch):
    package = tmp_path / "torch"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # find_spec answers from sys.modules first
    assert not startup.installation_has_bytecode()
    (package / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc").write_bytes(b"")
    assert startup.installation_has_bytecode()


EXIT = "MEGATRON_LAUNCH_EXIT"


def test_the_quick_exit_is_a_fast_path_default_that_the_user_can_turn_off():
    for name in ("345m", "toy"):
        job = job_for(name)
        assert job.environment.get(EXIT) == "quick"
        assert any(n.startswith("at exit a rank whose training returned cleanly ends at once") for n in job.notes)
    assert job_for("345m", env={EXIT: "python"}).environment.get(EXIT) == "python"  # the user's own
    mine = resolve(load_preset("345m"), 1, 1, inherited_env={EXIT: "python"})
    assert EXIT not in mine.environment.exported
    assert job_for(kernels=WITH_TE).environment.get(EXIT) is None  # off the fast path: no hook


IMPORT_GC = "MEGATRON_LAUNCH_IMPORT_GC"


def test_fast_path_ranks_pause_garbage_collection_while_importing_and_say_so():
    for name in ("345m", "toy"):
        job = job_for(name)
        assert job.environment.get(IMPORT_GC) == "paused"
        assert any(n.startswith("the ranks (and torchrun, where it runs) collect no garbage while they import")
                   for n in job.notes)
    assert job_for(kernels=WITH_TE).environment.get(IMPORT_GC) is None
    mine = job_for(env={IMPORT_GC: "python"})
    assert mine.environment.get(IMPORT_GC) == "python" and not any("no garbage" in n for n in mine.notes)


def test_compile_workers_start_only_when_a_kernel_is_compiled_unless_the_user_says_otherwise():
    job = job_for()
    assert job.environment.get("TORCH_WARM_POOL") == "0"
    assert any(n.startswith("torch's compile workers start only when a kernel must be compiled") for n in job.notes)
    assert job_for("toy").environment.get("TORCH_WARM_POOL") == "0"  # toy compiles Megatron's fusions
    assert job_for(env={"TORCH_WARM_POOL": "1"}).environment.get("TORCH_WARM_POOL") == "1"
    mine = resolve(load_preset("345m"), 1, 1, inherited_env={"TORCH_WARM_POOL": "1"})
    assert "TORCH_WARM_POOL" not in mine.environment.exported
    assert not any("compile workers" in n for n in mine.notes)
    assert job_for(kernels=WITH_TE).environment.get("TORCH_WARM_POOL") is None  # off the fast path: no hook
