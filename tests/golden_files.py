"""Golden files under tests/golden: a rendered text must equal its file; UPDATE_GOLDEN=1 rewrites the file."""

from __future__ import annotations

import os
from pathlib import Path


def assert_matches_golden(text: str, golden: Path, what: str, test_file: str) -> None:
    if os.environ.get("UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}; run UPDATE_GOLDEN=1 pytest {test_file}"
    assert text == golden.read_text(), f"{what} differs from {golden}"
