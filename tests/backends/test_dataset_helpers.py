"""Megatron's dataset helpers reach a checkout before rank 0's `make` runs: from the launcher's cache, from an
installed megatron-core wheel with the same source, or built once into the cache while training starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launcher.megatron import dataset_helpers as helpers

SUFFIX = ".cpython-312-x86_64-linux-gnu.so"
ROOT = Path(__file__).resolve().parents[2]
# A Makefile that "builds" by copying the source: the launcher's build runs make, as rank 0 would.
COPY_MAKEFILE = "LIBEXT = .wrong\nOUT = helpers_cpp$(LIBEXT)\n$(OUT): helpers.cpp\n\tcp helpers.cpp $@\n"


def checkout(tmp_path: Path, source: str = "int helpers;\n", makefile: str = COPY_MAKEFILE) -> Path:
    datasets = tmp_path / "megatron-lm" / "megatron" / "core" / "datasets"
    datasets.mkdir(parents=True)
    (datasets / "helpers.cpp").write_text(source)
    (datasets / "Makefile").write_text(makefile)
    (tmp_path / "megatron-lm" / "pretrain_gpt.py").touch()
    old = time.time() - 3600  # the source is older than anything the launcher writes
    os.utime(datasets / "helpers.cpp", (old, old))
    return tmp_path / "megatron-lm"


def seed_cache(cache: Path, megatron: Path, content: bytes = b"cached build") -> Path:
    datasets = helpers.datasets_dir(megatron)
    entry = cache / "dataset-helpers" / str(helpers.source_key(datasets, SUFFIX))
    entry.mkdir(parents=True, mode=0o700)
    entry.chmod(0o700)
    built = entry / helpers.built_name(SUFFIX)
    built.write_bytes(content)
    built.chmod(0o755)
    return built


def no_wheel(monkeypatch):
    monkeypatch.setattr(helpers, "wheel_build", lambda *_: None)


def test_a_cached_build_of_the_same_source_is_copied_in_and_make_finds_nothing_to_do(tmp_path, monkeypatch):
    no_wheel(monkeypatch)
    megatron = checkout(tmp_path)
    seed_cache(tmp_path / "cache", megatron)
    done = helpers.prepare(megatron, os.environ, cache=tmp_path / "cache", suffix=SUFFIX)
    datasets = helpers.datasets_dir(megatron)
    assert done.how == "cache"
    assert (datasets / helpers.built_name(SUFFIX)).read_bytes() == b"cached build"
    assert helpers.is_up_to_date(datasets, SUFFIX)
    if shutil.which("make"):  # what rank 0 runs: nothing left to build
        dry = subprocess.run(["make", "-q", "-C", str(datasets), f"LIBEXT={SUFFIX}"], capture_output=True)
        assert dry.returncode == 0


def test_a_cache_entry_of_another_source_is_not_used(tmp_path, monkeypatch):
    no_wheel(monkeypatch)
    megatron = checkout(tmp_path, source="int other;\n")
    seed_cache(tmp_path / "cache", checkout(tmp_path / "elsewhere"))  # the key of a different helpers.cpp
    monkeypatch.setattr(helpers, "_build_in_background", lambda *_: helpers.Preparation("building"))
    assert helpers.prepare(megatron, os.environ, cache=tmp_path / "cache", suffix=SUFFIX).how == "building"
    assert not (helpers.datasets_dir(megatron) / helpers.built_name(SUFFIX)).exists()


def test_a_cache_entry_others_can_write_is_not_loaded(tmp_path, monkeypatch):
    no_wheel(monkeypatch)
    megatron = checkout(tmp_path)
    built = seed_cache(tmp_path / "cache", megatron)
    built.chmod(0o777)
    monkeypatch.setattr(helpers, "_build_in_background", lambda *_: helpers.Preparation("building"))
    assert helpers.prepare(megatron, os.environ, cache=tmp_path / "cache", suffix=SUFFIX).how == "building"
    assert not (helpers.datasets_dir(megatron) / helpers.built_name(SUFFIX)).exists()


def test_an_up_to_date_build_in_the_checkout_is_left_alone(tmp_path, monkeypatch):
    no_wheel(monkeypatch)
    megatron = checkout(tmp_path)
    own = helpers.datasets_dir(megatron) / helpers.built_name(SUFFIX)
    own.write_bytes(b"the checkout's own")
    seed_cache(tmp_path / "cache", megatron)
    assert helpers.prepare(megatron, os.environ, cache=tmp_path / "cache", suffix=SUFFIX).how == "built"
    assert own.read_bytes() == b"the checkout's own"


def _elf() -> bytes:
    """A real ELF file's bytes (this Python's own binary), to cut."""
    return Path(sys.executable).resolve().read_bytes()


@pytest.mark.parametrize("keep", [0, 3, 40, 0.5], ids=["empty", "in the magic", "in the header", "half"])
def test_a_build_cut_while_written_is_never_taken_as_up_to_date_nor_left_for_make(tmp_path, monkeypatch, keep):
    """make killed while it linked (a scheduler's SIGTERM at start-up) leaves a cut file newer than the source:
    it is replaced from the cache, never left for rank 0's make, which would take it as built."""
    no_wheel(monkeypatch)
    megatron = checkout(tmp_path)
    whole = _elf()
    own = helpers.datasets_dir(megatron) / helpers.built_name(SUFFIX)
    own.write_bytes(whole[:int(len(whole) * keep) if isinstance(keep, float) else keep])
    assert not helpers.is_up_to_date(helpers.datasets_dir(megatron), SUFFIX)
    seed_cache(tmp_path / "cache", megatron, whole)
    assert helpers.prepare(megatron, os.environ, cache=tmp_path / "cache", suffix=SUFFIX).how == "cache"
    assert own.read_bytes() == whole


def test_a_cut_build_in_the_checkout_is_removed_when_nothing_can_replace_it_yet(tmp_path, monkeypatch):
    no_wheel(monkeypatch)
    megatron = checkout(tmp_path)
    own = helpers.datasets_dir(megatron) / helpers.built_name(SUFFIX)
    own.write_bytes(_elf()[:4096])
    monkeypatch.setattr(helpers, "_build_in_background", lambda *_: helpers.Preparation("building"))
    assert helpers.prepare(megatron, os.environ, cache=tmp_path / "cache", suffix=SUFFIX).how == "building"
    assert not own.exists()  # rank 0's make now builds it, if the launcher's build is not done first


def test_a_cut_cache_entry_is_removed_and_never_copied_in(tmp_path, monkeypatch):
    no_wheel(monkeypatch)
    megatron = checkout(tmp_path)
    cached = seed_cache(tmp_path / "cache", megatron, _elf()[:4096])
    monkeypatch.setattr(helpers, "_build_in_background", lambda *_: helpers.Preparation("building"))
    assert helpers.prepare(megatron, os.environ, cache=tmp_path / "cache", suffix=SUFFIX).how == "building"
    assert not cached.exists()
    assert not (helpers.datasets_dir(megatron) / helpers.built_name(SUFFIX)).exists()
    assert helpers.will_build(megatron, SUFFIX, cache=tmp_path / "cache")


def test_a_copy_into_the_cache_that_fails_halfway_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    import errno

    target = tmp_path / "helpers.so"
    target.write_bytes(b"old build")
    built = tmp_path / "built.so"
    built.write_bytes(_elf())

    def half_then_full(source, destination):
        Path(destination).write_bytes(Path(source).read_bytes()[:100])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(helpers.shutil, "copyfile", half_then_full)
    with pytest.raises(OSError):
        helpers._install(built, target)
    assert target.read_bytes() == b"old build"
    assert sorted(os.listdir(tmp_path)) == ["built.so", "helpers.so"]


def test_the_wheels_prebuilt_helpers_are_used_only_for_the_same_source(tmp_path, monkeypatch):
    megatron = checkout(tmp_path)
    wheel = tmp_path / "site-packages"
    folder = wheel / "megatron" / "core" / "datasets"
    folder.mkdir(parents=True)
    (folder / "helpers.cpp").write_text("int helpers;\n")
    (folder / helpers.built_name(SUFFIX)).write_bytes(b"wheel build")

    class Dist:
        def locate_file(self, path):
            return wheel / path

    monkeypatch.setattr(helpers.metadata, "distribution", lambda name: Dist())
    done = helpers.prepare(megatron, os.environ, cache=tmp_path / "cache", suffix=SUFFIX)
    assert done.how == "wheel"
    assert (helpers.datasets_dir(megatron) / helpers.built_name(SUFFIX)).read_bytes() == b"wheel build"
    # and it is cached for checkouts on machines where the wheel is gone
    (folder / "helpers.cpp").write_text("int changed;\n")
    again = checkout(tmp_path / "second")
    monkeypatch.setattr(helpers, "_build_in_background", lambda *_: helpers.Preparation("building"))
    assert helpers.prepare(again, os.environ, cache=tmp_path / "cache", suffix=SUFFIX).how == "cache"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_without_cache_or_wheel_it_is_built_once_in_the_background_then_reused(tmp_path, monkeypatch):
    no_wheel(monkeypatch)
    megatron = checkout(tmp_path)
    first = helpers.prepare(megatron, os.environ, cache=tmp_path / "cache", suffix=SUFFIX)
    assert first.how == "building"
    first.wait(60)
    built = helpers.datasets_dir(megatron) / helpers.built_name(SUFFIX)
    assert built.read_text() == "int helpers;\n" and helpers.is_up_to_date(helpers.datasets_dir(megatron), SUFFIX)
    fresh = checkout(tmp_path / "fresh")
    assert helpers.prepare(fresh, os.environ, cache=tmp_path / "cache", suffix=SUFFIX).how == "cache"
    assert not list((tmp_path / "cache").rglob("build-*"))  # the build's scratch directory is gone


def test_a_launch_here_gives_the_checkout_its_helpers_before_torchrun_starts(tmp_path):
    """`launch` of a pretrain_gpt.py job: the stand-in torchrun sees the helpers already in the checkout."""
    megatron = checkout(tmp_path)
    cache = tmp_path / "cache"
    seed_cache(cache, megatron)
    built = helpers.datasets_dir(megatron) / helpers.built_name(SUFFIX)
    torchrun = tmp_path / "torchrun"
    torchrun.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import pathlib
        print("helpers at start:", pathlib.Path({str(built)!r}).exists(), flush=True)
        """))
    torchrun.chmod(0o755)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": str(ROOT),
           "MEGATRON_LAUNCH_CACHE_DIR": str(cache)}
    argv = [sys.executable, "-m", "launcher", "toy", "--gpus-per-node", "1", "--set", f"torchrun={torchrun}",
            "--set", f"run_root={tmp_path / 'runs'}", "--megatron-path", str(megatron), "--no-doctor"]
    if helpers.built_name() != helpers.built_name(SUFFIX):
        pytest.skip("the seeded build is named for CPython 3.12 on x86-64")
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "helpers at start: True" in result.stdout, result.stdout + result.stderr
    assert "# dataset helpers: copied from the launcher's cache" in result.stdout


def test_will_build_says_what_prepare_will_leave_to_make(tmp_path, monkeypatch):
    no_wheel(monkeypatch)
    megatron, cache = checkout(tmp_path), tmp_path / "cache"
    assert helpers.will_build(megatron, SUFFIX, cache)  # nothing built, nothing cached: make compiles
    seed_cache(cache, megatron)
    assert not helpers.will_build(megatron, SUFFIX, cache)  # prepare copies the cached build in
    datasets = helpers.datasets_dir(megatron)
    datasets.chmod(0o555)  # a cached build cannot be installed into a read-only checkout: make compiles
    try:
        assert helpers.will_build(megatron, SUFFIX, cache) or os.access(datasets, os.W_OK)  # root writes anyway
    finally:
        datasets.chmod(0o755)
    (datasets / helpers.built_name(SUFFIX)).write_bytes(b"built")  # current: make has nothing to do
    assert not helpers.will_build(megatron, SUFFIX, tmp_path / "empty-cache")
    assert helpers.will_build(tmp_path / "no-checkout", SUFFIX, cache)  # cannot tell: as if it compiles
