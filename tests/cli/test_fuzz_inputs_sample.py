"""A small sample of scripts/fuzz_inputs.py: every command that reads a file, given a file that is hostile (a FIFO,
/dev/zero, a link loop, a sparse 10 GB file, bytes that are not UTF-8, 10,000 nested lists, 100,000 digits), ends
with exit 0 or 2 and `error:`/`hint:`, within its time limit, without a traceback or a half-written file."""

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_sample_of_the_hostile_input_sweep_has_no_finding(tmp_path):
    started = time.monotonic()
    # one case of each input slot (presets, base files, scripts, corpora, tokenizer files, dataset files, trackers,
    # the launcher's config, a checkout's files, a tarball, the run root), its first command
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "fuzz_inputs.py"), "--quick", "--per-slot", "1",
                           "--seed", "3", "--keep", str(tmp_path / "work")],
                          capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ", 0 findings," in done.stdout.splitlines()[-1]
    assert time.monotonic() - started < 240
