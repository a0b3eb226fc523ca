"""--build-index: GPTDataset index caches built on CPU with the job's own Megatron arguments, then only read."""

from __future__ import annotations

import errno
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

from launcher.checks.data import check_job_data, cut_cache_files
from launcher.dataprep import index_cache
from launcher.dataprep.index_cache import build_index_caches, check_index_request
from launcher.dataprep.prepare import prepare_data
from launcher.dataprep.text_tokenizers import TokenizerSpec
from launcher.errors import UserError

REPO = Path(__file__).resolve().parents[2]

def needs_megatron(test):
    test = pytest.mark.skipif(find_spec("megatron") is None or find_spec("torch") is None,
                              reason="needs megatron-core and torch")(test)
    return pytest.mark.megatron(test)


def megatron_checkout() -> Path | None:
    for candidate in (os.environ.get("MEGATRON_LM_PATH"), REPO / "third_party" / "megatron-lm"):
        if candidate and (Path(candidate) / "tools" / "prepare_cache.py").is_file():
            return Path(candidate)
    return None


def training_args(prefix: Path, cache: Path, *, train_iters: int, eval_interval: int, eval_iters: int,
                  global_batch: int) -> list[str]:
    return [
        "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "128",
        "--max-position-embeddings", "128", "--micro-batch-size", "2", "--global-batch-size", str(global_batch),
        "--train-iters", str(train_iters), "--eval-interval", str(eval_interval), "--eval-iters", str(eval_iters),
        "--lr", "1e-3", "--tokenizer-type", "NullTokenizer", "--vocab-size", "257",
        "--data-path", str(prefix), "--split", "90,8,2", "--data-cache-path", str(cache),
        "--tensor-model-parallel-size", "2",
    ]


def test_request_needs_real_data_and_a_cache_path():
    problems = check_index_request({"mock_data": True, "train_iters": 10})
    text = "\n".join(p.message for p in problems)
    assert "mock data" in text and "data_cache_path" in text
    assert check_index_request({"data_path": ["x"], "data_cache_path": "/c", "train_samples": 100}) == []


@pytest.fixture(scope="module")
def built_caches(tmp_path_factory):
    """A corpus, its training arguments (world 4, TP 2) and the summary of building its caches once."""
    if find_spec("megatron") is None or find_spec("torch") is None:
        pytest.skip("needs megatron-core and torch")
    root = tmp_path_factory.mktemp("index")
    corpus = root / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i} " * (i % 40 + 1)}) + "\n" for i in range(600)))
    prefix = root / "corpus"
    prepare_data([str(corpus)], str(prefix), TokenizerSpec("byte"), workers=1, show_progress=False)
    sizes = {"train_iters": 30, "eval_interval": 10, "eval_iters": 3, "global_batch": 8}
    args = training_args(prefix, root / "cache", **sizes)
    summary = build_index_caches(args, world_size=4, cwd=str(REPO))
    return root, args, sizes, summary, set(os.listdir(root / "cache"))


@needs_megatron
def test_caches_built_once_then_only_read(built_caches):
    root, args, sizes, summary, built = built_caches
    gbs = sizes["global_batch"]
    # Megatron's get_train_valid_test_num_samples
    assert summary["num_samples"] == [sizes["train_iters"] * gbs,
                                      (sizes["train_iters"] // sizes["eval_interval"] + 1) * sizes["eval_iters"] * gbs,
                                      sizes["eval_iters"] * gbs]
    assert summary["data_parallel_size"] == 2  # world 4 / TP 2
    assert all(n >= want for n, want in zip(summary["lengths"], summary["num_samples"], strict=True))
    assert built == set(summary["new_files"]) and len(built) == 12  # 3 splits x (description + 3 indices)

    again = build_index_caches(args, world_size=4, cwd=str(REPO))
    assert again["new_files"] == [] and again["lengths"] == summary["lengths"]


@needs_megatron
@pytest.mark.skipif(megatron_checkout() is None, reason="needs a Megatron-LM checkout (tools/prepare_cache.py)")
def test_upstream_prepare_cache_finds_our_caches(built_caches):
    root, args, _sizes, summary, built = built_caches
    checkout = megatron_checkout()
    assert checkout is not None
    # upstream's own cache preparation (same config as pretrain_gpt.py) must find our files and build nothing
    upstream = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('pc', {str(checkout / 'tools' / 'prepare_cache.py')!r})\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "module.compile_helpers = lambda: None  # the wheel ships the helpers prebuilt\n"
        "import megatron.training.arguments as arguments\n"
        "arguments.get_device_arch_version = lambda: 9\n"
        "sys.argv = ['prepare_cache.py', *sys.argv[1:]]\n"
        "print('RESULT', module.main())\n"
    )
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "4", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    run = subprocess.run([sys.executable, "-c", upstream, *args], env=env, capture_output=True, text=True,
                         timeout=300, check=False, cwd=root)
    assert run.returncode == 0, run.stderr[-3000:]
    assert set(os.listdir(root / "cache")) == built
    assert "Build and save" not in run.stderr
    assert f"'train_dataset_length': {summary['lengths'][0]}" in run.stdout


@needs_megatron
def test_megatron_rejecting_the_arguments_is_a_user_error(tmp_path):
    args = training_args(tmp_path / "none", tmp_path / "cache", train_iters=10, eval_interval=5, eval_iters=1,
                         global_batch=8) + ["--no-such-flag"]
    with pytest.raises(UserError, match="Megatron rejected"):
        build_index_caches(args, world_size=2, cwd=str(REPO))
    assert not (tmp_path / "cache").exists()


def run_launch(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def test_build_index_refuses_a_preset_without_real_data(tmp_path):
    mock = run_launch("prepare-data", "--build-index", "345m", cwd=tmp_path)
    assert mock.returncode == 2 and "Traceback" not in mock.stderr
    assert "uses mock data" in mock.stderr and "needs data_cache_path" in mock.stderr
    both = run_launch("prepare-data", "--build-index", "345m", "--set", f"data_path={tmp_path}/none",
                      "--set", f"data_cache_path={tmp_path}/cache", cwd=tmp_path)
    assert both.returncode == 2
    assert "both mock data" in both.stderr and f"{tmp_path}/none.bin" in both.stderr
    toy = run_launch("prepare-data", "--build-index", "toy", cwd=tmp_path)
    assert toy.returncode == 2 and "reads no dataset" in toy.stderr
    assert not (tmp_path / "cache").exists()


@needs_megatron
def test_build_index_through_a_preset_matches_its_training_command(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"line {i} " * (i % 30 + 1) for i in range(800)))
    prepared = run_launch("prepare-data", str(corpus), "--output-prefix", str(tmp_path / "corpus"),
                          "--tokenizer", "byte", "--text-unit", "line", "--workers", "2", cwd=tmp_path)
    assert prepared.returncode == 0, prepared.stderr
    sets = ["--set", "mock_data=false", "--set", f"data_path={tmp_path / 'corpus'}", "--set", "split=98,2,0",
            "--set", f"data_cache_path={tmp_path / 'cache'}", "--set", "vocab_size=257",
            "--set", "train_iters=40", "--set", "seq_length=256", "--set", "max_position_embeddings=256"]
    built = run_launch("prepare-data", "--build-index", "345m", "--nodes", "2", "--gpus-per-node", "4",
                       "--format", "json", *sets, cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-3000:]
    summary = json.loads(built.stdout)
    assert summary["world_size"] == 8 and summary["data_parallel_size"] == 8
    assert summary["num_samples"][0] == 40 * summary["global_batch_size"]
    assert summary["data_cache_path"] == str(tmp_path / "cache") and summary["new_files"]
    again = run_launch("prepare-data", "--build-index", "345m", "--nodes", "2", "--gpus-per-node", "4", *sets,
                       cwd=tmp_path)  # text: split 98,2,0 has no test split, and says so
    assert again.returncode == 0 and "all present already" in again.stdout, again.stderr[-3000:]
    assert "test none (test: split 98,2,0 gives it no documents" in again.stdout
    assert "Warning" not in built.stderr + again.stderr  # Megatron's import-time warnings say nothing to act on

    dry = run_launch("345m", "--dry-run", "--format", "json", "--nodes", "2", "--gpus-per-node", "4", *sets,
                     cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    argv = json.loads(dry.stdout)["argv"]  # the training command reads the caches built above
    assert argv[argv.index("--data-cache-path") + 1] == str(tmp_path / "cache")
    assert argv[argv.index("--data-path") + 1] == str(tmp_path / "corpus")


def test_samples_line_names_a_split_without_documents():
    from launcher.dataprep.index_cache import samples_line

    summary = {"num_samples": [3200, 320, 320], "lengths": [3305, 331, None], "split": "98,2,0"}
    line = samples_line(summary)
    assert line.startswith("samples train 3,200, valid 320, test none")
    assert "test: split 98,2,0 gives it no documents" in line and "/320" not in line
    full = samples_line({**summary, "lengths": [3305, 331, 400]})
    assert full == "samples train 3,200, valid 320, test 320"


# ---- index caches are whole or absent: Megatron takes a set of cache files as built once all exist, so a build
# stopped halfway (a full disk, a kill) leaves no cut .npy, and a cut one an earlier job left is found before a
# launch and replaced by --build-index ----

CUT_AT_THIRD_SAVE = """
import errno, numpy.lib.format as fmt
real, calls = fmt.write_array, [0]
def write_array(fp, array, *args, **kwargs):
    calls[0] += 1
    if calls[0] == 3:  # the disk fills while the third cache file is written
        fp.write(b"\\x93NUMPY" + b"x" * 200)
        raise OSError(errno.ENOSPC, "No space left on device")
    return real(fp, array, *args, **kwargs)
fmt.write_array = write_array
"""


def _python_that_runs(tmp_path: Path, preamble: str) -> str:
    """An interpreter for build_index_caches that runs `preamble` in the build's process before the build."""
    script = tmp_path / "python-with-preamble"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""\
        import os, runpy, sys
        sys.path[0] = os.getcwd()  # as `python -m` has it
        exec({preamble!r})
        assert sys.argv[1] == "-m"
        module = sys.argv[2]
        sys.argv = [module, *sys.argv[3:]]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        """))
    script.chmod(0o755)
    return str(script)


def _npy(path: Path, values: int) -> Path:
    np.save(path, np.arange(values, dtype=np.int64))
    return path


def test_a_cut_npy_is_told_from_a_whole_one_by_its_header(tmp_path):
    whole = _npy(tmp_path / "a-whole.npy", 10_000)
    data = whole.read_bytes()
    for name, size in (("empty", 0), ("magic", 4), ("header", 60), ("array", len(data) // 2), ("last", len(data) - 1)):
        (tmp_path / f"cut-{name}.npy").write_bytes(data[:size])
    os.mkfifo(tmp_path / "fifo.npy")  # not opened: a cache file is a regular file
    (tmp_path / "description.txt").write_text("{}")
    assert [Path(p).name for p in cut_cache_files(str(tmp_path))] == [
        "cut-array.npy", "cut-empty.npy", "cut-header.npy", "cut-last.npy", "cut-magic.npy"]
    assert cut_cache_files(str(tmp_path / "none")) == []


def test_a_launch_refuses_a_cut_cache_file_with_the_way_out(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    data = _npy(cache / "abc-GPTDataset-train-shuffle_index.npy", 1000).read_bytes()
    (cache / "abc-GPTDataset-train-shuffle_index.npy").write_bytes(data[:300])
    args = {"data_path": [str(tmp_path / "corpus")], "data_cache_path": str(cache), "split": "99,1,0"}
    problems, _unseen = check_job_data(args, remote=False)
    cut = [p for p in problems if "cut index cache file" in p.message]
    assert len(cut) == 1 and "abc-GPTDataset-train-shuffle_index.npy" in cut[0].message
    assert "rm " in cut[0].hint and "--build-index" in cut[0].hint
    assert not [p for p in check_job_data(args, remote=False, caches=False)[0] if "cut index" in p.message]
    # Megatron's default cache folder, beside the dataset, is looked at too
    default = tmp_path / "corpus" / "cache" / "GPTDataset_indices"
    default.mkdir(parents=True)
    (default / "x.npy").write_bytes(data[:300])
    problems, _unseen = check_job_data({**args, "data_cache_path": None}, remote=False)
    assert [p for p in problems if "x.npy is a cut index cache file" in p.message]


@pytest.mark.parametrize("planted", [pickle.dumps(["any", "object"]), b"PK\x03\x04zip", b"\x93NUMPX"])
def test_a_cache_file_that_numpy_would_unpickle_is_refused_as_one(tmp_path, planted):
    """Megatron's numpy.load(allow_pickle=True) unpickles a .npy file without NumPy's magic: code, not an index."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "abc-GPTDataset-train-document_index.npy").write_bytes(planted)
    args = {"data_path": [str(tmp_path / "corpus")], "data_cache_path": str(cache), "split": "99,1,0"}
    problems, _unseen = check_job_data(args, remote=False)
    named = [p for p in problems if "document_index.npy is no NumPy array file" in p.message]
    assert len(named) == 1 and "allow_pickle=True" in named[0].message and "rm " in named[0].hint
    (cache / "abc-GPTDataset-train-document_index.npy").write_bytes(b"\x93NUM")  # cut within the magic: merely cut
    assert [p for p in check_job_data(args, remote=False)[0] if "is a cut index cache file" in p.message]


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_each_cache_file_is_saved_whole_or_not_at_all(tmp_path, monkeypatch, error):
    def fail(_fd):
        raise error

    monkeypatch.setattr(index_cache.os, "fsync", fail)
    with index_cache._whole_npy_files(), pytest.raises(type(error)):
        np.save(str(tmp_path / "x-shuffle_index.npy"), np.arange(1000))
    assert os.listdir(tmp_path) == []
    with index_cache._whole_npy_files():
        monkeypatch.undo()
        np.save(str(tmp_path / "x-shuffle_index"), np.arange(1000))  # numpy's own naming: .npy added
    assert os.listdir(tmp_path) == ["x-shuffle_index.npy"]
    assert np.load(tmp_path / "x-shuffle_index.npy").tolist() == list(range(1000))


@needs_megatron
def test_a_build_that_runs_out_of_space_leaves_no_cut_file_and_says_so(built_caches, tmp_path):
    _root, args, _sizes, _summary, _built = built_caches
    cache = tmp_path / "cache"
    args = [*args[:args.index("--data-cache-path") + 1], str(cache), *args[args.index("--data-cache-path") + 2:]]
    with pytest.raises(UserError) as refused:
        index_cache.build_index_caches(args, world_size=4, cwd=str(REPO),
                                       python=_python_that_runs(tmp_path, CUT_AT_THIRD_SAVE))
    problem = refused.value.problems[0]
    assert "cannot write the index caches: No space left on device" in problem.message
    assert problem.hint.startswith("free space")
    names = os.listdir(cache)
    assert sum(name.endswith(".npy") for name in names) == 2  # the two written before the disk filled, whole
    assert cut_cache_files(str(cache)) == [] and not [name for name in names if name.endswith(".tmp")]


@needs_megatron
def test_build_index_replaces_a_cut_cache_file_an_earlier_job_left(built_caches, tmp_path):
    root, args, _sizes, _summary, built = built_caches
    cache = tmp_path / "cache"
    shutil.copytree(root / "cache", cache)
    victim = sorted(name for name in built if name.endswith("shuffle_index.npy"))[0]
    whole = (cache / victim).read_bytes()
    (cache / victim).write_bytes(whole[:len(whole) // 2])
    assert cut_cache_files(str(cache)) == [str(cache / victim)]
    args = [*args[:args.index("--data-cache-path") + 1], str(cache), *args[args.index("--data-cache-path") + 2:]]
    summary = index_cache.build_index_caches(args, world_size=4, cwd=str(REPO))
    assert summary["replaced_cut_files"] == [victim]
    assert (cache / victim).read_bytes() == whole and cut_cache_files(str(cache)) == []
    assert set(os.listdir(cache)) == built
