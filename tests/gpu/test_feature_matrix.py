"""The GPU feature matrix (scripts/feature_matrix.py), one row per test: every configuration the launcher accepts
trains (loss falls in 10 iterations, compiled layers on), or the launcher refuses it before launch with exit 2."""

from __future__ import annotations

import sys

import pytest

from tests.gpu.conftest import REPO, needs_gpus

sys.path.insert(0, str(REPO / "scripts"))
import feature_matrix  # noqa: E402

pytestmark = needs_gpus(1)


@pytest.mark.parametrize("row", feature_matrix.ROWS, ids=[row.name for row in feature_matrix.ROWS])
def test_row_trains_or_is_refused_up_front(run_root, row):
    outcome = feature_matrix.run_row(row, run_root)
    assert outcome.ok, f"{outcome.command}\n{outcome.outcome}: {outcome.reason}\n{outcome.tail}"
