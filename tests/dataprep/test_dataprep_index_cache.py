"""--build-index: GPTDataset index caches built on CPU with the job's own Megatron arguments, then only read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

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
