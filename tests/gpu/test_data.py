"""Issue 8 on a GPU: a corpus made here goes through `launch prepare-data` and the 345m preset trains on it."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from tests.gpu.conftest import RUN_TIMEOUT_S, launch_env, needs_gpus
from tests.gpu.test_runs import SHORT, assert_loss_falls, assert_trained

WORDS = "the a model learns tokens from text data layer attention batch step loss falls gpu node".split()


def write_corpus(path, documents: int = 3000) -> None:
    rng = random.Random(0)
    with path.open("w") as f:
        for _ in range(documents):
            sentences = (" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))) + "."
                         for _ in range(rng.randint(2, 8)))
            f.write(json.dumps({"text": " ".join(sentences).capitalize()}) + "\n")


@pytest.mark.parametrize("gpus", [pytest.param(1, marks=needs_gpus(1))])
def test_345m_trains_on_prepared_data(launch_gpu, run_root, gpus):
    corpus, prefix = run_root / "corpus.jsonl", run_root / "data" / "corpus"
    write_corpus(corpus)
    prefix.parent.mkdir()
    prepare = subprocess.run(
        [sys.executable, "-m", "launcher", "prepare-data", str(corpus), "--output-prefix", str(prefix),
         "--tokenizer", "byte", "--no-progress"],
        env=launch_env(0, run_root), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert prepare.returncode == 0, prepare.stdout + prepare.stderr
    assert prefix.with_suffix(".bin").stat().st_size > 0 and prefix.with_suffix(".idx").is_file()

    data = ["mock_data=false", f"data_path={prefix}", "split=98,2,0", "tokenizer_type=NullTokenizer",
            "vocab_size=257", f"data_cache_path={run_root / 'cache'}", "train_iters=30", "log_interval=5"]
    run = launch_gpu("345m", *SHORT, *(w for item in data for w in ("--set", item)), gpus=gpus)
    assert_trained(run, 30)
    assert list((run_root / "cache").rglob("*.npy")), "no GPTDataset index cache built on the prepared data"
    assert_loss_falls(run.iterations(), by=1.0)  # ln 257 = 5.5 at the start; bytes of a 16-word language
